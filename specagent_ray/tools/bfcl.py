"""BFCL v4 multi-turn (PyPI ``bfcl-eval``, installed with ``--no-deps``): each case's executable Python
backends are the tool environment, and BFCL's own multi-turn checker grades (state-based and
response-based, per turn).

Only BFCL's multi-turn modules are imported (its backends, ``multi_turn_utils`` and the checker); they
need nothing beyond the standard library and ``mpmath``. BFCL does not tag its functions, so
``EFFECTS`` is a reviewed table: a function that changes its instance's state in any way, including
its random generator, is a WRITE; a function missing from the table (a new BFCL release) is a WRITE.

A case is a list of user turns. The agent's turn ends with a message; the user then sends the next
turn; after the last one the user stops. Graded like BFCL: the committed steps, split at the agent's
messages, are the model's calls per turn.
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib
import inspect
import itertools
import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from ..optional import require
from ..protocol.types import ActionKind, Effect, Observation, Termination, ToolCall, Trajectory
from .schema import SchemaValidator

CATEGORIES = ("base", "miss_func", "miss_param", "long_context")

_READ, _WRITE = "read", "write"
# Reviewed per backend (every gold call of the four categories was run and the instance's state,
# private fields and random generator compared before and after; docs/benchmarks.md). Notes:
# cd changes only the private working directory, which later calls depend on: WRITE.
# echo writes when given a file name: WRITE. sort only returns output: READ.
# get_current_speed and get_outside_temperature_from_google draw from the instance's random generator,
# which shifts later results: WRITE. get_flight_cost fills a private cache that book_flight rebuilds
# and no result depends on: READ. contact_customer_support changes nothing (measured): READ.
EFFECTS: dict[str, dict[str, str]] = {
    "GorillaFileSystem": {
        **dict.fromkeys(("cat", "diff", "du", "find", "grep", "ls", "pwd", "sort", "tail", "wc"), _READ),
        **dict.fromkeys(("cd", "cp", "echo", "mkdir", "mv", "rm", "rmdir", "touch"), _WRITE)},
    "TicketAPI": {
        **dict.fromkeys(("get_ticket", "get_user_tickets", "ticket_get_login_status"), _READ),
        **dict.fromkeys(("close_ticket", "create_ticket", "edit_ticket", "logout", "resolve_ticket", "ticket_login"),
                        _WRITE)},
    "TravelAPI": {
        **dict.fromkeys(("compute_exchange_rate", "contact_customer_support", "get_all_credit_cards",
                         "get_booking_history", "get_budget_fiscal_year", "get_credit_card_balance", "get_flight_cost",
                         "get_nearest_airport_by_city", "list_all_airports", "retrieve_invoice",
                         "travel_get_login_status", "verify_traveler_information"), _READ),
        **dict.fromkeys(("authenticate_travel", "book_flight", "cancel_booking", "purchase_insurance",
                         "register_credit_card", "set_budget_limit"), _WRITE)},
    "TradingBot": {
        **dict.fromkeys(("filter_stocks_by_price", "get_account_info", "get_available_stocks", "get_current_time",
                         "get_order_details", "get_order_history", "get_stock_info", "get_symbol_by_name",
                         "get_transaction_history", "get_watchlist", "trading_get_login_status"), _READ),
        **dict.fromkeys(("add_to_watchlist", "cancel_order", "fund_account", "notify_price_change", "place_order",
                         "remove_stock_from_watchlist", "trading_login", "trading_logout", "withdraw_funds"), _WRITE)},
    "VehicleControlAPI": {
        **dict.fromkeys(("check_tire_pressure", "displayCarStatus", "display_log", "estimate_distance",
                         "estimate_drive_feasibility_by_mileage", "find_nearest_tire_shop", "gallon_to_liter",
                         "get_outside_temperature_from_weather_com", "get_zipcode_based_on_city", "liter_to_gallon"),
                        _READ),
        **dict.fromkeys(("activateParkingBrake", "adjustClimateControl", "fillFuelTank", "get_current_speed",
                         "get_outside_temperature_from_google", "lockDoors", "pressBrakePedal", "releaseBrakePedal",
                         "setCruiseControl", "setHeadlights", "set_navigation", "startEngine"), _WRITE)},
    "MessageAPI": {
        **dict.fromkeys(("get_message_stats", "get_user_id", "list_users", "message_get_login_status",
                         "search_messages", "view_messages_sent"), _READ),
        **dict.fromkeys(("add_contact", "delete_message", "message_login", "send_message"), _WRITE)},
    "TwitterAPI": {
        **dict.fromkeys(("get_tweet", "get_tweet_comments", "get_user_stats", "get_user_tweets",
                         "list_all_following", "posting_get_login_status", "search_tweets"), _READ),
        **dict.fromkeys(("authenticate_twitter", "comment", "follow_user", "mention", "post_tweet", "retweet",
                         "unfollow_user"), _WRITE)},
    "MathAPI": dict.fromkeys((
        "absolute_value", "add", "divide", "imperial_si_conversion", "logarithm", "max_value", "mean", "min_value",
        "multiply", "percentage", "power", "round_number", "si_unit_conversion", "square_root", "standard_deviation",
        "subtract", "sum_values"), _READ),
}
EFFECT_OF = {fn: Effect(e) for table in EFFECTS.values() for fn, e in table.items()}


def effect(name: str) -> Effect:
    """READ or WRITE from the reviewed table; a function the table does not list is a WRITE."""
    return EFFECT_OF.get(name, Effect.WRITE)
_TYPES = {"dict": "object", "float": "number", "integer": "integer", "string": "string", "boolean": "boolean",
          "array": "array", "tuple": "array", "any": None}


NEEDED_BY = "BFCL tool sources and `bench bfcl`"


def _config() -> Any:
    require("bfcl_eval", NEEDED_BY)
    return importlib.import_module("bfcl_eval.constants.executable_backend_config")


def _jsonl(path: str) -> list[dict[str, Any]]:
    text = resources.files("bfcl_eval").joinpath("data", *path.split("/")).read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def backend_class(name: str) -> type:
    return getattr(importlib.import_module(_config().CLASS_FILE_PATH_MAPPING[name]), name)


def json_schema(params: dict[str, Any], typed: bool = True) -> dict[str, Any]:
    """A BFCL parameter doc (``type: dict`` and BFCL's type names) as JSON Schema. ``typed=False`` keeps
    the names and the required ones but not the value types: BFCL's executor does not check them, and
    its own ground truth breaks some (``close_ticket(ticket_id='ticket_001')`` for an integer)."""
    out = {k: v for k, v in params.items() if k not in ("type", "properties", "items", "required", "default")}
    kind = _TYPES.get(params.get("type", "any"), None)
    if kind is not None and (typed or kind == "object"):
        out["type"] = kind
    if "properties" in params:
        out["properties"] = {k: json_schema(v, typed) for k, v in params["properties"].items()}
        out["required"] = list(params.get("required", []))
        out["additionalProperties"] = False
    if "items" in params and typed:
        out["items"] = json_schema(params["items"], typed)
    return out


@functools.cache
def function_docs() -> dict[str, dict[str, Any]]:
    """Every multi-turn function's BFCL doc, by name (no name is shared between backends)."""
    files = _config().MULTI_TURN_FUNC_DOC_FILE_MAPPING
    return {doc["name"]: doc for cls in EFFECTS for doc in _jsonl(f"multi_turn_func_doc/{files[cls]}")}


@dataclass(frozen=True)
class BfclCase:
    id: str
    category: str
    turns: tuple[str, ...]  # the user's message of each turn
    classes: tuple[str, ...]
    initial_config: dict[str, Any]
    ground_truth: tuple[tuple[str, ...], ...]  # BFCL's call strings per turn
    entry: dict[str, Any] = field(repr=False)

    def tools(self, typed: bool = True) -> dict[str, dict[str, Any]]:
        """The case's functions: ``{name: JSON schema of its parameters}`` (see ``json_schema``); built
        once per case (do not change it)."""
        return _case_tools(self.category, self.id, typed)

    def validator(self) -> SchemaValidator:
        """Checks a call's function name and its parameters' names, as BFCL runs them (untyped)."""
        return _case_validator(self.category, self.id)


@functools.cache
def _case_tools(category: str, case_id: str, typed: bool) -> dict[str, dict[str, Any]]:
    docs = function_docs()
    return {name: json_schema(docs[name]["parameters"], typed) for cls in load_cases(category)[case_id].classes
            for name in EFFECTS[cls] if name in docs}


@functools.cache
def _case_validator(category: str, case_id: str) -> SchemaValidator:
    return SchemaValidator(_case_tools(category, case_id, False))


@functools.cache
def load_cases(category: str = "base") -> dict[str, BfclCase]:
    """Every case of a multi-turn category; ``optional.Missing`` (a RuntimeError) without BFCL's package."""
    if category not in CATEGORIES:
        raise ValueError(f"unknown BFCL multi-turn category {category!r}; choose from {', '.join(CATEGORIES)}")
    require("bfcl_eval", NEEDED_BY)
    truth = {g["id"]: g["ground_truth"] for g in _jsonl(f"possible_answer/BFCL_v4_multi_turn_{category}.json")}
    cases = {}
    for e in _jsonl(f"BFCL_v4_multi_turn_{category}.json"):
        turns = tuple(" ".join(m["content"] for m in turn if m.get("role") == "user") for turn in e["question"])
        cases[e["id"]] = BfclCase(e["id"], category, turns, tuple(e["involved_classes"]), e["initial_config"],
                                  tuple(tuple(t) for t in truth[e["id"]]), e)
    return cases


def spare_reads(schemas: dict[str, dict[str, Any]]) -> tuple[ToolCall, ...]:
    """Reads that need no argument (what a distracted agent adds: ``pwd()``, ``list_all_airports()``)."""
    return tuple(ToolCall(n, {}) for n, schema in schemas.items()
                 if effect(n) is Effect.READ and not schema.get("required"))


def call_string(call: ToolCall) -> str:
    """BFCL's form of a call, ``name(arg=repr, ...)`` (as its own handlers write it)."""
    return f"{call.name}({','.join(f'{k}={v!r}' for k, v in call.arguments.items())})"


def parse_call(text: str) -> ToolCall:
    """A BFCL call string as a ``ToolCall``; positional arguments are named by the Python signature."""
    node = ast.parse(text.strip(), mode="eval").body
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        raise ValueError(f"not a function call: {text!r}")
    name = node.func.id
    cls = next(c for c, table in EFFECTS.items() if name in table)
    names = [p for p in inspect.signature(getattr(backend_class(cls), name)).parameters if p != "self"]
    args = {names[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
    args.update({k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None})
    return ToolCall(name, args)


class BfclTools:
    """The protocol's ``ToolAdapter`` over one case's backend instances, in the case's initial state.
    Guarantees: only the case's own functions run (anything else is an error observation, and unknown
    functions are WRITE and never valid); a function's exception is an error observation."""

    def __init__(self, case: BfclCase):
        self.case = case
        self.schemas = case.tools()
        self.validator = case.validator()
        long = "long_context" in case.category
        self.instances: dict[str, Any] = {}
        for cls in case.classes:
            instance = backend_class(cls)()
            if hasattr(instance, "_load_scenario"):
                instance._load_scenario(copy.deepcopy(case.initial_config.get(cls, {})), long_context=long)
            # Some backends load module-level defaults by reference: this instance must own its state, or
            # its writes would leak into every later instance (the grader's included).
            instance.__dict__.update(copy.deepcopy(instance.__dict__))
            self.instances[cls] = instance
        self.executed: list[ToolCall] = []

    def classify(self, call: ToolCall) -> Effect:
        return effect(call.name)

    def validate(self, call: ToolCall) -> str | None:
        return self.validator.check(call)

    async def execute(self, call: ToolCall) -> Observation:
        self.executed.append(call)
        owner = next((i for c, i in self.instances.items() if call.name in EFFECTS[c]), None)
        if owner is None or call.name not in self.schemas:
            return Observation(f"Error: unknown function {call.name!r}", error=True)
        try:
            # A copy: backends keep argument lists in their state and extend them later (post_tweet, then
            # mention), which would otherwise rewrite the call already in the committed history.
            result = getattr(owner, call.name)(**copy.deepcopy(call.arguments))
        except Exception as exc:  # noqa: BLE001 - the backend's own failure, shown to the agent
            return Observation(f"Error during execution: {exc}", error=True)
        return Observation(result_text(result), error=isinstance(result, dict) and "error" in result)


def result_text(result: Any) -> str:
    """A backend's result as BFCL's executor shows it: JSON for a dict, else its string."""
    if isinstance(result, dict):
        try:
            return json.dumps(result)
        except TypeError:  # MathAPI answers with mpmath numbers
            return str(result)
    return str(result)


_graded = itertools.count()


def turns_of(trajectory: Trajectory, n_turns: int) -> list[list[list[str]]]:
    """The committed tool calls per user turn (a turn ends at the agent's message), one step per call."""
    turns: list[list[list[str]]] = [[]]
    for step in trajectory.steps:
        if step.observation is None:
            continue
        if step.action.kind is ActionKind.TOOL:
            turns[-1].append([call_string(step.action.call)])  # type: ignore[arg-type]
        elif step.action.kind is ActionKind.MESSAGE:
            turns.append([])
    return turns[:n_turns] + [[] for _ in range(n_turns - len(turns))]


def reward(case: BfclCase, trajectory: Trajectory) -> float:
    """BFCL's own multi-turn verdict (1.0 valid, 0.0 not) on the committed trajectory."""
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    if trajectory.termination not in (Termination.AGENT_STOP, Termination.USER_STOP):
        return 0.0
    model = f"specagent{next(_graded)}"  # the checker caches instances in module globals under this name
    try:
        verdict = multi_turn_checker(turns_of(trajectory, len(case.turns)), [list(t) for t in case.ground_truth],
                                     case.entry, f"multi_turn_{case.category}", model)
    finally:
        for key in [k for k in vars(multi_turn_utils) if k.startswith(model + "_")]:
            del vars(multi_turn_utils)[key]
    return 1.0 if verdict["valid"] else 0.0
