"""Cluster-bootstrap intervals: hand-computed cases, an independent numpy bootstrap, paired deltas."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from prefray.engine.benchmark import UNIT_SCORE_SCHEMA, Benchmark, metric_rows
from prefray.engine.results.stats import (
    BootstrapSettings,
    Comparison,
    add_intervals,
    cluster_mean_ci,
    mean_intervals,
    paired_comparisons,
    paired_delta_ci,
    paired_deltas,
    with_intervals,
)
from prefray.engine.rundir import RunDir


def test_two_clusters_give_the_hand_computed_percentile_interval():
    # Cluster A: two units scoring 0; cluster B: four units scoring 1. A resample of 2 clusters is
    # AA (p=1/4, mean 0), AB or BA (p=1/2, mean over units = 4/6) or BB (p=1/4, mean 1).
    values = [0, 0, 1, 1, 1, 1]
    clusters = ["A", "A", "B", "B", "B", "B"]
    # 95%: the 2.5% and 97.5% quantiles sit in the end masses → [0, 1].
    wide = cluster_mean_ci(values, clusters, BootstrapSettings(confidence=0.95, n_resamples=4000))
    assert (wide.estimate, wide.low, wide.high) == (pytest.approx(4 / 6), 0.0, 1.0)
    # 40%: the 30% and 70% quantiles both fall in the middle mass → [4/6, 4/6] (the mean over
    # units, not the mean of cluster means, which would be 1/2).
    narrow = cluster_mean_ci(values, clusters, BootstrapSettings(confidence=0.4, n_resamples=4000))
    assert narrow.low == pytest.approx(4 / 6) and narrow.high == pytest.approx(4 / 6)
    assert (narrow.clusters, narrow.units) == (2, 6)


def _numpy_cluster_bootstrap(values, clusters, n_resamples, seed, confidence=0.95):
    ids = sorted(set(clusters))
    sums = np.array([sum(v for v, c in zip(values, clusters) if c == i) for i in ids], float)
    sizes = np.array([sum(1 for c in clusters if c == i) for i in ids], float)
    draws = np.random.default_rng(seed).integers(0, len(ids), size=(n_resamples, len(ids)))
    means = sums[draws].sum(axis=1) / sizes[draws].sum(axis=1)
    tail = (1 - confidence) / 2 * 100
    return np.percentile(means, [tail, 100 - tail])


def test_interval_matches_an_independent_numpy_cluster_bootstrap():
    rng = np.random.default_rng(7)
    clusters, values = [], []
    for c in range(30):
        size = int(rng.integers(1, 6))
        p = rng.uniform(0.1, 0.9)
        clusters += [f"p{c}"] * size
        values += list((rng.uniform(size=size) < p).astype(float))
    ours = cluster_mean_ci(values, clusters, BootstrapSettings(n_resamples=20000, seed=1))
    low, high = _numpy_cluster_bootstrap(values, clusters, 20000, seed=99)
    assert ours.estimate == pytest.approx(sum(values) / len(values))
    assert ours.low == pytest.approx(low, abs=0.01) and ours.high == pytest.approx(high, abs=0.01)


def test_clusters_widen_the_interval_over_treating_units_as_independent():
    # Ten clusters of ten identical units: the information is ten units' worth, not a hundred.
    clusters = [f"c{i}" for i in range(10) for _ in range(10)]
    values = [float(i % 2) for i in range(10) for _ in range(10)]
    clustered = cluster_mean_ci(values, clusters)
    independent = cluster_mean_ci(values, list(range(100)))
    assert clustered.high - clustered.low > 2 * (independent.high - independent.low)


def test_degenerate_inputs():
    assert math.isnan(cluster_mean_ci([1.0, 0.0], ["a", "a"]).low)  # one cluster: no interval
    same = cluster_mean_ci([0.5, 0.5, 0.5], ["a", "b", "c"])
    assert (same.low, same.high) == (0.5, 0.5)
    assert math.isnan(cluster_mean_ci([], []).estimate)


def _scores(effect: float, seed: int) -> pa.Table:
    """40 profiles × 3 units; 'on' adds `effect` to each unit's probability of scoring 1."""
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(40):
        base = rng.uniform(0.2, 0.6)
        for condition, prob in (("off", base), ("on", base + effect)):
            for _ in range(3):
                rows.append({"benchmark": "b", "model": "m", "condition": condition, "judge": "j",
                             "metric": "MR", "cluster": f"p{p}", "value": float(rng.uniform() < prob)})
    return pa.Table.from_pylist(rows, schema=UNIT_SCORE_SCHEMA)


def test_paired_delta_excludes_zero_on_an_effect_and_includes_it_without_one():
    effect = paired_deltas(_scores(0.35, seed=3), "condition", "on", "off").to_pylist()[0]
    assert effect["delta"] > 0 and effect["ci_low"] > 0, effect
    none = paired_deltas(_scores(0.0, seed=3), "condition", "on", "off").to_pylist()[0]
    assert none["ci_low"] < 0 < none["ci_high"], none
    assert (none["a"], none["b"], none["clusters"], none["metric"]) == ("on", "off", 40, "MR")


def test_pairing_narrows_the_interval_when_clusters_differ_a_lot():
    # Cluster levels vary widely; B = A + 0.1 exactly in every unit → the paired delta is 0.1 with
    # no width, while unpaired intervals of A and B overlap widely.
    clusters = [f"c{i}" for i in range(20) for _ in range(2)]
    a = [i / 20 for i in range(20) for _ in range(2)]
    b = [v + 0.1 for v in a]
    delta = paired_delta_ci(b, clusters, a, clusters)
    assert (delta.estimate, delta.low, delta.high) == (pytest.approx(0.1), pytest.approx(0.1), pytest.approx(0.1))
    shared_clusters_only = paired_delta_ci([1.0, 1.0], ["x", "y"], [0.0, 0.0, 5.0], ["x", "y", "z"])
    assert shared_clusters_only.estimate == 1.0 and shared_clusters_only.clusters == 2


class _FakeBenchmark(Benchmark):
    name = "b"

    def unit_scores(self, rows: pa.Table, settings: dict) -> pa.Table:
        out = [{"benchmark": r["benchmark"], "model": r["model"], "condition": r["condition"], "judge": r["judge"],
                "metric": "MR", "cluster": r["instance_id"], "value": float(r["text"] == "yes")}
               for r in rows.to_pylist()]
        return pa.Table.from_pylist(out, schema=UNIT_SCORE_SCHEMA)


def test_with_intervals_adds_bounds_only_where_unit_scores_exist():
    rows = pa.Table.from_pylist([{"benchmark": "b", "model": "m", "condition": "c", "judge": "j",
                                  "instance_id": f"p{i // 2}", "text": "yes" if i % 3 else "no"} for i in range(12)]
                                + [{"benchmark": "other", "model": "m", "condition": "c", "judge": "j",
                                    "instance_id": "p0", "text": "yes"}])
    metrics = metric_rows([{"benchmark": "b", "model": "m", "condition": "c", "judge": "j", "metric": "MR",
                            "value": 8 / 12, "n": 12},
                           {"benchmark": "b", "model": "m", "condition": "c", "judge": "j", "metric": "other",
                            "value": 1.0, "n": 12},
                           {"benchmark": "other", "model": "m", "condition": "c", "judge": "j", "metric": "MR",
                            "value": 1.0, "n": 1}])
    out = with_intervals(metrics, rows, {"b": _FakeBenchmark(), "other": Benchmark()}, {})
    by_metric = {(r["benchmark"], r["metric"]): r for r in out.to_pylist()}
    expected = mean_intervals(_FakeBenchmark().unit_scores(rows.slice(0, 12), {})).to_pylist()[0]
    assert by_metric[("b", "MR")]["ci_low"] == expected["ci_low"] < 8 / 12 < by_metric[("b", "MR")]["ci_high"]
    assert by_metric[("b", "other")]["ci_low"] is None
    assert by_metric[("other", "MR")]["ci_high"] is None
    assert out.num_rows == 3 and out.column_names[-2:] == ["ci_low", "ci_high"]


class _Declaring(Benchmark):
    comparisons = [Comparison("condition", "on", "off")]


def test_declared_comparisons_and_every_judge_pair():
    scores = _scores(0.35, seed=3)
    second_judge = scores.set_column(scores.schema.get_field_index("judge"), "judge",
                                     pa.array(["k"] * scores.num_rows))
    both = pa.concat_tables([scores, second_judge])
    table = paired_comparisons(both, {"b": _Declaring()})
    rows = table.to_pylist()
    by_kind = {(r["compared"], r["judge"], r["condition"]): r for r in rows}
    assert set(by_kind) == {("condition", "j", ""), ("condition", "k", ""), ("judge", "", "on"), ("judge", "", "off")}
    on_off = paired_deltas(scores, "condition", "on", "off").to_pylist()[0]
    assert by_kind[("condition", "j", "")]["delta"] == on_off["delta"]
    # the two judges scored every unit alike: their difference is exactly 0 with no width
    same = by_kind[("judge", "", "on")]
    assert (same["a"], same["b"], same["delta"], same["ci_low"], same["ci_high"]) == ("j", "k", 0.0, 0.0, 0.0)


def test_add_intervals_writes_deltas_and_returns_metrics_with_bounds(tmp_path):
    import pyarrow.parquet as pq

    rows = pa.Table.from_pylist([{"benchmark": "b", "model": "m", "condition": c, "judge": "j",
                                  "instance_id": f"p{i // 2}", "text": "yes" if (i + (c == "on")) % 3 else "no"}
                                 for c in ("on", "off") for i in range(12)])
    metrics = metric_rows([{"benchmark": "b", "model": "m", "condition": c, "judge": "j", "metric": "MR",
                            "value": 0.5, "n": 12} for c in ("on", "off")])
    bench = _FakeBenchmark()
    bench.comparisons = [Comparison("condition", "on", "off")]
    out = add_intervals(RunDir(tmp_path), metrics, rows, {"b": bench}, {}, seed=3)
    assert all(r["ci_low"] is not None for r in out.to_pylist())
    deltas = pq.read_table(tmp_path / "deltas.parquet").to_pylist()
    expected = paired_deltas(bench.unit_scores(rows, {}), "condition", "on", "off", BootstrapSettings(seed=3))
    assert len(deltas) == 1 and deltas[0]["delta"] == expected.to_pylist()[0]["delta"]
    assert deltas[0]["ci_low"] == expected.to_pylist()[0]["ci_low"]
    assert (tmp_path / "deltas.csv").read_text().startswith('"benchmark"')


def test_pairing_on_a_coarser_unit_resamples_whole_groups():
    # Base answers stand for a query (cluster "|q"), personalized ones for a persona–query pair: no
    # cluster is shared, so the pairs are drawn per query. q1: A = 1, 1 (two personas), B = 0;
    # q2: A = 0, 0, B = 0. A resample of 2 queries: q1 q1 (p=1/4, delta 1), mixed (p=1/2, delta
    # 2/4 − 0 = 0.5), q2 q2 (p=1/4, delta 0).
    rows = [{"benchmark": "b", "model": "m", "condition": c, "judge": "", "metric": "S", "cluster": k, "value": v}
            for c, k, v in (("on", "p1|q1", 1.0), ("on", "p2|q1", 1.0), ("on", "p1|q2", 0.0), ("on", "p2|q2", 0.0),
                            ("off", "|q1", 0.0), ("off", "|q2", 0.0))]
    scores = pa.Table.from_pylist(rows, schema=UNIT_SCORE_SCHEMA)
    by_query = Comparison("condition", "on", "off", pair_on=lambda cluster: cluster.split("|")[1])

    class Bench(Benchmark):  # the hooks it does not set keep their defaults
        comparisons = [by_query]

    wide = paired_comparisons(scores, {"b": Bench()}, BootstrapSettings(n_resamples=4000)).to_pylist()[0]
    assert (wide["delta"], wide["clusters"], wide["ci_low"], wide["ci_high"]) == (0.5, 2, 0.0, 1.0)
    narrow = paired_comparisons(scores, {"b": Bench()}, BootstrapSettings(confidence=0.4, n_resamples=4000))
    assert (narrow["ci_low"][0].as_py(), narrow["ci_high"][0].as_py()) == (0.5, 0.5)
    unpaired_bench = type("B", (Benchmark,), {"comparisons": [Comparison("condition", "on", "off")]})
    unpaired = paired_comparisons(scores, {"b": unpaired_bench()})
    assert math.isnan(unpaired["delta"][0].as_py())                      # without it no cluster is shared
