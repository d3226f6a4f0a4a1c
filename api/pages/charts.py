"""Server-rendered SVG charts: no script, no library, readable by screen readers.

Each chart is an `<svg role="img">` with a `<title>` and `<desc>` that say what it
shows, and every bar carries its own `<title>` (label and value), so hovering or
a screen reader gives the exact figure. Values are escaped by the caller's
template (the chart is built as data here and drawn by `charts.html`).
"""

from __future__ import annotations

from dataclasses import dataclass

from api.pages.filters import plural

WIDTH = 640
HEIGHT = 180
PAD_LEFT = 40
PAD_BOTTOM = 28
PAD_TOP = 10
MAX_BAR_WIDTH = 48.0


@dataclass(frozen=True)
class Bar:
    """One bar (or a stacked pair): position, size and what it says."""

    x: float
    width: float
    y: float
    height: float
    label: str
    title: str
    tone: str  # a CSS class: ok, bad, neutral
    show_label: bool


@dataclass(frozen=True)
class Chart:
    """A bar chart ready to draw."""

    title: str
    description: str
    bars: list[Bar]
    max_value: float
    width: int = WIDTH
    height: int = HEIGHT
    empty: bool = False

    @property
    def baseline(self) -> int:
        """The y of the x axis."""
        return self.height - PAD_BOTTOM


def bar_chart(
    title: str,
    points: list[tuple[str, float]],
    *,
    unit: str = "",
    tone: str = "neutral",
    failures: list[float] | None = None,
    ceiling: float | None = None,
) -> Chart:
    """Bars for (label, value) points; with `failures`, each bar's failed part is stacked in red."""
    top = ceiling or max([value for _, value in points] + [1.0])
    plot_w = WIDTH - PAD_LEFT - 10
    plot_h = HEIGHT - PAD_BOTTOM - PAD_TOP
    step = plot_w / max(len(points), 1)
    width = min(max(step * 0.7, 2.0), MAX_BAR_WIDTH)
    every = max(1, len(points) // 8)  # at most ~8 axis labels, so they never overlap
    bars: list[Bar] = []
    for index, (label, value) in enumerate(points):
        x = PAD_LEFT + index * step + (step - width) / 2
        failed = failures[index] if failures else 0.0
        good = value - failed
        good_h = plot_h * good / top
        failed_h = plot_h * failed / top
        base = HEIGHT - PAD_BOTTOM
        text = f"{label}: {value:g}{unit}" + (f" ({failed:g} failed)" if failures else "")
        bars.append(Bar(x, width, base - good_h, good_h, label, text, tone, index % every == 0))
        if failed_h:
            bars.append(Bar(x, width, base - good_h - failed_h, failed_h, label, text, "bad", False))
    total = sum(value for _, value in points)
    highest = max([v for _, v in points] + [0])
    description = (
        f"{plural(len(points), 'bar')}, total {total:g}{unit}, highest {highest:g}{unit}"
        if points
        else "No data yet"
    )
    return Chart(title, description, bars, top, empty=not points or total == 0)


def rate_chart(title: str, points: list[tuple[str, int, int]]) -> Chart:
    """Success rate per label from (label, total, succeeded), as bars from 0 to 100 %."""
    rates = [(label, round(100 * ok / total, 1) if total else 0.0) for label, total, ok in points]
    chart = bar_chart(title, rates, unit="%", tone="ok", ceiling=100.0)
    total = sum(t for _, t, _ in points)
    succeeded = sum(ok for _, _, ok in points)
    description = (
        f"{100 * succeeded / total:.1f}% of {plural(total, 'run')} succeeded overall; "
        f"{plural(sum(1 for _, t, _ in points if t), 'bar')} of {len(points)} with runs"
        if total
        else "No runs yet"
    )
    return Chart(chart.title, description, chart.bars, 100.0, empty=not total)
