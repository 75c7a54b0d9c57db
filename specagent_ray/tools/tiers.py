"""Where a tool call's risk tier comes from: per-tool tiers, argument rules, MCP annotations, operators.

Precedence, for one call: the operator's per-tool override (``overrides``: it wins both ways, so a read
can be marked "write" and a destructive tool "write") else the source's own tier (tau2's table, MCP
annotations from a trusted server, BFCL's reviewed effects) else WRITE; then every matching rule can
only raise it. A tool nobody knows is WRITE, never READ.

Rules are fail-closed. A predicate compares an argument with a value; a number spelled as a string
(``"600"``, ``" 6e2 "``, ``"1_000"``) compares as the number, and a value that cannot be compared (a
missing argument, a list, ``"1,000"``, NaN, a bool where a number is expected) makes the predicate hold:
a client cannot dodge a raising rule by spelling, and the cost of a wrong "holds" is one extra check.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from ..protocol.types import Effect, Observation, Tier, ToolCall

Op = Literal["eq", "in", "gt", "ge", "lt", "le", "prefix"]
OPS: tuple[str, ...] = get_args(Op)
Hints = tuple[bool | None, bool | None, bool | None, bool | None]  # read_only, destructive, idempotent, open_world
_ORDER = {"gt": lambda a, b: a > b, "ge": lambda a, b: a >= b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b}


def _number(value: Any) -> int | float | None:
    """``value`` as a number, numeric strings included; None for anything else (bools and NaN too)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            try:
                value = float(value)
            except ValueError:
                return None
    if isinstance(value, int) or (isinstance(value, float) and not math.isnan(value)):
        return value
    return None


def _equal(expected: Any, got: Any) -> bool | None:
    """True or False when decidable, None when ``got`` cannot be compared with ``expected``."""
    if isinstance(expected, bool) or isinstance(got, bool):
        return expected is got if isinstance(expected, bool) and isinstance(got, bool) else None
    if isinstance(expected, str):
        return expected == got if isinstance(got, str) else None
    number = _number(got)
    return None if number is None else number == expected


def _malformed(op: str, value: Any) -> bool:
    if op in _ORDER:
        return isinstance(value, (bool, str)) or _number(value) is None
    if op == "prefix":
        return not isinstance(value, str)
    if op not in ("eq", "in") or (op == "in") != isinstance(value, (list, tuple)):
        return True
    values = value if op == "in" else (value,)
    return not all(isinstance(v, (str, int, float)) and not (isinstance(v, float) and math.isnan(v)) for v in values)


@dataclass(frozen=True, slots=True)
class Predicate:
    """``arguments[arg] <op> value``. ``holds`` is True when it holds or cannot be decided (module doc)."""

    arg: str
    op: Op
    value: Any

    def __post_init__(self) -> None:
        if _malformed(self.op, self.value):
            raise ValueError(f"bad predicate on {self.arg!r}: {self.op} {self.value!r} (ops: {', '.join(OPS)}; "
                             "gt/ge/lt/le take a number, prefix a string, eq a string or number, in a list of them)")
        if self.op == "in":
            object.__setattr__(self, "value", tuple(self.value))

    def holds(self, arguments: Mapping[str, Any]) -> bool:
        if self.arg not in arguments:
            return True
        got = arguments[self.arg]
        if self.op == "prefix":
            return got.startswith(self.value) if isinstance(got, str) else True
        if self.op in _ORDER:
            number = _number(got)
            return True if number is None else _ORDER[self.op](number, self.value)
        answers = [_equal(v, got) for v in (self.value if self.op == "in" else (self.value,))]
        return any(a is not False for a in answers)


@dataclass(frozen=True, slots=True)
class TierRule:
    """Calls of ``tool`` whose arguments satisfy every predicate of ``when`` are at least ``tier``."""

    tool: str
    tier: Tier
    when: tuple[Predicate, ...] = ()

    def applies(self, call: ToolCall) -> bool:
        return call.name == self.tool and all(p.holds(call.arguments) for p in self.when)


@dataclass(frozen=True)
class TierTable:
    """Tiers of a set of tools. Guarantees: ``tier(call)`` is the highest of the tool's tier (``default``,
    at least WRITE, for a tool not listed) and the tier of every rule that applies: rules only raise."""

    tools: Mapping[str, Tier] = field(default_factory=dict)
    rules: Sequence[TierRule] = ()
    default: Tier = Tier.WRITE

    def __post_init__(self) -> None:
        if self.default is Tier.READ:
            raise ValueError("a tier table's default must be write or critical: an unknown tool is never a read")
        object.__setattr__(self, "tools", {n: Tier(t) for n, t in self.tools.items()})
        object.__setattr__(self, "rules", tuple(self.rules))

    def tool(self, name: str) -> Tier:
        return self.tools.get(name, self.default)

    def effect(self, name: str) -> Effect:
        """The effect of the tool by name: WRITE for a write or critical tool, and for an unknown one."""
        return self.tool(name).effect

    def tier(self, call: ToolCall) -> Tier:
        return Tier.highest([self.tool(call.name), *(r.tier for r in self.rules if r.applies(call))])

    def overridden(self, overrides: Mapping[str, Tier | str], rules: Sequence[TierRule] = ()) -> TierTable:
        """The operator's word: ``overrides`` replace tools' tiers (up or down), ``rules`` join the table's."""
        return TierTable({**self.tools, **{n: Tier(t) for n, t in overrides.items()}}, (*self.rules, *rules),
                         self.default)

    def unknown(self, overrides: Mapping[str, Any], rules: Sequence[TierRule] = ()) -> list[str]:
        """The tools ``overrides`` and ``rules`` name that this table does not list, sorted."""
        return sorted({*overrides, *(r.tool for r in rules)} - set(self.tools))

    def only(self, keep: set[str]) -> TierTable:
        return TierTable({n: t for n, t in self.tools.items() if n in keep},
                         [r for r in self.rules if r.tool in keep], self.default)

    def joined(self, other: TierTable) -> TierTable:
        return TierTable({**self.tools, **other.tools}, (*self.rules, *other.rules),
                         Tier.highest([self.default, other.default]))


def tier_from_annotations(read_only: bool | None, destructive: bool | None, idempotent: bool | None,
                          open_world: bool | None, trusted: bool) -> Tier:
    """MCP ``ToolAnnotations`` as a tier. An untrusted server's hints are ignored: WRITE (the spec: hints
    from untrusted servers must not drive decisions; they could lower a tier, and a server marking all
    its tools destructive would double their checks). A trusted server's: ``readOnlyHint`` true is READ;
    otherwise ``destructiveHint`` (which the spec defaults to true, so an unannotated tool is destructive)
    makes it CRITICAL, and an explicit false (additive updates only) WRITE. ``idempotentHint`` and
    ``openWorldHint`` do not change a tier: a staged write is sent at most once either way, and
    openWorld defaults to true, so counting it would make every explicitly non-destructive tool CRITICAL."""
    del idempotent, open_world
    if not trusted:
        return Tier.WRITE
    if read_only is True:
        return Tier.READ
    return Tier.WRITE if destructive is False else Tier.CRITICAL


def hints_of(annotations: Any) -> Hints:
    """An MCP ``ToolAnnotations`` (or None) as the four hints, in ``tier_from_annotations``' order."""
    names = ("read_only_hint", "destructive_hint", "idempotent_hint", "open_world_hint")
    return tuple(getattr(annotations, n, None) for n in names)  # type: ignore[return-value]


def tool_tier(name: str, hints: Hints, trusted: bool, overrides: Mapping[str, str]) -> Tier:
    """A tool's tier from its annotations (``hints``), unless the operator's override names it."""
    if name in overrides:
        return Tier(overrides[name])
    return tier_from_annotations(*hints, trusted=trusted)


class Tiered:
    """Any tool adapter with a tier table: a ``TieredTools``. Guarantees: ``tier(call)`` is never below
    what the adapter's ``classify`` says (a table that lacks a tool gives it its default, WRITE), and
    ``classify`` agrees with it (WRITE for a write or critical call); validate, execute and every other
    attribute are the adapter's. The adapter itself stays untiered."""

    def __init__(self, adapter: Any, table: TierTable) -> None:
        self.adapter, self.table = adapter, table

    def tier(self, call: ToolCall) -> Tier:
        return Tier.highest([Tier.of(self.adapter.classify(call)), self.table.tier(call)])

    def classify(self, call: ToolCall) -> Effect:
        return self.tier(call).effect

    def validate(self, call: ToolCall) -> str | None:
        return self.adapter.validate(call)

    async def execute(self, call: ToolCall) -> Observation:
        return await self.adapter.execute(call)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("adapter", "table"):
            raise AttributeError(name)
        return getattr(self.adapter, name)
