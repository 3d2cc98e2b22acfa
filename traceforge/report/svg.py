"""Charts as inline SVG, drawn in Python: the HTML report needs no script, no CDN and no network.

Every string that reaches the SVG (labels, titles, trace content) goes through `esc`, so a workload
named `<script>` is drawn as text. Each chart is an `<svg class="chart" data-chart=KIND>` whose marks
carry `class="mark"`, so a browser test can check that something was drawn.

>>> svg = bar_chart([("a<b", 3.0), ("c", 1.0)], title="Demo")
>>> "a&lt;b" in svg and svg.count('class="mark"') == 2
True
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

PALETTE = ("#3b6ea5", "#e07b39", "#5a9e4b", "#c0504d", "#8064a2", "#4bacc6", "#9c8b3d", "#7f7f7f")
LABEL_CHAR_PX = 7.0  # a label character's width at FONT's size, on the wide side (hex digits: 6.7)
LEGEND_CHARS = 24  # of a line chart's legend entry
LEGEND_SWATCH = 14  # px of line before it
REFERENCE_GREYS = ("#7f7f7f", "#b0b0b0")  # dashed reference lines: a bound, a target
FONT = 'font-family="system-ui, sans-serif" font-size="11"'


def esc(text: object) -> str:
    """Text for SVG/HTML content and attribute values."""
    return html.escape(str(text), quote=True)


def _fmt(value: float) -> str:
    magnitude = abs(value)
    if magnitude >= 1e9:
        return f"{value / 1e9:.1f}G"
    if magnitude >= 1e6:
        return f"{value / 1e6:.1f}M"
    if magnitude >= 1e3:
        return f"{value / 1e3:.1f}k"
    if magnitude and magnitude < 1:
        return f"{value:.2f}"
    return f"{value:.0f}"


def _ticks(top: float, count: int = 4, whole: bool = False) -> list[float]:
    """Round gridline values from 0 to at least `top`; whole numbers only when `whole` (counts)."""
    if top <= 0:
        return [0.0]
    raw = top / count
    step = 10 ** math.floor(math.log10(raw))
    for multiple in (1, 2, 2.5, 5, 10):
        if raw <= multiple * step:
            step *= multiple
            break
    if whole:
        step = max(math.ceil(step), 1)
    return [i * step for i in range(math.ceil(top / step - 1e-9) + 1)]


def _open(kind: str, width: int, height: int, title: str, style: str = "") -> list[str]:
    styled = f' style="{style}"' if style else ""
    return [
        f'<svg class="chart" data-chart="{esc(kind)}"{styled} '
        f'viewBox="0 0 {width} {height}" width="100%" role="img" aria-label="{esc(title)}">',
        f"<title>{esc(title)}</title>",
    ]


def bar_chart(
    bars: Sequence[tuple[str, float]],
    *,
    title: str,
    line: Sequence[float] | None = None,
    line_label: str = "",
    value_label: str = "",
    percent: bool = False,
    width: int = 640,
    height: int = 260,
) -> str:
    """Vertical bars, one per (label, value), optionally with a line over them on a 0-1 scale
    (the cumulative share of a Pareto chart)."""
    if not bars:
        return empty_chart(title)
    left, right, top, bottom = 48, 44 if line else 12, 16, 64
    if len(bars) <= 30:  # room for the slanted labels: the first one's left of its bar, all below
        slant = math.radians(35)
        longest = max(len(_short(label)) for label, _ in bars) * LABEL_CHAR_PX
        first = len(_short(bars[0][0])) * LABEL_CHAR_PX * math.cos(slant)
        left = max(left, math.ceil(first - (width - left - right) / len(bars) / 2 + 4))
        bottom = max(bottom, math.ceil(10 + longest * math.sin(slant) + 12))
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = max(v for _, v in bars) or 1.0
    ticks = _ticks(peak, whole=not percent and all(float(v).is_integer() for _, v in bars))
    top_value = max(ticks[-1], peak)
    out = _open("bar", width, height, title)
    out.append(f"<g {FONT}>")
    for tick in ticks:
        y = top + plot_h - plot_h * tick / top_value
        label = f"{tick:.0%}" if percent else _fmt(tick)
        out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{esc(label)}</text>')
    step = plot_w / len(bars)
    bar_w = max(step * 0.7, 1.0)
    for i, (label, value) in enumerate(bars):
        h = plot_h * value / top_value
        x = left + i * step + (step - bar_w) / 2
        shown = f"{value:.1%}" if percent else _fmt(value)
        out.append(
            f'<rect class="mark" x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{bar_w:.1f}" '
            f'height="{max(h, 0):.1f}" fill="{PALETTE[0]}"><title>{esc(label)}: {esc(shown)}</title></rect>'
        )
        if len(bars) <= 30:
            cx, cy = x + bar_w / 2, top + plot_h + 10
            out.append(
                f'<text x="{cx:.1f}" y="{cy:.1f}" text-anchor="end" '
                f'transform="rotate(-35 {cx:.1f} {cy:.1f})">{esc(_short(label))}</text>'
            )
    if line:
        points = " ".join(
            f"{left + (i + 0.5) * step:.1f},{top + plot_h - plot_h * min(max(v, 0.0), 1.0):.1f}"
            for i, v in enumerate(line)
        )
        out.append(
            f'<polyline class="mark" points="{points}" fill="none" stroke="{PALETTE[1]}" stroke-width="2"/>'
        )
        for tick in (0.0, 0.5, 0.8, 1.0):
            y = top + plot_h - plot_h * tick
            out.append(f'<text x="{left + plot_w + 4}" y="{y + 4:.1f}" fill="{PALETTE[1]}">{tick:.0%}</text>')
        if line_label:
            out.append(
                f'<text x="{width - 4}" y="{top - 4}" text-anchor="end" fill="{PALETTE[1]}">'
                f"{esc(line_label)}</text>"
            )
    if value_label:
        out.append(f'<text x="4" y="{top - 4}">{esc(value_label)}</text>')
    out.append("</g></svg>")
    return "".join(out)


def stacked_bar_chart(
    rows: Sequence[tuple[str, Sequence[float]]],
    *,
    series: Sequence[str],
    title: str,
    normalise: bool = True,
    width: int = 640,
) -> str:
    """Horizontal bars split into parts (e.g. uncached input / cached input / output per workload);
    normalised to 100% by default so workloads of different sizes compare."""
    if not rows:
        return empty_chart(title)
    left, right, top, row_h = 150, 16, 28, 22
    height = top + row_h * len(rows) + 12
    plot_w = width - left - right
    out = _open("stacked", width, height, title)
    out.append(f"<g {FONT}>")
    x = left
    for k, name in enumerate(series):  # legend
        out.append(f'<rect x="{x}" y="6" width="10" height="10" fill="{PALETTE[k % len(PALETTE)]}"/>')
        out.append(f'<text x="{x + 14}" y="15">{esc(name)}</text>')
        x += 14 + 7 * len(name) + 16
    peak = max((sum(v) for _, v in rows), default=1.0) or 1.0
    for i, (label, values) in enumerate(rows):
        y = top + i * row_h
        total = sum(values) or 1.0
        out.append(f'<text x="{left - 6}" y="{y + 14}" text-anchor="end">{esc(_short(label, 24))}</text>')
        x = float(left)
        for k, value in enumerate(values):
            w = plot_w * (value / total if normalise else value / peak)
            share = value / total
            out.append(
                f'<rect class="mark" x="{x:.1f}" y="{y + 2}" width="{max(w, 0):.1f}" height="{row_h - 6}" '
                f'fill="{PALETTE[k % len(PALETTE)]}"><title>{esc(label)} · {esc(series[k])}: '
                f"{esc(_fmt(value))} ({share:.0%})</title></rect>"
            )
            x += w
    out.append("</g></svg>")
    return "".join(out)


def line_chart(
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    *,
    title: str,
    x_label: str = "",
    y_label: str = "",
    log_x: bool = False,
    percent_y: bool = False,
    markers: bool = False,
    references: Sequence[tuple[str, Sequence[tuple[float, float]]]] = (),
    x_ticks: Sequence[float] | None = None,
    width: int = 640,
    height: int = 280,
) -> str:
    """One polyline per (name, [(x, y), ...]); `log_x` for sizes spanning orders of magnitude. The
    legend stands right of the plot, where no line can run under it (hit-ratio curves of a
    well-cached workload run flat along the top).

    `markers` draws a dot at each measured point (a series of two or three measurements); each of
    `references` (a bound, a target) is a dashed grey line, listed after the series; `x_ticks`
    labels those x values instead of five evenly spaced ones (the sizes that were measured)."""
    drawn = [*series, *references]
    points_all = [(x, y) for _, pts in drawn for x, y in pts if not (log_x and x <= 0)]
    if not points_all or not any(pts for _, pts in series):
        return empty_chart(title)
    names = [_short(name, LEGEND_CHARS) for name, _ in drawn]
    legend_w = LEGEND_SWATCH + 4 + max(map(len, names)) * LABEL_CHAR_PX
    left, right, top, bottom = 52, math.ceil(16 + legend_w), 24, 44
    plot_w, plot_h = width - left - right, height - top - bottom

    def fx(value: float) -> float:
        return math.log10(value) if log_x else value

    xs = [fx(x) for x, _ in points_all]
    x_min, x_max = min(xs), max(xs)
    if x_max == x_min:
        x_max = x_min + 1
    y_max = 1.0 if percent_y else (max(y for _, y in points_all) or 1.0)
    ticks = _ticks(y_max)
    y_top = max(ticks[-1], y_max)
    out = _open("line", width, height, title)
    out.append(f"<g {FONT}>")
    for tick in ticks:
        y = top + plot_h - plot_h * tick / y_top
        out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        label = f"{tick:.0%}" if percent_y else _fmt(tick)
        out.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{esc(label)}</text>')

    def px(x: float, y: float) -> tuple[float, float]:
        return left + plot_w * (x - x_min) / (x_max - x_min), top + plot_h - plot_h * y / y_top

    if x_ticks is None:
        x_ticks = [x_min + (x_max - x_min) * k / 4 for k in range(5)]
        x_ticks = [10**value for value in x_ticks] if log_x else x_ticks
    for value in x_ticks:
        if not x_min - 1e-9 <= fx(value) <= x_max + 1e-9:
            continue
        x = px(fx(value), 0)[0]
        anchor = "end" if x > left + plot_w - 12 else "middle"  # the last one inside the chart
        out.append(
            f'<text x="{x:.1f}" y="{top + plot_h + 14}" text-anchor="{anchor}">{esc(_fmt(value))}</text>'
        )
    for i, (name, pts) in enumerate(drawn):
        usable = sorted((fx(x), y) for x, y in pts if not (log_x and x <= 0))
        if not usable:
            continue
        reference = i >= len(series)
        colour = REFERENCE_GREYS[(i - len(series)) % 2] if reference else PALETTE[i % len(PALETTE)]
        style = f'stroke="{colour}" stroke-width="{1.5 if reference else 2}"'
        style += ' stroke-dasharray="5 4"' if reference else ""
        coords = " ".join("{:.1f},{:.1f}".format(*px(x, y)) for x, y in usable)
        kind = "reference" if reference else "mark"
        out.append(
            f'<polyline class="{kind}" points="{coords}" fill="none" {style}>'
            f"<title>{esc(name)}</title></polyline>"
        )
        for x, y in usable if markers and not reference else ():
            cx, cy = px(x, y)
            out.append(f'<circle class="point" cx="{cx:.1f}" cy="{cy:.1f}" r="3" fill="{colour}"/>')
        x, y = left + plot_w + 12, top + 8 + 14 * i
        out.append(
            f'<line class="legend" x1="{x}" x2="{x + LEGEND_SWATCH}" y1="{y - 4}" y2="{y - 4}" {style}/>'
            f'<text class="legend" x="{x + LEGEND_SWATCH + 4}" y="{y}" fill="{colour}">{esc(names[i])}</text>'
        )
    if x_label:
        out.append(
            f'<text x="{left + plot_w / 2:.1f}" y="{height - 6}" text-anchor="middle">{esc(x_label)}</text>'
        )
    if y_label:
        out.append(f'<text x="4" y="{top - 8}">{esc(y_label)}</text>')
    out.append("</g></svg>")
    return "".join(out)


DAG_LEAST_SCALE = 0.75
DAG_BOX_SLOT = 130  # horizontal room per call in a DAG drawing


def dag_diagram(
    levels: Sequence[Sequence[tuple[str, str]]],
    edges: Sequence[tuple[str, str]],
    *,
    title: str,
    width: int = 300,
    packed: bool = False,
) -> str:
    """A layered drawing: `levels` are the turns (each a list of (node id, label)); `edges` are
    (from id, to id). Observed schedule and parallel schedule are drawn with the same function.
    `packed`: each row's boxes side by side from the left, rather than spread over the width, so a
    drawing that scrolls sideways shows every row's first calls, none in a row left of view."""
    if not levels:
        return empty_chart(title)
    row_h, box_h, top = 44, 26, 8
    widest = max(len(level) for level in levels)
    width = max(width, DAG_BOX_SLOT * widest + 50)  # room for every box of the widest turn
    height = top + row_h * len(levels) + 4
    position: dict[str, tuple[float, float]] = {}
    # Never drawn larger than life, nor shrunk below DAG_LEAST_SCALE (its labels would be specks):
    # a wider drawing (a parallel turn of many calls) scrolls sideways in its figure instead.
    size = f"max-width: {width}px; min-width: {round(width * DAG_LEAST_SCALE)}px"
    out = _open("dag", width, height, title, style=size)
    out.append(f"<g {FONT}>")
    for depth, level in enumerate(levels):
        y = top + depth * row_h
        out.append(f'<text x="2" y="{y + 17}" fill="#888">{depth + 1}</text>')
        slot = DAG_BOX_SLOT if packed else (width - 30) / max(len(level), 1)
        for i, (node, _label) in enumerate(level):
            position[node] = (30 + slot * i + slot / 2, y)
    for src, dst in edges:
        if src in position and dst in position:
            (x1, y1), (x2, y2) = position[src], position[dst]
            out.append(
                f'<line x1="{x1:.1f}" y1="{y1 + box_h:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
                f'stroke="#999" stroke-width="1.2"/>'
            )
    for level in levels:
        for node, label in level:
            x, y = position[node]
            out.append(
                f'<g class="mark"><rect x="{x - 60:.1f}" y="{y:.1f}" width="120" height="{box_h}" rx="5" '
                f'fill="#eef3f9" stroke="{PALETTE[0]}"/><text x="{x:.1f}" y="{y + 17:.1f}" '
                f'text-anchor="middle">{esc(_short(label, 18))}</text><title>{esc(label)}</title></g>'
            )
    out.append("</g></svg>")
    return "".join(out)


def standalone(chart: str) -> str:
    """A chart as an SVG file of its own: with the SVG namespace, which SVG inline in HTML does
    without (and the report leaves out: it names no URL at all)."""
    return chart.replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1)


def empty_chart(title: str) -> str:
    return (
        f'<svg class="chart empty" data-chart="empty" '
        f'viewBox="0 0 640 40" width="100%" role="img" aria-label="{esc(title)}"><text x="8" y="24" {FONT}>'
        f"No data for this chart.</text></svg>"
    )


def _short(text: str, limit: int = 16) -> str:
    """`text` in at most `limit` characters: cut at the end, or for a path (a Claude Code workload
    is its working directory) at the start, keeping the last folders that fit, which tell it apart.

    >>> _short("get_reservation_details"), _short("/home/dev/projects/shop-api/backend")
    ('get_reservation…', '…/backend')
    """
    text = str(text)
    if len(text) <= limit:
        return text
    if "/" in text:
        tail = text[len(text) - (limit - 1) :]
        return "…" + (tail[tail.index("/") :] if "/" in tail else tail)
    return text[: limit - 1] + "…"
