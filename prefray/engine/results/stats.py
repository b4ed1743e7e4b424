"""Bootstrap confidence intervals over a benchmark's independent unit (its cluster).

A benchmark's units are not independent: the answers about one profile (BenchPreS), one persona
(CUPID) or one persona–query pair (PRISK) share their context. The intervals here resample whole
clusters: a resample draws clusters with replacement and the statistic is the mean over every unit
of the drawn clusters (Σ cluster sums ÷ Σ cluster sizes), i.e. the metric recomputed on a resampled
dataset. The resampling is scipy.stats.bootstrap's (paired over the per-cluster sums and sizes, so a
cluster's sum and size are drawn together), seeded; the default, the percentile interval, is computed
here exactly as scipy computes it (the same bounds to the bit, without importing scipy.stats).

Paired differences (A − B on the same clusters, e.g. defense − default, judge A − judge B) draw the
same clusters for both sides, so what the clusters share cancels out of the interval.

Input is a per-unit scores table (UNIT_SCORE_SCHEMA): one row per scored unit with its cluster.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from prefray.engine.benchmark import UNIT_SCORE_SCHEMA
from prefray.engine.config.schema import BenchmarkSettings
from prefray.engine.hooks import Comparison
from prefray.engine.memo import per_table
from prefray.engine.results.heap import give_back
from prefray.engine.rundir import RunDir

GROUP_KEYS = ("benchmark", "model", "condition", "judge", "metric")


@dataclass(frozen=True)
class BootstrapSettings:
    confidence: float = 0.95
    n_resamples: int = 2000
    seed: int = 0
    method: str = "percentile"  # or "BCa", "basic" (scipy.stats.bootstrap's methods)


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float
    clusters: int
    units: int


def cluster_totals(values: Sequence[float], clusters: Sequence[Any]) -> tuple[list[Any], np.ndarray, np.ndarray]:
    """Per cluster (in first-seen order): its id, the sum of its values and its number of units."""
    try:
        ids, first, inverse = np.unique(np.asarray(clusters, dtype=object), return_index=True, return_inverse=True)
    except TypeError:  # clusters that do not sort together
        return _cluster_totals_by_loop(values, clusters)
    order = np.argsort(first, kind="stable")
    sums = np.bincount(inverse.reshape(-1), weights=np.asarray(values, dtype=float), minlength=len(ids))
    sizes = np.bincount(inverse.reshape(-1), minlength=len(ids)).astype(float)
    return ids[order].tolist(), sums[order], sizes[order]


def _cluster_totals_by_loop(values: Sequence[float],
                            clusters: Sequence[Any]) -> tuple[list[Any], np.ndarray, np.ndarray]:
    index: dict[Any, int] = {}
    sums: list[float] = []
    sizes: list[int] = []
    for value, cluster in zip(values, clusters):
        if cluster not in index:
            index[cluster] = len(sums)
            sums.append(0.0)
            sizes.append(0)
        sums[index[cluster]] += float(value)
        sizes[index[cluster]] += 1
    return list(index), np.asarray(sums, dtype=float), np.asarray(sizes, dtype=float)


def _ratio(sums: np.ndarray, sizes: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.sum(sums, axis=axis) / np.sum(sizes, axis=axis)


def _bootstrap(data: tuple[np.ndarray, ...], statistic, settings: BootstrapSettings) -> tuple[float, float]:
    """The interval of `statistic` over paired resamples of `data`. The percentile interval is
    computed here as scipy.stats.bootstrap computes it (the same resamples from the same seeded
    generator, the same statistic over them, the same quantile arithmetic), so its bounds are
    identical to scipy's to the last bit, without importing scipy.stats (~1 s); the other methods
    go through scipy."""
    if settings.method != "percentile":
        return _scipy_bootstrap(data, statistic, settings)
    picks = _resample_indices(len(data[0]), settings.n_resamples, settings.seed)
    samples = [np.asarray(sample) for sample in data]
    step = max(1, BLOCK_VALUES // len(data[0]))   # resamples at a time: each one's statistic is its own
    distribution = np.concatenate([np.asarray(statistic(*(sample[picks[at:at + step]] for sample in samples), axis=-1),
                                              dtype=float) for at in range(0, len(picks), step)])
    alpha = np.asarray((1 - settings.confidence) / 2, dtype=distribution.dtype)
    return _percentiles(distribution, np.stack((alpha, 1 - alpha)))


def _scipy_bootstrap(data: tuple[np.ndarray, ...], statistic, settings: BootstrapSettings) -> tuple[float, float]:
    from scipy import stats  # imported here: scipy loads only when a non-percentile interval is asked
    result = stats.bootstrap(data, statistic, paired=True, vectorized=True, n_resamples=settings.n_resamples,
                             confidence_level=settings.confidence, method=settings.method,
                             rng=np.random.default_rng(settings.seed))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


BLOCK_VALUES = 1 << 16   # drawn values per sample resampled at once: a block stays in the CPU's cache


@functools.lru_cache(maxsize=16)
def _resample_indices(n: int, resamples: int, seed: int) -> np.ndarray:
    """The clusters each resample draws, as scipy.stats.bootstrap draws them for paired samples of
    `n` (one row of `n` indices per resample from a generator seeded with `seed`); the same for every
    metric with `n` clusters, so they are drawn once (read-only)."""
    picks = np.random.default_rng(seed).integers(0, n, (resamples, n))
    picks.setflags(write=False)
    return picks


def _percentiles(distribution: np.ndarray, p: np.ndarray) -> tuple[float, float]:
    """scipy.stats.quantile(distribution, p) by its default method (linear, Hyndman & Fan's 7th),
    NaN if the distribution has a NaN (scipy's nan_policy="propagate"), term by term as scipy
    computes it."""
    if np.isnan(distribution).any():
        return math.nan, math.nan
    y = np.sort(distribution)
    n = np.asarray(float(len(y)))
    jg = p * n + (1 - p)
    j = jg // 1 - 1
    g = jg % 1
    g[j < 0] = 0
    j, jp1 = np.clip(j, 0.0, n - 1), np.clip(jg // 1, 0.0, n - 1)
    bounds = (1 - g) * y[j.astype(np.int64)] + g * y[jp1.astype(np.int64)]
    return float(bounds[0]), float(bounds[1])


def cluster_mean_ci(values: Sequence[float], clusters: Sequence[Any],
                    settings: BootstrapSettings = BootstrapSettings()) -> Interval:
    """The mean over units and its cluster-bootstrap interval (NaN bounds with fewer than 2 clusters)."""
    return totals_mean_ci(cluster_totals(values, clusters), settings)


Totals = tuple[list[Any], np.ndarray, np.ndarray]   # per cluster, in first-seen order: ids, Σ values, units


def totals_mean_ci(totals: Totals, settings: BootstrapSettings = BootstrapSettings()) -> Interval:
    """cluster_mean_ci from the clusters' totals."""
    _, sums, sizes = totals
    units = int(sizes.sum())
    if units == 0:
        return Interval(math.nan, math.nan, math.nan, 0, 0)
    estimate = float(sums.sum() / sizes.sum())
    if len(sums) < 2:
        return Interval(estimate, math.nan, math.nan, len(sums), units)
    if np.allclose(sums / sizes, estimate):
        return Interval(estimate, estimate, estimate, len(sums), units)  # every resample gives the same mean
    low, high = _bootstrap((sums, sizes), _ratio, settings)
    return Interval(estimate, low, high, len(sums), units)


def paired_delta_ci(a_values: Sequence[float], a_clusters: Sequence[Any], b_values: Sequence[float],
                    b_clusters: Sequence[Any], settings: BootstrapSettings = BootstrapSettings()) -> Interval:
    """mean(A) − mean(B) over the clusters both sides have, with a paired cluster-bootstrap interval."""
    return totals_delta_ci(cluster_totals(a_values, a_clusters), cluster_totals(b_values, b_clusters), settings)


def totals_delta_ci(a: Totals, b: Totals, settings: BootstrapSettings = BootstrapSettings()) -> Interval:
    """paired_delta_ci from both sides' cluster totals."""
    (a_ids, a_sums, a_sizes), (b_ids, b_sums, b_sizes) = a, b
    b_pos = {c: i for i, c in enumerate(b_ids)}
    shared = [(i, b_pos[c]) for i, c in enumerate(a_ids) if c in b_pos]
    if not shared:
        return Interval(math.nan, math.nan, math.nan, 0, 0)
    ia, ib = (np.asarray(side) for side in zip(*shared))
    data = (a_sums[ia], a_sizes[ia], b_sums[ib], b_sizes[ib])
    estimate = float(_ratio(data[0], data[1]) - _ratio(data[2], data[3]))
    units = int(data[1].sum() + data[3].sum())
    if len(shared) < 2:
        return Interval(estimate, math.nan, math.nan, len(shared), units)
    per_cluster = data[0] / data[1] - data[2] / data[3]
    if np.allclose(per_cluster, estimate) and np.allclose(data[1], data[1][0]) and np.allclose(data[3], data[3][0]):
        return Interval(estimate, estimate, estimate, len(shared), units)

    def delta(sa, na, sb, nb, axis=-1):
        return _ratio(sa, na, axis) - _ratio(sb, nb, axis)

    low, high = _bootstrap(data, delta, settings)
    return Interval(estimate, low, high, len(shared), units)


def _groups(scores: pa.Table, keys: Iterable[str]) -> dict[tuple, Totals]:
    """Cluster totals per key (clusters in first-seen order); a unit without a score (null or NaN)
    is left out: it is not a zero, and the benchmark counts it as excluded. `keys` in any order of
    GROUP_KEYS (every caller's) are grouped once per table and reordered."""
    keys = list(keys)
    if sorted(keys) != sorted(GROUP_KEYS):
        return _grouped_totals(scores, keys)
    order = [GROUP_KEYS.index(k) for k in keys]
    return {tuple(key[i] for i in order): totals for key, totals in _groups_by_all_keys(scores).items()}


@per_table
def _groups_by_all_keys(scores: pa.Table) -> dict[tuple, Totals]:
    return _grouped_totals(scores, list(GROUP_KEYS))


def _grouped_totals(scores: pa.Table, keys: list[str]) -> dict[tuple, Totals]:
    import pyarrow.compute as pc

    if scores.num_rows == 0:
        return {}
    scored = pc.and_(pc.is_valid(scores["value"]), pc.invert(pc.fill_null(pc.is_nan(scores["value"]), True)))
    table = scores.select([*keys, "value", "cluster"]).append_column("_row", pa.array(np.arange(scores.num_rows)))
    table = table.filter(pc.fill_null(scored, False))
    per_cluster = table.group_by([*keys, "cluster"], use_threads=False).aggregate(
        [("value", "sum"), ("value", "count"), ("_row", "min")]).sort_by("_row_min")   # in order of first appearance
    columns = [per_cluster[k].to_pylist() for k in keys]
    sums = per_cluster["value_sum"].to_numpy()
    sizes = per_cluster["value_count"].to_numpy().astype(float)
    rows: dict[tuple, list[int]] = {}
    for position, key in enumerate(zip(*columns)):
        rows.setdefault(key, []).append(position)
    clusters = per_cluster["cluster"].to_pylist()
    return {key: ([clusters[i] for i in where], sums[where], sizes[where])
            for key, where in ((k, np.asarray(v)) for k, v in rows.items())}


def mean_intervals(scores: pa.Table, settings: BootstrapSettings = BootstrapSettings()) -> pa.Table:
    """Per benchmark × model × condition × judge × metric: value (mean), n, clusters, ci_low, ci_high."""
    out = []
    for key, totals in sorted(_groups(scores, GROUP_KEYS).items()):
        interval = totals_mean_ci(totals, settings)
        out.append({**dict(zip(GROUP_KEYS, key)), "value": interval.estimate, "n": interval.units,
                    "clusters": interval.clusters, "ci_low": interval.low, "ci_high": interval.high})
    return pa.Table.from_pylist(out, schema=INTERVAL_SCHEMA)


INTERVAL_SCHEMA = pa.schema([*(pa.field(k, pa.string()) for k in GROUP_KEYS), ("value", pa.float64()),
                             ("n", pa.int64()), ("clusters", pa.int64()), ("ci_low", pa.float64()),
                             ("ci_high", pa.float64())])


def paired_deltas(scores: pa.Table, column: str, a: str, b: str,
                  settings: BootstrapSettings = BootstrapSettings()) -> pa.Table:
    """A − B along `column` (condition, judge or model) for every group where both exist, e.g.
    column="condition", a="defense", b="default". Columns: the other keys, a, b, delta, clusters,
    ci_low, ci_high."""
    others = [k for k in GROUP_KEYS if k != column]
    groups = _groups(scores, [*others, column])
    out = []
    for key in sorted({k[:-1] for k in groups}):
        if (*key, a) not in groups or (*key, b) not in groups:
            continue
        interval = totals_delta_ci(groups[(*key, a)], groups[(*key, b)], settings)
        out.append({**dict(zip(others, key)), "a": a, "b": b, "delta": interval.estimate,
                    "clusters": interval.clusters, "ci_low": interval.low, "ci_high": interval.high})
    schema = pa.schema([*(pa.field(k, pa.string()) for k in others), ("a", pa.string()), ("b", pa.string()),
                        ("delta", pa.float64()), ("clusters", pa.int64()), ("ci_low", pa.float64()),
                        ("ci_high", pa.float64())])
    return pa.Table.from_pylist(out, schema=schema)


DELTA_SCHEMA = pa.schema([*(pa.field(k, pa.string()) for k in GROUP_KEYS), ("compared", pa.string()),
                          ("a", pa.string()), ("b", pa.string()), ("delta", pa.float64()), ("clusters", pa.int64()),
                          ("ci_low", pa.float64()), ("ci_high", pa.float64())])


@per_table
def rows_by_benchmark(rows: pa.Table) -> dict[str, pa.Table]:
    """Each benchmark's rows (in row order), by name in sorted order; the same tables for the same
    `rows`. Rows sorted by benchmark (as `latest_attempts` leaves them) are sliced, not copied."""
    import pyarrow.compute as pc

    if rows.num_rows == 0:
        return {}
    names = pc.unique(rows["benchmark"]).drop_null().to_pylist()
    runs = pc.run_end_encode(rows["benchmark"].combine_chunks()) if rows["benchmark"].null_count == 0 else None
    if runs is not None and len(runs.values) == len(names):   # one contiguous run per benchmark
        ends = runs.run_ends.to_pylist()
        starts = [0, *ends[:-1]]
        slices = {name: rows.slice(start, end - start)
                  for name, start, end in zip(runs.values.to_pylist(), starts, ends)}
        return {name: slices[name] for name in sorted(names)}
    return {name: rows.filter(pc.equal(rows["benchmark"], name)) for name in sorted(names)}


def unit_scores(rows: pa.Table, benchmarks: dict[str, Any], settings: dict[str, BenchmarkSettings]) -> pa.Table:
    """Per-unit scores of every benchmark that provides them (UNIT_SCORE_SCHEMA)."""

    tables = [UNIT_SCORE_SCHEMA.empty_table()]
    for name, part in rows_by_benchmark(rows).items():
        benchmark = benchmarks.get(name)
        if benchmark is not None:
            scores = benchmark.unit_scores(part, settings.get(name) or benchmark.settings_of({}))
            tables.append(scores.select(UNIT_SCORE_SCHEMA.names).cast(UNIT_SCORE_SCHEMA))
    return pa.concat_tables(tables)


def with_intervals(metrics: pa.Table, rows: pa.Table, benchmarks: dict[str, Any],
                   settings: dict[str, BenchmarkSettings], boot: BootstrapSettings = BootstrapSettings(),
                   scores: pa.Table | None = None) -> pa.Table:
    """`metrics` with `ci_low`, `ci_high` columns: bootstrapped from the per-unit scores of every
    benchmark that provides `unit_scores` (a declared combined metric from its inputs' units,
    combined.py); null where a metric has neither."""
    from prefray.engine.results.combined import combined_intervals

    scores = unit_scores(rows, benchmarks, settings) if scores is None else scores
    bounds = {tuple(r[k] for k in GROUP_KEYS): (r["ci_low"], r["ci_high"])
              for table in (mean_intervals(scores, boot), combined_intervals(scores, benchmarks, boot))
              for r in table.to_pylist()}
    keys = list(zip(*(metrics[k].to_pylist() for k in GROUP_KEYS)))
    for position, name in enumerate(("ci_low", "ci_high")):
        if name in metrics.column_names:
            metrics = metrics.drop_columns([name])
        metrics = metrics.append_column(name, pa.array([bounds.get(k, (None, None))[position] for k in keys],
                                                       pa.float64()))
    return metrics


def comparisons_of(benchmark: Any, scores: pa.Table) -> list[Comparison]:
    """A benchmark's declared comparisons (`Benchmark.comparisons`) and every pair of judges that
    scored it (judge A − judge B on the units both scored)."""
    declared = list(benchmark.comparisons) if benchmark is not None else []
    judges = sorted(set(scores["judge"].unique().to_pylist()))
    return declared + [Comparison("judge", a, b) for i, a in enumerate(judges) for b in judges[i + 1:]]


def paired_comparisons(scores: pa.Table, benchmarks: dict[str, Any],
                       boot: BootstrapSettings = BootstrapSettings()) -> pa.Table:
    """Every comparison of every benchmark with per-unit scores (DELTA_SCHEMA), its declared combined
    metrics among them (combined.py), in the order of their keys; the compared key's
    own column is empty and `compared` names it; `clusters` counts the paired units (the groups of
    `pair_on` where a comparison sets it)."""
    import pyarrow.compute as pc

    from prefray.engine.results.combined import combined_deltas, declared

    out = []
    for name in sorted(pc.unique(scores["benchmark"]).to_pylist()):
        part = benchmark_scores(scores, name)
        for comparison in comparisons_of(benchmarks.get(name), part):
            paired = part if comparison.pair_on is None else regrouped(part, comparison.pair_on)
            column, a, b = comparison.column, comparison.a, comparison.b
            rows = (paired_deltas(paired, column, a, b, boot).to_pylist()
                    + combined_deltas(paired, declared(benchmarks, name), column, a, b, boot))
            others = [k for k in GROUP_KEYS if k != column]
            for row in sorted(rows, key=lambda r: tuple(r[k] for k in others)):
                out.append({**row, column: "", "compared": column})
    return pa.Table.from_pylist(out, schema=DELTA_SCHEMA)


def benchmark_scores(scores: pa.Table, name: str) -> pa.Table:
    """The scores of benchmark `name`; their cluster totals are those of `scores` under its keys
    (the same rows in the same order), so they are taken from there, not grouped again."""
    import pyarrow.compute as pc

    part = scores.filter(pc.equal(scores["benchmark"], name))
    groups = _groups_by_all_keys(scores)
    _groups_by_all_keys.remember(part, {key: totals for key, totals in groups.items() if key[0] == name})
    return part


def regrouped(scores: pa.Table, pair_on: Callable[[str], str]) -> pa.Table:
    """`scores` with every cluster replaced by `pair_on(cluster)` (called once per distinct cluster)."""
    encoded = scores["cluster"].combine_chunks().dictionary_encode()
    paired = pa.array([pair_on(c) for c in encoded.dictionary.to_pylist()], pa.string())
    clusters = paired.take(encoded.indices)
    return scores.set_column(scores.schema.get_field_index("cluster"), "cluster", clusters)


def add_intervals(paths: RunDir, metrics: pa.Table, rows: pa.Table, benchmarks: dict[str, Any],
                  settings: dict[str, BenchmarkSettings], seed: int = 0) -> pa.Table:
    """The aggregate step in one call: `metrics` with ci_low/ci_high, and the paired comparisons
    written to RUN_DIR/deltas.parquet and deltas.csv (both always written, possibly empty)."""
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    boot = BootstrapSettings(seed=seed)
    scores = unit_scores(rows, benchmarks, settings)
    give_back()   # what building the scores freed goes back before the comparisons allocate (heap.py)
    deltas = paired_comparisons(scores, benchmarks, boot)
    give_back()
    for target, write in ((paths.deltas_parquet, pq.write_table), (paths.deltas_csv, pacsv.write_csv)):
        temp = target.with_name(f".{target.name}.tmp")
        write(deltas, temp)
        os.replace(temp, target)
    return with_intervals(metrics, rows, benchmarks, settings, boot, scores=scores)
