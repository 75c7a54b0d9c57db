"""The HTTP API's bodies, and what the OpenAPI schema publishes about them. Unknown fields are refused,
and every limit says what it is.

A server's schema is narrower than these models where its configuration decides: ``Offer`` publishes
which tool sources a create may name, which users each takes with the server's engines, and which
methods it serves, so that every create body the schema allows is one its configuration takes, except a
``task_id`` its source lacks when the server does not list the ids (400), and a body over the byte cap
(413, which no schema can rule out). A body outside the published schema gets 400, 403, 413 or 422, never
a session."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator

from ...models.structured import check_output_schema
from ...protocol.baselines import METHODS
from ...tools.schema import check_client_schema
from .config import BENCHMARKS, AppConfig, BfclSource, ClientSource, McpSource, OpenAIEngines, SimEngines

UserKind = Literal["client", "simulated", "tau2"]


class Body(BaseModel):
    """A request body. Its types are JSON Schema's: no bool for an integer, no string for a bool or a number."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def json_integer(v: Any) -> Any:
    """JSON Schema's integer: a number without a fraction (7.0 is 7), never a bool or a string."""
    if v is None:
        return v
    if isinstance(v, bool) or not isinstance(v, int | float) or isinstance(v, float) and not v.is_integer():
        raise ValueError("should be an integer")
    return int(v)


TOOL_NAME = r"^[A-Za-z0-9_.-]+$"
ToolName = Field(min_length=1, max_length=128, pattern=TOOL_NAME)  # a tool's name, wherever a body gives one


class ClientTool(Body):
    """A tool the client runs itself. ``read_only`` is a hint, trusted only for trusted client sources."""

    name: Annotated[str, ToolName]
    description: str = Field("", max_length=100_000)  # a coding agent's tool descriptions run to 10k characters
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}},
                                       description="a JSON Schema: at most 16 KiB and 16 levels deep, patterns in "
                                       "RE2 syntax, no patternProperties (422 otherwise)")
    read_only: StrictBool | None = None

    @field_validator("parameters")
    @classmethod
    def _safe_schema(cls, v: dict[str, Any]) -> dict[str, Any]:
        check_client_schema(v)
        return v


class Approval(Body):
    """Which writes, once the verifier accepted them, also wait for the client's approval (an
    ``approval_request`` event; ``POST .../approvals``). A human approval is added to the verifier's,
    never instead of it: reads and rejected writes never wait for one."""

    tools: list[Annotated[str, ToolName]] | None = Field(None, max_length=128,
                                                         description="these tools' writes; every write if null "
                                                         "(and tiers is null)")
    tiers: list[Literal["write", "critical"]] | None = Field(None, max_length=2, description="the writes of these "
                                                             "risk tiers too (a call's tier: docs/serving.md)")
    exempt: list[Annotated[str, ToolName]] = Field(default_factory=list, max_length=128,
                                                   description="writes of these tools never wait")

    def needed(self, tool: str, tier: str = "write") -> bool:
        if tool in self.exempt:
            return False
        if self.tools is None and self.tiers is None:
            return True
        return tool in (self.tools or ()) or tier in (self.tiers or ())


class SourceUse(Body):
    """One more MCP tool source a session uses beside its own ``tool_source``, with its own filter and
    approval rule (the Responses API's second and later MCP servers)."""

    tool_source: str = Field(min_length=1, max_length=64)
    allowed_tools: list[Annotated[str, ToolName]] | None = Field(None, max_length=128)
    approval: Approval | None = None


class Sampling(Body):
    """How the engines sample the agent's own text (drafts, repairs, final messages); verdicts stay greedy.
    Unset fields keep the profile's (greedy) defaults."""

    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_output_tokens: int | None = Field(None, ge=16, le=1_000_000, description="the most tokens an engine "
                                          "writes for one of the agent's outputs (a drafted step, a repair, "
                                          "the final message)")

    _integers = field_validator("max_output_tokens", mode="before")(json_integer)


class OutputFormat(Body):
    """The form of the agent's final message: a JSON object, one that ``schema`` accepts for ``json_schema``.
    A schema is taken only if the server can enforce it (``models/structured.check_output_schema``: at most 16 KiB
    and 16 levels deep, JSON Schema 2020-12, local ``$ref`` only, one that the grammar backend compiles);
    ``strict`` true adds OpenAI's strict rules (a root object; ``additionalProperties: false`` and every
    property required, on every object). Strict or not, the engines' grammar enforces the schema."""

    type: Literal["json_schema", "json_object"]
    name: str | None = Field(None, max_length=64)
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: StrictBool | None = None

    # published as taken: json_object takes no schema; json_schema needs one, and strict adds OpenAI's rules at
    # its root (that deeper objects follow them too, and that the grammar compiles it, only the server can see)
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, json_schema_extra={
        "if": {"properties": {"type": {"const": "json_object"}}},
        "then": {"properties": {"schema": {"type": "null"}}},
        "else": {"required": ["schema"], "properties": {"schema": {"type": "object"}},
                 "if": {"required": ["strict"], "properties": {"strict": {"const": True}}},
                 "then": {"properties": {"schema": {
                     "required": ["type", "additionalProperties"], "not": {"required": ["anyOf"]},
                     "properties": {"type": {"const": "object"}, "additionalProperties": {"const": False}}}}}}})

    @model_validator(mode="after")
    def _servable(self) -> OutputFormat:
        if self.type == "json_object":
            if self.schema_ is not None:
                raise ValueError("json_object takes no schema (json_schema does)")
            return self
        if self.schema_ is None:
            raise ValueError("json_schema needs a schema")
        check_output_schema(self.schema_, self.strict)
        return self


class CreateSession(Body):
    """A new agent session. ``tool_source`` names a source configured on the server; the client can
    never make the server start a command or reach a URL of its choosing."""

    tool_source: str = Field(min_length=1, max_length=64)
    task_id: str | None = Field(None, max_length=256, description="a tau2 task id (tau2 sources; telecom's run "
                                "to 215 characters)")
    message: str | None = Field(None, max_length=1_000_000, description="the user's opening message")
    user: UserKind = Field("client", description="client: the client posts user messages; simulated: the "
                           "scripted tau2 customer (sim engines); tau2: tau2's own LLM user simulator")
    method: str | None = Field(None, description=f"one of {', '.join(METHODS)}; the profile's default if omitted",
                               json_schema_extra={"enum": [*METHODS, None]})
    k: int | None = Field(None, ge=1, le=64, description="most steps drafted per block")
    max_steps: int | None = Field(None, ge=1, le=1000)
    review_messages: StrictBool = False
    parallel_calls: StrictBool | None = Field(None, description="an action may hold several independent tool "
                                              "calls; the profile's default (defaults.parallel_calls) if omitted")
    trial: int = Field(0, ge=0, le=1_000_000, description="seed of simulated engines")
    client_tools: list[ClientTool] = Field(default_factory=list, max_length=128)
    instructions: str | None = Field(None, max_length=100_000, description="the agent's role and policy: the "
                                     "system prompt's first paragraph (the profile's default role if omitted)")
    allowed_tools: list[Annotated[str, ToolName]] | None = Field(None, max_length=128, description="narrows the "
                                                                 "source's tools to these (400 for one it lacks)")
    approval: Approval | None = Field(None, description="writes that also wait for the client's approval")
    more_sources: list[SourceUse] = Field(default_factory=list, max_length=8, description="MCP tool sources the "
                                          "session also uses; a tool name may be in one source only")
    sampling: Sampling | None = Field(None, description="the agent's sampling; None: greedy")
    output_format: OutputFormat | None = Field(None, description="the final message's form; None: text")
    context: str | None = Field(None, max_length=8_000_000, description="the conversation before this session, as "
                                "a transcript the models read after the instructions (a replayed history: "
                                "context only, nothing in it is run)")

    _integers = field_validator("k", "max_steps", "trial", mode="before")(json_integer)

    @field_validator("method")
    @classmethod
    def _known_method(cls, v: str | None) -> str | None:
        if v is not None and v not in METHODS:
            raise ValueError(f"unknown method {v!r}; choose from {', '.join(METHODS)}")
        return v


class UserMessage(Body):
    text: str = Field(min_length=1, max_length=1_000_000)
    stop: StrictBool = Field(False, description="the user ends the conversation with this message")


class ToolResult(Body):
    call_id: str = Field(min_length=1, max_length=200)
    content: str = Field(max_length=1_000_000)
    error: StrictBool = False


class ErrorDetail(BaseModel):
    """The body of every error but 422: one line saying what is wrong (never a trace)."""

    detail: str


class SessionSummary(BaseModel):
    """A session as create, messages, tool results and cancel answer it."""

    model_config = ConfigDict(extra="allow")
    session_id: str = Field(description="the id every other session route takes")
    status: str = Field(description="running, waiting_user, waiting_tool, done, failed, cancelled or timed_out")
    committed_steps: int
    termination: str | None
    error: str | None
    events: int = Field(description="events so far: the next event's seq")


class SessionTrajectory(SessionSummary):
    """A session's committed trajectory, with its usage and resource report."""

    method: str
    task_id: str
    opening: str
    reward: float | None = Field(description="tau2's or BFCL's reward (with grade=true, once done)")
    steps: list[dict[str, Any]]
    usage: dict[str, Any]
    resources: dict[str, Any]
    grade_error: str | None = Field(None, description="why grade=true could not grade it")


def refusal(cfg: AppConfig, source: Any, user: str) -> str | None:
    """Why a session of ``user`` on ``source`` can never run on this server, or None. The one statement of
    these rules: the coordinator's check answers 400 with it, and the published create schema
    (``Offer``) lists only the combinations it allows."""
    sim = isinstance(cfg.engines, SimEngines)
    if not isinstance(source, BENCHMARKS):
        if sim:
            return "simulated engines replay benchmark gold actions: pick a tau2 tool source or a bfcl one"
        if user != "client":
            return f"a {source.kind} session needs user 'client' and an opening message"
    if user == "simulated" and not sim:
        return "user 'simulated' (the scripted tau2 customer) needs simulated engines; use 'tau2'"
    if user == "tau2" and not isinstance(cfg.engines, OpenAIEngines):
        return "user 'tau2' (tau2's LLM user simulator) needs model engines" + ("; use 'simulated'" if sim else "")
    if user == "tau2" and isinstance(source, BfclSource):
        return "BFCL cases have no LLM user; use 'simulated' (sim engines) or 'client'"
    return None


@dataclass(frozen=True)
class SourceTerms:
    """What one configured tool source takes on this server."""

    users: tuple[str, ...]  # the user kinds it serves with the server's engines; "client" is always one
    client_tools: bool  # a client source: the session's tools are the client's own
    needs_task: bool  # a benchmark source: a session names one of its tasks
    tasks: tuple[str, ...] | None = None  # those task ids, where the server lists them


@dataclass(frozen=True)
class Offer:
    """What a create may ask of this server beyond the body's shape."""

    sources: Mapping[str, SourceTerms]
    methods: tuple[str, ...]
    mcp: tuple[str, ...] = ()  # the MCP sources a session's ``more_sources`` may name
    formats: bool = True  # whether the engines can write a client's output_format (simulated ones cannot)

    @classmethod
    def of(cls, cfg: AppConfig, tasks: Mapping[str, Iterable[str]] | None = None) -> Offer:
        """The offer of a server with config ``cfg``; ``tasks`` lists the task ids of benchmark sources
        (by source name). The users each source takes are those ``refusal`` allows, the rule the
        coordinator's check (``ToolSources.check``) applies; a source that takes none is left out."""
        sources = {}
        for name, source in cfg.tool_sources.items():
            users = tuple(u for u in get_args(UserKind) if refusal(cfg, source, u) is None)
            if not users:
                continue
            listed = tuple(tasks[name]) if tasks and name in tasks else None
            sources[name] = SourceTerms(users, isinstance(source, ClientSource), isinstance(source, BENCHMARKS),
                                        listed)
        return cls(sources, tuple(cfg.methods), tuple(n for n, s in cfg.tool_sources.items() if isinstance(s, McpSource)),
                   not isinstance(cfg.engines, SimEngines))

    def create_schema(self, base: dict[str, Any]) -> dict[str, Any]:
        """The create body's published schema, from the model's own (``base``): one alternative per
        source and user kind, each naming what that combination needs."""
        variants = [self._variant(base, name, terms, user)
                    for name, terms in self.sources.items() for user in terms.users]
        if not variants:
            return base
        listed = ", ".join(self.sources)
        return {"title": base.get("title", "CreateSession"), "anyOf": variants,
                "description": f"{base.get('description', '')}\n\nThis server's tool sources: {listed}. A "
                               "client-user session needs an opening message; a benchmark source's session "
                               "names one of its tasks (400 otherwise)."}

    def _variant(self, base: dict[str, Any], name: str, terms: SourceTerms, user: str) -> dict[str, Any]:
        props = dict(base["properties"])
        props["tool_source"] = {"type": "string", "const": name}
        props["user"] = {**props["user"], "enum": [user]}
        props["method"] = {**props["method"], "anyOf": [{"type": "string", "enum": list(self.methods)},
                                                        {"type": "null"}], "enum": [*self.methods, None]}
        required = ["tool_source"] if user == "client" else ["tool_source", "user"]
        if user == "client":
            props["message"] = {**props["message"], "anyOf": [{"type": "string", "minLength": 1, "maxLength":
                                                                _longest(props["message"])}]}
            required.append("message")
        if terms.needs_task:
            props["task_id"] = ({"type": "string", "enum": list(terms.tasks)} if terms.tasks is not None
                                else {"type": "string", "maxLength": 256})
            required.append("task_id")
        if not terms.client_tools:
            props["client_tools"] = {**props["client_tools"], "maxItems": 0}
        # Which names a source's catalog holds is known only once a session describes it: the schema
        # publishes no allowed_tools (a server takes them, and answers 400 for a name its source lacks).
        props["allowed_tools"] = {"type": "null", "description": props["allowed_tools"].get("description", "")}
        if not self.formats:  # simulated engines replay benchmark messages: a create with a format is 400
            props["output_format"] = {"type": "null", "description": props["output_format"].get("description", "")}
        props["more_sources"] = {"type": "array", "maxItems": 0, "description": props["more_sources"].get(
            "description", "")} if not self.mcp else {"type": "array", "maxItems": len(self.mcp), "items": {
                "type": "object", "required": ["tool_source"], "additionalProperties": False,
                "properties": {"tool_source": {"enum": list(self.mcp)}}}}
        return {"type": "object", "title": f"{name}, user {user}", "properties": props,
                "required": required, "additionalProperties": False}


def _longest(prop: dict[str, Any]) -> int:
    return max(branch.get("maxLength", 0) for branch in prop.get("anyOf", [prop]))


def fit_strings(schema: dict[str, Any], budget: int) -> None:
    """Lower every ``maxLength`` in ``schema`` above ``budget`` to it (in place): no longer string fits
    in a request body the server takes."""
    if isinstance(schema.get("maxLength"), int) and schema["maxLength"] > budget:
        schema["maxLength"] = budget
    for value in schema.values():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict):
                fit_strings(item, budget)
