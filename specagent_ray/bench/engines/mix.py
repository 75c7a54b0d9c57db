"""The fixed mix of agent sessions that ``bench engines`` runs on real engines (MEASURED).

Each session is scripted: its blocks, their steps and observations, which block stages a write, the
user turns and the tool pauses between blocks all follow from the mix, so a run with a feature off and
one with it on ask the engines the same prompts in the same pattern. Every call goes through the
serving path's own engine client (``OpenAIEngineClient``: its priorities, verify batcher and prefill
ahead); the drafts' and verdicts' answers are ignored (random-weight models), the script decides what
is committed. Each run gets its own policy text, so no run finds another's prefixes in the cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...costs.ledger import Ledger
from ...models.backend import ChatBackend, Completion, usage_of
from ...models.prompts import PromptConfig, Prompts
from ...protocol.interfaces import CallRecord, EngineUnavailable, MalformedOutput
from ...protocol.types import Action, Effect, History, Observation, Step, Task
from ...serve.core.catalog import Catalog
from ...serve.core.config import CoordinatorConfig, Endpoint, OpenAIEngines
from ...serve.core.tuning import PriorityConfig
from ...serve.engines.engine_client import OpenAIEngineClient

SCHEMAS = {
    "get_reservation": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
    "get_user": {"type": "object", "properties": {"user_id": {"type": "string"}}, "required": ["user_id"]},
    "update_seat": {"type": "object", "properties": {"id": {"type": "string"}, "seat": {"type": "string"}}},
    "cancel_reservation": {"type": "object", "properties": {"id": {"type": "string"}}},
}
EFFECTS = {"get_reservation": Effect.READ, "get_user": Effect.READ, "update_seat": Effect.WRITE,
           "cancel_reservation": Effect.WRITE}
REVIEW = "You are now the reviewer."  # how a verify prompt's last message begins (prompts.verify_instruction)


@dataclass(frozen=True)
class Mix:
    """Sessions x blocks; each block has ``k`` steps, the last a staged write in every ``write_every``-th; a
    user turn of ``turn_chars`` (what a client sends back: a reply, a client tool's result) follows each
    write, during the pause. Sessions start ``stagger_s`` apart and pause between blocks."""

    sessions: int = 4
    blocks: int = 4
    k: int = 3
    write_every: int = 2
    policy_chars: int = 2000
    observation_chars: int = 300
    turn_chars: int = 1500
    pauses_s: tuple[float, ...] = (0.3, 1.0)
    stagger_s: float = 0.25
    max_tokens: int = 16  # drafts and verdicts: their answers are ignored, their prefills are measured


@dataclass
class Run:
    """What one run measured. Waits are from asked to answered, seconds; tokens are vLLM's usage."""

    label: str
    verify: list[tuple[int, int, int]] = field(default_factory=list)  # (prompt, cached, block tokens)
    ttft_s: list[float] = field(default_factory=list)
    ttft_write_s: list[float] = field(default_factory=list)  # verifies of blocks that stage a write
    waits: dict[str, list[float]] = field(default_factory=dict)
    session_s: list[float] = field(default_factory=list)
    tokens: dict[str, list[int]] = field(default_factory=lambda: {"weak": [0, 0], "strong": [0, 0]})
    prefill: dict[str, int] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)  # calls the engines did not answer (each one's error)

    def add(self, other: Run) -> None:
        """Pool another run's samples and sums into this one (repeats of the same setting)."""
        self.verify += other.verify
        self.ttft_s += other.ttft_s
        self.ttft_write_s += other.ttft_write_s
        self.session_s += other.session_s
        self.failed += other.failed
        for kind, waits in other.waits.items():
            self.waits.setdefault(kind, []).extend(waits)
        for role, (prompt, cached) in other.tokens.items():
            self.tokens[role][0] += prompt
            self.tokens[role][1] += cached
        for key, n in other.prefill.items():
            self.prefill[key] = self.prefill.get(key, 0) + n


class FirstTokenBackend(ChatBackend):
    """``ChatBackend`` that streams, to time the first token; a verify prompt's usage and time to first
    token go to ``on_verify``. Answers and errors are what ``ChatBackend.complete`` gives."""

    on_verify: Any = None

    async def _chat(self, request: dict[str, Any]) -> Completion:
        start = time.perf_counter()
        stream = await self.client.chat.completions.create(**request, stream=True,
                                                           stream_options={"include_usage": True})
        first, text, finish, usage = None, [], None, None
        async for chunk in stream:
            if chunk.choices:
                first = first or time.perf_counter()
                text.append(chunk.choices[0].delta.content or "")
                finish = chunk.choices[0].finish_reason or finish
            usage = chunk.usage or usage
        done = Completion("".join(text), usage_of(usage), finish, self.model)
        messages = request["messages"]
        if self.on_verify and (messages[-1].get("content") or "").startswith(REVIEW):
            self.on_verify(messages, done.usage, (first or time.perf_counter()) - start)
        return done


def policy_text(label: str, chars: int) -> str:
    rules = (f"Rule {i}: confirm the reservation id and the passenger's name before changing seat {i}."
             for i in range(10_000))
    text = f"Desk {label}. " + " ".join(rules)
    return text[:chars]


def block_of(session: int, block: int, mix: Mix) -> list[Step]:
    """Block ``block`` of session ``session``: reads with observations, then (in every ``write_every``-th
    block, the first included) a staged write."""
    steps, writes = [], block % mix.write_every == 0
    for j in range(mix.k - writes):
        rid = f"R{session:03d}{block}{j}"
        obs = f"reservation {rid}: " + ", ".join(f"leg {n} LAX-SFO seat {n}C fare 12{n}" for n in range(40))
        steps.append(Step(Action.tool("get_reservation", id=rid), Observation(obs[: mix.observation_chars]),
                          "weak", Effect.READ))
    if writes:
        steps.append(Step(Action.tool("update_seat", id=f"R{session:03d}{block}0", seat="14A"), None, "weak",
                          Effect.WRITE))
    return steps


def committed(block: Sequence[Step], session: int, turn: int, mix: Mix) -> tuple[Step, ...]:
    """What the script commits of a block: its staged write executed, then the user's next turn."""
    if not block[-1].staged:
        return tuple(block)
    write = Step(block[-1].action, Observation(f"seat updated: {block[-1].action.call.arguments}"),
                 "weak", Effect.WRITE)
    said = f"User {session}, turn {turn}: here is my itinerary. " + " ".join(
        f"Leg {n}: JFK-LHR on 2027-01-{n % 28 + 1:02d}, seat {n}B, fare class Y{n}." for n in range(400))
    ask = Step(Action.message("Done. Anything else?"), Observation(said[: mix.turn_chars]), "weak", Effect.READ)
    return (*block[:-1], write, ask)


class Tokens:
    """Token counts of message lists with the verifier's own chat template (block tokens per verify)."""

    def __init__(self, model_dir: Path):
        from transformers import AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(str(model_dir))

    def __call__(self, messages: Sequence[Mapping[str, Any]], generation: bool) -> int:
        out = self.tok.apply_chat_template(list(messages), tokenize=True, add_generation_prompt=generation)
        return len(out["input_ids"] if hasattr(out, "keys") else out)  # transformers 5 answers a BatchEncoding


def engine_client(url: str, mix: Mix, prefill_ahead: bool, priority: bool, order: PriorityConfig | None = None,
                  trust_s: float = 60.0, kv_tokens: int | None = None) -> OpenAIEngineClient:
    """The serving path's engine client on ``url``, its verifier backend timing first tokens."""
    engines = OpenAIEngines(drafter=Endpoint(url=url, model="drafter", send_priority=priority),
                            verifier=Endpoint(url=url, model="verifier", send_priority=priority),
                            prefill_ahead=prefill_ahead, prefill_trust_s=trust_s, verifier_kv_tokens=kv_tokens,
                            max_tokens=mix.max_tokens,
                            timeout_s=600, max_retries=0, observation_chars=mix.observation_chars)
    coord = CoordinatorConfig(batch_window_ms=2.0, verify_timeout_s=600, priority=order or PriorityConfig())
    client = OpenAIEngineClient(engines, coord, {})
    timed = FirstTokenBackend(client.verifier.base_url, model="verifier", timeout_s=600, max_retries=0)
    timed.client = client.verifier.client  # one HTTP client, closed once
    client.verifier = timed
    if client.ahead:
        client.ahead.backend = timed
    return client


def longest_prompt(mix: Mix, tokens: Tokens) -> int:
    """The mix's longest prompt (the last block's verify), in the verifier's tokens."""
    prompts = Prompts(PromptConfig(policy=policy_text("x" * 24, mix.policy_chars),
                                   observation_chars=mix.observation_chars), SCHEMAS)
    history = History(Task("task-0", _instruction(mix.sessions - 1)))
    for b in range(mix.blocks):
        block = block_of(mix.sessions - 1, b, mix)
        if b < mix.blocks - 1:
            history = History(history.task, history.steps + committed(block, mix.sessions - 1, b, mix))
    return tokens(prompts.verify(history, block), True)


def _instruction(i: int) -> str:
    return f"Passenger {i}: please move me to a window seat on all my trips."


async def run_mix(url: str, mix: Mix, tokens: Tokens, label: str, prefill_ahead: bool, priority: bool,
                  order: PriorityConfig | None = None, trust_s: float = 60.0, kv_tokens: int | None = None) -> Run:
    """One run of the mix on the engines at ``url`` with the features given (``order``: the priority
    slacks, the coordinator's defaults when None; ``trust_s``, ``kv_tokens``: prefill ahead's trust in the
    cache)."""
    client = engine_client(url, mix, prefill_ahead, priority, order, trust_s, kv_tokens)
    run = Run(label)
    policy = policy_text(f"{label}-{time.time_ns()}", mix.policy_chars)
    catalog = Catalog(SCHEMAS, EFFECTS, policy)

    def on_verify(messages, usage, ttft):
        leading = len(messages) - 1 - _block_messages(messages)
        block = tokens(messages, True) - tokens(messages[:leading], False)
        run.verify.append((usage.prompt_tokens, usage.cached_prompt_tokens, block))
        run.ttft_s.append(ttft)
        if "[STAGED" in messages[-1]["content"]:
            run.ttft_write_s.append(ttft)

    client.verifier.on_verify = on_verify
    ledgers = await asyncio.gather(*(_session(client, catalog, mix, i, run) for i in range(mix.sessions)))
    if client.ahead:
        await asyncio.gather(*list(client.ahead.tasks))
        run.prefill = dict(client.ahead.counts)
    for ledger in ledgers:
        for role in ("weak", "strong"):
            t = ledger.totals(role)
            run.tokens[role][0] += t.prompt_tokens
            run.tokens[role][1] += t.cached_prompt_tokens
    run.waits = {kind: list(w) for kind, w in client.priority.waits.items()}
    await asyncio.gather(client.drafter.aclose(), client.verifier.aclose())
    return run


def _block_messages(messages: Sequence[Mapping[str, Any]]) -> int:
    """How many messages before the review instruction belong to the block: read from the instruction's
    numbered list, each step an assistant message plus, unless staged, its observation."""
    lines = [ln for ln in messages[-1]["content"].splitlines() if ln[:1].isdigit()]
    return sum(1 if "[STAGED" in ln else 2 for ln in lines)


async def _session(client: OpenAIEngineClient, catalog: Catalog, mix: Mix, i: int, run: Run) -> Ledger:
    s = types.SimpleNamespace(id=f"mix-{i}", outside=contextlib.nullcontext, ledger=Ledger(),
                              request=types.SimpleNamespace(instructions=None, context=None))
    weak, _, verifier = client.models(s, catalog)  # type: ignore[arg-type]
    history = History(Task(f"task-{i}", _instruction(i)))
    await asyncio.sleep(i * mix.stagger_s)
    start = time.perf_counter()
    for b in range(mix.blocks):
        block = block_of(i, b, mix)
        for j in range(len(block)):
            await _answered(weak.propose(history, block[:j]), s.ledger, "weak", "draft", run)
        await _answered(verifier.verify(history, block), s.ledger, "strong", "verify", run)
        history = History(history.task, history.steps + committed(block, i, b, mix))
        await asyncio.sleep(mix.pauses_s[(i + b) % len(mix.pauses_s)])
    run.session_s.append(time.perf_counter() - start)
    return s.ledger


async def _answered(call, ledger: Ledger, role: str, purpose: str, run: Run) -> None:
    """Await a model call; its usage goes to the session's ledger (a malformed answer's too); a call the
    engines did not answer is counted in ``run.failed``."""
    try:
        done = await call
    except MalformedOutput as exc:
        done = exc
    except EngineUnavailable as exc:
        run.failed.append(f"{purpose}: {exc}")
        return
    usage = getattr(done, "usage", None)
    if usage is not None:
        ledger.record(CallRecord(role, purpose, usage, 0.0))  # type: ignore[arg-type]
