"""Small line charts as inline SVG, rendered on the server (no JavaScript, no chart library)."""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

WIDTH = 480
HEIGHT = 110
PAD_LEFT = 44
PAD_BOTTOM = 18
PAD_TOP = 8


def _fmt(value: float) -> str:
    if value >= 100 or value == int(value):
        return f"{value:.0f}"
    return f"{value:.1f}"


def line_chart(title: str, ago_s: Sequence[float], values: Sequence[float], css: str) -> Markup:
    """A line of ``values`` against seconds ago (oldest left), with its max and time span.

    ``css`` names the class that colours the line (see ``static/dashboard.css``).
    """
    label = escape(title)
    if len(values) < 2:
        return Markup(
            f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{label}">'
            f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle" class="chart-empty">'
            f"{label}: collecting samples…</text></svg>"
        )
    span = max(ago_s[0], 1.0)
    top = max(max(values), 1.0)
    plot_w = WIDTH - PAD_LEFT - 4
    plot_h = HEIGHT - PAD_BOTTOM - PAD_TOP
    points = " ".join(
        f"{PAD_LEFT + plot_w * (1 - a / span):.1f},{PAD_TOP + plot_h * (1 - v / top):.1f}"
        for a, v in zip(ago_s, values, strict=True)
    )
    base_y = PAD_TOP + plot_h
    return Markup(
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{label}">'
        f"<title>{label}</title>"
        f'<line class="chart-axis" x1="{PAD_LEFT}" y1="{base_y}" x2="{WIDTH - 4}" y2="{base_y}"/>'
        f'<line class="chart-axis" x1="{PAD_LEFT}" y1="{PAD_TOP}" x2="{PAD_LEFT}" y2="{base_y}"/>'
        f'<text class="chart-label" x="{PAD_LEFT - 4}" y="{PAD_TOP + 8}" text-anchor="end">'
        f"{_fmt(top)}</text>"
        f'<text class="chart-label" x="{PAD_LEFT - 4}" y="{base_y}" text-anchor="end">0</text>'
        f'<text class="chart-label" x="{PAD_LEFT}" y="{HEIGHT - 3}">-{_fmt(span)} s</text>'
        f'<text class="chart-label" x="{WIDTH - 4}" y="{HEIGHT - 3}" text-anchor="end">now</text>'
        f'<polyline class="chart-line {escape(css)}" points="{points}"/>'
        f'<text class="chart-title" x="{WIDTH - 8}" y="{PAD_TOP + 10}" text-anchor="end">'
        f"{label}</text>"
        "</svg>"
    )
