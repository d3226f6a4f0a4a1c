"""Jinja2 filters: how dates, money and counts read on the dashboard."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any


def when(value: Any) -> str:
    """An ISO 8601 or datetime value as `2026-11-23 21:05 UTC` (empty for none)."""
    if value in (None, ""):
        return "—"
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M UTC")
    return str(value)


def money(cents: Any) -> str:
    """Cents as dollars: `$12.34`."""
    if cents is None:
        return "—"
    return f"${int(cents) / 100:,.2f}"


def count(value: Any) -> str:
    """A count with thousands separators."""
    if value is None:
        return "—"
    return f"{int(value):,}"


def percent(value: Any) -> str:
    """A 0-100 rate as `97.5%` (a dash when there is nothing to rate)."""
    if value is None:
        return "—"
    return f"{float(value):.1f}%"


def version(semver: Any) -> str:
    """A template version as every page writes it: `v1.2.0` (its semver; a dash for none)."""
    return f"v{semver}" if semver else "—"


def plural(count: Any, one: str, many: str | None = None) -> str:
    """`1 bar`, `3 bars`, `1 entry`, `0 entries`: the count with the word that fits it."""
    number = int(count)
    word = one if number == 1 else (many or f"{one}s")
    return f"{number:,} {word}"


FILTERS: dict[str, Callable[..., str]] = {
    "when": when,
    "money": money,
    "count": count,
    "percent": percent,
    "version": version,
    "plural": plural,
}
