"""The Responses API's translation, without a server: requests in (``responses.py``), records out
(``response_items.py``), turns and approvals (``turns.py``), and the plan-following engines."""

from __future__ import annotations

import json

import pytest

from specagent_ray.models.plan import PlanPolicy, PlanVerifier, parse_plan
from specagent_ray.protocol.types import Action, Effect, History, Observation, Step, Task, ToolCall
from specagent_ray.serve.api import Approval, ToolResult, UserMessage
from specagent_ray.serve.errors import BadRequest, Conflict, NotFound
from specagent_ray.serve.records import TurnMeta
from specagent_ray.serve.response_items import output_items, status_of, usage
from specagent_ray.serve.responses import ResponseCreate, Terms, approval_of, create_request, parse_response_id
from specagent_ray.serve.turns import ApprovalPost, Approvals, Turns, TurnPost

TERMS = Terms(("specagent", "strong"), {"agent": "specagent"}, ("bank",), "app")


def body(**fields) -> ResponseCreate:
    return ResponseCreate(**{"model": "specagent", "input": "say hi", **fields})


# -- requests in --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("tool, named", [
    ({"type": "mcp", "server_label": "bank", "server_url": "http://169.254.169.254/"}, "server_url"),
    ({"type": "mcp", "server_label": "bank", "headers": {"Authorization": "x"}}, "headers"),
    ({"type": "mcp", "server_label": "bank", "authorization": "token"}, "authorization"),
    ({"type": "mcp", "server_label": "nowhere"}, "'nowhere'"),
    ({"type": "web_search"}, "web_search"),
    ({"type": "function", "name": "f", "x-secret": 1}, "x-secret"),
])
def test_a_tool_the_server_cannot_honour_is_refused_by_name(tool, named):
    with pytest.raises(BadRequest, match=named):
        create_request(body(tools=[tool]), TERMS)


@pytest.mark.parametrize("extra, named", [
    ({"temperature": 0.3}, "temperature"), ({"tool_choice": "required"}, "tool_choice"),
    ({"tool_choice": {"type": "function", "name": "f"}}, "tool_choice"), ({"store": False}, "store"),
    ({"max_output_tokens": 5, "top_p": 1}, "max_output_tokens, top_p"),
])
def test_an_unsupported_parameter_is_refused_by_name_never_ignored(extra, named):
    with pytest.raises(BadRequest, match=named):
        create_request(body(**extra), TERMS)


def test_a_create_maps_model_tools_and_approval_onto_one_session():
    req = create_request(body(model="agent", instructions="Be brief.", tools=[
        {"type": "mcp", "server_label": "bank", "allowed_tools": ["get_balance", "transfer"],
         "require_approval": {"always": {"tool_names": ["transfer"]}}}]), TERMS)
    assert (req.tool_source, req.method, req.instructions, req.user) == ("bank", "specagent", "Be brief.", "client")
    assert req.allowed_tools == ["get_balance", "transfer"] and req.approval == Approval(tools=["transfer"])
    functions = create_request(body(tools=[{"type": "function", "name": "f", "read_only": True}]), TERMS)
    assert functions.tool_source == "app" and functions.client_tools[0].read_only is True
    with pytest.raises(BadRequest, match="one tool source"):
        create_request(body(tools=[{"type": "mcp", "server_label": "bank"}, {"type": "function", "name": "f"}]), TERMS)
    with pytest.raises(BadRequest, match="unknown model"):
        create_request(body(model="gpt-5"), TERMS)
    with pytest.raises(BadRequest, match="previous_response_id"):
        create_request(body(input=[{"type": "function_call_output", "call_id": "c", "output": "x"}]), TERMS)


def test_require_approval_never_is_the_default_and_filters_map_onto_the_rule():
    assert approval_of("never") is None and approval_of("always") == Approval()
    rule = approval_of({"never": {"tool_names": ["refund"]}})
    assert rule.needed("transfer") and not rule.needed("refund")
    with pytest.raises(BadRequest, match="tool_names only"):
        approval_of({"always": {"read_only": True}})


@pytest.mark.parametrize("rid", ["resp_../x_0", "resp_0-abc_0", "resp_0-0123456789abcdef", "0-0123456789abcdef_1"])
def test_a_malformed_response_id_is_one_that_does_not_exist(rid):
    with pytest.raises(NotFound):
        parse_response_id(rid)


# -- records out --------------------------------------------------------------------------------------------

def rec(seq: int, t: str, **fields) -> dict:
    return {"seq": seq, "t": t, **fields}


def tool(name: str, **arguments) -> dict:
    return {"kind": "tool", "name": name, "arguments": arguments}


def step(action: dict, content: str | None, effect: str = "read") -> dict:
    obs = None if content is None else {"content": content, "error": False}
    return {"action": action, "observation": obs, "author": "weak", "effect": effect}


def test_a_rejected_draft_never_appears_and_a_message_block_appears_once():
    read, bad, good = tool("get_balance", account="a"), tool("transfer", amount=500), tool("transfer", amount=5)
    turn0 = [rec(0, "created", request={}, tools=None),
             rec(1, "tool_result", name="get_balance", observation={"content": "100"}),
             rec(2, "drafted", action=read), rec(3, "staged", action=bad), rec(4, "accepted", detail="0/2"),
             rec(5, "rejected", action=read), rec(6, "fused_repair", action=good),
             rec(7, "intent", key="k0"), rec(8, "tool_result", name="transfer", observation={"content": "moved 5"}),
             rec(9, "commit", steps=[step(good, "moved 5", "write")], keys=["k0"], calls=[]),
             rec(10, "tool_result", name="get_balance", observation={"content": "95"}),
             rec(11, "drafted", action=read), rec(12, "agent_message", text="Sent 5.")]
    out = output_items(turn0, "s", "bank")
    assert [(i["type"], i.get("name"), i.get("output")) for i in out] == [
        ("mcp_call", "transfer", "moved 5"), ("mcp_call", "get_balance", "95"), ("message", None, None)]
    assert "500" not in json.dumps(out)
    turn1 = [rec(13, "turn", n=1, meta={}), rec(14, "user_message", text="thanks"),
             rec(15, "commit", steps=[step(read, "95"), step({"kind": "message", "text": "Sent 5."}, "thanks")],
                 keys=[None, None], calls=[])]
    assert output_items(turn1, "s", "bank") == []  # its steps went out with the message, in turn 0


def test_a_denied_write_never_ran_and_is_no_mcp_call_and_function_steps_go_out_once():
    denied = [rec(0, "approval_request", id="apr_s_0", name="transfer", arguments={"amount": 9}),
              rec(1, "turn", n=1, meta={}), rec(2, "approval_response", id="apr_s_0", approve=False),
              rec(3, "commit", steps=[step(tool("transfer", amount=9), "The user denied this call.", "write")],
                  keys=[None], calls=[])]
    assert [i["type"] for i in output_items(denied[:1], "s", "bank")] == ["mcp_approval_request"]
    assert output_items(denied[1:], "s", "bank") == []
    asked = [rec(0, "tool_call_pending", call_id="c1", name="lookup", arguments={"q": 1}),
             rec(1, "commit", steps=[step(tool("lookup", q=1), "x")], keys=[None], calls=[])]
    assert [i["type"] for i in output_items(asked, "s", None)] == ["function_call"]


def test_the_first_end_of_a_turn_decides_its_status_and_usage_counts_both_models():
    calls = [{"role": "weak", "purpose": "draft", "wall_s": 0, "usage": [100, 10, 20]},
             {"role": "strong", "purpose": "prefill", "wall_s": 0, "usage": [250, 0, 1, 0]},
             {"role": "strong", "purpose": "verify", "wall_s": 0, "usage": [300, 200, 7, 240]}]
    turn = [rec(0, "calls", calls=calls), rec(1, "accepted", detail="2/3"), rec(2, "agent_message", text="hi"),
            rec(3, "final", status="cancelled")]
    assert status_of(turn, latest=True) == "completed" and status_of(turn[:2], latest=True) == "in_progress"
    assert status_of([rec(0, "final", status="failed")], latest=True) == "failed"
    u = usage(turn)
    assert (u["input_tokens"], u["output_tokens"], u["input_tokens_details"]["cached_tokens"]) == (650, 28, 210)
    assert u["speculation"] | {"by_model": None} == {"blocks": 1, "drafted_steps": 3, "accepted_steps": 2,
                                                     "strong_calls": 1, "prefill_calls": 1, "verdict_tokens": 7,
                                                     "by_model": None}


# -- turns and approvals ------------------------------------------------------------------------------------

def test_an_input_posted_again_answers_with_the_turn_that_took_it_and_a_changed_answer_is_a_conflict():
    approvals, turns = Approvals("s"), Turns()
    request, _ = approvals.new(ToolCall("transfer", {"amount": 1}))
    yes = ApprovalPost(approval_request_id=request.id, approve=True)
    post = TurnPost(previous=0, inputs=[yes], meta=TurnMeta(model="specagent"))
    assert turns.repeat(post, None, approvals) is None
    n = turns.begin(post, None)
    turns.took_input(yes, n)
    assert approvals.answer(yes) is not None
    assert turns.repeat(post, None, approvals) == n == 1
    with pytest.raises(Conflict, match="already approved"):
        turns.repeat(TurnPost(previous=0, inputs=[yes.model_copy(update={"approve": False})],
                              meta=TurnMeta(model="specagent")), None, approvals)
    with pytest.raises(Conflict, match="latest"):
        turns.begin(TurnPost(previous=0, inputs=[UserMessage(text="x")], meta=TurnMeta(model="m")), None)
    messages = TurnPost(previous=1, inputs=[UserMessage(text="x"), ToolResult(call_id="c", content="")],
                        meta=TurnMeta(model="m"))
    assert turns.repeat(messages, None, approvals) is None  # a message is never "the same" as another


def test_an_approval_asked_before_a_restart_is_found_again_until_a_commit_consumes_it():
    approvals = Approvals("s")
    call = ToolCall("transfer", {"amount": 1})
    first, _ = approvals.new(call)
    assert approvals.open_for(call) is first
    approvals.answer(ApprovalPost(approval_request_id=first.id, approve=True))
    approvals.consumed()
    assert approvals.open_for(call) is None  # the same transfer asked for again is a new request


# -- the plan-following engines -------------------------------------------------------------------------------

async def test_the_plan_engines_draft_the_weak_variant_and_the_verifier_repairs_it_with_the_plan():
    plan = 'call get_balance {"account": "a"}; call transfer {"amount": 5} weak {"amount": 500}; say done'
    assert len(parse_plan(plan)) == 3 and parse_plan("hello there")[0].intended == Action.message("ok")
    assert parse_plan('call x {not json}')[0].intended == Action.message("ok")
    history = History(Task("t", plan))
    read = Step(Action.tool("get_balance", account="a"), Observation("1"), "weak", Effect.READ)
    drafted = (await PlanPolicy("weak").propose(history, [read])).action
    assert drafted == Action.tool("transfer", amount=500)
    verdict = (await PlanVerifier().verify(history, [read, Step(drafted, None, "weak", Effect.WRITE)])).verdict
    assert verdict.accepted_prefix == 1 and verdict.repair == Action.tool("transfer", amount=5)
    after = history.commit((read, Step(verdict.repair, Observation("ok"), "strong", Effect.WRITE)))
    assert (await PlanPolicy("weak").propose(after)).action == Action.message("done")
