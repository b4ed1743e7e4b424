"""The forest plot of a run comparison: a panel per benchmark × metric (its own x
scale), a row per compared cell: its delta and 95% CI.

A filled marker is a delta whose adjusted p is below `alpha`, a hollow one is not; a row without an
interval (fewer than two paired clusters) shows its point alone; the vertical line is "no change".
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pyarrow as pa


def forest_plot(table: pa.Table, path: Path, alpha: float = 0.05) -> Path:
    """Draw `table` (COMPARE_SCHEMA rows) into `path` (format from its suffix), written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = table.to_pylist()
    runs = sorted({r["run_b"] for r in rows})
    colours = {run: f"C{i % 10}" for i, run in enumerate(runs)}
    panels: dict[tuple[str, str], list[dict]] = {}
    for row in rows:   # one panel (and x scale) per benchmark × metric: rates, scores and counts differ
        panels.setdefault((row["benchmark"], row["metric"]), []).append(row)
    heights = [len(group) + 1.2 for group in panels.values()] or [1.0]
    fig, axes = plt.subplots(len(heights), 1, figsize=(8, max(2.5, 0.3 * sum(heights) + 0.8)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, ((benchmark, metric), group) in zip(axes[:, 0], panels.items()):
        _panel(ax, group, colours, alpha)
        ax.set_title(f"{benchmark}: {metric}", fontsize=8, loc="left")
    axes[-1, 0].set_xlabel("delta (run − first run), 95% cluster-bootstrap CI", fontsize=8)
    title = f"filled: adjusted p < {alpha:g}"
    if len(runs) > 1:
        title += "; colour: run"
        for run, colour in colours.items():
            axes[0, 0].plot([], [], color=colour, label=run)
        axes[0, 0].legend(fontsize=7, loc="best")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.985))
    path = Path(path)
    temp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    try:
        fig.savefig(temp, dpi=120)
        os.replace(temp, path)
    finally:
        plt.close(fig)
        temp.unlink(missing_ok=True)
    return path


def _panel(ax, rows: list[dict], colours: dict[str, str], alpha: float) -> None:
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
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([_cell_label(r) for r in reversed(rows)], fontsize=7)
    ax.tick_params(axis="x", labelsize=7)


def _cell_label(row: dict) -> str:
    cell = " / ".join(v for v in (row["model"], row["condition"], row["judge"]) if v)
    return cell + (f" vs {row['versus']}" if row.get("versus") else "")
