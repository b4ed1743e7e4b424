"""Intervals of a metric combined from means (F1 of mean precision and recall): hand-computed
percentile intervals, an independent numpy cluster bootstrap, paired deltas, and the engine's
with_intervals / paired_comparisons picking up a benchmark's declared combined metrics."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from prefray.engine.benchmark import UNIT_SCORE_SCHEMA, Benchmark, metric_rows
from prefray.engine.results.combined import Combined, combined_ci, combined_delta_ci
from prefray.engine.results.stats import (
    BootstrapSettings,
    Comparison,
    cluster_totals,
    paired_comparisons,
    with_intervals,
)


def f1_of_means(p, r):
    p, r = np.asarray(p, float), np.asarray(r, float)
    return np.divide(2 * p * r, p + r, out=np.zeros(np.shape(p + r)), where=p + r > 0)


F1 = Combined("F1", ("precision", "recall"), f1_of_means)


def totals(values, clusters):
    return cluster_totals(values, clusters)


def test_two_clusters_give_the_hand_computed_interval_of_the_f1_of_means():
    # Cluster A: one instance with P = 1, R = 0; cluster B: one with P = 1, R = 1. F1 of the means:
    # P̄ = 1, R̄ = 0.5 → 2·0.5/1.5 = 2/3 (the mean of per-instance F1 would be (0 + 1)/2 = 1/2).
    # A resample of 2 clusters: AA (p=1/4): P̄ 1, R̄ 0 → F1 0; AB or BA (p=1/2): 2/3; BB (p=1/4): 1.
    p, r, clusters = [1.0, 1.0], [0.0, 1.0], ["A", "B"]
    parts = [totals(p, clusters), totals(r, clusters)]
    wide = combined_ci(parts, f1_of_means, BootstrapSettings(confidence=0.95, n_resamples=4000))
    assert (wide.estimate, wide.low, wide.high) == (pytest.approx(2 / 3), 0.0, 1.0)
    # 40%: the 30% and 70% quantiles fall in the middle mass: 2/3, where a mean of F1_i units gives 1/2
    narrow = combined_ci(parts, f1_of_means, BootstrapSettings(confidence=0.4, n_resamples=4000))
    assert (narrow.low, narrow.high) == (pytest.approx(2 / 3), pytest.approx(2 / 3))
    assert (narrow.clusters, narrow.units) == (2, 2)


def _numpy_f1_bootstrap(p, r, clusters, n_resamples, seed, confidence=0.95):
    ids = sorted(set(clusters))
    sums_p = np.array([sum(v for v, c in zip(p, clusters) if c == i) for i in ids], float)
    sums_r = np.array([sum(v for v, c in zip(r, clusters) if c == i) for i in ids], float)
    sizes = np.array([sum(1 for c in clusters if c == i) for i in ids], float)
    draws = np.random.default_rng(seed).integers(0, len(ids), size=(n_resamples, len(ids)))
    mp, mr = sums_p[draws].sum(axis=1) / sizes[draws].sum(axis=1), sums_r[draws].sum(axis=1) / sizes[draws].sum(axis=1)
    f1 = 2 * mp * mr / (mp + mr)
    tail = (1 - confidence) / 2 * 100
    return np.percentile(f1, [tail, 100 - tail])


def _instances(seed: int, shift: float = 0.0):
    rng = np.random.default_rng(seed)
    clusters, p, r = [], [], []
    for c in range(30):
        for _ in range(int(rng.integers(1, 4))):
            clusters.append(f"p{c}")
            p.append(float(rng.choice([0, 0.5, 1])))
            r.append(min(1.0, float(rng.choice([0, 0.25, 0.5, 1])) + shift))
    return p, r, clusters


def test_interval_matches_an_independent_numpy_bootstrap_of_the_f1_of_means():
    p, r, clusters = _instances(seed=5)
    ours = combined_ci([totals(p, clusters), totals(r, clusters)], f1_of_means, BootstrapSettings(n_resamples=20000))
    mp, mr = sum(p) / len(p), sum(r) / len(r)
    assert ours.estimate == pytest.approx(2 * mp * mr / (mp + mr))
    low, high = _numpy_f1_bootstrap(p, r, clusters, 20000, seed=11)
    assert ours.low == pytest.approx(low, abs=0.01) and ours.high == pytest.approx(high, abs=0.01)
    assert ours.low < ours.estimate < ours.high


def test_no_interval_where_it_cannot_be_the_statistic():
    one = combined_ci([totals([1.0, 0.0], ["a", "a"]), totals([0.5, 0.5], ["a", "a"])], f1_of_means)
    assert one.estimate == pytest.approx(2 * 0.5 * 0.5 / 1.0) and math.isnan(one.low) and math.isnan(one.high)
    # recall's units lie in other clusters than precision's: no interval rather than a wrong one
    apart = combined_ci([totals([1.0, 0.0], ["a", "b"]), totals([0.5, 0.5], ["a", "c"])], f1_of_means)
    assert math.isnan(apart.estimate) and math.isnan(apart.low)
    zeros = combined_ci([totals([0.0] * 3, list("abc")), totals([0.0] * 3, list("abc"))], f1_of_means)
    assert (zeros.estimate, zeros.low, zeros.high) == (0.0, 0.0, 0.0)   # every resample: F1 0


def test_paired_delta_recomputes_both_f1s_on_the_same_clusters():
    # A: clusters x (P 1, R 1), y (P 0, R 1) → P̄ .5, R̄ 1 → F1 2/3; B: x (1, 0), y (1, 0) → F1 0.
    # Delta 2/3. Resamples: xx (p=1/4): A's F1 1 − 0 = 1; xy/yx (p=1/2): 2/3; yy (p=1/4): 0 − 0 = 0.
    clusters = ["x", "y"]
    a = [totals([1.0, 0.0], clusters), totals([1.0, 1.0], clusters)]
    b = [totals([1.0, 1.0], clusters), totals([0.0, 0.0], clusters)]
    wide = combined_delta_ci(a, b, f1_of_means, BootstrapSettings(n_resamples=4000))
    assert (wide.estimate, wide.low, wide.high, wide.clusters) == (pytest.approx(2 / 3), 0.0, 1.0, 2)
    narrow = combined_delta_ci(a, b, f1_of_means, BootstrapSettings(confidence=0.4, n_resamples=4000))
    assert (narrow.low, narrow.high) == (pytest.approx(2 / 3), pytest.approx(2 / 3))


class _WithF1(Benchmark):
    name = "b"
    comparisons = [Comparison("condition", "on", "off")]
    combined_metrics = [F1]


def _unit_rows(p, r, clusters, condition):
    return [{"benchmark": "b", "model": "m", "condition": condition, "judge": "j", "metric": metric,
             "cluster": c, "value": v} for metric, values in (("precision", p), ("recall", r))
            for v, c in zip(values, clusters)]


def test_with_intervals_and_deltas_carry_the_declared_combined_metric():
    p_on, r_on, clusters = _instances(seed=2, shift=0.5)
    p_off, r_off, _ = _instances(seed=2)
    scores = pa.Table.from_pylist(_unit_rows(p_on, r_on, clusters, "on") + _unit_rows(p_off, r_off, clusters, "off"),
                                  schema=UNIT_SCORE_SCHEMA)
    metrics = metric_rows([{"benchmark": "b", "model": "m", "condition": c, "judge": "j", "metric": "F1",
                            "value": 0.5, "n": len(clusters)} for c in ("on", "off")])
    out = {r["condition"]: r for r in with_intervals(metrics, pa.table({"x": [1]}), {"b": _WithF1()}, {},
                                                       scores=scores).to_pylist()}
    expected = combined_ci([totals(p_on, clusters), totals(r_on, clusters)], f1_of_means)
    assert (out["on"]["ci_low"], out["on"]["ci_high"]) == (expected.low, expected.high)
    assert out["off"]["ci_low"] < out["on"]["ci_low"]
    deltas = {r["metric"]: r for r in paired_comparisons(scores, {"b": _WithF1()}).to_pylist()}
    assert list(deltas) == ["F1", "precision", "recall"]   # in the order of their keys
    f1 = lambda p, r: 2 * (sum(p) / len(p)) * (sum(r) / len(r)) / (sum(p) / len(p) + sum(r) / len(r))  # noqa: E731
    assert deltas["F1"]["delta"] == pytest.approx(f1(p_on, r_on) - f1(p_off, r_off))
    assert deltas["F1"]["ci_low"] > 0 and deltas["F1"]["clusters"] == 30
    # a benchmark that declares nothing gets no F1 row, and no F1 interval
    plain = Benchmark()
    assert "F1" not in {r["metric"] for r in paired_comparisons(scores, {"b": plain}).to_pylist()}
    assert with_intervals(metrics, pa.table({"x": [1]}), {"b": plain}, {}, scores=scores)["ci_low"][0].as_py() is None
