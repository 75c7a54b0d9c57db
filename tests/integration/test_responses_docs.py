"""The Responses API example in docs/serving.md runs verbatim, and prints what its comments say."""

from __future__ import annotations

import contextlib
import io
import re
import sys
from pathlib import Path

import pytest

from specagent_ray.testing.gateway_server import in_process_gateway

DOC = Path(__file__).resolve().parents[2] / "docs" / "serving.md"


def example() -> str:
    section = DOC.read_text().split("## The Responses API", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.slow  # the fast tier stays under 90 s; the full suite runs it
def test_the_docs_example_runs_verbatim_and_the_write_waits_for_approval(tmp_path):
    journal = tmp_path / "journal.jsonl"
    bank = [sys.executable, "-m", "specagent_ray.testing.mcp_server", "--journal", str(journal)]
    app = {"engines": {"kind": "scripted"}, "tool_sources": {"bank": {"kind": "mcp", "command": bank, "trusted": True}}}
    code, out = example(), io.StringIO()
    expected = [line.split("# ", 1)[1].split(":")[0] for line in code.splitlines() if line.startswith("print(")]
    with in_process_gateway(tmp_path / "log", app=app) as gateway, contextlib.redirect_stdout(out):
        exec(compile(code, str(DOC), "exec"), {"gateway": gateway})  # noqa: S102 - the documented code itself
    assert out.getvalue().splitlines() == expected == ["Sent 30 to bob.", "2"]
    assert journal.read_text().count('"transfer"') == 1
