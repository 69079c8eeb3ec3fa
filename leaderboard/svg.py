"""Severity curves (ood-auroc per level) as a self-contained inline SVG; every label is escaped."""

from __future__ import annotations

from html import escape

import numpy as np

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
WIDTH, HEIGHT = 720, 380
LEFT, RIGHT, TOP, BOTTOM = 56, 230, 16, 44


def severity_svg(curves: list[tuple[str, list[float]]], title: str) -> str:
    """One polyline per (label, ood-auroc per level), level 0 (easiest) on the left."""
    values = np.array([v for _, vs in curves for v in vs], dtype="float64")
    values = values[np.isfinite(values)]
    low = float(np.floor(values.min() * 20) / 20) if values.size else 0.5
    high = float(min(1.0, np.ceil(values.max() * 20) / 20)) if values.size else 1.0
    high = high if high > low else low + 0.05
    levels = max((len(vs) for _, vs in curves), default=2)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(level: int) -> float:
        return LEFT + plot_w * level / max(levels - 1, 1)

    def y(value: float) -> float:
        return TOP + plot_h * (high - value) / (high - low)

    parts = [f'<svg class="severity" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
             f'width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{escape(title)}">',
             f"<title>{escape(title)}</title>",
             f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>']
    for tick in np.linspace(low, high, 5):
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#eee"/>'
                     f'<text x="{LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end" font-size="11">{tick:.2f}</text>')
    for level in range(levels):
        parts.append(f'<text x="{x(level):.1f}" y="{TOP + plot_h + 16}" text-anchor="middle" font-size="11">{level}</text>')
    parts.append(f'<text x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 6}" text-anchor="middle" font-size="12">'
                 "severity level (0 = easiest)</text>"
                 f'<text transform="translate(14 {TOP + plot_h / 2:.1f}) rotate(-90)" text-anchor="middle" font-size="12">ood-auroc</text>')
    for i, (label, vs) in enumerate(curves):
        color = PALETTE[i % len(PALETTE)]
        points = " ".join(f"{x(level):.1f},{y(v):.1f}" for level, v in enumerate(vs) if np.isfinite(v))
        parts.append(f'<polyline class="curve" fill="none" stroke="{color}" stroke-width="2" points="{points}">'
                     f"<title>{escape(label)}</title></polyline>")
        legend_y = TOP + 10 + 16 * i
        parts.append(f'<line x1="{WIDTH - RIGHT + 12}" x2="{WIDTH - RIGHT + 30}" y1="{legend_y - 4}" y2="{legend_y - 4}" '
                     f'stroke="{color}" stroke-width="3"/><text x="{WIDTH - RIGHT + 36}" y="{legend_y}" font-size="11">'
                     f"{escape(_short(label))}</text>")
    parts.append("</svg>")
    return "".join(parts)


def _short(label: str, limit: int = 30) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "\u2026"
