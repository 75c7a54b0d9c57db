"""The analytic cost model: ESTIMATED FLOPs, HBM-read bytes and GPU latency from token counts.

Nothing here is measured. Every figure is derived from a :class:`~specagent_ray.costs.specs.ModelSpec`, a
:class:`~specagent_ray.costs.specs.GpuProfile` and one call's token counts, following the paper's
accounting: the prompt prefix is reused once per session (cached prompt tokens are not prefilled again),
and an MoE model is charged its active parameters per token.

Conventions (all pure functions of the inputs):

- Positions are 0-based. A token at position t attends to ``t + 1`` positions (itself included); that is
  its *context*. With P prompt tokens of which c are cached, prefill processes positions c..P-1, and the
  D decode steps process positions P..P+D-1 (one forward pass per decode token, batch 1).
- FLOPs per processed token: ``2 * active_params`` (matmuls) plus attention
  ``4 * kv_layers * n_heads * head_dim * context`` (QK^T and AV, 2 FLOPs per multiply-add each). Query
  heads (``n_heads``), not KV heads, set the attention FLOPs: GQA shares K/V but not the arithmetic.
  Linear-attention (Gated DeltaNet) state updates, norms and the softmax are neglected.
- HBM-read bytes as an interval (low, high):
  a prefill pass (only when at least one prompt token is not cached) reads the weights once, low
  ``active_params * bytes_per_param`` (few experts touched), high ``total_params * bytes_per_param`` (a
  long prefill touches nearly all experts). Each decode token reads the active weights (low = high at
  batch 1) plus the KV cache of its context, ``kv_bytes_per_token * context``. KV traffic during prefill,
  KV writes, activations and linear-attention recurrent state are neglected. For a dense model low == high.
- GPU latency by roofline over ``n_gpus`` GPUs: prefill time is ``max(flops / (peak * n), bytes / (bw * n))``
  with bytes the interval's midpoint; decode time is the sum over decode tokens of
  ``max(bytes_j / (bw * n), flops_j / (peak * n))``. On more than one GPU every forward pass also waits
  for ``collectives_per_layer * layers`` small collectives (2 all-reduces per layer for tensor
  parallelism, plus dispatch and combine all-to-alls for an MoE), each at the GPU profile's intra- or
  inter-node latency. Without that term a 16-GPU model would decode 16x faster than one GPU allows,
  which no deployment reaches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Collection, Iterable, Protocol

from ..protocol.interfaces import CallRecord
from ..protocol.types import Author
from .specs import GpuProfile, ModelSpec


@dataclass(frozen=True, slots=True)
class CallCost:
    """ESTIMATED cost of one or more calls: FLOPs, HBM-read bytes (low, high) and roofline GPU seconds.

    Costs add with ``+``; ``sum(costs, CallCost())`` (or plain ``sum(costs)``) totals a collection.
    """

    flops: float = 0.0
    hbm_low: float = 0.0
    hbm_high: float = 0.0
    gpu_latency_s: float = 0.0

    @property
    def hbm_point(self) -> float:
        """ESTIMATED point value of HBM-read bytes: the midpoint of (low, high)."""
        return (self.hbm_low + self.hbm_high) / 2

    def __add__(self, other: "CallCost") -> "CallCost":
        if not isinstance(other, CallCost):
            return NotImplemented
        return CallCost(
            flops=self.flops + other.flops,
            hbm_low=self.hbm_low + other.hbm_low,
            hbm_high=self.hbm_high + other.hbm_high,
            gpu_latency_s=self.gpu_latency_s + other.gpu_latency_s,
        )

    def __radd__(self, other: object) -> "CallCost":
        if other == 0:  # lets the builtin sum() start from 0
            return self
        return NotImplemented


def attention_flops_per_context(spec: ModelSpec) -> int:
    """ESTIMATED attention FLOPs per token per position attended: ``4 * kv_layers * n_heads * head_dim``."""
    return 4 * spec.kv_layers * spec.n_heads * spec.head_dim


def _sum_range(first: int, count: int) -> float:
    """Sum of the integers first, first+1, ..., first+count-1 (0 when count <= 0)."""
    if count <= 0:
        return 0.0
    return count * (2 * first + count - 1) / 2


def _sum_max_linear(a1: float, b1: float, a2: float, b2: float, first: int, count: int) -> float:
    """Sum over c = first..first+count-1 of max(a1 + b1*c, a2 + b2*c), in closed form.

    The difference of the two lines is linear in c, so the first line wins on a half-line: split the range
    at the crossing and sum each part exactly.
    """
    if count <= 0:
        return 0.0
    last = first + count - 1
    if b1 == b2:
        split, one_first = last + 1, a1 >= a2  # parallel lines: one wins over the whole range
    else:
        root = (a2 - a1) / (b1 - b2)
        if b1 > b2:  # line 1 wins for c >= root
            split, one_first = min(max(math.ceil(root), first), last + 1), False
        else:  # line 1 wins for c <= root
            split, one_first = min(max(math.floor(root) + 1, first), last + 1), True
    lower_n, upper_n = split - first, last + 1 - split
    lower_a, lower_b, upper_a, upper_b = (a1, b1, a2, b2) if one_first else (a2, b2, a1, b1)
    return (
        lower_a * lower_n + lower_b * _sum_range(first, lower_n)
        + upper_a * upper_n + upper_b * _sum_range(split, upper_n)
    )


def call_cost(
    spec: ModelSpec,
    gpu: GpuProfile,
    n_gpus: int,
    prompt_tokens: int,
    cached_prompt_tokens: int,
    decode_tokens: int,
) -> CallCost:
    """ESTIMATED cost of one call (see the module docstring for the accounting).

    Raises ValueError for negative counts, ``cached_prompt_tokens > prompt_tokens`` or ``n_gpus < 1``.
    Guarantees: ``0 <= hbm_low <= hbm_high``; low == high for a dense model; a call with no tokens costs 0.
    """
    if n_gpus < 1:
        raise ValueError(f"n_gpus must be >= 1, got {n_gpus}")
    if min(prompt_tokens, cached_prompt_tokens, decode_tokens) < 0:
        raise ValueError("token counts must be >= 0")
    if cached_prompt_tokens > prompt_tokens:
        raise ValueError(f"cached_prompt_tokens {cached_prompt_tokens} > prompt_tokens {prompt_tokens}")

    p, c, d = prompt_tokens, cached_prompt_tokens, decode_tokens
    dense_flops = 2 * spec.active_params
    attn = attention_flops_per_context(spec)
    active_bytes = spec.active_params * spec.bytes_per_param
    total_bytes = spec.total_params * spec.bytes_per_param
    kv = spec.kv_bytes_per_token
    bw = gpu.hbm_bytes_per_s * n_gpus
    peak = gpu.peak_flops * n_gpus
    per_pass = gpu.collective_s(n_gpus) * spec.layers * (4 if spec.is_moe else 2)

    # Prefill: positions c..p-1, contexts c+1..p.
    prefill_n = p - c
    prefill_flops = dense_flops * prefill_n + attn * _sum_range(c + 1, prefill_n)
    pre_low, pre_high = (active_bytes, total_bytes) if prefill_n > 0 else (0.0, 0.0)
    prefill_s = max(prefill_flops / peak, (pre_low + pre_high) / 2 / bw) + per_pass if prefill_n > 0 else 0.0

    # Decode: positions p..p+d-1, contexts p+1..p+d.
    decode_flops = dense_flops * d + attn * _sum_range(p + 1, d)
    decode_bytes = active_bytes * d + kv * _sum_range(p + 1, d)
    decode_s = _sum_max_linear(active_bytes / bw, kv / bw, dense_flops / peak, attn / peak, p + 1, d) + per_pass * d

    return CallCost(
        flops=prefill_flops + decode_flops,
        hbm_low=pre_low + decode_bytes,
        hbm_high=pre_high + decode_bytes,
        gpu_latency_s=prefill_s + decode_s,
    )


class HasCalls(Protocol):
    """Anything holding call records, e.g. :class:`specagent_ray.costs.ledger.Ledger`."""

    @property
    def calls(self) -> Iterable[CallRecord]: ...


def ledger_cost(
    ledger: HasCalls,
    role: Author,
    spec: ModelSpec,
    gpu: GpuProfile,
    n_gpus: int,
    *,
    purposes: Collection[str] | None = None,
) -> CallCost:
    """ESTIMATED total cost of the ledger's calls made by ``role`` (optionally only those whose purpose is
    in ``purposes``), each priced by :func:`call_cost` from its measured token usage."""
    total = CallCost()
    for call in ledger.calls:
        if call.role != role or (purposes is not None and call.purpose not in purposes):
            continue
        u = call.usage
        total = total + call_cost(spec, gpu, n_gpus, u.prompt_tokens, u.cached_prompt_tokens, u.decode_tokens)
    return total
