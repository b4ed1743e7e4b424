"""The values a benchmark declares on its `Benchmark` object (engine/benchmark.py), for the engine
to read: paired differences (`Comparison`), metrics computed from other metrics' means
(`Combined`), figures (`ScatterSpec`, `MetricsSpec`, `CellsSpec`) and its paper's tables
(`PaperTable` of `Column`s, with an optional `RowMark`). Plain frozen dataclasses: the modules that
use them (results/stats, results/combined, results/plots, results/paper_tables) hold the code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class Comparison:
    """A − B along one key, e.g. Comparison("condition", "defense", "default") or, across models,
    Comparison("model", "gpt-5.2-reasoning", "gpt-5.2").

    `pair_on` maps a cluster to the coarser unit both sides share, for a B whose units stand for
    several of A's (PRISK: a base answer to a query stands for every persona of that query, so
    personalized − base pairs on the query). Both sides' units are then grouped by it, and each
    resample draws whole groups: the estimate is still Σ values ÷ Σ units per side."""

    column: str
    a: str
    b: str
    pair_on: Callable[[str], str] | None = None


@dataclass(frozen=True)
class Combined:
    """A metric named `name` = combine(mean of each input metric's units), e.g.
    Combined("F1", ("precision", "recall"), f1_of_means). `combine` takes the inputs' means as
    numpy arrays (one value each, or one per resample) and returns an array of the same shape."""

    name: str
    inputs: tuple[str, ...]
    combine: Callable[..., np.ndarray]


@dataclass(frozen=True)
class ScatterSpec:
    """A figure of metric `y` against metric `x`, one point per model × condition (× judge);
    `diagonal` draws the dashed y = x line, `ideal` marks the best possible point."""

    x: str
    y: str
    title: str = ""
    diagonal: bool = False
    ideal: tuple[float, float] | None = None
    percent: bool = False  # rates drawn ×100


@dataclass(frozen=True)
class MetricsSpec:
    """Several metrics side by side per slice of `dimension` (and "all": the headline values), one
    figure per model × condition (× judge), e.g. precision, recall and F1 by instance type."""

    metrics: tuple[str, ...]
    dimension: str
    title: str = ""
    slices: tuple[str, ...] = ()  # the slices' order after "all" (others follow by name)


@dataclass(frozen=True)
class CellsSpec:
    """`metrics` side by side (the x axis) for the model × condition `cells` (the bars, in order),
    one figure per judge that scored every cell; no figure when a cell is missing from the run."""

    metrics: tuple[str, ...]
    cells: tuple[tuple[str, str], ...]
    title: str
    name: str
    percent: bool = False  # rates drawn ×100


@dataclass(frozen=True)
class Column:
    header: str                    # e.g. "P", "w/ Prof"
    metric: str                    # as in metrics.csv, e.g. "precision[instance_type=consistent]"
    condition: str
    benchmark: str | None = None   # None: the table's benchmark
    group: str = ""                # spanning header, e.g. "Consistent"
    best: Literal["max", "min"] | None = None
    versus: str | None = None      # set: the paired difference `condition − versus` from deltas.parquet


@dataclass(frozen=True)
class RowMark:
    """A symbol after the model's name on the rows whose model config holds `value` at `key`."""
    symbol: str                    # e.g. "*"
    key: str                       # a model config key, e.g. "reasoning"
    value: Any                     # e.g. False
    note: str                      # the symbol's meaning, printed under the table


@dataclass(frozen=True)
class PaperTable:
    name: str                      # file stem, e.g. "benchpres_table1"
    title: str                     # e.g. "BenchPreS Table 1"
    caption: str
    benchmark: str
    columns: tuple[Column, ...]
    scale: float = 1.0             # 100 prints rates stored as 0–1 as the paper's percentages
    digits: int = 1
    row_mark: RowMark | None = None


FigureSpec = ScatterSpec | MetricsSpec | CellsSpec
"""A figure a benchmark draws beside the default ones (`Benchmark.figures`)."""
