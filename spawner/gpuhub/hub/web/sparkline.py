"""Inline SVG sparklines of GPU utilization for the fleet page (numbers only: nothing to
escape, and small: at most ~30 points, in whole pixels)."""

from __future__ import annotations

from collections.abc import Sequence

SPARK_WIDTH, SPARK_HEIGHT = 120, 24


def sparkline(history: Sequence[tuple[float, float]], end: float, window: float) -> str:
    """Polyline points for utilization (0..1) over the ``window`` seconds before ``end``,
    0 % at the bottom; "" when nothing was sampled in that window."""
    points = [(t, u) for t, u in history if t >= end - window]
    if not points:
        return ""
    step = max(1, -(-len(points) // 30))  # at most ~30 points: whole pixels are enough
    chosen = points[::step]
    if chosen[-1] is not points[-1]:
        chosen.append(points[-1])
    out = []
    for t, u in chosen:
        x = SPARK_WIDTH * (1 - (end - t) / window)
        y = SPARK_HEIGHT - 1 - (SPARK_HEIGHT - 2) * min(1.0, max(0.0, u))
        out.append(f"{x:.0f},{y:.0f}")
    return " ".join(out)
