"""Report plots as PNG bytes (matplotlib, Agg; no pyplot state, so safe in threads and workers).

Each function takes plain data (already computed by :mod:`reports.contamination`) and returns
PNG bytes; the report inlines them as base64 ``data:`` URIs and also writes them as files.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

_COLORS = ["#3366cc", "#dc6b19", "#2e8b57", "#8e44ad", "#c0392b", "#16a085", "#7f8c8d"]


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _png(fig) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def _grid(n: int) -> tuple[int, int]:
    cols = min(n, 3)
    return (n + cols - 1) // cols, cols


def _panels(names: list[str]):
    """A figure with one axes per name (spare axes switched off).

    Returns (figure, [(index, ax, name)], first axes) — the first axes carries the "no matches"
    note when ``names`` is empty."""
    rows, cols = _grid(max(len(names), 1))
    fig = _figure(4.2 * cols, 2.8 * rows)
    axes = fig.subplots(rows, cols, squeeze=False)
    panels = []
    for k, ax in enumerate(axes.flat):
        if k >= len(names):
            ax.set_axis_off()
        else:
            panels.append((k, ax, names[k]))
    return fig, panels, axes.flat[0]


def score_histograms(scores: dict[str, Sequence[float]], thresholds: dict[str, float]) -> bytes:
    """One histogram per detector of its best score per (sample, item) pair, threshold drawn."""
    dets = sorted(scores)
    fig, panels, first = _panels(dets)
    for k, ax, det in panels:
        vals = list(scores[det])
        ax.hist(vals, bins=30, color=_COLORS[k % len(_COLORS)], alpha=0.85)
        thr = thresholds.get(det)
        if thr is not None:
            ax.axvline(
                thr, color="black", linestyle="--", linewidth=1.2, label=f"threshold {thr:g}"
            )
            ax.legend(fontsize=8, loc="upper center")
        ax.set_title(f"{det} (n={len(vals)})", fontsize=10)
        ax.set_xlabel("score", fontsize=8)
        ax.set_ylabel("pairs", fontsize=8)
        ax.tick_params(labelsize=8)
    if not dets:
        first.text(0.5, 0.5, "no matches recorded", ha="center", va="center")
    return _png(fig)


def sensitivity_curves(
    curves: dict[str, Sequence[tuple[float, int]]], thresholds: dict[str, float]
) -> bytes:
    """Samples flagged vs threshold, one panel per detector (each has its own score scale)."""
    from matplotlib.ticker import MaxNLocator

    dets = sorted(curves)
    fig, panels, first = _panels(dets)
    for k, ax, det in panels:
        xs = [p[0] for p in curves[det]]
        ys = [p[1] for p in curves[det]]
        ax.step(xs, ys, where="post", color=_COLORS[k % len(_COLORS)], linewidth=1.6)
        thr = thresholds.get(det)
        if thr is not None:
            ax.axvline(
                thr, color="black", linestyle="--", linewidth=1.2, label=f"threshold {thr:g}"
            )
            ax.legend(fontsize=8)
        ax.set_title(det, fontsize=10)
        ax.set_xlabel("threshold", fontsize=8)
        ax.set_ylabel("rows flagged", fontsize=8)
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize=8)
    if not dets:
        first.text(0.5, 0.5, "no matches recorded", ha="center", va="center")
    return _png(fig)


def upset(combos: Sequence[tuple[Sequence[str], int]], detectors: Sequence[str]) -> bytes:
    """UpSet-style chart: bars = pairs flagged by exactly this detector combination, dots below
    mark the detectors in the combination. (Drawn by hand: the ``upsetplot`` package is not a
    dependency and the chart is two matplotlib axes.)"""
    dets = list(detectors)
    n = max(len(combos), 1)
    fig = _figure(max(4.0, 0.7 * n + 2.0), 2.6 + 0.35 * max(len(dets), 1))
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[3, max(len(dets), 1) * 0.6])
    xs = list(range(len(combos)))
    counts = [c for _, c in combos]
    bars = top.bar(xs, counts, color="#3366cc", width=0.6)
    top.bar_label(bars, fontsize=8)
    from matplotlib.ticker import MaxNLocator

    top.yaxis.set_major_locator(MaxNLocator(integer=True))
    top.set_ylabel("flagged pairs", fontsize=8)
    top.tick_params(labelsize=8)
    top.spines[["top", "right"]].set_visible(False)
    for x, (combo, _) in enumerate(combos):
        ys_on = [dets.index(d) for d in combo if d in dets]
        for y in range(len(dets)):
            bottom.scatter(x, y, s=60, color="#222" if y in ys_on else "#ddd", zorder=3)
        if len(ys_on) > 1:
            bottom.plot([x, x], [min(ys_on), max(ys_on)], color="#222", linewidth=2, zorder=2)
    bottom.set_yticks(range(len(dets)), dets, fontsize=8)
    bottom.set_ylim(-0.5, len(dets) - 0.5)
    bottom.set_xticks([])
    bottom.spines[["top", "right", "bottom"]].set_visible(False)
    if not combos:
        top.text(0.5, 0.5, "no flagged pairs", ha="center", va="center", transform=top.transAxes)
    return _png(fig)
