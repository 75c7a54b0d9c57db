"""The prompts only ever append (issue 54): a continued session's prompt to each engine extends the previous
prompt to that engine byte for byte, so the engine's prefix cache hits, on every wire (Responses, Chat
Completions, Messages), for a stateless client that resends its whole history each step.

The seam is the engines' HTTP client: the real ``OpenAIEngineClient`` (its prompt config, its
``LLMPolicy``/``LLMVerifier``, its ``PromptTrail``s, its verify batcher, the parsing of what comes back)
over two recording backends, one per engine, in place of ``ChatBackend``. Each backend records the message
list it is sent and answers what the session's plan says (``models/scripted_plan.py``'s policies and verifier decide
it, rendered as the JSON a model would write), so the gateway, the wires, the binder and the coordinator are
the real ones. Each recorded prompt is rendered with the tiny model's own chat template (the tokenizer vLLM
loads on the local-cpu profile, ``models/tiny.py``) and tokenized.

What the engine may legitimately change between two prompts is the end of the earlier one: its closing
instruction ("decide your next action", "review the draft") and the steps under review (a draft, a block),
which a verdict may reject. Everything before that, the system message and the committed history, must be
a prefix of the next prompt, as text and as tokens. Where every draft is accepted, the whole earlier prompt
but its closing instruction must be."""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from specagent_ray.models import scripted_plan as plan_module
from specagent_ray.models.backend import Completion
from specagent_ray.models.prompts import render_action
from specagent_ray.models.tiny import _train_tokenizer
from specagent_ray.protocol.types import Step, Usage
from specagent_ray.serve.core.config import CoordinatorConfig, OpenAIEngines
from specagent_ray.serve.engines.engine_client import OpenAIEngineClient
from specagent_ray.testing.gateway_server import in_process_gateway

PlanEngines = plan_module.PlanEngineClient  # the plan's own parts, before the fixture swaps the client

READ = 'call read_file {"path": "a"}'
PLAN = f'{READ}; call write_file {{"path": "a", "text": "b"}}; say done'
AGAIN = 'call read_file {"path": "b"}; call write_file {"path": "b", "text": "c"}; say again'
# the weak model drafts the write wrongly: the verifier rejects that step and repairs it
WRONG = f'{READ}; call write_file {{"path": "a", "text": "b"}} weak {{"path": "a", "text": "typo"}}; say fixed'
MODEL = "claude-sonnet-4-5"
APP = {"engines": {"kind": "scripted"},
       "tool_sources": {"app": {"kind": "client", "read_tools": ["read_file"]}}}
PARAMS = {"type": "object", "properties": {"path": {"type": "string"}, "text": {"type": "string"}}}


@dataclass
class Sent:
    """One prompt an engine was sent: its session, the message list, and how many messages before its
    closing instruction hold the steps under review (the draft so far, or the block)."""

    sid: str
    engine: str
    messages: list[dict[str, str]]
    reviewed: int


class RecordingBackend:
    """An engine: records each prompt, answers the next answer queued for its session (``x-session-id``)."""

    def __init__(self, engine: str, sent: list[Sent], answers: dict[tuple[str, str], list[tuple[str, int]]]):
        self.engine, self.sent, self.answers = engine, sent, answers

    async def complete(self, messages, json_schema, max_tokens, temperature=0.0, headers=None, priority=None,
                       top_p=None) -> Completion:
        sid = dict(headers or {})["x-session-id"]
        text, reviewed = self.answers[(sid, self.engine)].pop(0)
        self.sent.append(Sent(sid, self.engine, [dict(m) for m in messages], reviewed))
        return Completion(text, Usage(100, 0, 20), "stop", self.engine)


def shown(steps: Sequence[Step]) -> int:
    """How many messages steps take in a prompt: the action, and its observation where it has one."""
    return sum(1 + (s.observation is not None) for s in steps)


class Planned:
    """A session's model on the recording engine: the plan decides the answer, which is queued for the
    engine; then the real model asks the engine, which answers it."""

    def __init__(self, real: Any, twin: Any, queue: list[tuple[str, int]]):
        self.real, self.twin, self.queue = real, twin, queue

    async def propose(self, history, draft=(), feedback=None):
        proposal = await self.twin.propose(history, draft, feedback)
        self.queue.append((render_action(proposal.action), shown(draft)))
        return await self.real.propose(history, draft, feedback)

    async def verify(self, history, block):
        v = (await self.twin.verify(history, block)).verdict
        repair = json.loads(render_action(v.repair)) if v.repair is not None else None
        self.queue.append((json.dumps({"accepted_prefix": v.accepted_prefix, "reason": v.reason, "repair": repair}),
                           shown(block)))
        return await self.real.verify(history, block)

    def by_exact_match(self) -> Planned:
        return Planned(self.real.by_exact_match(), self.twin, self.queue)

    def for_critical(self) -> Planned:
        return Planned(self.real.for_critical(), self.twin, self.queue)


class RecordingEngines(OpenAIEngineClient):
    """The real engine client of model engines, whose two endpoints are recording backends."""

    def __init__(self, sent: list[Sent]):
        endpoint = {"url": "http://127.0.0.1:9/v1"}  # never dialled: the backends below replace the clients
        super().__init__(OpenAIEngines(drafter={**endpoint, "model": "tiny-weak"},
                                       verifier={**endpoint, "model": "tiny-strong"}), CoordinatorConfig(), {})
        self.answers: dict[tuple[str, str], list[tuple[str, int]]] = defaultdict(list)
        self.drafter = RecordingBackend("drafter", sent, self.answers)
        self.verifier = RecordingBackend("verifier", sent, self.answers)

    def models(self, session, catalog, parallel=False):
        weak, strong, verifier = super().models(session, catalog, parallel)
        p_weak, p_strong, p_verifier = PlanEngines(self.priority).models(session, catalog, parallel)
        on = lambda engine: self.answers[(session.id, engine)]
        return (Planned(weak, p_weak, on("drafter")), Planned(strong, p_strong, on("verifier")),
                Planned(verifier, p_verifier, on("verifier")))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    sent: list[Sent] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plan_module, "PlanEngineClient", lambda priority: RecordingEngines(sent))
        with in_process_gateway(tmp_path_factory.mktemp("log"), app=APP, gateway={"model_aliases": {
                "my-agent": "specagent", MODEL: "specagent"}}) as url:
            mp.undo()  # the gateway holds its engine client; nothing else is built with the recording one
            yield url, sent


@pytest.fixture(scope="module")
def tokenizer():
    return _train_tokenizer(3072)  # the tiny models' tokenizer and ChatML template, as vLLM loads them


def vllm_template(name: str) -> str | None:
    """A chat template vLLM ships (found without importing vLLM, which takes seconds); None without vLLM."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / "transformers_utils" / "chat_templates" / name
    return path.read_text() if path.exists() else None


# The tiny models' own ChatML template (None), and a Qwen3-style one that drops the reasoning of past
# assistant turns (vLLM's MiniCPM-V 4.5 template): a template whose rendering of a message depends on where
# the last user query is would break the prefix if a prompt ever ended on an assistant turn.
TEMPLATES = {"tiny ChatML": None, "Qwen3-style, drops past reasoning": vllm_template("template_minicpmv45.jinja")}


def block_start(text: str, k: int) -> int:
    """Where message ``k``'s block starts in a ChatML-style rendering (one ``<|im_start|>`` per message)."""
    return [m.start() for m in re.finditer(re.escape("<|im_start|>"), text)][k]


def check_prompts_append(sent: list[Sent], sid: str, tokenizer, strict: bool) -> dict[str, int]:
    """Each engine's consecutive prompts of session ``sid`` extend each other (module doc), rendered by each
    chat template, as text and as tokens; ``strict``: everything but the closing instruction. Answers the
    prompts per engine."""
    counts = {}
    for engine in ("drafter", "verifier"):
        prompts = [s for s in sent if s.sid == sid and s.engine == engine]
        counts[engine] = len(prompts)
        for i, (prev, nxt) in enumerate(itertools.pairwise(prompts)):
            kept = len(prev.messages) - 1 - (0 if strict else prev.reviewed)  # the messages that must stay
            assert kept >= 1 and prev.messages[0]["role"] == "system"
            for name, template in TEMPLATES.items():
                if name != "tiny ChatML" and template is None:
                    continue  # vLLM is not installed: its template is not here
                earlier, later = (tokenizer.apply_chat_template(p.messages, chat_template=template, tokenize=False,
                                                                add_generation_prompt=True) for p in (prev, nxt))
                head = earlier[: block_start(earlier, kept)]
                part = _parting(head, later)
                assert later.startswith(head), (
                    f"{name}: {engine} prompt {i + 1} does not extend prompt {i}: they part at character {part}:"
                    f"\n...{head[part - 200:part + 200]!r}\n...{later[part - 200:part + 200]!r}")
                ids = tokenizer(head, add_special_tokens=False)["input_ids"]
                assert tokenizer(later, add_special_tokens=False)["input_ids"][: len(ids)] == ids
    return counts


def _parting(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


# -- the three wires' loops, as stateless clients run them -------------------------------------------------

TOOLS_CHAT = [{"type": "function", "function": {"name": n, "description": f"{n} a file", "parameters": PARAMS}}
              for n in ("read_file", "write_file")]
TOOLS_RESPONSES = [{"type": "function", "name": n, "description": f"{n} a file", "parameters": PARAMS}
                   for n in ("read_file", "write_file")]
TOOLS_MESSAGES = [{"name": n, "description": f"{n} a file", "input_schema": PARAMS} for n in ("read_file", "write_file")]


def chat_loop(url: str, plans: Sequence[str]) -> list[str]:
    """Each plan a user message, each tool call run by the client, the whole history resent every step.
    Answers each step's session id."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="dev-key", max_retries=0, timeout=60)
    messages: list[dict] = [{"role": "system", "content": "You edit files."}]
    sids = []
    for plan in plans:
        messages.append({"role": "user", "content": plan})
        for _ in range(6):
            r = client.chat.completions.create(model="my-agent", messages=messages, tools=TOOLS_CHAT)
            sids.append(r.model_extra["specagent"]["session_id"])
            message = r.choices[0].message.model_dump(exclude_none=True)
            messages.append(message)
            if r.choices[0].finish_reason != "tool_calls":
                break
            messages += [{"role": "tool", "tool_call_id": c["id"], "content": f"ran {c['function']['name']}"}
                         for c in message["tool_calls"]]
    return sids


def responses_loop(url: str, plans: Sequence[str]) -> list[str]:
    """The Responses API's stateless loop: output items replayed without their ids, as popular frameworks do."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="dev-key", max_retries=0, timeout=60)
    history: list[dict] = []
    sids = []
    for plan in plans:
        history.append({"role": "user", "content": plan})
        for _ in range(6):
            r = client.responses.create(model="specagent", instructions="You edit files.", tools=TOOLS_RESPONSES,
                                        input=history)
            sids.append(r.id.removeprefix("resp_").rsplit("_", 1)[0])
            history += [{k: v for k, v in i.model_dump(exclude_none=True).items() if k != "id"} for i in r.output]
            calls = [i for i in r.output if i.type == "function_call"]
            if not calls:
                break
            history += [{"type": "function_call_output", "call_id": c.call_id, "output": f"ran {c.name}"}
                        for c in calls]
    return sids


def messages_loop(url: str, plans: Sequence[str], stream: bool = False) -> list[str]:
    """Anthropic's Messages API: each tool_use answered by a tool_result, the whole conversation resent."""
    client = anthropic.Anthropic(base_url=url, api_key="dev-key", max_retries=0, timeout=60)
    messages: list[dict] = []
    sids = []

    def create(ms):
        if not stream:
            return client.messages.create(model=MODEL, max_tokens=1024, system="You edit files.", messages=ms,
                                          tools=TOOLS_MESSAGES)
        with client.messages.stream(model=MODEL, max_tokens=1024, system="You edit files.", messages=ms,
                                    tools=TOOLS_MESSAGES) as s:
            return s.get_final_message()

    for plan in plans:
        messages.append({"role": "user", "content": plan})
        for _ in range(6):
            m = create(messages)
            sids.append(m.id.removeprefix("msg_").rsplit("_", 1)[0])
            messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]})
            if m.stop_reason != "tool_use":
                break
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": b.id, "content": f"ran {b.name}"}
                for b in m.content if b.type == "tool_use"]})
    return sids


LOOPS = {"responses": responses_loop, "chat": chat_loop, "messages": messages_loop,
         "messages-stream": lambda url, plans: messages_loop(url, plans, stream=True)}


@pytest.mark.parametrize("wire", list(LOOPS))
def test_each_engines_prompts_only_append_over_a_two_turn_loop(served, tokenizer, wire):
    """Two user turns of read, verified write and a message: one session, and each engine's every prompt
    extends its previous one but for the closing instruction."""
    url, sent = served
    sids = LOOPS[wire](url, [PLAN, AGAIN])
    assert len(sids) == 6 and len(set(sids)) == 1, sids  # one session for the whole loop
    counts = check_prompts_append(sent, sids[0], tokenizer, strict=True)
    assert counts["drafter"] >= 6 and counts["verifier"] >= 2, counts  # drafts, and a verify of each write


@pytest.mark.parametrize("wire", ["chat", "messages"])
def test_a_rejected_draft_changes_only_the_end_of_the_prompt(served, tokenizer, wire):
    """The weak model drafts a wrong write; the verifier rejects it and repairs it. Only the steps under
    review and the closing instruction may leave the next prompt: the committed history stays its prefix."""
    url, sent = served
    sids = LOOPS[wire](url, [WRONG, AGAIN])
    assert len(set(sids)) == 1, sids
    check_prompts_append(sent, sids[0], tokenizer, strict=False)
    verdicts = [s for s in sent if s.sid == sids[0] and s.engine == "verifier"]
    assert any("typo" in s.messages[-2]["content"] for s in verdicts)  # the rejected draft was reviewed
