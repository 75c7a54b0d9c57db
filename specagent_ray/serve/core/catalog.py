"""A session's tools as the protocol and the engines see them: plain data, below the parts that use it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...protocol.types import Effect, Tier, ToolCall
from ...tools.schema import SchemaValidator
from ...tools.tiers import TierTable
from .errors import BadRequest


@dataclass
class Catalog:
    """A session's tools: schemas for ``valid()``, effects for ``classify`` (unknown tools are WRITE),
    tiers for ``tier`` (tools/tiers.py; taken from the effects when not given), and the policy text the
    prompts carry. Guarantees: a tool's effect and tier agree (a write or critical tool is a WRITE: it is
    staged), and ``classify(call)`` is WRITE for every call whose tier is above READ, rules included."""

    schemas: dict[str, dict[str, Any]]
    effects: dict[str, Effect]
    policy: str = ""
    routes: dict[str, str] = field(default_factory=dict)  # a tool of a session's ``more_sources``: its source
    tiers: TierTable | None = None

    def __post_init__(self) -> None:
        self.validator = SchemaValidator(self.schemas)
        if self.tiers is None:
            self.tiers = TierTable({n: Tier.of(e) for n, e in self.effects.items()})
        wrong = sorted(n for n in self.schemas.keys() | self.effects.keys() if self.tiers.effect(n) is not self.effect(n))
        if wrong:
            raise ValueError(f"tools whose effect and tier disagree: {', '.join(wrong)}")

    @staticmethod
    def tiered(schemas: dict[str, dict[str, Any]], tiers: TierTable, policy: str = "") -> Catalog:
        """The catalog of ``schemas`` whose effects come from ``tiers``."""
        return Catalog(schemas, {n: tiers.effect(n) for n in schemas}, policy, tiers=tiers)

    def of_source(self, source: Any, name: str) -> Catalog:
        """These tools under their source's ``overrides`` and ``tier_rules`` (config ``TieredSource``;
        ValueError naming any tool they name that these tools lack), effects following the tiers."""
        assert self.tiers is not None
        tiers = source.tier_table(self.tiers.only(set(self.schemas)), name)
        return Catalog(self.schemas, {n: tiers.effect(n) for n in self.schemas}, self.policy, self.routes, tiers)

    def effect(self, name: str) -> Effect:
        return self.effects.get(name, Effect.WRITE)

    def tier(self, call: ToolCall) -> Tier:
        assert self.tiers is not None
        return Tier.highest([Tier.of(self.effect(call.name)), self.tiers.tier(call)])

    def classify(self, call: ToolCall) -> Effect:
        """The call's effect: WRITE for a write or critical tool, and for a read a rule raised."""
        return self.tier(call).effect

    def listing(self) -> list[dict[str, Any]]:
        """The tools as a client sees them: name, arguments schema, whether they run as reads here, their
        tier (rules may raise some calls above it), and the source of a tool from the session's
        ``more_sources``."""
        assert self.tiers is not None
        return [{"name": n, "input_schema": schema,
                 "annotations": {"read_only": self.effect(n) is Effect.READ, "tier": self.tiers.tool(n).value},
                 **({"source": self.routes[n]} if n in self.routes else {})} for n, schema in self.schemas.items()]

    def narrowed(self, keep: set[str] | None) -> Catalog:
        """These tools, only those in ``keep`` (all if None)."""
        if keep is None:
            return self
        assert self.tiers is not None
        return Catalog({n: v for n, v in self.schemas.items() if n in keep},
                       {n: e for n, e in self.effects.items() if n in keep}, self.policy,
                       {n: r for n, r in self.routes.items() if n in keep}, self.tiers.only(keep))

    def joined(self, other: Catalog, source: str) -> Catalog:
        """These tools and ``other``'s, which come from ``source`` (400 for a name in both)."""
        both = sorted(set(self.schemas) & set(other.schemas))
        if both:
            raise BadRequest(f"tool {both[0]!r} is in more than one of the session's tool sources ({source} too)")
        assert self.tiers is not None and other.tiers is not None
        return Catalog({**self.schemas, **other.schemas}, {**self.effects, **other.effects}, self.policy,
                       {**self.routes, **dict.fromkeys(other.schemas, source)}, self.tiers.joined(other.tiers))
