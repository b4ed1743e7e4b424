"""Inter-judge agreement over small in-memory shard tables (no Ray, no files)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from prefray.engine.results.agreement import (
    AGREEMENT_SCHEMA,
    PANEL_AGREEMENT_SCHEMA,
    VALUES_SCHEMA,
    judge_agreement,
    judge_values,
)
from prefray.engine.rundir.shards import SHARD_SCHEMA


def row(judge: str | None, parsed: object, instance: str = "i0", *, role: str = "judge", status: str = "ok",
        stage: str = "grade", benchmark: str = "bench", sample: int = 0) -> dict:
    base = {field.name: None for field in SHARD_SCHEMA}
    base.update({"unit_id": f"{judge}-{instance}-{sample}", "attempt": 0, "benchmark": benchmark, "model": "m",
                 "condition": "c", "stage": stage, "role": role, "judge": judge, "instance_id": instance,
                 "item": "x", "sample": sample, "status": status,
                 "parsed_json": parsed if isinstance(parsed, str) or parsed is None else json.dumps(parsed)})
    return base


def table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SHARD_SCHEMA)


def judged(judge: str, values: list[object], stage: str = "grade") -> list[dict]:
    key = "applied" if all(isinstance(v, bool) for v in values) else "score"
    return [row(judge, {key: v}, f"i{k}", stage=stage) for k, v in enumerate(values)]


def pair_rows(result: pa.Table) -> list[dict]:
    """The rows of judge pairs (the panel row of a stage, judge_a == "panel", is tested in test_judge_panel)."""
    return [r for r in result.to_pylist() if r["judge_a"] != "panel"]


def only(result: pa.Table) -> dict:
    (pair,) = pair_rows(result)
    return pair


def test_extraction_rules():
    rows = table([
        row("j1", {"reason": "text", "applied": True, "score": 3}, "a"),  # string skipped, bool first
        row("j1", {"nested": {"score": 1}, "list": [1], "score": 4}, "b"),  # non-scalars skipped
        row("j1", {"score": 7.5, "reason": "..."}, "c"),
        row("j1", {"reason": "no number"}, "d"),  # nothing usable: dropped
        row("j1", "not json", "e"),
        row("j1", None, "f"),
        row("j1", {"applied": False}, "g", status="failed"),
        row("j1", {"applied": False}, "h", status="skipped"),
        row("subj", {"applied": False}, "k", role="subject"),
    ])
    values = judge_values(rows)
    assert values.schema == VALUES_SCHEMA
    got = [(r["instance_id"], r["field"], r["value"], r["kind"]) for r in values.to_pylist()]
    assert got == [("a", "applied", 1.0, "binary"), ("b", "score", 4.0, "scored"), ("c", "score", 7.5, "scored")]
    assert values.column("judge").to_pylist() == ["j1"] * 3


def test_bool_checked_before_int():
    values = judge_values(table([row("j", {"ok": False, "n": 1}), row("j", {"n": 0, "ok": True}, "i1")]))
    assert values.to_pylist()[0]["kind"] == "binary" and values.to_pylist()[0]["value"] == 0.0
    assert values.to_pylist()[1]["kind"] == "scored" and values.to_pylist()[1]["field"] == "n"


def test_cohen_kappa_hand_computed():
    # 10 units: both 1 on 5, a=1/b=0 on 1, a=0/b=1 on 1, both 0 on 3.
    # po = (5 + 3) / 10 = 0.8; a says 1 on 6/10, b says 1 on 6/10
    # pe = 0.6*0.6 + 0.4*0.4 = 0.52; kappa = (0.8 - 0.52) / (1 - 0.52) = 0.28 / 0.48 = 0.58333...
    a = [True] * 5 + [True] + [False] + [False] * 3
    b = [True] * 5 + [False] + [True] + [False] * 3
    result = judge_agreement(judge_values(table(judged("ja", a) + judged("jb", b))))
    assert result.schema == PANEL_AGREEMENT_SCHEMA   # the pairwise columns, then alpha and n_eff
    got = only(result)
    assert (got["judge_a"], got["judge_b"], got["kind"], got["n"]) == ("ja", "jb", "binary", 10)
    assert got["percent_agreement"] == pytest.approx(0.8)
    assert got["cohen_kappa"] == pytest.approx(0.28 / 0.48)
    assert got["pearson"] is None and got["spearman"] is None


def test_kappa_when_chance_agreement_is_one():
    same = only(judge_agreement(judge_values(table(judged("a", [True] * 4) + judged("b", [True] * 4)))))
    assert same["cohen_kappa"] == 1.0 and same["percent_agreement"] == 1.0


def test_scored_percent_pearson_spearman():
    a, b = [1, 2, 3, 4, 5], [1, 3, 2, 5, 10]
    got = only(judge_agreement(judge_values(table(judged("b", b) + judged("a", a)))))
    assert (got["judge_a"], got["judge_b"], got["kind"], got["n"]) == ("a", "b", "scored", 5)
    assert got["percent_agreement"] == pytest.approx(0.2)  # only unit 0 is exactly equal
    assert got["pearson"] == pytest.approx(np.corrcoef(a, b)[0, 1])
    # ranks of b: 1,3,2,4,5 → d² sums to 2 → rho = 1 - 6*2 / (5*(25-1)) = 0.9
    assert got["spearman"] == pytest.approx(0.9)
    assert got["cohen_kappa"] is None


def test_correlations_null_when_short_or_constant():
    short = only(judge_agreement(judge_values(table(judged("a", [1, 2]) + judged("b", [2, 1])))))
    assert short["n"] == 2 and short["pearson"] is None and short["spearman"] is None
    flat = only(judge_agreement(judge_values(table(judged("a", [3, 3, 3]) + judged("b", [1, 2, 3])))))
    assert flat["pearson"] is None and flat["spearman"] is None


def test_three_judges_three_pairs_and_stages_apart():
    rows = judged("j3", [1, 2, 3]) + judged("j1", [1, 2, 3]) + judged("j2", [3, 2, 1])
    rows += judged("j1", [True], stage="other") + judged("j9", [True], stage="other")
    result = judge_agreement(judge_values(table(rows)))
    keys = [(r["stage"], r["judge_a"], r["judge_b"]) for r in result.to_pylist()]
    assert keys == [("grade", "j1", "j2"), ("grade", "j1", "j3"), ("grade", "j2", "j3"), ("grade", "panel", "j1,j2,j3"),
                    ("other", "j1", "j9"), ("other", "panel", "j1,j9")]
    by_pair = {(r["judge_a"], r["judge_b"]): r for r in pair_rows(result)}
    assert by_pair[("j1", "j3")]["pearson"] == pytest.approx(1.0)
    assert by_pair[("j1", "j2")]["spearman"] == pytest.approx(-1.0)


def test_units_of_one_judge_are_not_paired():
    rows = [row("a", {"score": 1}, "shared"), row("b", {"score": 1}, "shared"),
            row("a", {"score": 5}, "only-a"), row("b", {"score": 2}, "only-b"),
            row("a", {"score": 4}, "shared", sample=1), row("c", {"score": 4}, "elsewhere")]
    result = judge_agreement(judge_values(table(rows)))
    pairs = {(r["judge_a"], r["judge_b"]): r for r in pair_rows(result)}
    assert set(pairs) == {("a", "b")}  # a/c and b/c share no unit: omitted (and c is in no panel)
    assert [r["judge_b"] for r in result.to_pylist() if r["judge_a"] == "panel"] == ["a,b"]
    assert pairs[("a", "b")]["n"] == 1 and pairs[("a", "b")]["percent_agreement"] == 1.0


def test_empty_input():
    assert judge_values(table([])).num_rows == 0
    assert judge_agreement(judge_values(table([]))).schema == AGREEMENT_SCHEMA


# -- Krippendorff's alpha ------------------------------------------------------------------------------
from prefray.engine.results.alpha import alpha_ci, krippendorff_alpha  # noqa: E402

NAN = np.nan
# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", the 4 observers x 12 units example
# (unit 12 has one value, so it is not pairable): nominal 0.743, ordinal 0.815, interval 0.849.
TEXTBOOK = [[1, 2, 3, 3, 2, 1, 4, 1, 2, NAN, NAN, NAN],
            [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, NAN, 3],
            [NAN, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, NAN],
            [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, NAN]]


@pytest.mark.parametrize(("level", "expected"), [("nominal", 0.743), ("ordinal", 0.815), ("interval", 0.849)])
def test_alpha_textbook_example(level, expected):
    assert round(krippendorff_alpha(TEXTBOOK, level), 3) == expected


def test_alpha_hand_computed():
    # binary, 2 coders x 4 units: o00 = 2, o01 = o10 = 1, o11 = 4; n0 = 3, n1 = 5, n = 8.
    # alpha = 1 - (n - 1) * (o01 + o10) / (2 * n0 * n1) = 1 - 7 * 2 / 30 = 8/15
    assert krippendorff_alpha([[0, 1, 1, 1], [0, 1, 0, 1]], "nominal") == pytest.approx(8 / 15)
    # values 1,1 | 2,3 | 3,3: o11 = 2, o23 = o32 = 1, o33 = 2; n1 = 2, n2 = 1, n3 = 3, n = 6.
    # interval: D_o part = 2 * 1 = 2, D_e part = 2 * (2*1*1 + 2*3*4 + 1*3*1) = 58 -> 1 - 5 * 2 / 58 = 24/29
    data = [[1, 2, 3], [1, 3, 3]]
    assert krippendorff_alpha(data, "interval") == pytest.approx(24 / 29)
    # ordinal: delta(1,2) = (2 + 1 - 3/2)^2 = 2.25, delta(2,3) = (1 + 3 - 4/2)^2 = 4,
    # delta(1,3) = (2 + 1 + 3 - 5/2)^2 = 12.25; D_o part = 2 * 4 = 8,
    # D_e part = 2 * (2*1*2.25 + 2*3*12.25 + 1*3*4) = 180 -> 1 - 5 * 8 / 180 = 7/9
    assert krippendorff_alpha(data, "ordinal") == pytest.approx(7 / 9)
    # nominal: only the 2 vs 3 pair disagrees: 1 - 5 * 2 / (2 * (2*1 + 2*3 + 1*3)) = 1 - 10/22
    assert krippendorff_alpha(data, "nominal") == pytest.approx(12 / 22)


def test_alpha_missing_values_and_unpairable_units():
    base = [[1, 2, 3], [1, 3, 3]]
    with_missing = [[1, 2, 3, 1, NAN], [1, 3, 3, NAN, NAN], [NAN, NAN, NAN, NAN, NAN]]
    for level in ("nominal", "ordinal", "interval"):
        assert krippendorff_alpha(with_missing, level) == pytest.approx(krippendorff_alpha(base, level))
    assert krippendorff_alpha([[1, NAN], [NAN, 2]]) is None        # no unit with two values
    assert krippendorff_alpha([[2, 2, 2], [2, 2, NAN]]) is None    # one value throughout: D_e = 0
    assert krippendorff_alpha([[1, 2, 3], [1, 2, 3]], "interval") == 1.0


def pairwise_alpha(data: np.ndarray, level: str) -> float:
    """alpha from its pairwise definition (every pair of values from different coders in a unit,
    weighted 1 / (m_u - 1), against every pair of pairable values): independent of the coincidence matrix."""
    units = [[v for v in data[:, u] if not np.isnan(v)] for u in range(data.shape[1])]
    units = [u for u in units if len(u) >= 2]
    pooled = [v for u in units for v in u]
    n = len(pooled)
    ranks = sorted(set(pooled))

    def delta(a, b):
        if level == "nominal":
            return float(a != b)
        if level == "interval":
            return (a - b) ** 2
        low, high = sorted((a, b))
        between = sum(pooled.count(g) for g in ranks if low <= g <= high)
        return (between - (pooled.count(a) + pooled.count(b)) / 2) ** 2

    observed = sum(delta(u[i], u[j]) / (len(u) - 1) for u in units for i in range(len(u)) for j in range(len(u))
                   if i != j) / n
    expected = sum(delta(pooled[i], pooled[j]) for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
    return 1 - observed / expected


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval"])
def test_alpha_matches_the_pairwise_definition(level):
    rng = np.random.default_rng(7)
    for _ in range(5):
        data = rng.integers(1, 5, size=(3, 15)).astype(float)
        data[rng.random(data.shape) < 0.2] = NAN
        assert krippendorff_alpha(data, level) == pytest.approx(pairwise_alpha(data, level))


def test_alpha_bootstrap_interval():
    result = alpha_ci(TEXTBOOK, "nominal", resamples=400, seed=3)
    assert result.alpha == pytest.approx(0.743, abs=5e-4)
    assert result.ci_low < result.alpha < result.ci_high <= 1.0
    assert (result.units, result.values, result.resamples) == (11, 40, 400)
    assert alpha_ci(TEXTBOOK, "nominal", resamples=400, seed=3) == result        # a seed gives one interval
    perfect = alpha_ci([[1, 2, 3, 1], [1, 2, 3, 1]], "nominal", resamples=200)
    assert (perfect.alpha, perfect.ci_low, perfect.ci_high) == (1.0, 1.0, 1.0)
    assert alpha_ci(TEXTBOOK, "interval", resamples=0).ci_low is None
    # draws where every value is one label leave alpha undefined: counted, not in the percentiles
    rare = alpha_ci([[1, 1, 1, 1, 2], [1, 1, 1, 1, 2]], "nominal", resamples=200, seed=1)
    assert 0 < rare.undefined_resamples < 200 and rare.ci_low == 1.0
