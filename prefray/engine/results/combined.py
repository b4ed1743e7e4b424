"""Intervals of a metric computed from the means of other metrics (a ratio of means, not a mean).

CUPID's F1 is 2 P̄ R̄ / (P̄ + R̄) of mean precision and mean recall: no per-unit value averages to it,
so the mean-of-units interval of `stats` cannot give it one. A benchmark declares such a metric as
`Combined(name, inputs, combine)` in its `combined_metrics`; its interval resamples whole clusters
(as every interval here does), takes each input's mean over the units of the drawn clusters
(Σ sums ÷ Σ units) and applies `combine` to those means, so every draw is the statistic the table
reports. A paired difference (A − B) draws the same clusters for both sides and recomputes
combine(A's means) − combine(B's means).

The inputs' units must lie in the same clusters (CUPID: a precision and a recall unit per counted
instance); where they do not, or an input has no units, the interval is left out (NaN), never
approximated. Fewer than two clusters give the estimate with NaN bounds, as in `stats`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from prefray.engine.benchmark import Benchmark
from prefray.engine.hooks import Combined
from prefray.engine.results.stats import (
    GROUP_KEYS,
    INTERVAL_SCHEMA,
    BootstrapSettings,
    Interval,
    Totals,
    _bootstrap,
    _groups,
)

DEFAULT = BootstrapSettings()


Stacked = tuple[list[Any], np.ndarray, np.ndarray]   # cluster ids, Σ values and units per input × cluster


def stacked(parts: Sequence[Totals | None]) -> Stacked | None:
    """The inputs' cluster totals side by side, clusters in the first input's order; None unless
    every input has units in exactly the same clusters."""
    if not parts or any(p is None or not len(p[0]) for p in parts):
        return None
    ids = list(parts[0][0])
    rows = []
    for part_ids, sums, sizes in parts:
        position = {c: i for i, c in enumerate(part_ids)}
        if set(position) != set(ids):
            return None
        order = np.asarray([position[c] for c in ids])
        rows.append((sums[order], sizes[order]))
    return ids, np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows])


def _value(combine: Callable[..., np.ndarray], sums: np.ndarray, sizes: np.ndarray) -> float:
    return float(combine(*(s.sum() / n.sum() for s, n in zip(sums, sizes))))


def _constant(sums: np.ndarray, sizes: np.ndarray) -> bool:
    """Whether every cluster has the same mean in every input: then every resample gives the same
    means, and the interval is the estimate itself."""
    means = sums / sizes
    return bool(np.allclose(means, means[:, :1]))


def _statistic(combine: Callable[..., np.ndarray], inputs: int, sides: int = 1):
    """The vectorized bootstrap statistic over (Σ, units) of each input (of each side): the combined
    means of side A, minus those of side B when there are two sides."""

    def of_side(arrays, axis):
        means = [np.sum(arrays[2 * j], axis=axis) / np.sum(arrays[2 * j + 1], axis=axis) for j in range(inputs)]
        return combine(*means)

    def statistic(*arrays, axis=-1):
        if sides == 1:
            return of_side(arrays, axis)
        return of_side(arrays[:2 * inputs], axis) - of_side(arrays[2 * inputs:], axis)

    return statistic


def _flat(sums: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, ...]:
    return tuple(a for pair in zip(sums, sizes) for a in pair)


def combined_ci(parts: Sequence[Totals | None], combine: Callable[..., np.ndarray],
                settings: BootstrapSettings = DEFAULT) -> Interval:
    """combine(the inputs' means) and its cluster-bootstrap interval (NaN where the inputs' clusters
    differ or are fewer than two)."""
    aligned = stacked(parts)
    if aligned is None:
        return Interval(math.nan, math.nan, math.nan, 0, 0)
    ids, sums, sizes = aligned
    estimate, units = _value(combine, sums, sizes), int(sizes[0].sum())
    if len(ids) < 2:
        return Interval(estimate, math.nan, math.nan, len(ids), units)
    if _constant(sums, sizes):
        return Interval(estimate, estimate, estimate, len(ids), units)
    low, high = _bootstrap(_flat(sums, sizes), _statistic(combine, len(sums)), settings)
    return Interval(estimate, low, high, len(ids), units)


def combined_delta_ci(a: Sequence[Totals | None], b: Sequence[Totals | None], combine: Callable[..., np.ndarray],
                      settings: BootstrapSettings = DEFAULT) -> Interval:
    """combine(A's means) − combine(B's means) over the clusters both sides have, with a paired
    cluster-bootstrap interval."""
    side_a, side_b = stacked(a), stacked(b)
    if side_a is None or side_b is None:
        return Interval(math.nan, math.nan, math.nan, 0, 0)
    b_pos = {c: i for i, c in enumerate(side_b[0])}
    shared = [(i, b_pos[c]) for i, c in enumerate(side_a[0]) if c in b_pos]
    if not shared:
        return Interval(math.nan, math.nan, math.nan, 0, 0)
    ia, ib = (np.asarray(s) for s in zip(*shared))
    sums_a, sizes_a, sums_b, sizes_b = side_a[1][:, ia], side_a[2][:, ia], side_b[1][:, ib], side_b[2][:, ib]
    estimate = _value(combine, sums_a, sizes_a) - _value(combine, sums_b, sizes_b)
    units = int(sizes_a[0].sum() + sizes_b[0].sum())
    if len(shared) < 2:
        return Interval(estimate, math.nan, math.nan, len(shared), units)
    if _constant(sums_a, sizes_a) and _constant(sums_b, sizes_b):
        return Interval(estimate, estimate, estimate, len(shared), units)
    data = _flat(sums_a, sizes_a) + _flat(sums_b, sizes_b)
    low, high = _bootstrap(data, _statistic(combine, len(sums_a), sides=2), settings)
    return Interval(estimate, low, high, len(shared), units)


def declared(benchmarks: dict[str, Benchmark], name: str) -> list[Combined]:
    """The combined metrics benchmark `name` declares (`Benchmark.combined_metrics`); none when the
    run has no such benchmark."""
    benchmark = benchmarks.get(name)
    return [] if benchmark is None else list(benchmark.combined_metrics)


def combined_intervals(scores: pa.Table, benchmarks: dict[str, Any],
                       settings: BootstrapSettings = DEFAULT) -> pa.Table:
    """Per benchmark × model × condition × judge and declared combined metric (INTERVAL_SCHEMA):
    its value, n (units of its first input), clusters, ci_low, ci_high."""
    cells = [k for k in GROUP_KEYS if k != "metric"]
    groups = _groups(scores, GROUP_KEYS)
    out = []
    for key in sorted({k[:-1] for k in groups}):
        for metric in declared(benchmarks, key[0]):
            interval = combined_ci([groups.get((*key, m)) for m in metric.inputs], metric.combine, settings)
            if interval.units:
                out.append({**dict(zip(cells, key)), "metric": metric.name, "value": interval.estimate,
                            "n": interval.units, "clusters": interval.clusters, "ci_low": interval.low,
                            "ci_high": interval.high})
    return pa.Table.from_pylist(out, schema=INTERVAL_SCHEMA)


def combined_deltas(scores: pa.Table, metrics: Sequence[Combined], column: str, a: str, b: str,
                    settings: BootstrapSettings = DEFAULT) -> list[dict[str, Any]]:
    """A − B along `column` of every combined metric, in the shape of stats.paired_deltas' rows."""
    others = [k for k in GROUP_KEYS if k not in (column, "metric")]
    groups = _groups(scores, [*others, "metric", column])
    out = []
    for key in sorted({k[:-2] for k in groups}):
        for metric in metrics:
            side_a = [groups.get((*key, m, a)) for m in metric.inputs]
            side_b = [groups.get((*key, m, b)) for m in metric.inputs]
            if any(p is None for p in side_a + side_b):
                continue
            interval = combined_delta_ci(side_a, side_b, metric.combine, settings)
            out.append({**dict(zip(others, key)), "metric": metric.name, "a": a, "b": b, "delta": interval.estimate,
                        "clusters": interval.clusters, "ci_low": interval.low, "ci_high": interval.high})
    return out
