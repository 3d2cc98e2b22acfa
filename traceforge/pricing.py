"""Model prices: the shipped table (`traceforge/prices.toml`) plus a user's overrides, and the
matching of the model names sources report to its entries.

A name matches an entry exactly (or one of its aliases), or the entry followed only by a date or
version suffix, after dropping a provider prefix. Anything else is unpriced: a cost is never
guessed from a similar-looking name.

>>> table = load_prices()
>>> table.lookup("openai/gpt-4o-2024-08-06").model
'gpt-4o'
>>> table.lookup("gpt-4o-audio-preview") is None
True
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

PRICE_FIELDS = ("input", "cached_input", "cache_write", "output")

# Suffixes that name a snapshot of the same model: -20241022, -2024-08-06, -0613, @20240620,
# -v1:0 (Bedrock), -latest.
_SNAPSHOT = re.compile(r"(?:[-@](?:\d{8}|\d{4}-\d{2}-\d{2}|\d{4}|latest|v\d+(?::\d+)?))+")
# Bedrock-style prefixes: `anthropic.claude-...`, `us.anthropic.claude-...`.
_VENDOR_PREFIX = re.compile(r"^(?:[a-z]{2}\.)?(?:anthropic|openai|google|meta|amazon|mistral)\.")


class PriceFileError(ValueError):
    """A price file that cannot be read, with the file, the place and what to do."""


@dataclass(frozen=True)
class Price:
    """USD per million tokens for one model."""

    model: str
    input: float
    cached_input: float
    cache_write: float
    output: float
    provider: str
    source: str | None = None
    as_of: str | None = None

    def cost(self, uncached_input: int, cache_read: int, cache_write: int, output: int) -> float:
        """The cost in USD of one call's tokens.

        >>> Price("m", 3.0, 0.3, 3.75, 15.0, "p").cost(1_000_000, 0, 0, 0)
        3.0
        """
        return (
            uncached_input * self.input
            + cache_read * self.cached_input
            + cache_write * self.cache_write
            + output * self.output
        ) / 1e6


class PriceTable:
    """Prices by model name, with the matching rules of this module."""

    def __init__(self, prices: dict[str, Price], aliases: dict[str, str]) -> None:
        self.prices = prices
        self.aliases = aliases
        self._keys = sorted({*prices, *aliases}, key=len, reverse=True)

    def lookup(self, model: str | None) -> Price | None:
        """The price of `model`, or None when no entry matches it."""
        if not model:
            return None
        name = normalize_model(model)
        for key in self._keys:
            if name == key or (name.startswith(key) and _SNAPSHOT.fullmatch(name[len(key) :])):
                return self.prices[self.aliases.get(key, key)]
        return None

    def sources(self) -> list[dict[str, str | None]]:
        """Each provider's source page and date, for reports."""
        seen = {}
        for price in self.prices.values():
            seen.setdefault(
                price.provider, {"provider": price.provider, "source": price.source, "as_of": price.as_of}
            )
        return list(seen.values())


def normalize_model(model: str) -> str:
    """Lower case, without a routing prefix (`openrouter/openai/`, `models/`, `anthropic.`)."""
    name = model.strip().lower().rsplit("/", 1)[-1]
    return _VENDOR_PREFIX.sub("", name)


def load_prices(override: str | Path | None = None) -> PriceTable:
    """The shipped price table, with the entries of the TOML file `override` added or replacing
    the shipped ones of the same name.

    Raises PriceFileError naming the file and the problem.
    """
    shipped = resources.files("traceforge").joinpath("prices.toml").read_text(encoding="utf-8")
    prices: dict[str, Price] = {}
    aliases: dict[str, str] = {}
    _read_table(tomllib.loads(shipped), "traceforge/prices.toml", prices, aliases)
    if override is not None:
        path = Path(override)
        try:
            document = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise PriceFileError(f"{path}: cannot read the price file: {exc.strerror or exc}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise PriceFileError(f"{path}: not valid TOML: {exc}. Fix the file and rerun.") from exc
        _read_table(document, str(path), prices, aliases)
    return PriceTable(prices, aliases)


def _read_table(
    document: dict[str, Any], origin: str, prices: dict[str, Price], aliases: dict[str, str]
) -> None:
    for provider, section in document.items():
        if not isinstance(section, dict) or not isinstance(section.get("models"), dict):
            raise PriceFileError(
                f"{origin}: [{provider}] has no [{provider}.models] table; each provider section "
                'lists its models as `"name" = { input = ..., output = ... }`'
            )
        for model, entry in section["models"].items():
            where = f"{origin}: [{provider}.models] {model!r}"
            if not isinstance(entry, dict):
                raise PriceFileError(f"{where}: expected a table of prices, got {entry!r}")
            values = {}
            for name in PRICE_FIELDS:
                value = entry.get(name)
                if value is None and name in ("cached_input", "cache_write"):
                    value = entry.get("input")  # no discount or surcharge unless stated
                if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                    raise PriceFileError(
                        f"{where}: `{name}` must be a non-negative number (USD per 1M tokens)"
                    )
                values[name] = float(value)
            key = normalize_model(model)
            prices[key] = Price(
                model=key,
                provider=str(provider),
                source=section.get("source"),
                as_of=str(section["as_of"]) if section.get("as_of") is not None else None,
                **values,
            )
            aliases.pop(key, None)
            for alias in entry.get("aliases") or []:
                aliases[normalize_model(str(alias))] = key
