"""Chat prompts for draft, verify and repair, and the JSON schemas their answers must follow.

Every prompt starts with the same *leading block*: one system message (role, domain policy, the tools'
JSON schemas rendered with sorted keys, the answer format, the task), then the committed history H as
assistant/user turns (an action as its JSON, then ``Tool result (name): ...`` or ``Customer: ...``).
What differs comes after it, in the last message:

- draft  = leading block + the steps drafted so far + "decide the next action";
- verify = leading block + the block's steps + "review the draft" (the staged step marked not executed);
- repair = leading block + "the reviewer rejected the next step because: r" + "decide the next action".

Guarantee: a step renders the same wherever it appears, so the verify prompt for (H, block) and the
repair prompt for H + block[:j] share, byte for byte, the leading block of H plus the j accepted steps.
The repair's prefill is then a prefix-cache hit in vLLM; the paper's templates share no prefix (+30-87 %
FLOPs). All functions here are pure: the same inputs give the same messages.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field

from ..protocol.types import MAX_CALLS, Action, ActionKind, History, Step, Task
from .structured import MessageFormat, parse_json


class ChatMessage(TypedDict):
    role: Literal["system", "user", "assistant"]
    content: str


DEFAULT_ROLE = (
    "You are a customer service agent. You help the customer by calling tools and sending messages, "
    "following the policy below exactly."
)


class PromptConfig(BaseModel):
    """The fixed text of the prompts. ``observation_chars`` truncates each tool result and reply."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: str = Field("", description="the domain policy, e.g. tau2's airline policy")
    agent_role: str = Field(DEFAULT_ROLE, description="the first paragraph of the system message")
    observation_chars: int = Field(4000, ge=1, description="longest observation shown, in characters")
    tool_descriptions: dict[str, str] = Field(default_factory=dict, description="tool name -> what it does")
    typed_arguments: bool = Field(True, description="constrain each tool's arguments to its own schema "
                                  "(anyOf per tool); False asks for a free-form arguments object")
    parallel_calls: bool = Field(False, description="the model may answer several independent tool calls in "
                                 "one action, and a verdict may accept or reject each staged call")
    confidence: bool = Field(False, description="a verdict also says how sure the reviewer is (0..1): the "
                             "three-tier chain's mid verifier, which escalates when unsure")
    message_schema: dict[str, Any] | None = Field(None, description="a message's text is a JSON value this "
                                                  "schema accepts (structured outputs), not a string")


# -- schemas ---------------------------------------------------------------------------------------

REASON_CHARS = 300  # the engine stops a rejection reason here instead of at max_tokens
MESSAGE_CHARS = 1000


def with_parallel_calls(schema: dict[str, Any]) -> dict[str, Any]:
    """An action schema that also allows ``{"kind": "tools", "calls": [{"name", "arguments"}, ...]}``,
    each call one of the schema's own tool branches (typed) or its name and arguments (flat)."""
    tool_branches = [b for b in schema.get("anyOf", []) if b.get("properties", {}).get("kind") == {"const": "tool"}]
    if tool_branches:
        call: dict[str, Any] = {"anyOf": [{**b, "required": ["name", "arguments"], "properties": {
            k: v for k, v in b["properties"].items() if k != "kind"}} for b in tool_branches]}
        calls = {"type": "array", "items": call, "minItems": 2, "maxItems": MAX_CALLS}
        branch = {"type": "object", "additionalProperties": False, "required": ["kind", "calls"],
                  "properties": {"kind": {"const": "tools"}, "calls": calls}}
        return {**schema, "anyOf": [*schema["anyOf"], branch]}
    props = schema["properties"]
    call = {"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
            "properties": {"name": props["name"], "arguments": props["arguments"]}}
    kind = {**props["kind"], "enum": [*props["kind"]["enum"], "tools"]}
    calls = {"type": "array", "items": call, "minItems": 2, "maxItems": MAX_CALLS}
    return {**schema, "properties": {**props, "kind": kind, "calls": calls}}

def message_slot(message_schema: Mapping[str, Any] | None) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """A message's ``text`` in an action schema, and the ``$defs`` it needs: the client's schema where the
    session has one (``MessageFormat.embedded``), else None (the caller's own string)."""
    return MessageFormat(message_schema).embedded() if message_schema is not None else (None, {})


def action_schema(tool_schemas: Mapping[str, Any], message_schema: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The schema of one action. A flat object with a ``kind`` enum, not a ``oneOf``: every engine
    (xgrammar, cloud structured outputs) supports it. Which fields a kind needs is the parser's check.
    With ``message_schema`` a message's text is a value that schema accepts."""
    kinds = ["tool", "message", "stop"] if tool_schemas else ["message", "stop"]
    properties: dict[str, Any] = {"kind": {"type": "string", "enum": kinds}}
    if tool_schemas:
        properties["name"] = {"type": "string", "enum": sorted(tool_schemas)}
        properties["arguments"] = {"type": "object"}
    slot, defs = message_slot(message_schema)
    properties["text"] = slot or {"type": "string"}
    return {**({"$defs": defs} if defs else {}), "title": "action", "type": "object", "properties": properties,
            "required": ["kind"], "additionalProperties": False}


def typed_action_schema(tool_schemas: Mapping[str, Any], message_schema: Mapping[str, Any] | None = None
                        ) -> dict[str, Any]:
    """One action whose arguments must match the chosen tool's own schema: an ``anyOf`` with one branch
    per tool (``name`` a const), plus message and stop. Tools' ``$defs`` are hoisted to the root, renamed
    per tool where two tools (or the message's schema) define the same name differently, so every ``$ref``
    still resolves. With ``message_schema`` a message's text is a value that schema accepts."""
    slot, defs = message_slot(message_schema)
    branches: list[dict[str, Any]] = []
    for name in sorted(tool_schemas):
        params = copy.deepcopy(dict(tool_schemas[name]))
        renames = {}
        for key, value in params.pop("$defs", {}).items():
            new = key if defs.get(key, value) == value else f"{name}__{key}"
            defs[new], renames[key] = value, new
        params = _rewrite_refs(params, renames)
        defs.update({k: _rewrite_refs(v, renames) for k, v in defs.items() if k in renames.values()})
        branches.append({"type": "object", "additionalProperties": False, "required": ["kind", "name", "arguments"],
                         "properties": {"kind": {"const": "tool"}, "name": {"const": name}, "arguments": params}})
    branches.append({"type": "object", "additionalProperties": False, "required": ["kind", "text"],
                     "properties": {"kind": {"const": "message"}, "text": slot or
                                    {"type": "string", "minLength": 1, "maxLength": MESSAGE_CHARS}}})
    branches.append({"type": "object", "additionalProperties": False, "required": ["kind"],
                     "properties": {"kind": {"const": "stop"}}})
    schema: dict[str, Any] = {"title": "action", "anyOf": branches}
    if defs:
        schema["$defs"] = defs
    return schema


def _rewrite_refs(node: Any, renames: Mapping[str, str]) -> Any:
    if isinstance(node, dict):
        out = {k: _rewrite_refs(v, renames) for k, v in node.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/") and ref[8:] in renames:
            out["$ref"] = "#/$defs/" + renames[ref[8:]]
        return out
    if isinstance(node, list):
        return [_rewrite_refs(v, renames) for v in node]
    return node


def verdict_schema(tool_schemas: Mapping[str, Any], n: int | None = None, typed: bool = False,
                   parallel: bool = False, confidence: bool = False,
                   message_schema: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The schema of a verdict ``(j, r, ã)``; with ``n`` the engine also enforces ``j <= n``. With
    ``parallel``, ``calls`` answers each call of a staged parallel action (or is null), and the repair may
    be a parallel action; with ``message_schema``, a repair's message is a value that schema accepts."""
    prefix: dict[str, Any] = {"type": "integer", "minimum": 0}
    if n is not None:
        prefix["maximum"] = n
    action = (typed_action_schema(tool_schemas, message_schema) if typed and tool_schemas
              else action_schema(tool_schemas, message_schema))
    if parallel and tool_schemas:
        action = with_parallel_calls(action)
    defs = action.pop("$defs", None)
    repair = {k: v for k, v in action.items() if k != "title"}
    properties: dict[str, Any] = {
        "accepted_prefix": prefix,
        "reason": {"type": "string", "maxLength": REASON_CHARS},  # a verdict stays short
        "repair": {"anyOf": [repair, {"type": "null"}]},
    }
    if parallel:  # one boolean per staged call, or null
        properties["calls"] = {"anyOf": [{"type": "array", "items": {"type": "boolean"}, "minItems": 1,
                                          "maxItems": MAX_CALLS}, {"type": "null"}]}
    if confidence:  # how sure the reviewer is that this verdict is right
        properties["confidence"] = {"type": "number", "minimum": 0, "maximum": 1}
    return {**({"$defs": defs} if defs else {}), "title": "verdict", "type": "object", "properties": properties,
            "required": list(properties), "additionalProperties": False}


# -- rendering -------------------------------------------------------------------------------------

def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def render_action(action: Action, structured: bool = False) -> str:
    """An action as the JSON object the model answers with: fields in the schema's order (the order
    the engine generates them in), arguments with sorted keys. ``structured``: a message's text that is
    JSON is the value it was written as (structured outputs), not a string."""
    if action.kind is ActionKind.TOOL and action.more:
        calls = ", ".join(f'{{"name": {_json(c.name)}, "arguments": {_json(c.arguments)}}}' for c in action.calls)
        return f'{{"kind": "tools", "calls": [{calls}]}}'
    if action.kind is ActionKind.TOOL and action.call is not None:
        return f'{{"kind": "tool", "name": {_json(action.call.name)}, "arguments": {_json(action.call.arguments)}}}'
    if action.kind is ActionKind.MESSAGE:
        return f'{{"kind": "message", "text": {_message_text(action.text, structured)}}}'
    return '{"kind": "stop"}'


def _message_text(text: str, structured: bool) -> str:
    if structured:
        try:
            parse_json(text)
            return text  # the value's own JSON: the form the model writes it in
        except ValueError:
            pass
    return _json(text)


def truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]} ...[{len(text) - limit} more chars truncated]"


def step_messages(step: Step, observation_chars: int, structured: bool = False) -> list[ChatMessage]:
    """One step as turns: the action, then its observation (none for a stop or a staged step)."""
    out: list[ChatMessage] = [{"role": "assistant", "content": render_action(step.action, structured)}]
    obs = step.observation
    if obs is None:
        return out
    body = truncate(obs.content, observation_chars)
    if step.action.kind is ActionKind.TOOL and step.action.more:  # the content lists each call's result
        names = ", ".join(c.name for c in step.action.calls)
        out.append({"role": "user", "content": f"Tool results ({names}):\n{body}"})
    elif step.action.kind is ActionKind.TOOL and step.action.call is not None:
        label = "Tool error" if obs.error else "Tool result"
        out.append({"role": "user", "content": f"{label} ({step.action.call.name}): {body}"})
    else:
        out.append({"role": "user", "content": f"Customer: {body}"})
    return out


def steps_messages(steps: Sequence[Step], observation_chars: int, structured: bool = False) -> list[ChatMessage]:
    return [m for s in steps for m in step_messages(s, observation_chars, structured)]


ANSWER_FORMAT = """# How to answer
Each of your actions is exactly one JSON object, nothing else:
- {"kind": "tool", "name": "<tool name>", "arguments": {...}} calls a tool;
- {"kind": "message", "text": "..."} sends a message to the customer;
- {"kind": "stop"} ends the conversation once the task is done.
Tool results come back as "Tool result (<name>): ...", the customer's replies as "Customer: ..."."""
PARALLEL_FORMAT = """
- {"kind": "tools", "calls": [{"name": "<tool name>", "arguments": {...}}, ...]} calls several tools at once,
  when none of them needs another's result; their results come back together, one line each."""
MESSAGE_FORMAT = """
A message's "text" is not a string: it is one JSON value, which the customer reads as data, that this JSON
Schema accepts: """


def render_system(config: PromptConfig, tool_schemas: Mapping[str, Any], task: Task) -> str:
    """The system message: role, policy, tools (sorted by name, schemas with sorted keys), format, task."""
    parts = [config.agent_role.strip()]
    if config.policy.strip():
        parts.append("# Policy\n" + config.policy.strip())
    tools = ["# Tools\nEach tool: its name, what it does, and the JSON Schema of its arguments."]
    for name in sorted(tool_schemas):
        about = config.tool_descriptions.get(name, "").strip()
        tools.append(f"## {name}\n" + (about + "\n" if about else "") + _json(tool_schemas[name]))
    parts.append("\n".join(tools))
    form = MESSAGE_FORMAT + _json(config.message_schema) if config.message_schema is not None else ""
    parts.append(ANSWER_FORMAT + (PARALLEL_FORMAT if config.parallel_calls else "") + form)
    parts.append("# Task\n" + task.instruction.strip())
    return "\n\n".join(parts)


class Prompts:
    """Builds the message lists for one domain. Pure: same (history, steps) in, same messages out."""

    def __init__(self, config: PromptConfig, tool_schemas: Mapping[str, Any]):
        self.config = config
        self.tool_schemas = {k: copy.deepcopy(v) for k, v in tool_schemas.items()}
        self.tool_names = frozenset(self.tool_schemas)
        self.structured = config.message_schema is not None  # a message's text is the client's JSON value

    @cached_property
    def action_schema(self) -> dict[str, Any]:
        message = self.config.message_schema
        if self.config.typed_arguments and self.tool_schemas:
            schema = typed_action_schema(self.tool_schemas, message)
        else:
            schema = action_schema(self.tool_schemas, message)
        return with_parallel_calls(schema) if self.config.parallel_calls and self.tool_schemas else schema

    def verdict_schema(self, n: int) -> dict[str, Any]:
        return verdict_schema(self.tool_schemas, n, typed=self.config.typed_arguments,
                              parallel=self.config.parallel_calls, confidence=self.config.confidence,
                              message_schema=self.config.message_schema)

    def leading_block(self, history: History) -> list[ChatMessage]:
        """System message + H. The verify and repair prompts both begin with exactly these messages."""
        system: ChatMessage = {"role": "system", "content": render_system(self.config, self.tool_schemas, history.task)}
        return [system, *steps_messages(history.steps, self.config.observation_chars, self.structured)]

    def draft(self, history: History, draft: Sequence[Step] = (), feedback: str | None = None) -> list[ChatMessage]:
        """The next action after H + the steps drafted so far (``feedback`` makes it a repair)."""
        tail = NEXT_ACTION if feedback is None else repair_instruction(feedback)
        return [*self.leading_block(history), *steps_messages(draft, self.config.observation_chars, self.structured),
                {"role": "user", "content": tail}]

    def repair(self, history: History, reason: str) -> list[ChatMessage]:
        """The strong model's own step from (H, r)."""
        return self.draft(history, (), reason)

    def verify(self, history: History, block: Sequence[Step], criterion: str = "semantic") -> list[ChatMessage]:
        """One prefill over H + block, then a short verdict ``(j, r, ã)``; ``criterion`` is SpecAgent's
        ``semantic`` acceptance or the ablation's ``exact`` one (only the closing instruction differs)."""
        return [*self.leading_block(history), *steps_messages(block, self.config.observation_chars, self.structured),
                {"role": "user", "content": verify_instruction(block, criterion, self.config.confidence,
                                                               self.structured)}]


NEXT_ACTION = "Decide your next action. Answer with one JSON object only."


def repair_instruction(reason: str) -> str:
    return (f"A reviewer rejected the next step because: {reason.strip() or '(no reason given)'}\n"
            "Decide your next action yourself, taking that reason into account. "
            "Answer with one JSON object only.")


ACCEPTANCE = {
    "semantic": "A step is acceptable if it is reasonable progress on the task under the policy; it need not "
                "be the action you would have chosen. Asking the user for something the task needs but does "
                "not give (a missing parameter, a function that is not available) is reasonable progress; "
                "guessing it is not.",
    # A critical call's second look (the ``verdicts`` check): the semantic criterion, and the staged call
    # checked argument by argument before it may run.
    "critical": "A step is acceptable if it is reasonable progress on the task under the policy; it need not "
                "be the action you would have chosen. The last step is a critical, irreversible call (money, "
                "cancellations, lost service): before you accept it, check each of its arguments against what "
                "the user asked and confirmed, the tool results above and the policy, one by one; accept it "
                "only if every argument is right and the policy allows the call now.",
    # The exact-match ablation: the same reviewer, only the acceptance criterion changed.
    "exact": "A step is acceptable only if it is exactly the action you would have chosen at that point: the "
             "same tool with the same arguments, or the same message word for word. A different action is "
             "not acceptable, however reasonable.",
}


def verify_instruction(block: Sequence[Step], criterion: str = "semantic", confidence: bool = False,
                       structured: bool = False) -> str:
    lines = []
    for i, step in enumerate(block, 1):
        note = "STAGED: not executed, runs only if you accept it" if step.staged else "executed"
        lines.append(f"{i}. {render_action(step.action, structured)}  [{note}]")
    n = len(block)
    staged = block[-1].action.calls if block and block[-1].staged else ()
    per_call = (f" The last step holds {len(staged)} tool calls: if you accept every step, calls may answer each "
                f"of them in order (true runs it, false never does; reason and repair then speak of the false "
                f"ones), or be null to accept them all.") if len(staged) > 1 else ""
    fields = ', "calls": <list of true/false, or null>' if len(staged) > 1 else ""
    if confidence:
        per_call += (" In confidence, give the probability (0 to 1) that your verdict is right: a more careful "
                     "reviewer checks it when you are unsure.")
        fields += ', "confidence": <number from 0 to 1>'
    return (
        f"You are now the reviewer. The last {n} action(s) above are a draft by a junior agent:\n"
        + "\n".join(lines) + "\n"
        f"Check the steps in order. {ACCEPTANCE[criterion]} accepted_prefix is the number of "
        f"leading acceptable steps (0..{n}). If it is below {n}, say in reason why the next step is not "
        f"acceptable, and give in repair the action that should replace it (or null).{per_call} Answer with one "
        f'JSON object only: {{"accepted_prefix": <integer>, "reason": "<text>", "repair": <action or null>{fields}}}.'
    )


def retry_messages(messages: Sequence[ChatMessage], bad_output: str, reason: str,
                   shown_chars: int = 2000) -> list[ChatMessage]:
    """The same prompt (still a prefix-cache hit) plus the rejected output and why it was rejected."""
    return [*messages, {"role": "assistant", "content": truncate(bad_output, shown_chars)},
            {"role": "user", "content": f"That answer was invalid: {reason}. Answer again with exactly one "
                                        "JSON object that follows the required format."}]


# -- measuring the shared prefix -------------------------------------------------------------------

def serialize(messages: Sequence[ChatMessage]) -> str:
    """A canonical text of a message list, to compare prompts byte for byte."""
    return json.dumps(list(messages), ensure_ascii=False, separators=(",", ":"))


def shared_prefix_chars(a: Sequence[ChatMessage], b: Sequence[ChatMessage]) -> int:
    """How many leading characters the serialized message lists have in common."""
    return common_prefix(serialize(a), serialize(b))


def common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix of two strings, by binary search over slices compared in C
    (a character loop in Python costs milliseconds on a long prompt)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if a[:mid] == b[:mid] else (lo, mid - 1)
    return lo
