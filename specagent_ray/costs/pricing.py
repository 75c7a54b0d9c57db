"""API list prices (``data/pricing.yaml``) for the edge-cloud cost report."""

from __future__ import annotations

from importlib import resources

from pydantic import BaseModel, ConfigDict, Field

from .deployment import Pricing
from .specs import by_name, yaml_entries


class PriceEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    prompt_per_mtok: float = Field(ge=0)
    cached_per_mtok: float = Field(ge=0)
    decode_per_mtok: float = Field(ge=0)
    source: str = Field(min_length=1)


def load_prices(text: str | None = None) -> dict[str, Pricing]:
    """Name -> prices, from ``text`` or the packaged file. Unknown keys and duplicates are errors."""
    if text is None:
        text = resources.files(__package__).joinpath("data/pricing.yaml").read_text()
    entries = by_name([PriceEntry.model_validate(e) for e in yaml_entries(text, "prices")])
    return {name: Pricing(prompt_per_mtok=e.prompt_per_mtok, cached_per_mtok=e.cached_per_mtok,
                          decode_per_mtok=e.decode_per_mtok) for name, e in entries.items()}


def load_price(name: str) -> Pricing:
    prices = load_prices()
    if name not in prices:
        raise ValueError(f"unknown price list {name!r}; known: {', '.join(sorted(prices))}")
    return prices[name]
