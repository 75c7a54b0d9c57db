"""The one config shape of a served SpecAgent application.

The same dict is a Serve config's ``args`` (``serve run``, ``serve deploy``, KubeRay's ``serveConfigV2``)
and what ``build_app`` receives. Every model forbids unknown keys, so a typo is an error that names
the field, not a silently ignored setting.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StrictFloat, StrictInt, StrictStr, model_validator

from ...costs.hardware import Hardware
from ...protocol.baselines import METHODS
from ...protocol.types import Tier
from ...tools.tiers import Predicate, TierRule, TierTable
from .engine_config import (  # noqa: F401 - the engine classes live in engine_config.py; imported from here too
    ChainConfig,
    CriticalConfig,
    Endpoint,
    Engines,
    LatencyModel,
    OpenAIEngines,
    ScriptedEngines,
    SimEngines,
    Strict,
    check_mid,
)
from .tenants import TenantConfig, check_tenants
from .tuning import PriorityConfig, SpeculationConfig


class CoordinatorConfig(Strict):
    """Scheduling. A verify request waits at most ``batch_window_ms`` for others to share its batch,
    and a batch holds at most ``max_batch`` requests (see docs/serving.md for measured effects)."""

    max_sessions: int = Field(2000, ge=1, description="running sessions; more get 429")
    tenant_max_sessions: int | None = Field(None, ge=1, description="running sessions per API key (tenant); "
                                            "more get 429, while other tenants are still admitted; None: no "
                                            "limit but max_sessions")
    idle_timeout_s: float = Field(900.0, gt=0, description="a session waiting this long for a user message or a "
                                  "client tool result ends as timed_out")
    inbox_limit: int = Field(16, ge=1, description="posted user messages a session holds unanswered; more get 429")
    queue_limit: int = Field(4096, ge=1, description="queued engine requests above which new work gets 429")
    batch_window_ms: float = Field(2.0, ge=0, le=1000)
    max_batch: int = Field(64, ge=1, le=4096)
    verify_attempts: int = Field(2, ge=1, le=5, description="tries before the fallback to a strong step")
    verify_timeout_s: float = Field(120.0, gt=0)
    retry_after_s: int = Field(1, ge=1, description="Retry-After of a 429")
    retain_finished: int = Field(10_000, ge=1, description="finished sessions kept in memory for their "
                                 "trajectory; older ones are dropped (their records stay in the session log)")
    lease_s: float = Field(15.0, gt=0, le=300, description="session log lease period: a successor waits this "
                           "long (plus lease_skew_s) for a holder that stopped renewing. The holder renews every "
                           "2/15 of it and pauses (writes wait, new sessions get 429) once 2/3 of it passed "
                           "without a confirmed renewal: Kubernetes leader election's 15 s lease, 10 s renew "
                           "deadline and 2 s retry")
    lease_skew_s: float = Field(0.5, ge=0, le=60, description="the most the hosts' wall clocks may differ; a "
                                "successor waits this much longer than the lease period")
    ack_timeout_s: float = Field(10.0, gt=0, description="how long create, messages and tool results wait for "
                                 "their records to be stored before answering 503")
    intent_wait_s: float = Field(120.0, gt=0, description="how long a verified write's intent waits for the "
                                 "session log while this coordinator is not fenced (a starved lease renewal, a "
                                 "slow store): the write runs once it is stored; past this the session ends "
                                 "failed with the reason, never with an error as the tool's answer")
    tool_retry_s: float = Field(30.0, gt=0, description="how long a tool host call is tried again while the tool "
                                "host raises (a replica restarting, an MCP server reconnecting); a write keeps "
                                "its key, so it runs at most once; past this the session ends failed")
    priority: PriorityConfig = Field(PriorityConfig(), description="the order of engine requests: staged-write "
                                     "verifies first, drafts later, least attained strong service first")
    compact_min: int = Field(20_000, ge=1, description="records stored since the last snapshot before the "
                             "session log is compacted (also at least twice the live sessions' records)")


class GatewayConfig(Strict):
    """Authentication and limits of the HTTP API. Keys come from ``api_keys_env`` (comma-separated);
    ``dev_api_key`` is for local profiles only."""

    api_keys_env: str = "SPECAGENT_API_KEYS"
    operator_keys_env: str = Field("SPECAGENT_OPERATOR_KEYS", description="keys (comma-separated) that may also "
                                   "read /v1/stats, the cluster-wide view; the dev key is one")
    dev_api_key: str | None = None
    max_body_bytes: int | None = Field(None, ge=1024, description="the body cap of the routes that carry a "
                                       "conversation (/v1/responses, the conversation routes); None: derived "
                                       "from the verifier's context window (engines.verifier.context_tokens x "
                                       "body_bytes_per_token), never under body_floor_bytes")
    body_floor_bytes: int = Field(4 << 20, ge=1024, description="the least derived body cap: many times a coding "
                                  "agent's first request (about 41 KB), for profiles whose models state no window")
    body_bytes_per_token: int = Field(16, ge=1, le=1024, description="bytes of request body per token of context "
                                      "that the derived cap allows: JSON, escapes and tool schemas, with margin")
    small_body_bytes: int = Field(65536, ge=1024, description="the body cap of every other route (the sessions "
                                  "API, approvals, tool results): they carry no conversation")
    events_wait_s: float = Field(15.0, gt=0, description="SSE long-poll slice")
    events_poll_s: float = Field(0.05, ge=0, le=5, description="the least time between two polls of a coordinator "
                                 "shard for the events of every stream a gateway replica serves (one call for "
                                 "all of them); a stream's event waits at most this long past its commit")
    coordinator_retry_s: float = Field(120.0, gt=0, description="how long a request waits for a coordinator: "
                                       "an idempotent one waits out a restart (only 'coordinator unavailable' "
                                       "errors are retried), and one that no replica takes gets 503 after it")
    docs: bool = Field(False, description="serve /docs, /redoc and /openapi.json (without a key); keep it off "
                       "in production, where the API's shape is nobody's business but the clients'")
    rate_per_s: float = Field(50.0, gt=0, description="per-tenant request rate (token bucket, per gateway "
                              "replica); above it a request gets 429 with Retry-After")
    burst: int = Field(100, ge=1, description="per-tenant token bucket size: requests a tenant may send at once")
    model_aliases: dict[str, str] = Field(default_factory=dict, description="Responses API model names and the "
                                          "method each runs, e.g. {my-agent: specagent}")
    unhosted_tools: Literal["refuse", "drop"] = Field("drop", description="a Responses API tool whose type this "
                                                      "server does not host (web_search, file_search, ...): "
                                                      "drop (the default): the models are not offered it, the "
                                                      "x-specagent-dropped-tools header names it, and the "
                                                      "response's tools show what the agent had; refuse: 400 "
                                                      "naming it")
    strict_fields: bool = Field(False, description="refuse a request field that this server does not know (400 "
                                "unknown_parameter, at the top level and inside tools and items); off (the "
                                "default): it is accepted, ignored, logged once per name and named in the "
                                "x-specagent-ignored-fields header, as vLLM's OpenAI server does")


EffectName = Literal["read", "write"]
TierName = Literal["read", "write", "critical"]  # "read"/"write" overrides of older profiles are tiers too
Scalar = StrictStr | StrictInt | StrictFloat
Number = StrictInt | StrictFloat


class ArgCondition(Strict):
    """Conditions on one argument of a call, all of which must hold (tools/tiers.py: fail-closed, numbers
    given as strings compare as numbers, and a value that cannot be compared makes the rule apply)."""

    eq: Scalar | None = None
    in_: list[Scalar] | None = Field(None, alias="in")
    gt: Number | None = None
    ge: Number | None = None
    lt: Number | None = None
    le: Number | None = None
    prefix: StrictStr | None = None

    def predicates(self, arg: str) -> list[Predicate]:
        given = self.model_dump(exclude_none=True, by_alias=True)
        if not given:
            raise ValueError(f"the condition on {arg!r} names no operator (eq, in, gt, ge, lt, le, prefix)")
        return [Predicate(arg, op, value) for op, value in given.items()]


class TierRuleConfig(Strict):
    """Calls of ``tool`` whose arguments meet every condition of ``when`` are at least ``tier``, e.g.
    ``{tool: refund, tier: critical, when: {amount: {gt: 500}}}``. A rule only raises a tier."""

    tool: str
    tier: Literal["write", "critical"]
    when: dict[str, ArgCondition] = {}

    @model_validator(mode="after")
    def _well_formed(self) -> TierRuleConfig:
        self.rule()  # a malformed predicate (a NaN bound, no operator) is a config error
        return self

    def rule(self) -> TierRule:
        return TierRule(self.tool, Tier(self.tier), tuple(p for a, c in self.when.items() for p in c.predicates(a)))


class TieredSource(Strict):
    """A tool source's tiers as its operator sets them (docs/serving.md, "Risk tiers"): ``overrides`` set a
    tool's tier either way, ``tier_rules`` raise it for some arguments. ``tier_table`` applies both."""

    overrides: dict[str, TierName] = {}
    tier_rules: list[TierRuleConfig] = []

    def tier_table(self, base: TierTable, name: str = "") -> TierTable:
        """``base`` with this source's overrides and rules; ValueError naming any tool ``base`` lacks (not
        for client sources, whose tools each session declares)."""
        rules = [r.rule() for r in self.tier_rules]
        unknown = [] if isinstance(self, ClientSource) else base.unknown(self.overrides, rules)
        if unknown:
            raise ValueError(f"tool source {name!r}: overrides or tier_rules name tools it does not have: "
                             f"{', '.join(unknown)} (it has: {', '.join(sorted(base.tools)) or 'none'})")
        return base.overridden(self.overrides, rules)

    def _check_names(self, known: set[str] | None, what: str) -> None:
        unknown = [] if known is None else sorted({*self.overrides, *(r.tool for r in self.tier_rules)} - known)
        if unknown:
            raise ValueError(f"overrides or tier_rules name tools {what} does not have: {', '.join(unknown)}")


class Tau2Source(TieredSource):
    """tau2-bench's own environments, one private DB per session, hosted by the tool host. Tiers: with
    ``domain_tiers``, the domain's table (tools/tau2.py: its money-moving and service-ending tools are
    critical), else tau2's read/write tags; then ``overrides`` and ``tier_rules``, checked against the
    domain's tools when tau2 is installed."""

    kind: Literal["tau2"] = "tau2"
    domain: Literal["airline", "retail", "telecom"]
    domain_tiers: bool = Field(False, description="the domain's critical tools get the critical second check. "
                               "Off by default: on the simulated benchmark it costs +30-60 % strong HBM on "
                               "airline and retail for no fewer wrong critical writes (docs/benchmarks.md)")

    @model_validator(mode="after")
    def _known_tools(self) -> Tau2Source:
        if self.overrides or self.tier_rules:
            from ...tools.tau2 import tool_names

            self._check_names(tool_names(self.domain), f"tau2's {self.domain} domain")
        return self


class BfclSource(TieredSource):
    """BFCL v4 multi-turn cases: each session's own backend instances (file system, trading, travel, ...),
    hosted by the tool host; a session names its case by ``task_id`` (``multi_turn_base_0``). Tiers: BFCL's
    reviewed effects (tools/bfcl.py), then ``overrides`` and ``tier_rules`` naming BFCL functions."""

    kind: Literal["bfcl"] = "bfcl"
    category: Literal["base", "miss_func", "miss_param", "long_context"] = "base"

    @model_validator(mode="after")
    def _known_tools(self) -> BfclSource:
        if self.overrides or self.tier_rules:
            from ...tools.bfcl import EFFECT_OF

            self._check_names(set(EFFECT_OF), "BFCL's backends")
        return self


class McpSource(TieredSource):
    """An MCP server over stdio (``command``) or streamable HTTP (``url``), configured here only.

    Annotations are hints: trusted only when ``trusted`` (tools/tiers.py ``tier_from_annotations``:
    read-only is READ, destructive CRITICAL, explicitly non-destructive WRITE). Unknown or unannotated
    tools of an untrusted server are WRITE. ``overrides`` always win; the tools they and ``tier_rules``
    name are checked when a session's catalog is built."""

    kind: Literal["mcp"] = "mcp"
    command: list[str] | None = None
    url: str | None = None
    url_aliases: list[str] = Field(default_factory=list, max_length=16, description="other URLs by which a "
                                   "client may name this server in an MCP tool's server_url (exact match only); "
                                   "its own url always names it")
    trusted: bool = False

    @model_validator(mode="after")
    def _one_transport(self) -> McpSource:
        if (self.command is None) == (self.url is None):
            raise ValueError("an MCP source needs exactly one of command (stdio) or url (streamable HTTP)")
        if self.command is not None and not self.command:
            raise ValueError("command must not be empty")
        return self


class ClientSource(TieredSource):
    """Tools the client runs itself: the session pauses with a pending call until the client posts its
    result. Tools are declared per session; their ``read_only`` hints are trusted only when ``trusted``;
    ``overrides`` and ``tier_rules`` apply to the tools a session declares."""

    kind: Literal["client"] = "client"
    trusted: bool = False
    read_tools: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(
        default_factory=list, max_length=256, description="tool names this server trusts as reads whatever a "
        "client says (a coding agent's file read, search and list tools): their drafted calls go out while the "
        "draft is written. Chat Completions and Anthropic Messages have no read-only flag, so there every other "
        "function tool is a write, verified before it goes out. An override of the same tool wins")

    def reads(self) -> dict[str, TierName]:
        """The per-tool tiers: ``read_tools`` as reads, then ``overrides`` over them."""
        return {**{name: "read" for name in self.read_tools}, **self.overrides}

    def tier_table(self, base: TierTable, name: str = "") -> TierTable:
        return base.overridden(self.reads(), [r.rule() for r in self.tier_rules])


ToolSource = Annotated[Tau2Source | BfclSource | McpSource | ClientSource, Field(discriminator="kind")]
BENCHMARKS = (Tau2Source, BfclSource)  # sources whose sessions name a benchmark task and can be graded


def unavailable_sources(sources: dict[str, ToolSource]) -> dict[str, str]:
    """The configured sources that cannot run in this process, each with one line naming the missing
    package or command and how to install it: a tau2 or BFCL source without its package, an MCP stdio
    source whose command is not on PATH. The server runs without them (``optional.py``)."""
    from ...optional import Missing, require, require_command

    out = {}
    for name, source in sources.items():
        needed_by = f"tool source {name!r} ({source.kind})"
        try:
            if isinstance(source, Tau2Source):
                require("tau2", needed_by)
            elif isinstance(source, BfclSource):
                require("bfcl_eval", needed_by)
            elif isinstance(source, McpSource) and source.command:
                require_command(source.command[0], needed_by)
        except Missing as exc:
            out[name] = str(exc)
    return out


class SessionDefaults(Strict):
    method: str = "specagent"
    k: int = Field(6, ge=1, le=64)
    max_steps: int = Field(30, ge=1, le=1000)
    parallel_calls: bool = Field(False, description="an action may hold several independent tool calls (a session's "
                                 "own parallel_calls overrides it; the Responses API's parallel_tool_calls can "
                                 "only turn it off)")

    @model_validator(mode="after")
    def _known_method(self) -> SessionDefaults:
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; choose from {', '.join(METHODS)}")
        return self


class MeterConfig(Strict):
    """The GPU meter (telemetry/fleet.py): NVML samplers on the engines' nodes, and each engine call charged
    its share of the devices' MEASURED GPU-seconds and DRAM bytes. Off: every figure stays ESTIMATED."""

    period_s: float = Field(0.1, gt=0, le=10, description="NVML sampling period on every metered node")
    nvml: str = Field("pynvml", description="'pynvml' (the driver's NVML), or 'module:factory' for a scripted "
                      "NVML where no GPU is (specagent_ray.testing.fake_nvml:ScriptedNvml)")
    nvml_args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of a scripted NVML")
    sim_devices: dict[Literal["weak", "mid", "strong"], list[int]] = Field(
        default_factory=dict, description="simulated engines hold no GPU: the NVML device indices each role's "
        "replicas stand for. Real engine replicas report the GPUs Ray gave them.")
    poll_s: float = Field(1.0, gt=0, le=60, description="how often the fleet drains the node meters and seals")
    seal_after_s: float = Field(30.0, gt=0, le=3600, description="how long a window waits for the calls that ran in "
                                "it (the longest engine call); then it is charged for good")
    push_s: float = Field(0.5, gt=0, le=60, description="how often each coordinator shard sends its calls' spans")
    placement_ttl_s: float = Field(10.0, gt=0, le=600, description="an engine replica's placement not renewed for "
                                   "this long is forgotten (engines renew it every third of it)")


PRODUCTION_METHODS = ("specagent", "strong")  # every write is checked (or written) by the strong model


class AppConfig(Strict):
    """Everything ``build_app`` needs. ``session_log`` is a store URI (a local folder by default).
    ``methods`` are the methods clients may ask for: by default only those whose writes the strong model
    checks; the baselines (weak, agentcollab, ...) run weak-model writes unchecked and belong to the bench."""

    engines: Engines = SimEngines()
    methods: tuple[str, ...] = Field(PRODUCTION_METHODS, min_length=1)
    coordinator: CoordinatorConfig = CoordinatorConfig()
    gateway: GatewayConfig = GatewayConfig()
    tool_sources: dict[str, ToolSource] = {"airline": Tau2Source(domain="airline")}
    tool_hosts: int = Field(1, ge=1, le=64, description="tool host shards (tau2 environments, MCP clients); "
                            "sessions are spread over them by a hash of their id")
    coordinators: int = Field(1, ge=1, le=64, description="coordinator shards, each owning its sessions, its "
                              "session log namespace and its lease; admission limits hold per shard")
    defaults: SessionDefaults = SessionDefaults()
    hardware: Hardware = Field(Hardware(), description="the deployment each session's resource report "
                               "estimates GPU-s, HBM and FLOPs for (model specs and GPU profile from costs/data)")
    session_log: str = ".specagent/sessions"
    tenants: dict[str, TenantConfig] = Field(default_factory=dict, description="named tenants and their keys "
                                             "and limits (serve/core/tenants.py); none: one tenant per key")
    speculation: SpeculationConfig = Field(SpeculationConfig(), description="how each block's K is chosen: "
                                           "fixed (the session's K), adaptive (from acceptance and engine load) "
                                           "or a table (serve/sessions/block_sizes.py)")
    meter: MeterConfig | None = Field(None, description="measure GPU-seconds and DRAM bytes per request with NVML "
                                      "on the engines' nodes (docs/serving.md); none: ESTIMATED only")
    chain: ChainConfig = Field(ChainConfig(), description="what a mid engine settles without the strong verifier "
                               "(engine_config.py, docs/serving.md); read only where the engines have a mid")
    critical: CriticalConfig = Field(CriticalConfig(), description="the second check of a critical call "
                                     "(a tool source's tier: docs/serving.md, Risk tiers)")

    @model_validator(mode="after")
    def _methods_known(self) -> AppConfig:
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown:
            raise ValueError(f"unknown methods {unknown}; choose from {', '.join(METHODS)}")
        aliases = [f"{a} -> {m}" for a, m in self.gateway.model_aliases.items() if m not in METHODS]
        if aliases:
            raise ValueError(f"gateway.model_aliases name unknown methods: {', '.join(aliases)}")
        if self.defaults.method not in self.methods:
            raise ValueError(f"the default method {self.defaults.method!r} is not in methods {list(self.methods)}")
        check_tenants(self.tenants, self.methods, self.tool_sources)
        check_mid(self.engines, self.hardware)
        return self
