"""Figures from the long-format metrics: one PNG per benchmark and metric family.

One figure per headline metric (models on the x axis) and one per breakdown dimension (e.g.
`MR[category=…]`: the categories on the x axis). Bars are grouped by condition (and judge when several judged the run).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pyarrow as pa

MAX_FIGURES = 60


def _family(metric: str) -> tuple[str, str]:
    match = re.fullmatch(r"([^\[]+)\[(.+)\]", metric)
    return (match.group(1), match.group(2)) if match else (metric, "")


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")


def figure_groups(metrics: pa.Table) -> dict[tuple[str, str], list[dict]]:
    """Rows by figure: (benchmark, metric) for headline values across models, and
    (benchmark, metric[dimension]) for each breakdown dimension (e.g. MR[category])."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in metrics.to_pylist():
        if row["value"] is None or math.isnan(row["value"]):
            continue
        family, part = _family(row["metric"])
        dimension, _, value = part.partition("=")
        if part and not value:
            continue  # a suffix that is no slice (e.g. [vs_base]) is shown in the tables only
        name = f"{family}[{dimension}]" if part else family
        groups.setdefault((row["benchmark"], name), []).append({**row, "slice": value})
    return groups


def draw(rows: list[dict], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    multi_judge = len({r["judge"] for r in rows}) > 1
    x_key = "slice" if rows[0]["slice"] else "model"
    xs = sorted({r[x_key] for r in rows})
    series = sorted({(r["model"] if x_key == "slice" else "", r["condition"], r["judge"] if multi_judge else "")
                     for r in rows})
    width = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(xs) * max(1, len(series)) ** 0.5 + 3), 4))
    for i, (model, condition, judge) in enumerate(series):
        values = {r[x_key]: r["value"] for r in rows
                  if r["condition"] == condition and (not model or r["model"] == model)
                  and (not multi_judge or r["judge"] == judge)}
        label = " / ".join(p for p in (model, condition, judge) if p)
        ax.bar([j + i * width for j in range(len(xs))], [values.get(x, 0.0) for x in xs], width, label=label)
    ax.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(xs))])
    ax.set_xticklabels(xs, rotation=30, ha="right", fontsize=8)
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_plots(run_dir: Path, metrics: pa.Table) -> list[Path]:
    folder = Path(run_dir) / "plots"
    folder.mkdir(exist_ok=True)
    written = []
    for (benchmark, family), rows in sorted(figure_groups(metrics).items())[:MAX_FIGURES]:
        path = folder / f"{_safe(benchmark)}__{_safe(family)}.png"
        draw(rows, f"{benchmark}: {family}", path)
        written.append(path)
    return written
