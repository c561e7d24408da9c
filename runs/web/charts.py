"""Server-rendered SVG charts (no JavaScript, no CDN).

Every piece of text that may come from a trace (tool names, detector ids) goes through
format_html; numbers are formatted here. The result is safe to put in a template as is.
"""

from __future__ import annotations

from datetime import date

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from ..services.summary import Strip

STRIP_COLORS = ("#e6e9ef", "#f6d58e", "#efaa4f", "#dc6b3f", "#b3261e")
# A bar chart's labels: at most LABEL_CHARS characters of the 12 px monospace (.chart__label,
# about 0.6 em a character), right-aligned in a column wide enough for them, so a long label
# ("Same error, different tries") is cut with an ellipsis, not by the edge of the chart.
LABEL_CHARS = 24
LABEL_CHAR_PX = 7.3
LABEL_W = round(LABEL_CHARS * LABEL_CHAR_PX) + 16  # 8 px from the edge, 8 px before the bar


def _join(sep: str, template: str, rows) -> SafeString:
    return format_html_join(sep, template, (_fmt(row) for row in rows))


def _svg(width: int, height: int, body: str, label: str, css: str = "chart") -> SafeString:
    return format_html(
        '<svg class="{}" viewBox="0 0 {} {}" width="{}" height="{}" role="img" aria-label="{}" '
        'preserveAspectRatio="none">{}</svg>',
        css,
        width,
        height,
        width,
        height,
        label,
        mark_safe(body),  # noqa: S308 - built from format_html parts below
    )


def repeat_strip(strip: Strip, width: int = 144, height: int = 14) -> SafeString:
    """Return the runs list's picture of where a run's repeats sit (darker = more repeats)."""
    cells = strip.cells
    if not cells:
        return mark_safe("")
    cell = width / len(cells)
    spans = []  # run-length: one rect per stretch of equal cells keeps the list page small
    for i, level in enumerate(cells):
        level = max(0, min(level, 4))
        if spans and spans[-1][1] == level:
            spans[-1][2] += 1
        else:
            spans.append([i, level, 1])
    rects = _join(
        "",
        '<rect x="{}" y="2" width="{}" height="{}" fill="{}"/>',
        (
            (start * cell, n * cell + 0.2, height - 4, STRIP_COLORS[level])
            for start, level, n in spans
        ),
    )
    marks = _join(
        "",
        '<rect x="{}" y="0" width="1.5" height="{}" fill="#1d2330"/>',
        ((i * cell, height) for i in strip.fired[:20]),
    )
    return _svg(width, height, rects + marks, "where this run repeats itself", "strip")


def stall_chart(
    series: list, *, steps: int, fired: list[int] = (), width: int = 640, height: int = 120
) -> SafeString:
    """Return the stall score over the run as a line, with a tick where each warning fired."""
    points = [(float(p[0]), float(p[1])) for p in series or [] if len(p) == 2]
    if not points:
        return mark_safe("")
    pad_l, pad_b, pad_t = 34, 18, 8
    span = max(steps - 1, points[-1][0], 1)
    inner_w, inner_h = width - pad_l - 6, height - pad_b - pad_t

    def x(seq: float) -> float:
        return pad_l + inner_w * seq / span

    def y(score: float) -> float:
        return pad_t + inner_h * (1 - max(0.0, min(score, 1.0)))

    line = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in points)
    area = f"{x(points[0][0]):.1f},{y(0):.1f} {line} {x(points[-1][0]):.1f},{y(0):.1f}"
    grid = _join(
        "",
        '<line x1="{}" x2="{}" y1="{}" y2="{}" class="chart__grid"/>'
        '<text x="{}" y="{}" class="chart__axis" text-anchor="end">{}</text>',
        ((pad_l, width - 6, y(v), y(v), pad_l - 4, y(v) + 4, f"{v:.1f}") for v in (0, 0.5, 1)),
    )
    ticks = _join(
        "",
        '<line x1="{}" x2="{}" y1="{}" y2="{}" class="chart__fired"/>',
        ((x(s), x(s), pad_t, pad_t + inner_h) for s in list(fired)[:50]),
    )
    body = (
        grid
        + ticks
        + format_html(
            '<polygon points="{}" class="chart__area"/><polyline points="{}" class="chart__line"/>'
            '<text x="{}" y="{}" class="chart__axis">step 0</text>'
            '<text x="{}" y="{}" class="chart__axis" text-anchor="end">step {}</text>',
            area,
            line,
            pad_l,
            height - 4,
            width - 6,
            height - 4,
            int(span),
        )
    )
    return _svg(width, height, body, "stall score over the run", "chart chart--stall")


def bars(rows: list[tuple[str, float]], *, unit: str = "", width: int = 520) -> SafeString:
    """Return a horizontal bar chart of (label, value) rows, largest first."""
    rows = [(str(label), float(value or 0)) for label, value in rows][:12]
    if not rows:
        return mark_safe("")
    top = max(v for _, v in rows) or 1
    bar_h, gap, label_w = 20, 6, LABEL_W
    height = len(rows) * (bar_h + gap)
    parts = _join(
        "",
        '<text x="{}" y="{}" class="chart__label" text-anchor="end">{}</text>'
        '<rect x="{}" y="{}" width="{}" height="{}" rx="3" class="chart__bar"/>'
        '<text x="{}" y="{}" class="chart__value">{}</text>',
        (
            (
                label_w - 8,
                i * (bar_h + gap) + 15,
                label if len(label) <= LABEL_CHARS else label[: LABEL_CHARS - 1] + "…",
                label_w,
                i * (bar_h + gap),
                max((width - label_w - 70) * v / top, 1),
                bar_h,
                label_w + max((width - label_w - 70) * v / top, 1) + 6,
                i * (bar_h + gap) + 15,
                _num(v) + unit + ("s" if unit and v != 1 else ""),
            )
            for i, (label, v) in enumerate(rows)
        ),
    )
    return _svg(width, height, parts, "bar chart", "chart chart--bars")


def daily_columns(
    days: list[tuple[date, int, int]], *, width: int = 640, height: int = 160
) -> SafeString:
    """Return columns per day: all runs (light) with the flagged ones (dark) in front."""
    if not days:
        return mark_safe("")
    pad_b, pad_t, pad_l = 20, 10, 30
    top = max(total for _, total, _ in days) or 1
    col = (width - pad_l) / len(days)
    inner = height - pad_b - pad_t

    def h(n: int) -> float:
        return inner * n / top

    cols = _join(
        "",
        '<rect x="{}" y="{}" width="{}" height="{}" class="chart__bar chart__bar--all">'
        "<title>{}: {} runs, {} flagged</title></rect>"
        '<rect x="{}" y="{}" width="{}" height="{}" class="chart__bar chart__bar--flagged"/>',
        (
            (
                pad_l + i * col + 1,
                pad_t + inner - h(total),
                max(col - 2, 1),
                h(total),
                day.isoformat(),
                total,
                flagged,
                pad_l + i * col + 1,
                pad_t + inner - h(flagged),
                max(col - 2, 1),
                h(flagged),
            )
            for i, (day, total, flagged) in enumerate(days)
        ),
    )
    labels = format_html(
        '<text x="{}" y="{}" class="chart__axis">{}</text>'
        '<text x="{}" y="{}" class="chart__axis" text-anchor="end">{}</text>'
        '<text x="{}" y="{}" class="chart__axis" text-anchor="end">{}</text>',
        pad_l,
        height - 4,
        days[0][0].strftime("%b %d"),
        width,
        height - 4,
        days[-1][0].strftime("%b %d"),
        pad_l - 4,
        pad_t + 8,
        top,
    )
    return _svg(width, height, cols + labels, "runs and flagged runs per day", "chart chart--days")


def _fmt(row: tuple) -> tuple:
    """Return a row with floats as short strings (format_html escapes, so format first)."""
    return tuple(f"{v:.1f}" if isinstance(v, float) else v for v in row)


def _num(value: float) -> str:
    if value >= 1000:
        return f"{value:,.0f}"
    if value == int(value):
        return str(int(value))
    return f"{value:.2f}"


def sparkline(counts: list[int], *, width: int = 120, height: int = 22) -> SafeString:
    """Return a small column chart of counts (one column per day, oldest first).

    Built from numbers only, with f-strings: a list page draws fifty of them, and
    format_html per column cost ~3 ms a chart.
    """
    if not counts:
        return mark_safe("")
    top = max(counts) or 1
    col = width / len(counts)
    cols = []
    for i, n in enumerate(int(c) for c in counts):
        h = max(height * n / top, 1) if n else 0
        cols.append(
            f'<rect x="{i * col:.1f}" y="{height - h:.1f}" width="{max(col - 1, 0.5):.1f}" '
            f'height="{h:.1f}" class="chart__bar"><title>{n}</title></rect>'
        )
    body = mark_safe("".join(cols))  # noqa: S308 - numbers only
    return _svg(width, height, body, f"runs per day, last {len(counts)} days", "chart spark")
