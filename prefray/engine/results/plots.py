"""Figures from the long-format metrics, as PNG and SVG under RUN_DIR/plots/.

- One bar figure per headline metric (models on the x axis) and, on request (`run.figures=all`), one
  per breakdown dimension (e.g. `MR[category=…]`: the categories on the x axis) and per diagnostic
  metric (failures, truncated or unparsed answers); bars grouped by condition (and judge when several
  judged the run).
- Scatter pairs a benchmark declares (`figures = [ScatterSpec(x="MR", y="AAR", diagonal=True)]` on
  the benchmark object): one point per model × condition (× judge), e.g. the appropriate-application
  rate against the misapplication rate, with the y = x line (no selectivity) and the ideal point.
- Metric groups a benchmark declares (`MetricsSpec(("precision", "recall", "F1"), "instance_type")`):
  the metrics side by side per slice of one dimension ("all" = the headline value), one figure per
  model × condition (× judge).
- Cells a benchmark declares (`CellsSpec(("MR", "AAR"), cells=((model, condition), …))`): the
  metrics side by side for named model × condition cells, e.g. a model's reasoning and non-reasoning
  variants, one figure per judge, drawn only when the run has every cell.
- `percent=True` on a spec draws rates on a 0–100 scale, as a paper that plots percentages does.
- A benchmark's `condition_order` (e.g. PRISK's factorial: base, profile, retrieval,
  profile_retrieval) orders the condition bars; conditions it does not list follow by name.

Every figure shows n, draws 95% CI whiskers where the metrics carry `ci_low`/`ci_high`, hatches
(bars) or hollows (points) incomplete cells, writes "no data" where a value is missing (never a
zero bar), and uses one value scale per metric family (`MR` and all `MR[…]` breakdowns share it).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import pyarrow as pa

from prefray.engine.hooks import CellsSpec, MetricsSpec, ScatterSpec
from prefray.engine.rundir import RunDir

MAX_FIGURES = 60
PARALLEL_FROM = 12  # figures per drawing process, at least
FORMATS = ("png", "svg")
# zlib's fastest level: the same pixels, encoded faster; a run's figure files a few percent larger
SAVE_OPTIONS = {"png": {"pil_kwargs": {"compress_level": 1}}}
NOTE = "n = scored units · whiskers: 95% CI · hatched / hollow: incomplete cell · 'no data': no value"


def as_percent(row: dict) -> dict:
    """A metric row with its value and CI bounds ×100."""
    return {**row, **{k: row[k] * 100 for k in ("value", "ci_low", "ci_high") if _number(row.get(k)) is not None}}


def figure_specs(benchmarks: dict[str, Any]) -> dict[str, list[Any]]:
    """The figures each benchmark declares (`Benchmark.figures`)."""
    return {name: list(b.figures) for name, b in benchmarks.items()}


def condition_orders(benchmarks: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """Each benchmark's declared order of conditions in its figures (`Benchmark.condition_order`)."""
    return {name: tuple(b.condition_order) for name, b in benchmarks.items()}


def ranked(values: Any, order: Sequence[str] = ()) -> list:
    """`values` sorted by their place in `order`, the others after it by name."""
    place = {v: i for i, v in enumerate(order)}
    return sorted(values, key=lambda v: (place.get(v, len(place)), v))


def _family(metric: str) -> tuple[str, str]:
    match = re.fullmatch(r"([^\[]+)\[(.+)\]", metric)
    return (match.group(1), match.group(2)) if match else (metric, "")


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")


def _number(value: Any) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


# What a run's bookkeeping measures, not a model's behaviour (failed or truncated answers, answers
# that could not be parsed, units left out of a rate by cause, e.g. BenchPreS's MR_excluded_cut_reply,
# contexts no rule mapped): in the tables always, drawn only with every figure (run.figures=all),
# never in a launch's found line (results/report.py).
DIAGNOSTIC = re.compile(r"(failures_|parse_failures_|truncated_share$|unmapped_|\w+_excluded_)")


def figure_groups(metrics: pa.Table, breakdowns: bool = True) -> dict[tuple[str, str], list[dict]]:
    """Rows by figure: (benchmark, metric) for headline values across models, and (with
    `breakdowns`) (benchmark, metric[dimension]) for each breakdown dimension (e.g. MR[category])
    and the DIAGNOSTIC metrics."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in metrics.to_pylist():
        if _number(row["value"]) is None:
            continue
        family, part = _family(row["metric"])
        if not breakdowns and (part or DIAGNOSTIC.match(family)):
            continue
        dimension, _, value = part.partition("=")
        if part and not value:
            continue  # a suffix that is no slice (e.g. [vs_base]) is shown in the tables only
        name = f"{family}[{dimension}]" if part else family
        groups.setdefault((row["benchmark"], name), []).append({**row, "slice": value})
    return groups


def family_scales(metrics: pa.Table) -> dict[tuple[str, str], tuple[float, float]]:
    """(benchmark, family) → y limits covering every value and CI bound of the family; rates that
    stay in [0, 1] get [0, 1]."""
    spans: dict[tuple[str, str], list[float]] = {}
    for row in metrics.to_pylist():
        part = _family(row["metric"])[1]
        if part and "=" not in part:
            continue  # not a slice (e.g. [vs_base], a relative change): another quantity, not drawn
        values = [v for v in (_number(row["value"]), _number(row.get("ci_low")), _number(row.get("ci_high")))
                  if v is not None]
        if values:
            spans.setdefault((row["benchmark"], _family(row["metric"])[0]), []).extend(values)
    scales = {}
    for key, values in spans.items():
        low, high = min(0.0, min(values)), max(0.0, max(values))  # 0 is always on the scale
        if low >= 0 and high <= 1:
            scales[key] = (0.0, 1.08)
        else:
            pad = 0.08 * ((high - low) or 1.0)
            scales[key] = (low - (pad if low < 0 else 0.0), high + pad)
    return scales


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"  # text stays text in SVG: searchable, smaller

    return plt


def _errors(row: dict) -> tuple[float, float] | None:
    value, low, high = _number(row["value"]), _number(row.get("ci_low")), _number(row.get("ci_high"))
    if value is None or low is None or high is None:
        return None
    return max(0.0, value - low), max(0.0, high - value)


def _save(fig, path: Path, margins: dict[str, float] | None = None) -> list[Path]:
    """Write `fig` in every format; `margins` (subplots_adjust fractions) place the axes, else
    matplotlib's tight layout measures every text first (the slow part of a figure)."""
    fig.text(0.01, 0.01, NOTE, fontsize=6, color="#555")
    if margins:
        fig.subplots_adjust(**margins)
    else:
        fig.tight_layout(rect=(0, 0.03, 1, 1))
    written = []
    for fmt in FORMATS:
        target = path.with_name(f"{path.name}.{fmt}")
        fig.savefig(target, dpi=110, **SAVE_OPTIONS.get(fmt, {}))
        written.append(target)
    _pyplot().close(fig)
    return written


def draw(rows: list[dict], title: str, path: Path, scale: tuple[float, float] | None = None,
         conditions: Sequence[str] = (), slices: Sequence[str] = (), models: Sequence[str] = ()) -> list[Path]:
    """A grouped bar figure; `path` without suffix gets one file per format. Bars of a group follow
    `models`, then `conditions` (each then by name); groups follow `slices` (then by name)."""
    plt = _pyplot()
    from matplotlib.patches import Patch

    multi_judge = len({r["judge"] for r in rows}) > 1
    x_key = "slice" if rows[0]["slice"] else "model"
    xs = ranked({r[x_key] for r in rows}, slices)
    rank = {c: i for i, c in enumerate(ranked({r["condition"] for r in rows}, conditions))}
    model_rank = {m: i for i, m in enumerate(ranked({r["model"] for r in rows}, models))}
    series = sorted({(r["model"] if x_key == "slice" else "", r["condition"], r["judge"] if multi_judge else "")
                     for r in rows}, key=lambda s: (model_rank.get(s[0], -1), rank[s[1]], s[2]))
    width = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(xs) * max(1, len(series)) ** 0.5 + 3), 4.2))
    low, high = scale or (0.0, 1.08)
    ax.set_ylim(low, high)
    for i, (model, condition, judge) in enumerate(series):
        found = {r[x_key]: r for r in rows if r["condition"] == condition and (not model or r["model"] == model)
                 and (not multi_judge or r["judge"] == judge)}
        for j, x in enumerate(xs):
            if x not in found:
                ax.text(j + i * width, low + 0.02 * (high - low), "no data", rotation=90, ha="center", va="bottom",
                        fontsize=6, color="#777")
        bars = [(j + i * width, found[x]) for j, x in enumerate(xs) if x in found]
        if bars:
            _series_bars(ax, bars, width, f"C{i % 10}", (low, high))
    ax.axhline(0, color="#999", linewidth=0.6)
    ax.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(xs))])
    ax.set_xticklabels(xs, rotation=30, ha="right", fontsize=8)
    ax.set_title(title, y=1.0)  # placed, not searched for: nothing stands above the axes
    handles = [Patch(facecolor=f"C{i % 10}", label=" / ".join(p for p in s if p))  # the series' colour, never a hatch
               for i, s in enumerate(series) if s != ("", "", "")]
    labels = [handle.get_label() for handle in handles]
    columns = legend_columns(len(labels), fig.get_figheight())
    if labels:  # beside the axes: covers no bar, no placement search
        ax.legend(handles=handles, fontsize=LEGEND_FONT, loc="upper left", bbox_to_anchor=(1.0, 1.0), ncol=columns)
    return _save(fig, path, bar_margins(fig.get_size_inches(), xs, labels, columns))


def _series_bars(ax, bars: list[tuple[float, dict]], width: float, color: str, scale: tuple[float, float]) -> None:
    """One series' bars at their positions, in one call per kind of artist (bars, whiskers, zero
    marks): hatched and black-edged where the cell is incomplete, whiskers where it has a CI, a
    thick line on the axis for a value of 0 (a value, unlike "no data"), and each bar's n above it."""
    low, high = scale
    positions = [pos for pos, _ in bars]
    incomplete = [row.get("complete") is False for _, row in bars]
    drawn = ax.bar(positions, [row["value"] for _, row in bars], width, color=color,
                   edgecolor=["black" if cut else color for cut in incomplete])
    for patch, cut in zip(drawn, incomplete):
        if cut:
            patch.set_hatch("//")
    errors = [_errors(row) for _, row in bars]
    whiskers = [(pos, row["value"], error) for (pos, row), error in zip(bars, errors) if error]
    if whiskers:
        ax.errorbar([w[0] for w in whiskers], [w[1] for w in whiskers], fmt="none", ecolor="#333", capsize=2,
                    yerr=[[w[2][0] for w in whiskers], [w[2][1] for w in whiskers]])
    zeros = [pos for pos, row in bars if row["value"] == 0]
    if zeros:
        ax.hlines([0.0] * len(zeros), [z - width / 2 for z in zeros], [z + width / 2 for z in zeros], colors=color,
                  linewidth=3, capstyle="butt")
    for (pos, row), error in zip(bars, errors):
        top = row["value"] + (error[1] if error else 0.0)
        ax.text(pos, min(max(top, 0.0) + 0.01 * (high - low), high), f"n={row.get('n', '?')}", rotation=90,
                ha="center", va="bottom", fontsize=6)


# Bar figures are laid out from their labels' lengths instead of measured text (tight_layout measures
# every text of a figure and costs about a third of its drawing time); the estimates are generous.
TICK_FONT, LEGEND_FONT = 8, 7
CHAR_WIDTH_IN = 0.62 / 72        # a DejaVu Sans character is at most ~0.62 em wide; × points → inches
LEGEND_ROW_IN = 1.45 * LEGEND_FONT / 72


def legend_columns(entries: int, height_in: float) -> int:
    """Columns that keep a legend of `entries` within the figure's height."""
    fits = max(1, int((height_in - 0.4) / LEGEND_ROW_IN))
    return max(1, -(-entries // fits))


def bar_margins(size_in: Sequence[float], ticks: Sequence[Any], labels: Sequence[str],
                columns: int) -> dict[str, float]:
    """subplots_adjust fractions for a bar figure: room below for the x tick labels (rotated 30°,
    right-aligned on their tick), above for the title, right for a legend of `labels` in `columns`."""
    width, height = size_in
    tick_len = [len(str(t)) * TICK_FONT * CHAR_WIDTH_IN for t in ticks] or [0.0]
    below = 0.5 * max(tick_len) + 0.12 + 0.35                     # sin 30° × the longest label, its height, the note
    left = max(0.65, 0.87 * tick_len[0] - 0.25)                   # cos 30° × the first label, minus its tick's inset
    legend = 0.0
    if labels:
        per_column = max(len(label) for label in labels) * LEGEND_FONT * CHAR_WIDTH_IN + 0.45   # text + handle
        legend = columns * per_column + 0.15
    return {"left": min(left / width, 0.4), "right": max(1 - (legend + 0.15) / width, 0.45),
            "bottom": min(below / height, 0.5), "top": 1 - 0.4 / height}


def scatter_points(metrics: pa.Table, benchmark: str, spec: ScatterSpec) -> list[dict]:
    """One point per model × condition × judge that has both metrics (missing pairs are left out
    and listed in the figure as 'no data')."""
    cells: dict[tuple, dict[str, dict]] = {}
    for row in metrics.to_pylist():
        if row["benchmark"] == benchmark and row["metric"] in (spec.x, spec.y):
            cells.setdefault((row["model"], row["condition"], row["judge"]), {})[row["metric"]] = row
    points = []
    for (model, condition, judge), pair in sorted(cells.items()):
        x, y = pair.get(spec.x), pair.get(spec.y)
        usable = x is not None and y is not None and _number(x["value"]) is not None and _number(y["value"]) is not None
        points.append({"model": model, "condition": condition, "judge": judge, "x": x, "y": y, "usable": usable})
    return points


def draw_scatter(points: list[dict], spec: ScatterSpec, title: str, path: Path,
                 scales: tuple[tuple[float, float], tuple[float, float]]) -> list[Path]:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 5.2))
    models = sorted({p["model"] for p in points})
    conditions = sorted({p["condition"] for p in points})
    markers = "osD^v<>PX*"
    multi_judge = len({p["judge"] for p in points}) > 1
    missing = []
    for p in points:
        name = " / ".join(s for s in (p["model"], p["condition"], p["judge"] if multi_judge else "") if s)
        if not p["usable"]:
            missing.append(name)
            continue
        x, y = p["x"], p["y"]
        incomplete = x.get("complete") is False or y.get("complete") is False
        color = f"C{models.index(p['model']) % 10}"
        xerr, yerr = _errors(x), _errors(y)
        ax.errorbar(x["value"], y["value"], xerr=[[xerr[0]], [xerr[1]]] if xerr else None,
                    yerr=[[yerr[0]], [yerr[1]]] if yerr else None, fmt=markers[conditions.index(p["condition"]) % 10],
                    color=color, mfc="none" if incomplete else color, capsize=2, markersize=7)
        ax.annotate(f"{name} (n={x.get('n', '?')}/{y.get('n', '?')})", (x["value"], y["value"]), fontsize=6,
                    xytext=(4, 4), textcoords="offset points")
    for (low, high), set_limits in zip(scales, (ax.set_xlim, ax.set_ylim)):
        set_limits(low - 0.03 * (high - low), high)  # points on 0 stay visible
    if spec.diagonal:
        top = min(scales[0][1], scales[1][1])
        ax.plot([0, top], [0, top], linestyle="--", color="#888", linewidth=0.8, label="y = x")
        ax.text(top, top, " y = x", fontsize=6, color="#777", ha="right", va="bottom")
    ideal = tuple(v * 100 for v in spec.ideal) if spec.percent and spec.ideal else spec.ideal
    if ideal is not None:
        ax.plot(*ideal, marker="*", color="gold", markeredgecolor="black", markersize=12, linestyle="none")
        ax.annotate("ideal", ideal, fontsize=6, xytext=(6, -8), textcoords="offset points")
    ax.set_xlabel(f"{spec.x} (%)" if spec.percent else spec.x)
    ax.set_ylabel(f"{spec.y} (%)" if spec.percent else spec.y)
    ax.set_title(title)
    if missing:
        ax.text(0.99, 0.01, "no data: " + ", ".join(missing), transform=ax.transAxes, ha="right", va="bottom",
                fontsize=6, color="#777")
    if not any(p["usable"] for p in points):
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", fontsize=12, color="#777")
    return _save(fig, path)


def metrics_rows(metrics: pa.Table, benchmark: str, spec: MetricsSpec) -> dict[tuple[str, str, str], list[dict]]:
    """(model, condition, judge) → bar rows of a MetricsSpec figure: one per metric × slice that
    the cell has ("all" for the headline value), the metric as the bar's series."""
    wanted = {name: "all" for name in spec.metrics}
    cells: dict[tuple[str, str, str], list[dict]] = {}
    for row in metrics.to_pylist():
        family, part = _family(row["metric"])
        dimension, _, value = part.partition("=")
        if row["benchmark"] != benchmark or family not in wanted or (part and dimension != spec.dimension):
            continue
        if _number(row["value"]) is None:
            continue
        cells.setdefault((row["model"], row["condition"], row["judge"]), []).append(
            {**row, "model": family, "condition": "", "judge": "", "slice": value or "all"})
    return cells


Figure = tuple[Callable[..., list[Path]], tuple, dict]  # a drawing function and its arguments


def metrics_figures(cells: dict[tuple[str, str, str], list[dict]], benchmark: str, spec: MetricsSpec, folder: Path,
                    scales: dict[tuple[str, str], tuple[float, float]]) -> list[Figure]:
    spans = [scales.get((benchmark, name), (0.0, 1.08)) for name in spec.metrics]
    scale = (min(low for low, _ in spans), max(high for _, high in spans))  # one scale for the compared metrics
    slices = ("all", *ranked({r["slice"] for rows in cells.values() for r in rows} - {"all"}, spec.slices))
    figures: list[Figure] = []
    for (model, condition, judge), rows in sorted(cells.items()):
        cell = " / ".join(p for p in (model, condition, judge) if p)
        title = f"{spec.title or benchmark + ': ' + ', '.join(spec.metrics)} by {spec.dimension} — {cell}"
        name = f"{_safe(benchmark)}__{_safe('_'.join(spec.metrics))}_by_{_safe(spec.dimension)}__{_safe(cell)}"
        figures.append((draw, (rows, title, folder / name, scale), {"slices": slices, "models": spec.metrics}))
    return figures


def cells_figures(metrics: pa.Table, benchmark: str, spec: CellsSpec, folder: Path,
                  scales: dict[tuple[str, str], tuple[float, float]]) -> list[Figure]:
    wanted = {cell: f"{cell[0]} / {cell[1]}" for cell in spec.cells}
    by_judge: dict[str, dict[tuple[str, str], dict]] = {}
    for row in metrics.to_pylist():
        cell = (row["model"], row["condition"])
        if row["benchmark"] == benchmark and cell in wanted and row["metric"] in spec.metrics \
                and _number(row["value"]) is not None:
            by_judge.setdefault(row["judge"], {})[(*cell, row["metric"])] = row
    spans = [scales.get((benchmark, _family(m)[0]), (0.0, 1.08)) for m in spec.metrics]
    scale = (min(low for low, _ in spans), max(high for _, high in spans))
    if spec.percent:
        scale = (scale[0] * 100, scale[1] * 100)
    figures: list[Figure] = []
    for judge, found in sorted(by_judge.items()):
        if any((*cell, m) not in found for cell in spec.cells for m in spec.metrics):
            continue  # the run lacks a cell this comparison needs
        rows = [{**(as_percent(found[(*cell, m)]) if spec.percent else found[(*cell, m)]), "slice": m,
                 "model": wanted[cell], "condition": "", "judge": ""} for cell in spec.cells for m in spec.metrics]
        title = f"{spec.title}{' (%)' if spec.percent else ''}{' — judge ' + judge if judge else ''}"
        name = f"{_safe(benchmark)}__{_safe(spec.name)}{'__' + _safe(judge) if judge else ''}"
        figures.append((draw, (rows, title, folder / name, scale),
                        {"slices": spec.metrics, "models": tuple(wanted.values())}))
    return figures


def run_figures(metrics: pa.Table, folder: Path, specs: dict[str, Sequence[Any]] | None = None,
                orders: dict[str, Sequence[str]] | None = None, breakdowns: bool = True) -> list[Figure]:
    """Every figure of the run (the breakdown bars only with `breakdowns`), in the order they are
    written, not yet drawn."""
    scales = family_scales(metrics)
    figures: list[Figure] = []
    for benchmark, benchmark_specs in sorted((specs or {}).items()):
        for spec in benchmark_specs:
            if isinstance(spec, MetricsSpec):
                figures += metrics_figures(metrics_rows(metrics, benchmark, spec), benchmark, spec, folder, scales)
                continue
            if isinstance(spec, CellsSpec):
                figures += cells_figures(metrics, benchmark, spec, folder, scales)
                continue
            points = scatter_points(metrics, benchmark, spec)
            if not points:
                continue
            axes = (scales.get((benchmark, _family(spec.x)[0]), (0.0, 1.08)),
                    scales.get((benchmark, _family(spec.y)[0]), (0.0, 1.08)))
            if spec.percent:
                points = [{**p, "x": p["x"] and as_percent(p["x"]), "y": p["y"] and as_percent(p["y"])}
                          for p in points]
                axes = tuple((low * 100, high * 100) for low, high in axes)
            title = spec.title or f"{benchmark}: {spec.y} against {spec.x}"
            name = f"{_safe(benchmark)}__{_safe(spec.y)}_vs_{_safe(spec.x)}"
            figures.append((draw_scatter, (points, spec, title, folder / name, axes), {}))
    for (benchmark, family), rows in sorted(figure_groups(metrics, breakdowns).items())[:MAX_FIGURES]:
        scale = scales.get((benchmark, _family(family)[0]))
        figures.append((draw, (rows, f"{benchmark}: {family}", folder / f"{_safe(benchmark)}__{_safe(family)}", scale),
                        {"conditions": (orders or {}).get(benchmark, ())}))
    return figures


def _draw_one(figure: Figure) -> list[Path]:
    function, args, kwargs = figure
    return function(*args, **kwargs)


def draw_all(figures: list[Figure], workers: int = 1, pool: ProcessPoolExecutor | None = None) -> list[Path]:
    """Draw `figures`, in `workers` processes when more than one: in `pool` if given (started
    earlier: `drawing_pool`), else in processes started now (each figure is drawn whole by one
    process, so its files are the same either way); returns the files written, in figure order."""
    if workers <= 1 or len(figures) < 2:
        return _draw_many(figures)
    workers = min(workers, len(figures))
    if pool is None:
        with _spawned(workers) as started:
            return draw_all(figures, workers, started)
    # one figure at a time: a process that starts later (drawing_pool) draws fewer of them
    return [path for paths in pool.map(_draw_one, figures) for path in paths]


def _spawned(processes: int) -> ProcessPoolExecutor:
    # spawned, not forked: the caller may hold Ray's and the event loop's threads
    return ProcessPoolExecutor(processes, mp_context=get_context("spawn"))


def drawing_pool() -> ProcessPoolExecutor:
    """Processes for `write_plots` to draw in (one per core). One starts now and imports matplotlib
    at once, so that its start (~0.6 s of Python and imports) overlaps the work before the figures (a
    run's metrics); the others start when the figures are handed out (a pool of spawned processes
    starts one when none is idle), so that they do not take the cores from the metrics. The caller
    shuts them down."""
    pool = _spawned(os.cpu_count() or 1)
    pool.submit(_import_pyplot)
    return pool


def _import_pyplot() -> None:
    _pyplot()


def import_pyplot_meanwhile() -> threading.Thread:
    """Import matplotlib's pyplot on a thread started now (~0.4 s of imports), for a run that draws
    its figures in its own process once the calls are over: the import overlaps the calls, which wait
    on the providers, instead of delaying the figures (a figure drawn before it ends waits for it
    under Python's import lock)."""
    thread = threading.Thread(target=_import_pyplot, name="prefray-import-pyplot", daemon=True)
    thread.start()
    return thread


def _draw_many(figures: list[Figure]) -> list[Path]:
    return [path for figure in figures for path in _draw_one(figure)]


def plot_workers(figures: int) -> int:
    """Processes to draw `figures` in: one per core when there are enough figures to pay for
    starting them (a process starts Python and imports matplotlib, ~1 s), else the calling process alone."""
    return 1 if figures < PARALLEL_FROM else max(1, min(os.cpu_count() or 1, figures // PARALLEL_FROM))


def write_plots(run_dir: RunDir, metrics: pa.Table, specs: dict[str, Sequence[Any]] | None = None,
                orders: dict[str, Sequence[str]] | None = None, workers: int | None = None,
                breakdowns: bool = True, pool: ProcessPoolExecutor | None = None) -> list[Path]:
    """Every figure of the run in every format (the breakdown bars only with `breakdowns`); returns
    the files written. `orders`: each benchmark's condition order (condition_orders); `workers`:
    processes drawing them (default: plot_workers); `pool`: the other processes, started earlier
    (`drawing_pool`). A figure whose inputs and drawing code are those
    it was last drawn from, with its files still there, is not drawn again (plots/.drawn.json keeps
    each figure's fingerprint)."""
    folder = run_dir.plots
    folder.mkdir(exist_ok=True)
    figures = run_figures(metrics, folder, specs, orders, breakdowns)
    drawn = _read_drawn(folder)
    prints = [figure_print(figure) for figure in figures]
    stale = [figure for figure, mark in zip(figures, prints)
             if drawn.get(_stem(figure)) != mark or not all(p.exists() for p in figure_files(figure))]
    draw_all(stale, plot_workers(len(stale)) if workers is None else workers, pool)
    _write_drawn(folder, {**drawn, **{_stem(f): mark for f, mark in zip(figures, prints)}})
    return [path for figure in figures for path in figure_files(figure)]


DRAWN = ".drawn.json"


def _path(figure: Figure) -> Path:
    """Where a figure is written, without suffix (a bar figure's third argument, a scatter's fourth)."""
    return figure[1][2] if figure[0] is draw else figure[1][3]


def _stem(figure: Figure) -> str:
    return _path(figure).name


def figure_files(figure: Figure) -> list[Path]:
    path = _path(figure)
    return [path.with_name(f"{path.name}.{fmt}") for fmt in FORMATS]


@functools.cache
def _drawing_code() -> str:
    """This module's source and matplotlib's version: a change to either redraws every figure."""
    import matplotlib

    return hashlib.sha1(Path(__file__).read_bytes() + matplotlib.__version__.encode()).hexdigest()


def figure_print(figure: Figure) -> str:
    """A fingerprint of everything a figure is drawn from."""
    function, args, kwargs = figure
    data = json.dumps([function.__name__, [str(a) if isinstance(a, Path) else a for a in args], kwargs, FORMATS,
                       _drawing_code()], sort_keys=True, default=repr)
    return hashlib.sha1(data.encode()).hexdigest()


def _read_drawn(folder: Path) -> dict[str, str]:
    try:
        return json.loads((folder / DRAWN).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _write_drawn(folder: Path, drawn: dict[str, str]) -> None:
    temp = folder / f".{DRAWN}.tmp"
    temp.write_text(json.dumps(drawn, sort_keys=True), encoding="utf-8")
    os.replace(temp, folder / DRAWN)
