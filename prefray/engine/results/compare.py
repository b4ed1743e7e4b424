"""Paired comparison of two runs: deltas, cluster-bootstrap intervals, paired tests, adjusted p.

Two runs are paired on the units they share: a stored unit is identified by its benchmark, model,
condition, judge, stage, instance, judged item and sample (`UNIT_KEYS`), the identity its unit id
hashes. `shared_units` marks each run's rows whose unit the other run has (and keeps whole the
set-level judging stages named by their content, which no two runs share), and counts, per cell and
stage, the units both runs have and those only one has. A key named in `across` is left out of the
identity (e.g. `across=("model",)` pairs one model's run with another model's run on the same
instances); each run must then hold one value of it per benchmark.

Both runs' rows, kept to the shared units, give their benchmarks' per-unit scores (UNIT_SCORE_SCHEMA,
each clustered on the benchmark's independent unit). `compare_scores` takes the two score tables
and returns one row per cell × metric (`COMPARE_SCHEMA`):

- `value_a`, `value_b`: the mean over the units of the clusters both runs scored (Σ values ÷ Σ
  units, as the metric itself; for a benchmark's combined metric, combined.py, its combination of
  its inputs' means, e.g. CUPID's F1 of mean precision and recall); `delta` = value_b − value_a (the
  later run minus the first);
- `ci_low`, `ci_high`: a paired cluster-bootstrap percentile interval (stats.totals_delta_ci: a
  resample draws clusters, both runs' units of a drawn cluster together);
- `p`: a paired permutation (sign-flip) test of the same statistic. Under the null hypothesis the
  two runs' labels are exchangeable within each cluster, so swapping a cluster's A and B units
  leaves the distribution unchanged; the p-value is the share of swaps whose |delta| is at least the
  observed one (exact over all 2^k swaps for k ≤ `exact_clusters`, else `n_permutations` random
  swaps, counting the observed one: (1 + hits) / (1 + draws)). Why this test and not a t-test or
  Wilcoxon test on cluster means: it tests the estimate the table reports (a combined metric's: a
  swap exchanges a cluster's units of all its inputs, and the combination is recomputed) (a units-weighted ratio,
  not an unweighted mean of cluster means), assumes no distribution (scores are often 0/1 or a
  few levels, clusters few), and keeps clusters as the unit of independence, as the interval does;
- `p_adjusted`: over the whole family of rows with a p-value (every cell, metric and compared run),
  Holm's step-down by default or Benjamini–Hochberg (`adjust="bh"`), via statsmodels'
  `multipletests`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prefray.engine.results.combined import Combined, combined_delta_ci, stacked
from prefray.engine.results.stats import BootstrapSettings, Totals, _groups, totals_delta_ci

CELL_KEYS = ("benchmark", "model", "condition", "judge")
UNIT_KEYS = (*CELL_KEYS, "stage", "instance_id", "item", "sample")
ACROSS_KEYS = ("model", "condition", "judge")   # what a comparison may pair across
ADJUST_METHODS = {"holm": "holm", "bh": "fdr_bh"}
_NULL = "\x00"   # a null key part: equal to another null, never to a value
_BLOCK = 1000    # swaps evaluated at once

COMPARE_SCHEMA = pa.schema([
    ("run_a", pa.string()), ("run_b", pa.string()),
    *(pa.field(k, pa.string()) for k in CELL_KEYS), ("versus", pa.string()), ("metric", pa.string()),
    ("value_a", pa.float64()), ("value_b", pa.float64()), ("delta", pa.float64()),
    ("ci_low", pa.float64()), ("ci_high", pa.float64()), ("p", pa.float64()), ("p_adjusted", pa.float64()),
    ("n_pairs", pa.int64()), ("n_clusters", pa.int64()), ("n_a", pa.int64()), ("n_b", pa.int64()),
])

SHARING_SCHEMA = pa.schema([
    ("run_a", pa.string()), ("run_b", pa.string()), *(pa.field(k, pa.string()) for k in CELL_KEYS),
    ("stage", pa.string()), ("role", pa.string()), ("shared", pa.int64()), ("only_a", pa.int64()),
    ("only_b", pa.int64()), ("whole", pa.bool_()),
])


class NotComparable(ValueError):
    """Two runs that cannot be paired; the message says why in one line."""


@dataclass(frozen=True)
class CompareSettings:
    boot: BootstrapSettings = BootstrapSettings()
    n_permutations: int = 9999
    exact_clusters: int = 12      # up to 2^12 = 4096 swaps: enumerate them all
    adjust: Literal["holm", "bh"] = "holm"


# ---------------------------------------------------------------- pairing on units

def unit_key(rows: pa.Table, across: Sequence[str] = ()) -> pa.Array:
    """One string per row naming its unit (UNIT_KEYS without `across`); nulls are a value of their own."""
    parts = [pc.fill_null(rows[k].cast(pa.string()), _NULL) for k in UNIT_KEYS if k not in across]
    return pc.binary_join_element_wise(*parts, "\x1f")


def shared_units(rows_a: pa.Table, rows_b: pa.Table,
                 across: Sequence[str] = ()) -> tuple[pa.Array, pa.Array, pa.Table]:
    """Which rows of each run (one row per unit: the best attempt) are compared: (mask_a, mask_b,
    sharing). A unit is compared when the other run has it too, with one exception: a judging
    stage (any role but the evaluated model's) of a cell that both runs have but with no unit in
    common is a set-level judgement named by its content (e.g. PRISK's merge of a query's options
    into V_q, made from the run's own answers), which the other run cannot share; it is kept whole in
    each run (`whole` in `sharing`) and read with the answers it judged.

    `sharing` counts per cell, stage and role (SHARING_SCHEMA; the run names are left empty for
    `labelled`): units in both runs and units in one only; a second-run unit is counted under the
    first run's values of the `across` keys."""
    check_single(rows_a, across, "the first run")
    check_single(rows_b, across, "the second run")
    key_a, key_b = unit_key(rows_a, across), unit_key(rows_b, across)
    mask_a, mask_b = pc.is_in(key_a, value_set=key_b), pc.is_in(key_b, value_set=key_a)
    rows_b_as_a = aligned(rows_b, rows_a, across)
    counts: dict[tuple, list[int]] = {}
    for side, (rows, mask) in enumerate(((rows_a, mask_a), (rows_b_as_a, mask_b))):
        for label, shared, total in _label_counts(rows, mask):
            slot = counts.setdefault(label, [0, 0, 0])
            if side == 0:
                slot[0] += shared     # a shared unit is counted once, from the first run
            slot[1 + side] += total - shared
    whole = {label for label, (shared, only_a, only_b) in counts.items()
             if shared == 0 and only_a and only_b and label[-1] != "subject"}
    if whole:
        labels = pa.array(["\x1f".join(label) for label in whole], pa.string())
        mask_a = pc.or_(mask_a, pc.is_in(_label_key(rows_a), value_set=labels))
        mask_b = pc.or_(mask_b, pc.is_in(_label_key(rows_b_as_a), value_set=labels))
    sharing = [{"run_a": "", "run_b": "", **dict(zip(LABEL_KEYS, label)), "shared": c[0], "only_a": c[1],
                "only_b": c[2], "whole": label in whole} for label, c in sorted(counts.items())]
    return mask_a, mask_b, pa.Table.from_pylist(sharing, schema=SHARING_SCHEMA)


def _label_key(rows: pa.Table) -> pa.Array:
    return pc.binary_join_element_wise(*(pc.fill_null(rows[k], "") for k in LABEL_KEYS), "\x1f")


def check_single(rows: pa.Table, across: Sequence[str], which: str) -> None:
    """Raise NotComparable unless `rows` hold one value of every `across` key per benchmark (the
    judge: per benchmark among judged rows, since the evaluated model's rows have none)."""
    for key in across:
        if key not in ACROSS_KEYS:
            raise NotComparable(f"cannot pair across '{key}': choose among {', '.join(ACROSS_KEYS)}")
        for benchmark, values in _values_per_benchmark(rows, key).items():
            if len(values) > 1:
                raise NotComparable(f"{which} has {len(values)} values of {key} in benchmark {benchmark} "
                                    f"({', '.join(sorted(values))}): pairing across {key} needs one per run")


LABEL_KEYS = (*CELL_KEYS, "stage", "role")


def _label_counts(rows: pa.Table, mask: pa.Array) -> list[tuple[tuple, int, int]]:
    """(cell, stage and role; units shared; units) per label of `rows`."""
    table = pa.table({**{k: pc.fill_null(rows[k], "") for k in LABEL_KEYS},
                      "shared": pc.fill_null(mask, False).cast(pa.int64())})
    grouped = table.group_by(list(LABEL_KEYS), use_threads=False).aggregate([("shared", "sum"), ("shared", "count")])
    labels = zip(*(grouped[k].to_pylist() for k in LABEL_KEYS))
    return list(zip(labels, grouped["shared_sum"].to_pylist(), grouped["shared_count"].to_pylist()))


def _values_per_benchmark(rows: pa.Table, key: str) -> dict[str, set[str]]:
    """Per benchmark: the values of `key` in `rows` (for the judge: the non-empty ones)."""
    pairs = rows.select(["benchmark", key]).group_by(["benchmark", key], use_threads=False).aggregate([])
    found: dict[str, set[str]] = {}
    for benchmark, value in zip(pairs["benchmark"].to_pylist(), pairs[key].to_pylist()):
        if key == "judge" and not value:
            continue
        found.setdefault(benchmark, set()).add(value or "")
    return found


def versus_labels(rows_a: pa.Table, rows_b: pa.Table, across: Sequence[str]) -> dict[str, str]:
    """Per benchmark: 'key=B value' for each `across` key whose values differ between the runs."""
    out: dict[str, str] = {}
    for key in across:
        a, b = _values_per_benchmark(rows_a, key), _values_per_benchmark(rows_b, key)
        for benchmark, values in b.items():
            if values != a.get(benchmark, values):
                out[benchmark] = ", ".join(filter(None, [out.get(benchmark), f"{key}={next(iter(values))}"]))
    return out


def aligned(table: pa.Table, rows_a: pa.Table, across: Sequence[str]) -> pa.Table:
    """A second-run table (rows or unit scores) under the first run's values of the `across` keys,
    so that the two runs' cells meet (a row without a judge keeps none)."""
    for key in across:
        values = {b: next(iter(v)) for b, v in _values_per_benchmark(rows_a, key).items()}
        column = [values.get(b, v) if (key != "judge" or v) else v
                  for b, v in zip(table["benchmark"].to_pylist(), table[key].to_pylist())]
        table = table.set_column(table.schema.get_field_index(key), key, pa.array(column, pa.string()))
    return table


# ---------------------------------------------------------------- the test

def sign_flip_p(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray],
                settings: CompareSettings = CompareSettings()) -> float:
    """Two-sided p of delta = ratio(B) − ratio(A) under swaps of A and B within clusters.

    `a` and `b` are (sums, sizes) per cluster, aligned (cluster i is the same on both sides)."""
    (sa, na), (sb, nb) = a, b
    return combined_flip_p((sa[None], na[None]), (sb[None], nb[None]), lambda mean: mean, settings)


def combined_flip_p(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray], combine: Callable,
                    settings: CompareSettings = CompareSettings()) -> float:
    """sign_flip_p of delta = combine(B's means) − combine(A's means), where `a` and `b` hold the
    (sums, sizes) of each input metric × cluster (a combined metric, combined.py; one input and
    combine = identity is sign_flip_p). A swap exchanges a cluster's units of every input at once."""
    (sa, na), (sb, nb) = a, b
    k = sa.shape[-1]
    if k == 0:
        return math.nan
    if k <= settings.exact_clusters:
        flips = np.array(list(itertools.product((False, True), repeat=k)), dtype=bool)
        observed_counted = False       # the identity is one of the enumerated swaps
    else:
        rng = np.random.default_rng(settings.boot.seed)
        flips = rng.random((settings.n_permutations, k)) < 0.5
        observed_counted = True

    def side(sums: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        means = sums.sum(-1) / sizes.sum(-1)                      # (..., inputs)
        return combine(*np.moveaxis(means, -1, 0))

    def delta(flip: np.ndarray) -> np.ndarray:
        flip = flip[..., None, :]                                 # the same swap for every input
        a_sums, a_sizes = np.where(flip, sb, sa), np.where(flip, nb, na)
        b_sums, b_sizes = np.where(flip, sa, sb), np.where(flip, na, nb)
        return side(b_sums, b_sizes) - side(a_sums, a_sizes)

    observed = abs(float(delta(np.zeros(k, dtype=bool))))
    tolerance = 1e-12 * max(1.0, observed)
    hits = sum(int(np.count_nonzero(np.abs(delta(flips[start:start + _BLOCK])) >= observed - tolerance))
               for start in range(0, len(flips), _BLOCK))   # in blocks: memory stays flat with many clusters
    if observed_counted:
        return (1 + hits) / (1 + len(flips))
    return hits / len(flips)


def _paired(a: Totals, b: Totals) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Both sides' (sums, sizes) on the clusters both have, in the first side's order."""
    b_pos = {c: i for i, c in enumerate(b[0])}
    pairs = [(i, b_pos[c]) for i, c in enumerate(a[0]) if c in b_pos]
    ia = np.asarray([i for i, _ in pairs], dtype=int)
    ib = np.asarray([j for _, j in pairs], dtype=int)
    return (a[1][ia], a[2][ia]), (b[1][ib], b[2][ib])


def compare_scores(scores_a: pa.Table, scores_b: pa.Table, settings: CompareSettings = CompareSettings(),
                   pairs: dict[tuple[str, str, str], int] | None = None,
                   versus: dict[str, str] | None = None,
                   combined: Mapping[str, Sequence[Combined]] | None = None) -> pa.Table:
    """One row per cell × metric that both score tables have (COMPARE_SCHEMA without the run
    names, which `labelled` sets, and `p_adjusted`, which `adjusted` fills). `pairs` gives n_pairs
    per (benchmark, model, condition): the evaluated model's answers both runs have; `versus` per
    benchmark what the second run's cell is where it differs (`versus_labels`); `combined` per
    benchmark its combined metrics (e.g. CUPID's F1 of mean precision and recall), compared by
    recomputing them from the resampled or swapped inputs' means."""
    keys = (*CELL_KEYS, "metric")
    groups_a, groups_b = _groups(scores_a, keys), _groups(scores_b, keys)
    out = _combined_rows(groups_a, groups_b, combined or {}, settings, pairs, versus)
    for key in sorted(set(groups_a) & set(groups_b)):
        (sa, na), (sb, nb) = _paired(groups_a[key], groups_b[key])
        interval = totals_delta_ci(groups_b[key], groups_a[key], settings.boot)   # B − A
        value_a = float(sa.sum() / na.sum()) if na.sum() else math.nan
        value_b = float(sb.sum() / nb.sum()) if nb.sum() else math.nan
        cell = dict(zip(keys, key))
        out.append({**cell, "versus": (versus or {}).get(key[0], ""), "value_a": value_a, "value_b": value_b,
                    "delta": interval.estimate,
                    "ci_low": interval.low, "ci_high": interval.high, "p": sign_flip_p((sa, na), (sb, nb), settings),
                    "p_adjusted": None, "run_a": "", "run_b": "",
                    "n_pairs": (pairs or {}).get(key[:3], 0), "n_clusters": len(sa),
                    "n_a": int(na.sum()), "n_b": int(nb.sum())})
    out.sort(key=lambda row: tuple(row[k] for k in keys))
    return pa.Table.from_pylist(out, schema=COMPARE_SCHEMA)


def _combined_rows(groups_a: dict[tuple, Totals], groups_b: dict[tuple, Totals],
                   combined: Mapping[str, Sequence[Combined]], settings: CompareSettings,
                   pairs: dict[tuple[str, str, str], int] | None,
                   versus: dict[str, str] | None) -> list[dict[str, Any]]:
    """compare_scores' rows of the combined metrics of every cell both runs have all inputs of."""
    out = []
    for cell in sorted({k[:-1] for k in groups_a} & {k[:-1] for k in groups_b}):
        for metric in combined.get(cell[0], ()):
            side_a = stacked([groups_a.get((*cell, m)) for m in metric.inputs])
            side_b = stacked([groups_b.get((*cell, m)) for m in metric.inputs])
            if side_a is None or side_b is None:
                continue
            position = {c: i for i, c in enumerate(side_b[0])}
            shared = [(i, position[c]) for i, c in enumerate(side_a[0]) if c in position]
            if not shared:
                continue
            ia, ib = (np.asarray(s) for s in zip(*shared))
            a = (side_a[1][:, ia], side_a[2][:, ia])
            b = (side_b[1][:, ib], side_b[2][:, ib])
            interval = combined_delta_ci([_row(b, j) for j in range(len(metric.inputs))],
                                         [_row(a, j) for j in range(len(metric.inputs))], metric.combine,
                                         settings.boot)   # B − A
            value_a, value_b = (float(metric.combine(*(s.sum() / n.sum() for s, n in zip(*side)))) for side in (a, b))
            out.append({**dict(zip(CELL_KEYS, cell)), "metric": metric.name, "versus": (versus or {}).get(cell[0], ""),
                        "value_a": value_a, "value_b": value_b, "delta": interval.estimate,
                        "ci_low": interval.low, "ci_high": interval.high,
                        "p": combined_flip_p(a, b, metric.combine, settings), "p_adjusted": None,
                        "run_a": "", "run_b": "", "n_pairs": (pairs or {}).get(cell[:3], 0),
                        "n_clusters": len(shared), "n_a": int(a[1][0].sum()), "n_b": int(b[1][0].sum())})
    return out


def _row(side: tuple[np.ndarray, np.ndarray], j: int) -> Totals:
    """One input's cluster totals of an aligned side (clusters numbered in order)."""
    return list(range(side[0].shape[1])), side[0][j], side[1][j]


def adjusted(table: pa.Table, method: Literal["holm", "bh"] = "holm") -> pa.Table:
    """`table` with `p_adjusted` over the family of its rows with a p-value (null where p is NaN)."""
    from statsmodels.stats.multitest import multipletests

    p = np.asarray(table["p"].to_numpy(zero_copy_only=False), dtype=float)
    valid = ~np.isnan(p)
    out = np.full(len(p), np.nan)
    if valid.any():
        out[valid] = multipletests(p[valid], method=ADJUST_METHODS[method])[1]
    column = pa.array([None if np.isnan(v) else float(v) for v in out], pa.float64())
    return table.set_column(table.schema.get_field_index("p_adjusted"), "p_adjusted", column)


def answer_pairs(sharing: pa.Table) -> dict[tuple[str, str, str], int]:
    """Per (benchmark, model, condition): the evaluated model's units both runs have."""
    out: dict[tuple[str, str, str], int] = {}
    for row in sharing.to_pylist():
        if row["role"] == "subject":
            key = (row["benchmark"], row["model"], row["condition"])
            out[key] = out.get(key, 0) + row["shared"]
    return out


def labelled(table: pa.Table, **columns: Any) -> pa.Table:
    """`table` with the named string columns set to one value (e.g. run_a, run_b)."""
    for name, value in columns.items():
        table = table.set_column(table.schema.get_field_index(name), name,
                                 pa.array([value] * table.num_rows, pa.string()))
    return table


def compare_rows(rows_a: pa.Table, rows_b: pa.Table, scores_a: Callable[[pa.Table], pa.Table],
                 scores_b: Callable[[pa.Table], pa.Table], across: Sequence[str] = (),
                 settings: CompareSettings = CompareSettings(), names: tuple[str, str] = ("A", "B"),
                 breakdowns: bool = False,
                 combined: Mapping[str, Sequence[Combined]] | None = None) -> tuple[pa.Table, pa.Table]:
    """Two runs' best rows → (comparison, sharing), both labelled with `names`; p not yet adjusted.
    Headline metrics only, unless `breakdowns` (metrics named `NAME[slice]`, e.g. `MR[domain=…]`);
    `combined`: each benchmark's combined metrics (`Benchmark.combined_metrics`), compared too.

    `scores_a`/`scores_b` turn a run's rows (kept to the shared units) into its per-unit scores (the
    benchmarks' `unit_scores`, stats.unit_scores). Raises NotComparable when no unit is shared."""
    mask_a, mask_b, sharing = shared_units(rows_a, rows_b, across)
    if not pc.any(mask_a).as_py():
        raise NotComparable(f"{names[0]} and {names[1]} share no unit (benchmark, model, condition, judge, "
                            f"instance, item and sample{_minus(across)}): {_content(rows_a, names[0])}; "
                            f"{_content(rows_b, names[1])}")
    a = scores_a(rows_a.filter(mask_a))
    b = aligned(scores_b(rows_b.filter(mask_b)), rows_a, across)
    if not breakdowns:
        a, b = headline_scores(a), headline_scores(b)
    table = compare_scores(a, b, settings, answer_pairs(sharing), versus_labels(rows_a, rows_b, across), combined)
    return labelled(table, run_a=names[0], run_b=names[1]), labelled(sharing, run_a=names[0], run_b=names[1])


def _minus(across: Sequence[str]) -> str:
    return f", not {' or '.join(across)}" if across else ""


def _content(rows: pa.Table, name: str) -> str:
    cells = sorted({tuple(c) for c in zip(*(rows[k].to_pylist() for k in ("benchmark", "model", "condition")))})
    shown = ", ".join("/".join(c) for c in cells[:4]) + (f" and {len(cells) - 4} more" if len(cells) > 4 else "")
    return f"{name} has {shown or 'no stored unit'}"


def headline_scores(scores: pa.Table) -> pa.Table:
    """The unit scores of headline metrics (a breakdown's name carries a `[slice]`)."""
    return scores.filter(pc.invert(pc.match_substring(scores["metric"], "[")))
