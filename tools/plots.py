"""Ratio charts for the benchmarks (matplotlib, an optional extra: `pip install matplotlib`)."""

from __future__ import annotations

import math


def ratio_chart(path: str, title: str, groups: list[str], series: dict[str, list[float | None]],
                note: str = "", xlabel: str = "ratio (peer time / ngra-tf time; > 1: ngra-tf is faster)") -> bool:
    """Writes a PNG of grouped horizontal bars, one group per row label, one bar per series.

    Ratios are drawn on a log scale with a line at 1x (above 1: ngra-tf is
    faster). Missing values (None) leave a gap. Returns False, after saying
    why, when matplotlib is not installed.
    """
    try:
        import matplotlib  # noqa: PLC0415  (optional)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        print(f"matplotlib is not installed (pip install matplotlib): {path} not written")
        return False
    names = list(series)
    height = 0.8 / max(len(names), 1)
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(groups) * max(len(names), 1) + 1.6))
    for i, name in enumerate(names):
        values = series[name]
        rows = [g for g, v in enumerate(values) if v and math.isfinite(v)]
        ax.barh([r + i * height for r in rows], [values[r] for r in rows], height, label=name)
        for r in rows:
            ax.text(values[r], r + i * height, f" {values[r]:.2f}x", va="center", fontsize=7)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    finite = [v for values in series.values() for v in values if v and math.isfinite(v)]
    if finite:
        ax.set_xlim(min(0.5, min(finite) / 1.5), max(finite) * 2.5)
    ax.set_yticks([g + height * (len(names) - 1) / 2 for g in range(len(groups))], groups, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    if note:
        fig.text(0.01, 0.01, note, fontsize=7, color="gray")
    fig.tight_layout(rect=(0, 0.03 if note else 0, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")
    return True
