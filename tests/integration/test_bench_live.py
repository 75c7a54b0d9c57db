"""`bench tau2 --backend vllm` end to end against OpenAI-compatible endpoints given as URLs.

The endpoint is a real HTTP server on 127.0.0.1 (uvicorn + FastAPI) speaking the chat-completions wire
format with a scripted model behind it; everything on our side is the production path: ChatBackend,
prompts, parsers, the protocol loop, tau2's tools, tau2's LLM user simulator through litellm, tau2's
evaluator, the cost and edge-cloud reports. Real engines are exercised by tests/integration/test_engines.py.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from specagent_ray.cli import main
from specagent_ray.testing.http import serve_in_thread

app = FastAPI()
LIMITS = {"max_prompt_tokens": 10**9}
calls: Counter[str] = Counter()
prompts_seen: list[tuple[str, list[dict]]] = []


def _telecom_user(body: dict) -> str | dict:
    """tau2's user simulator with the user's own tools (telecom): asked to toggle airplane mode, it calls
    its tool, then answers once the result came back."""
    messages = body["messages"]
    if any(m.get("role") == "tool" for m in messages[-2:]):
        calls["user_after_tool"] += 1
        return "Done, I toggled it."
    if "airplane" in json.dumps(messages[-1]).lower():
        calls["user_tool"] += 1
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": "u1", "type": "function", "function": {"name": "toggle_airplane_mode", "arguments": "{}"}}]}
    return "My phone shows no service."


def _reply(body: dict) -> str | dict:
    fmt = body.get("response_format")
    if fmt is None:  # tau2's user simulator (via litellm): no schema
        calls["user"] += 1
        if body.get("tools"):
            return _telecom_user(body)
        return "Hi, I am Emma Kim, user id emma_kim_9957. I want to cancel reservation EHGLP3."
    schema = fmt["json_schema"]["schema"]
    text = json.dumps(body["messages"])
    if "operate the user's applications" in text and schema.get("title") != "verdict":  # BFCL: pwd, then end the turn
        calls["bfcl_agent"] += 1
        turns = sum(m["role"] == "assistant" for m in body["messages"])
        return json.dumps({"kind": "tool", "name": "pwd", "arguments": {}} if turns % 2 == 0
                          else {"kind": "message", "text": "Done."})
    if "refuel_data" in text and schema.get("title") != "verdict":  # telecom's agent: ask once, then stop
        calls[body["model"]] += 1
        asked = "toggle airplane mode" in text
        return json.dumps({"kind": "stop"} if asked else {"kind": "message", "text": "Please toggle airplane mode."})
    if schema.get("title") == "verdict":
        calls["verify"] += 1
        n = schema["properties"]["accepted_prefix"]["maximum"]
        if calls["verify"] % 2 == 1:  # every other review rejects the whole block, without a fused repair
            return json.dumps({"accepted_prefix": 0, "reason": "look the user up first", "repair": None})
        return json.dumps({"accepted_prefix": n, "reason": "", "repair": None})
    calls[body["model"]] += 1
    if "first_name" in text:  # the user's profile has been read: done
        return json.dumps({"kind": "stop"})
    return json.dumps({"kind": "tool", "name": "get_user_details", "arguments": {"user_id": "emma_kim_9957"}})


@app.post("/v1/chat/completions")
async def chat_completions(request: Request):
    body = await request.json()
    prompts_seen.append((body["model"], body["messages"]))
    prompt = sum(len(json.dumps(m)) for m in body["messages"]) // 4
    if prompt > LIMITS["max_prompt_tokens"] and body.get("response_format"):
        return JSONResponse({"error": {"message": f"maximum context length exceeded ({prompt} tokens)",
                                       "type": "BadRequestError"}}, status_code=400)
    content = _reply(body)
    message = content if isinstance(content, dict) else {"role": "assistant", "content": content}
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": 12, "total_tokens": prompt + 12,
                  "prompt_tokens_details": {"cached_tokens": int(prompt * 0.9)}},
    }


@pytest.fixture(scope="module")
def endpoint():
    with serve_in_thread(app) as root:
        yield f"{root}/v1"


@pytest.mark.slow  # real tau2 tasks through HTTP endpoints, 5 s
def test_live_bench_runs_methods_through_endpoints_and_reports_edge_cloud_costs(endpoint, tmp_path, capsys):
    rc = main(["bench", "tau2", "--backend", "vllm", "--weak", endpoint, "--strong", endpoint,
               "--tasks", "0,1", "--trials", "1", "--methods", "strong,specagent", "--max-steps", "8", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    doc = json.loads((tmp_path / "tau2-airline-live.json").read_text())
    assert doc["labels"]["policies"] == "live engines" and doc["labels"]["tokens"].startswith("measured")
    by = {s["method"]: s for s in doc["summary"]}
    assert by["strong"]["weak_tokens"] == 0 and by["specagent"]["strong_calls"] < by["strong"]["strong_calls"] + 2
    runs = {(r["method"], r["task_id"]): r for r in doc["results"]}
    assert len(runs) == 4 and all(r["termination"] == "agent_stop" for r in runs.values())
    spec = runs[("specagent", "0")]
    assert spec["blocks"]["rejections"] >= 1 and spec["blocks"]["strong_repairs"] >= 1
    assert spec["repair_prompt_tokens"] > 0  # measured from the endpoint's usage: 90 % cached here
    assert spec["repair_cached_tokens"] == pytest.approx(0.9 * spec["repair_prompt_tokens"], rel=0.05)
    assert calls["user"] >= 4  # the customer answered tau2's greeting in every run
    assert calls["drafter"] > 0 and calls["verifier"] > 0 and calls["verify"] > 0
    assert "edge-cloud cost per task" in out and "90 %" in out  # the repair prompt's measured cache share
    assert "real engines; Pass@1" in out and "simulated policies" not in out
    strong_prices = [r["resources"]["dollars"] for r in doc["results"]]
    assert all(d is not None and d > 0 for d in strong_prices)


def test_an_unreachable_endpoint_gives_one_clear_error_line(tmp_path, capsys):
    import socket as _socket

    with _socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    rc = main(["bench", "tau2", "--backend", "vllm", "--weak", dead, "--strong", dead, "--tasks", "0",
               "--trials", "1", "--methods", "strong", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 2 and "error:" in out and dead in out and "Traceback" not in out


def test_a_backend_error_fails_that_run_and_the_bench_goes_on(endpoint, tmp_path, capsys, monkeypatch):
    # the scripted endpoint answers HTTP 400 for a prompt it deems too long, as vLLM does past its context
    monkeypatch.setitem(LIMITS, "max_prompt_tokens", 1)
    rc = main(["bench", "tau2", "--backend", "vllm", "--weak", endpoint, "--strong", endpoint, "--tasks", "0,1",
               "--trials", "1", "--methods", "specagent", "--out", str(tmp_path)])
    assert rc == 0, capsys.readouterr().out
    doc = json.loads((tmp_path / "tau2-airline-live.json").read_text())
    assert [r["reward"] for r in doc["results"]] == [0.0, 0.0]
    assert all(r["termination"].startswith("backend_error: ") and "HTTP 400" in r["termination"]
               for r in doc["results"])


def test_telecom_live_the_users_own_tools_run_on_their_side_and_reach_the_grader(endpoint, tmp_path, capsys):
    from specagent_ray.tools.tau2 import Tau2Domain

    task = Tau2Domain.load("telecom").base[0]
    rc = main(["bench", "tau2", "--domain", "telecom", "--backend", "vllm", "--weak", endpoint, "--strong", endpoint,
               "--tasks", task, "--trials", "1", "--methods", "strong", "--max-steps", "6", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    doc = json.loads((tmp_path / "tau2-telecom-live.json").read_text())
    assert [r["termination"] for r in doc["results"]] == ["agent_stop"]  # and tau2 graded it
    assert calls["user_tool"] >= 1 and calls["user_after_tool"] >= 1  # called its tool, then heard the result


async def test_the_live_user_runs_its_tools_on_the_users_side_and_reports_them(endpoint):
    from specagent_ray.models.backend import ChatEndpoint as Endpoint
    from specagent_ray.models.tau2_user import Tau2User
    from specagent_ray.tools.tau2 import Tau2Domain, Tau2Tools

    telecom = Tau2Domain.load("telecom")
    task = telecom.tasks[telecom.base[0]]
    tools = Tau2Tools(telecom, task=task)
    obs = await Tau2User(task, Endpoint(endpoint, "user"), tools=tools).reply("Please toggle airplane mode.")
    assert obs.content == "Done, I toggled it." and [u.call.name for u in obs.user_calls] == ["toggle_airplane_mode"]
    assert tools.user_executed == [u.call for u in obs.user_calls] and not tools.executed  # the user's side only


def test_bfcl_live_runs_real_model_calls_on_the_cases_backends_turn_by_turn(endpoint, tmp_path, capsys):
    rc = main(["bench", "bfcl", "--category", "base", "--backend", "vllm", "--weak", endpoint, "--strong", endpoint,
               "--tasks", "multi_turn_base_0", "--trials", "1", "--methods", "strong,specagent", "--max-steps", "20",
               "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    doc = json.loads((tmp_path / "bfcl-base-live.json").read_text())
    assert [r["termination"] for r in doc["results"]] == ["user_stop", "user_stop"]  # every turn was sent
    assert calls["bfcl_agent"] > 0 and all(r["committed_steps"] >= 2 for r in doc["results"])
    assert "real engines; Pass@1 measured by BFCL's evaluator" in out


@pytest.mark.parametrize("domain, task", [("airline", "no-such-task"), ("bfcl-base", "multi_turn_base_9999")])
def test_an_unknown_task_is_refused_before_any_engine_is_called(domain, task):
    from specagent_ray.bench.quality.live import LiveConfig, run_live
    from specagent_ray.models.backend import ChatEndpoint

    nowhere = ChatEndpoint("http://127.0.0.1:9/v1", "none")  # nothing listens: any call would fail otherwise
    with pytest.raises(ValueError, match=f"{domain} has no task"):
        run_live(LiveConfig(weak=nowhere, strong=nowhere, domain=domain, task_ids=(task,)))
