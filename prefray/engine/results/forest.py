"""The forest plot of a run comparison: one row per compared cell × metric, its delta and 95% CI.

A filled marker is a delta whose adjusted p is below `alpha`, a hollow one is not; a row without an
interval (fewer than two paired clusters) shows its point alone; the vertical line is "no change".
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pyarrow as pa


def row_label(row: dict) -> str:
    cell = " / ".join(v for v in (row["benchmark"], row["model"], row["condition"], row["judge"]) if v)
    versus = f" vs {row['versus']}" if row.get("versus") else ""
    return f"{cell}{versus}: {row['metric']}"


def forest_plot(table: pa.Table, path: Path, alpha: float = 0.05) -> Path:
    """Draw `table` (COMPARE_SCHEMA rows) into `path` (format from its suffix), written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = table.to_pylist()
    runs = sorted({r["run_b"] for r in rows})
    colours = {run: f"C{i % 10}" for i, run in enumerate(runs)}
    height = max(2.5, 0.32 * len(rows) + 1.4)
    fig, ax = plt.subplots(figsize=(8, height))
    for y, row in enumerate(reversed(rows)):
        delta, low, high = row["delta"], row["ci_low"], row["ci_high"]
        if delta is None or math.isnan(delta):
            continue
        colour = colours[row["run_b"]]
        if low is not None and high is not None and not (math.isnan(low) or math.isnan(high)):
            ax.plot([low, high], [y, y], color=colour, linewidth=1.5)
        significant = row["p_adjusted"] is not None and row["p_adjusted"] < alpha
        ax.plot([delta], [y], marker="o", color=colour, markerfacecolor=colour if significant else "white",
                markersize=6)
    ax.axvline(0.0, color="grey", linestyle="--", linewidth=1)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([row_label(r) for r in reversed(rows)], fontsize=8)
    ax.set_xlabel("delta (run − first run), 95% cluster-bootstrap CI")
    title = f"filled: adjusted p < {alpha:g}"
    if len(runs) > 1:
        title += "; colour: run"
        for run, colour in colours.items():
            ax.plot([], [], color=colour, label=run)
        ax.legend(fontsize=7, loc="best")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    path = Path(path)
    temp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    try:
        fig.savefig(temp, dpi=120)
        os.replace(temp, path)
    finally:
        plt.close(fig)
        temp.unlink(missing_ok=True)
    return path
