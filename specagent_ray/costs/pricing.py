"""API list prices (``data/pricing.yaml``) for the edge-cloud cost report."""

from __future__ import annotations

from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict, Field

from ..telemetry.resources import Pricing


class PriceEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    prompt_per_mtok: float = Field(ge=0)
    cached_per_mtok: float = Field(ge=0)
    decode_per_mtok: float = Field(ge=0)
    source: str = Field(min_length=1)


def load_prices(text: str | None = None) -> dict[str, Pricing]:
    """Name -> prices, from ``text`` or the packaged file. Unknown keys and duplicates are errors."""
    doc = yaml.safe_load(text if text is not None else
                         resources.files(__package__).joinpath("data/pricing.yaml").read_text())
    if not isinstance(doc, dict) or set(doc) != {"prices"} or not isinstance(doc["prices"], list):
        raise ValueError("pricing file: expected a mapping with the single key 'prices' holding a list")
    out: dict[str, Pricing] = {}
    for raw in doc["prices"]:
        entry = PriceEntry.model_validate(raw)
        if entry.name in out:
            raise ValueError(f"pricing file: duplicate name {entry.name!r}")
        out[entry.name] = Pricing(prompt_per_mtok=entry.prompt_per_mtok, cached_per_mtok=entry.cached_per_mtok,
                                  decode_per_mtok=entry.decode_per_mtok)
    return out


def load_price(name: str) -> Pricing:
    prices = load_prices()
    if name not in prices:
        raise ValueError(f"unknown price list {name!r}; known: {', '.join(sorted(prices))}")
    return prices[name]
