"""What the roofline probe runs on the device: a random-weight decoder, the DRAM meter, a copy and a matmul.

- The decoder: a dense decoder of a named shape in plain PyTorch, Qwen3 layout (GQA attention with q/k
  RMSNorm and RoPE, SwiGLU MLP, optionally tied embeddings); weights drawn on the device under a seed,
  nothing downloaded. A static KV cache of a fixed window makes a decode step a fixed sequence of kernels,
  so on a GPU it is captured once as a CUDA graph and replayed: the probe times the GPU, not Python's
  kernel launches (which would hide the bandwidth roofline of a small batch).
- :class:`DramMeter`: times a phase and reads the DRAM bytes the project's NVML sampler saw over it.
- :func:`copy_check` and :func:`matmul_rate`: the achieved copy bandwidth (and the sampler's bytes against
  a copy of known size) and the achieved FLOP/s of a large matrix product.

torch is imported inside the functions, so importing this module costs nothing. Guarantees:
``Shape.params`` counts exactly the weights ``build_weights`` draws (tied embeddings once); a prefill
writes KV positions 0..T-1 and computes logits for the last position only; a decode step at position
``at`` writes KV there and attends to positions 0..at.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

EPS = 1e-6


@dataclass(frozen=True, slots=True)
class Shape:
    """A dense decoder shape. ``params`` counts every weight (tied embeddings once)."""

    name: str
    layers: int
    hidden: int
    intermediate: int
    n_heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool

    def params(self) -> int:
        attn = self.hidden * (self.n_heads + 2 * self.kv_heads) * self.head_dim + self.n_heads * self.head_dim * self.hidden
        layer = attn + 3 * self.hidden * self.intermediate + 2 * self.hidden + 2 * self.head_dim
        return self.layers * layer + self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden

    def kv_per_token(self, elem: int) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * elem

    def attn_flops(self) -> int:
        """FLOPs per token per attended position (QK^T and AV), as ``costs/model.py`` counts them."""
        return 4 * self.layers * self.n_heads * self.head_dim


SHAPES = {s.name: s for s in (  # Qwen3 config.json figures; tiny ones for the CPU
    Shape("tiny", 2, 64, 128, 4, 2, 16, 256, True),
    Shape("tiny-wide", 4, 128, 256, 8, 2, 16, 256, True),
    Shape("qwen3-4b", 36, 2560, 9728, 32, 8, 128, 151936, True),
    Shape("qwen3-8b", 36, 4096, 12288, 32, 8, 128, 151936, False),
    Shape("qwen3-14b", 40, 5120, 17408, 40, 8, 128, 151936, False),
    Shape("qwen3-32b", 64, 5120, 25600, 64, 8, 128, 151936, False),
)}


@dataclass
class Weights:
    shape: Shape
    embed: Any
    head: Any
    norm: Any
    layers: list[dict[str, Any]]
    cos: Any
    sin: Any
    fused_gqa: bool = True  # prefill attention takes grouped K/V directly; False: K/V expanded per query head


def build_weights(shape: Shape, device: str, elem: int, max_pos: int, seed: int) -> Weights:
    """Random weights (normal, std 0.02; norms 1) drawn on ``device`` under ``seed``."""
    import torch

    dtype = torch.bfloat16 if elem == 2 else torch.float32
    gen = torch.Generator(device=device).manual_seed(seed)
    rand = lambda *size: torch.empty(*size, device=device, dtype=dtype).normal_(0, 0.02, generator=gen)
    ones = lambda n: torch.ones(n, device=device, dtype=dtype)
    h, hd = shape.hidden, shape.head_dim
    layers = [{"qkv": rand((shape.n_heads + 2 * shape.kv_heads) * hd, h), "o": rand(h, shape.n_heads * hd),
               "gate_up": rand(2 * shape.intermediate, h), "down": rand(h, shape.intermediate),
               "n1": ones(h), "n2": ones(h), "qn": ones(hd), "kn": ones(hd)} for _ in range(shape.layers)]
    embed = rand(shape.vocab, h)
    inv = 1.0 / (1e6 ** (torch.arange(0, hd, 2, device=device, dtype=torch.float32) / hd))
    freqs = torch.outer(torch.arange(max_pos, device=device, dtype=torch.float32), inv)
    return Weights(shape, embed, embed if shape.tied else rand(shape.vocab, h), ones(h), layers,
                   freqs.cos().to(dtype), freqs.sin().to(dtype), fused_gqa(device, dtype))


def fused_gqa(device: str, dtype: Any) -> bool:
    """Whether a fused attention kernel (flash, cuDNN, memory-efficient) runs a causal GQA prefill here.
    Without one, SDPA's math fallback would hold a [batch, heads, T, T] matrix: the prefill then expands
    K/V per query head instead (a copy, small next to the prefill's matrix products). Always True on the
    CPU, where lengths are tiny."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if torch.device(device).type != "cuda":
        return True
    q, k = torch.zeros(1, 4, 64, 128, device=device, dtype=dtype), torch.zeros(1, 2, 64, 128, device=device, dtype=dtype)
    try:
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
            F.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=True)
    except RuntimeError:
        return False
    return True


def _rope(x, cos, sin):
    import torch

    half = x.shape[-1] // 2
    c, s, x1, x2 = cos[:, None, :], sin[:, None, :], x[..., :half], x[..., half:]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


def _layer(x, p, sh: Shape, cos, sin, kc, vc, at, mask, gqa: bool = True):
    """One decoder layer. ``at`` None: a causal prefill from position 0 (``gqa`` False: K/V expanded per
    query head for the attention); else one token at position ``at``."""
    import torch.nn.functional as F

    b, t, h = x.shape
    nh, kvh, hd = sh.n_heads, sh.kv_heads, sh.head_dim
    q, k, v = F.linear(F.rms_norm(x, (h,), p["n1"], EPS), p["qkv"]).split([nh * hd, kvh * hd, kvh * hd], dim=-1)
    q = _rope(F.rms_norm(q.view(b, t, nh, hd), (hd,), p["qn"], EPS), cos, sin).transpose(1, 2)
    k = _rope(F.rms_norm(k.view(b, t, kvh, hd), (hd,), p["kn"], EPS), cos, sin).transpose(1, 2)
    v = v.view(b, t, kvh, hd).transpose(1, 2)
    if at is None:
        kc[:, :, :t].copy_(k)
        vc[:, :, :t].copy_(v)
        if not gqa:
            k, v = k.repeat_interleave(nh // kvh, 1), v.repeat_interleave(nh // kvh, 1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa).transpose(1, 2)
    else:  # the query heads of one KV head attend together: no copy of K/V per query head
        kc.index_copy_(2, at, k)
        vc.index_copy_(2, at, v)
        a = F.scaled_dot_product_attention(q.reshape(b, kvh, nh // kvh, hd), kc, vc, attn_mask=mask)
    x = x + F.linear(a.reshape(b, t, nh * hd), p["o"])
    gate, up = F.linear(F.rms_norm(x, (h,), p["n2"], EPS), p["gate_up"]).chunk(2, dim=-1)
    return x + F.linear(F.silu(gate) * up, p["down"])


def _next_token(w: Weights, x):
    import torch.nn.functional as F

    return F.linear(F.rms_norm(x[:, -1:], (w.shape.hidden,), w.norm, EPS), w.head).argmax(-1)


def new_cache(w: Weights, batch: int, window: int) -> list[tuple[Any, Any]]:
    import torch

    sh = w.shape
    kv = torch.zeros(sh.layers, 2, batch, sh.kv_heads, window, sh.head_dim, device=w.embed.device, dtype=w.embed.dtype)
    return [(kv[i, 0], kv[i, 1]) for i in range(sh.layers)]


def prefill(w: Weights, ids, cache) -> Any:
    """Causal prefill of ``ids`` [batch, T] into ``cache`` positions 0..T-1; logits of the last token only."""
    import torch.nn.functional as F

    t = ids.shape[1]
    x = F.embedding(ids, w.embed)
    for p, (kc, vc) in zip(w.layers, cache, strict=True):
        x = _layer(x, p, w.shape, w.cos[:t], w.sin[:t], kc, vc, None, None, w.fused_gqa)
    return _next_token(w, x)


class Stepper:
    """One decode step of the whole batch at position ``at`` over the cache's window (masked past ``at``),
    feeding its argmax back as the next input. On a GPU with ``graphs`` it is a CUDA-graph replay."""

    def __init__(self, w: Weights, cache, batch: int, start: int, graphs: bool, advance: bool) -> None:
        import torch
        import torch.nn.functional as F

        dev, window = w.embed.device, cache[0][0].shape[2]
        ids = self.ids = torch.zeros(batch, 1, dtype=torch.long, device=dev)
        at = self.at = torch.full((1,), start, dtype=torch.long, device=dev)
        positions, self.advance = torch.arange(window, device=dev), advance

        def step() -> None:  # refers to no `self`: no cycle, so the cache and the graph go with the Stepper
            mask = (positions <= at).view(1, 1, 1, window)
            cos, sin = w.cos.index_select(0, at), w.sin.index_select(0, at)
            x = F.embedding(ids, w.embed)
            for p, (kc, vc) in zip(w.layers, cache, strict=True):
                x = _layer(x, p, w.shape, cos, sin, kc, vc, at, mask)
            ids.copy_(_next_token(w, x))

        self._step, self._graph = step, None
        if graphs and dev.type == "cuda":
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                step(), step()
            torch.cuda.current_stream().wait_stream(side)
            self._graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self._graph):
                step()

    def __call__(self) -> None:
        self._graph.replay() if self._graph is not None else self._step()
        if self.advance:
            self.at.add_(1)


def need_bytes(shape: Shape, batch: int, window: int, tokens: int, elem: int, attn_matrix: bool) -> int:
    """ESTIMATED memory a phase needs beyond the weights: a KV cache of ``window`` positions, the
    activations of ``tokens`` new tokens per sequence, one position's logits, and (``attn_matrix``: the
    CPU's attention) the full attention matrix."""
    act = 3 * shape.intermediate + (shape.n_heads + 2 * shape.kv_heads) * shape.head_dim + 4 * shape.hidden
    attn = shape.n_heads * tokens * tokens * elem if attn_matrix else 0
    return batch * (window * shape.kv_per_token(elem) + tokens * act * elem + attn + shape.vocab * 4)



def random_ids(w: Weights, batch: int, tokens: int):
    import torch

    return torch.randint(0, w.shape.vocab, (batch, tokens), device=w.embed.device)


# -- DRAM bytes through the NVML sampler ------------------------------------------------------------------
class DramMeter:
    """Times a phase and reads the DRAM bytes the NVML sampler integrated over it (GPM DRAM_BW_UTIL).

    Guarantees: ``measure`` returns bytes None, with a reason, whenever they were not measured (CPU run,
    NVML unavailable, GPM unsupported, a missed read); never 0 standing in for unknown."""

    def __init__(self, sampler: Any = None, reason: str | None = None, driver: str | None = None) -> None:
        self.sampler, self.reason, self.driver = sampler, reason, driver

    @classmethod
    def open(cls, device: str, index: int, api: Any = None, clock: Callable[[], float] | None = None,
             fallback_bw: float | None = None) -> DramMeter:
        if device != "cuda" and api is None:
            return cls(reason="CPU run: no NVML device to read")
        import pynvml

        from ...telemetry.nvml import NvmlSampler
        from ...telemetry.nvml_api import PynvmlApi

        sampler = NvmlSampler(api, clock=clock or time.monotonic, devices=[index], fallback_peak_bandwidth=fallback_bw)
        if not sampler.open():
            return cls(reason=f"NVML unavailable: {sampler.reason}")
        try:
            driver = pynvml.nvmlSystemGetDriverVersion() if isinstance(sampler.api, PynvmlApi) else \
                getattr(sampler.api, "driver_version", lambda: None)()
        except pynvml.NVMLError:
            driver = None
        if sampler.devices()[0].dram_bytes is None:
            sampler.stop()
            return cls(reason="GPM DRAM counters unsupported here (Hopper or newer and a recent driver needed)",
                       driver=driver)
        sampler.sample_once()  # primes the sampler's window and its first GPM sample
        return cls(sampler, None, driver)

    def measure(self, fn: Callable[[], Any], sync: Callable[[], None]) -> tuple[float, float | None, str | None]:
        """(seconds, DRAM bytes or None, reason if None) of one call of ``fn``, synchronized both ends."""
        sync()
        if self.sampler is not None:
            self.sampler.sample_once()  # closes the window before the phase
        start = time.perf_counter()
        fn()
        sync()
        seconds = time.perf_counter() - start
        window = self.sampler.sample_once() if self.sampler is not None else None
        if window is not None and window.dram_bytes is not None:
            return seconds, window.dram_bytes, None
        if self.sampler is not None and not self.sampler.available:
            self.reason = f"NVML unavailable: {self.sampler.reason}"
        return seconds, None, self.reason or "no DRAM bytes in this window (GPM unsupported or a read missed; " \
            "see the sampler's warning)"

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()


def timed(fn: Callable[[], Any], meter: DramMeter, sync: Callable[[], None], min_s: float, max_reps: int
          ) -> tuple[float, float | None, int, str | None]:
    """(seconds, DRAM bytes, repeats, reason) per call of ``fn``: one untimed warm-up call, then enough
    calls (at most ``max_reps``) to fill ``min_s`` measured in one sampler window."""
    sync()
    start = time.perf_counter()
    fn()
    sync()
    first = time.perf_counter() - start
    reps = max(1, min(max_reps, math.ceil(min_s / max(first, 1e-9))))
    seconds, dram, reason = meter.measure(lambda: [fn() for _ in range(reps)], sync)
    return seconds / reps, None if dram is None else dram / reps, reps, reason


def copy_check(device: str, nbytes: int, copies: int | None, min_s: float, meter: DramMeter,
               sync: Callable[[], None]) -> dict[str, Any]:
    """A device-to-device copy of ``nbytes``, ``copies`` times (or enough to fill ``2 * min_s``):
    achieved bandwidth (read + written bytes over time, measured) and the sampler's bytes over the known
    ``2 * size * copies`` (measured; None with the reason where the sampler cannot read DRAM)."""
    import torch

    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    sync()
    start = time.perf_counter()
    dst.copy_(src)
    sync()
    one = time.perf_counter() - start
    k = copies or max(1, min(10_000, math.ceil(2 * min_s / max(one, 1e-9))))
    seconds, dram, reason = meter.measure(lambda: [dst.copy_(src) for _ in range(k)], sync)
    expected = 2 * nbytes * k
    return {"bytes_per_copy": nbytes, "copies": k, "seconds": seconds, "copy_bytes_per_s": expected / seconds,
            "expected_dram_bytes": expected, "sampler_dram_bytes": dram,
            "sampler_over_expected": None if dram is None else dram / expected, "sampler_reason": reason}


def matmul_rate(device: str, elem: int, n: int, sync: Callable[[], None], reps: int = 10) -> dict[str, Any]:
    """Achieved FLOP/s of an n x n x n matrix product in the probe's dtype (3 warm-ups, ``reps`` timed)."""
    import torch

    dtype = torch.bfloat16 if elem == 2 else torch.float32
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    sync()
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync()
    return {"n": n, "flops_per_s": 2 * n**3 * reps / (time.perf_counter() - start)}
