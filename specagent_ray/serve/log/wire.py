"""JSON forms of the protocol's values, for the session log, the event stream and the HTTP API.

``step_from(step_dict(s)) == s`` for every step; the same holds for actions. Nothing here knows about
Ray or HTTP.
"""

from __future__ import annotations

from typing import Any

from ...protocol.interfaces import CallRecord
from ...protocol.types import Action, ActionKind, Effect, Event, Observation, Step, ToolCall, Usage, UserToolCall


def action_dict(action: Action) -> dict[str, Any]:
    if action.kind is ActionKind.TOOL:
        assert action.call is not None
        out = {"kind": "tool", "name": action.call.name, "arguments": action.call.arguments}
        if action.more:  # a one-call action keeps its old form
            out["more"] = [{"name": c.name, "arguments": c.arguments} for c in action.more]
        return out
    if action.kind is ActionKind.MESSAGE:
        return {"kind": "message", "text": action.text}
    return {"kind": "stop"}


def action_from(data: dict[str, Any]) -> Action:
    kind = data["kind"]
    if kind == "tool":
        more = [ToolCall(c["name"], c["arguments"]) for c in data.get("more") or ()]
        return Action.parallel([ToolCall(data["name"], dict(data["arguments"])), *more])
    if kind == "message":
        return Action.message(data["text"])
    return Action.stop()


def observation_dict(obs: Observation | None) -> dict[str, Any] | None:
    if obs is None:
        return None
    out: dict[str, Any] = {"content": obs.content, "error": obs.error, "user_stop": obs.user_stop}
    if obs.user_calls:  # only dual-control domains have them; other records keep their old form
        out["user_calls"] = [{"name": u.call.name, "arguments": u.call.arguments, "content": u.content,
                              "error": u.error} for u in obs.user_calls]
    if obs.parts:  # a parallel action's
        out["parts"] = [observation_dict(p) for p in obs.parts]
    return out


def observation_from(data: dict[str, Any] | None) -> Observation | None:
    if data is None:
        return None
    calls = tuple(UserToolCall(ToolCall(u["name"], u["arguments"]), u["content"], u.get("error", False))
                  for u in data.get("user_calls") or ())
    parts = tuple(observation_from(p) for p in data.get("parts") or ())
    return Observation(data["content"], data["error"], data["user_stop"], calls, parts)  # type: ignore[arg-type]


def step_dict(step: Step) -> dict[str, Any]:
    return {"action": action_dict(step.action), "observation": observation_dict(step.observation),
            "author": step.author, "effect": step.effect.value}


def step_from(data: dict[str, Any]) -> Step:
    return Step(action_from(data["action"]), observation_from(data["observation"]), data["author"],
                Effect(data["effect"]))


def event_dict(event: Event) -> dict[str, Any]:
    return {"kind": event.kind, "detail": event.detail,
            "action": action_dict(event.action) if event.action is not None else None}


def event_from(data: dict[str, Any]) -> Event:
    action = data.get("action")
    return Event(data["kind"], data.get("detail", ""), action_from(action) if action else None)


def call_dict(call: CallRecord) -> dict[str, Any]:
    """A model call as a log record stores it (``records.ModelCallJson``)."""
    u = call.usage
    return {"role": call.role, "purpose": call.purpose, "wall_s": call.wall_s,
            "usage": [u.prompt_tokens, u.cached_prompt_tokens, u.decode_tokens, u.predicted_cached_tokens]}


def call_from(data: dict[str, Any]) -> CallRecord:
    return CallRecord(data["role"], data["purpose"], Usage(*data["usage"]), data["wall_s"])
