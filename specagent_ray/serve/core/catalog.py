"""A session's tools as the protocol and the engines see them: plain data, below the parts that use it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...protocol.types import Effect
from ...tools.schema import SchemaValidator
from .errors import BadRequest


@dataclass
class Catalog:
    """A session's tools: schemas for ``valid()``, effects for ``classify`` (unknown tools are WRITE),
    and the policy text the prompts carry."""

    schemas: dict[str, dict[str, Any]]
    effects: dict[str, Effect]
    policy: str = ""
    routes: dict[str, str] = field(default_factory=dict)  # a tool of a session's ``more_sources``: its source

    def __post_init__(self) -> None:
        self.validator = SchemaValidator(self.schemas)

    def effect(self, name: str) -> Effect:
        return self.effects.get(name, Effect.WRITE)

    def listing(self) -> list[dict[str, Any]]:
        """The tools as a client sees them: name, arguments schema, whether they run as reads here, and
        the source of a tool from the session's ``more_sources``."""
        return [{"name": n, "input_schema": schema, "annotations": {"read_only": self.effect(n) is Effect.READ},
                 **({"source": self.routes[n]} if n in self.routes else {})} for n, schema in self.schemas.items()]

    def narrowed(self, keep: set[str] | None) -> Catalog:
        """These tools, only those in ``keep`` (all if None)."""
        if keep is None:
            return self
        return Catalog({n: v for n, v in self.schemas.items() if n in keep},
                       {n: e for n, e in self.effects.items() if n in keep}, self.policy,
                       {n: r for n, r in self.routes.items() if n in keep})

    def joined(self, other: Catalog, source: str) -> Catalog:
        """These tools and ``other``'s, which come from ``source`` (400 for a name in both)."""
        both = sorted(set(self.schemas) & set(other.schemas))
        if both:
            raise BadRequest(f"tool {both[0]!r} is in more than one of the session's tool sources ({source} too)")
        return Catalog({**self.schemas, **other.schemas}, {**self.effects, **other.effects}, self.policy,
                       {**self.routes, **dict.fromkeys(other.schemas, source)})
