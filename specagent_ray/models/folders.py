"""Model folders that vLLM loads, written so that a crash never leaves one that looks complete."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

NEEDED = ("config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors")


def is_complete(out: Path, spec_file: str, spec: dict) -> bool:
    """True iff ``out`` holds every file vLLM needs and was built from exactly ``spec``."""
    try:
        saved = json.loads((out / spec_file).read_text())
    except (OSError, ValueError):
        return False
    return saved == spec and all((out / name).is_file() for name in NEEDED)


def save_folder(out: Path, model: Any, tokenizer: Any, spec_file: str, spec: dict,
                finish: Callable[[Path], None] = lambda folder: None) -> Path:
    """Save model and tokenizer into a temporary folder beside ``out``, run ``finish`` on it, write the
    spec last, then swap it into place. On any failure the temporary folder is removed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        finish(tmp)
        (tmp / spec_file).write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
