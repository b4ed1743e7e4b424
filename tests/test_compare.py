"""Run comparison (prefray.engine.results.compare, prefray.app.compare).

Fast: the statistics are checked on synthetic per-unit scores (a planted effect beside null cells;
the delta and interval against an independent numpy bootstrap; the permutation p against a hand
enumeration; Holm and BH by hand), the pairing on synthetic rows, and the command on two run dirs
written here (a manifest and one shard each, scored by the toy benchmark below), in this process.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from prefray import app
from prefray.app import catalog
from prefray.engine.benchmark import UNIT_SCORE_SCHEMA, Benchmark
from prefray.engine.results.combined import Combined
from prefray.engine.results.compare import (
    CompareSettings,
    NotComparable,
    adjusted,
    combined_flip_p,
    compare_rows,
    compare_scores,
    shared_units,
    sign_flip_p,
)
from prefray.engine.results.stats import BootstrapSettings
from prefray.engine.rundir.shards import SHARD_SCHEMA, write_shard


def scores(cells: dict[tuple[str, str], list[tuple[str, float]]], model: str = "m") -> pa.Table:
    """UNIT_SCORE_SCHEMA rows: {(condition, metric): [(cluster, value), ...]} of benchmark "toy"."""
    rows = [{"benchmark": "toy", "model": model, "condition": condition, "judge": "j", "metric": metric,
             "cluster": cluster, "value": value}
            for (condition, metric), units in cells.items() for cluster, value in units]
    return pa.Table.from_pylist(rows, schema=UNIT_SCORE_SCHEMA)


def planted(rng: np.random.Generator, clusters: int, per_cluster: int, p: float,
            cluster_sd: float = 0.1) -> list[tuple[str, float]]:
    """0/1 units around a per-cluster rate drawn near `p` (clusters differ, as profiles do)."""
    out = []
    for c in range(clusters):
        rate = min(1.0, max(0.0, p + rng.normal(0, cluster_sd)))
        out += [(f"c{c}", float(rng.random() < rate)) for _ in range(per_cluster)]
    return out


def test_a_planted_effect_survives_adjustment_and_null_cells_do_not():
    rng = np.random.default_rng(11)
    a_cells, b_cells = {}, {}
    a_cells[("effect", "rate")] = planted(rng, 40, 6, 0.30)
    b_cells[("effect", "rate")] = planted(rng, 40, 6, 0.60)
    for i in range(6):   # six cells where both runs draw from the same distribution
        a_cells[(f"null{i}", "rate")] = planted(rng, 40, 6, 0.45)
        b_cells[(f"null{i}", "rate")] = planted(rng, 40, 6, 0.45)
    table = adjusted(compare_scores(scores(a_cells), scores(b_cells), CompareSettings(n_permutations=4999)))
    rows = {r["condition"]: r for r in table.to_pylist()}
    assert rows["effect"]["delta"] > 0.2 and rows["effect"]["ci_low"] > 0
    assert rows["effect"]["p_adjusted"] < 0.01
    for i in range(6):
        assert rows[f"null{i}"]["p_adjusted"] > 0.05, rows[f"null{i}"]
    # Holm never lowers a p-value, and the family is every row
    assert all(r["p_adjusted"] >= r["p"] for r in rows.values())
    assert table.num_rows == 7


def test_delta_and_interval_match_an_independent_cluster_bootstrap():
    rng = np.random.default_rng(3)
    sizes = rng.integers(1, 6, size=15)
    a_units = [(f"c{c}", float(rng.integers(0, 2))) for c in range(15) for _ in range(sizes[c])]
    b_units = [(f"c{c}", float(rng.integers(0, 2))) for c in range(15) for _ in range(sizes[c] + 1)]
    table = compare_scores(scores({("x", "rate"): a_units}), scores({("x", "rate"): b_units}),
                           CompareSettings(boot=BootstrapSettings(n_resamples=4000, seed=5)))
    row = table.to_pylist()[0]
    # the delta: B's mean over its units minus A's, by hand
    mean_a = sum(v for _, v in a_units) / len(a_units)
    mean_b = sum(v for _, v in b_units) / len(b_units)
    assert row["delta"] == pytest.approx(mean_b - mean_a, abs=1e-12)
    assert (row["value_a"], row["value_b"]) == (pytest.approx(mean_a), pytest.approx(mean_b))
    assert (row["n_a"], row["n_b"], row["n_clusters"]) == (len(a_units), len(b_units), 15)
    # the interval: a plain loop that draws clusters with replacement, both runs' units together
    by_a = {f"c{c}": [v for k, v in a_units if k == f"c{c}"] for c in range(15)}
    by_b = {f"c{c}": [v for k, v in b_units if k == f"c{c}"] for c in range(15)}
    loop = np.random.default_rng(99)
    deltas = []
    for _ in range(20000):
        drawn = [f"c{i}" for i in loop.integers(0, 15, size=15)]
        a = [v for c in drawn for v in by_a[c]]
        b = [v for c in drawn for v in by_b[c]]
        deltas.append(sum(b) / len(b) - sum(a) / len(a))
    low, high = np.percentile(deltas, [2.5, 97.5])
    assert row["ci_low"] == pytest.approx(low, abs=0.02)
    assert row["ci_high"] == pytest.approx(high, abs=0.02)


def test_the_permutation_p_is_the_share_of_within_cluster_swaps_at_least_as_extreme():
    # Three clusters, one unit each per side: A = (0, 0, 0), B = (1, 1, 1); delta = 1. Swapping a
    # cluster exchanges its A and B value; of the 8 swap patterns only "none" and "all" give
    # |delta| = 1 (the others ±1/3): p = 2/8.
    a = (np.zeros(3), np.ones(3))
    b = (np.ones(3), np.ones(3))
    assert sign_flip_p(a, b) == pytest.approx(2 / 8)
    # A = (0, 0, 1): the third cluster ties (1 and 1), so swapping it changes nothing: p = 4/8
    assert sign_flip_p((np.array([0.0, 0.0, 1.0]), np.ones(3)), b) == pytest.approx(4 / 8)
    # clusters of different sizes: A sums (0, 0), sizes (1, 3); B sums (1, 3), sizes (1, 3):
    # observed 4/4 − 0 = 1; swap c0: A = (1+0)/4, B = (0+3)/4, |delta| = 1/2; swap c1: A = 3/4,
    # B = 1/4, 1/2; swap both: 1. So p = 2/4.
    assert sign_flip_p((np.zeros(2), np.array([1.0, 3.0])), (np.array([1.0, 3.0]), np.array([1.0, 3.0]))) == 0.5
    # no difference at all: every swap ties with the observed 0
    assert sign_flip_p(a, a) == 1.0
    # many clusters: random swaps, the observed one counted, (1 + hits) / (1 + draws)
    many_a = (np.zeros(30), np.ones(30))
    many_b = (np.ones(30), np.ones(30))
    settings = CompareSettings(n_permutations=999)
    assert sign_flip_p(many_a, many_b, settings) == pytest.approx(1 / 1000)


def f1_of_means(p, r):
    p, r = np.asarray(p, float), np.asarray(r, float)
    return np.divide(2 * p * r, p + r, out=np.zeros(np.shape(p + r)), where=p + r > 0)


def test_a_combined_metric_is_compared_as_the_f1_of_each_runs_means():
    """Clusters x, y, one instance each. Run A: x (P 1, R 0), y (P 0, R 0) → P̄ .5, R̄ 0 → F1 0.
    Run B: x (P 1, R 1), y (P .5, R .5) → P̄ .75, R̄ .75 → F1 .75. Delta .75.
    Swaps (a cluster's P and R units exchanged together): none .75; x: A' = {(1, 1), (0, 0)} → .5,
    B' = {(1, 0), (.5, .5)} → P̄ .75, R̄ .25 → .375, delta −.125; y: +.125; both: −.75 → p = 2/4.
    Resamples: xx (p=1/4): 1 − 0 = 1; yy (1/4): .5 − 0 = .5; xy (1/2): .75 → 95% [.5, 1], 40% [.75, .75]."""
    a = scores({("c", "precision"): [("x", 1.0), ("y", 0.0)], ("c", "recall"): [("x", 0.0), ("y", 0.0)]})
    b = scores({("c", "precision"): [("x", 1.0), ("y", 0.5)], ("c", "recall"): [("x", 1.0), ("y", 0.5)]})
    combined = {"toy": [Combined("F1", ("precision", "recall"), f1_of_means)]}
    wide = compare_scores(a, b, CompareSettings(boot=BootstrapSettings(n_resamples=4000)), combined=combined)
    rows = {r["metric"]: r for r in wide.to_pylist()}
    assert list(rows) == ["F1", "precision", "recall"]   # in key order, beside the plain metrics
    f1 = rows["F1"]
    assert (f1["value_a"], f1["value_b"], f1["delta"]) == (0.0, pytest.approx(0.75), pytest.approx(0.75))
    assert (f1["ci_low"], f1["ci_high"], f1["p"]) == (pytest.approx(0.5), pytest.approx(1.0), 0.5)
    assert (f1["n_clusters"], f1["n_a"], f1["n_b"]) == (2, 2, 2)
    narrow = compare_scores(a, b, CompareSettings(boot=BootstrapSettings(confidence=0.4, n_resamples=4000)),
                            combined=combined).to_pylist()[0]
    assert (narrow["ci_low"], narrow["ci_high"]) == (pytest.approx(0.75), pytest.approx(0.75))
    # the swap test by itself, and without a declared combined metric no F1 row
    sums_a, sums_b = np.array([[1.0, 0.0], [0.0, 0.0]]), np.array([[1.0, 0.5], [1.0, 0.5]])
    assert combined_flip_p((sums_a, np.ones((2, 2))), (sums_b, np.ones((2, 2))), f1_of_means) == 0.5
    assert "F1" not in compare_scores(a, b)["metric"].to_pylist()


def test_holm_and_benjamini_hochberg_by_hand():
    table = pa.table({"p": pa.array([0.01, 0.04, 0.03, float("nan")]),
                      "p_adjusted": pa.nulls(4, pa.float64())})
    holm = adjusted(table, "holm")["p_adjusted"].to_pylist()
    # sorted 0.01, 0.03, 0.04 × 3, 2, 1 → 0.03, 0.06, 0.04 → monotone: 0.03, 0.06, 0.06
    assert holm[:3] == pytest.approx([0.03, 0.06, 0.06])
    assert holm[3] is None
    bh = adjusted(table, "bh")["p_adjusted"].to_pylist()
    # sorted 0.01, 0.03, 0.04 × 3/1, 3/2, 3/3 → 0.03, 0.045, 0.04 → step-up minimum: 0.03, 0.04, 0.04
    assert bh[:3] == pytest.approx([0.03, 0.04, 0.04])


def shard_rows(units: list[tuple[str, int, str]], model: str = "m", condition: str = "c",
               benchmark: str = "toy") -> list[dict]:
    """Stored rows of the toy benchmark: (instance, sample, parsed value) per unit."""
    rows = []
    for instance, sample, value in units:
        row = {name: None for name in SHARD_SCHEMA.names}
        row.update({"unit_id": f"{benchmark}-{model}-{condition}-{instance}-{sample}", "attempt": 0,
                    "benchmark": benchmark, "model": model, "condition": condition, "stage": "answer",
                    "role": "subject", "judge": "", "instance_id": instance, "item": "", "sample": sample,
                    "status": "ok", "text": value, "parsed_json": json.dumps({"value": float(value)}),
                    "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0, "cached": False})
        rows.append(row)
    return rows


def test_pairing_counts_the_units_one_run_lacks_and_keeps_only_the_shared_ones():
    a = pa.Table.from_pylist(shard_rows([("p1-q1", 0, "1"), ("p1-q2", 0, "0"), ("p2-q1", 0, "1")]),
                             schema=SHARD_SCHEMA)
    b = pa.Table.from_pylist(shard_rows([("p1-q1", 0, "0"), ("p2-q1", 0, "0"), ("p2-q1", 1, "1"),
                                         ("p3-q1", 0, "1")]), schema=SHARD_SCHEMA)
    mask_a, mask_b, sharing = shared_units(a, b)
    assert mask_a.to_pylist() == [True, False, True]
    assert mask_b.to_pylist() == [True, True, False, False]
    (row,) = sharing.to_pylist()
    assert (row["shared"], row["only_a"], row["only_b"]) == (2, 1, 2)
    # across the model: another model's run of the same units pairs on them
    other = pa.Table.from_pylist(shard_rows([("p1-q1", 0, "1")], model="n"), schema=SHARD_SCHEMA)
    assert shared_units(a, other)[0].to_pylist() == [False, False, False]
    mask_a, _, sharing = shared_units(a, other, across=("model",))
    assert mask_a.to_pylist() == [True, False, False]
    assert sharing.to_pylist()[0]["model"] == "m"
    # a run with two models cannot be paired across the model
    both = pa.concat_tables([a, other])
    with pytest.raises(NotComparable, match="2 values of model"):
        shared_units(both, other, across=("model",))


def test_a_set_level_judging_stage_named_by_its_content_is_kept_whole_in_each_run():
    def merged(units, content):   # one judge unit per query, named by the options it merged (as PRISK's V_q)
        rows = shard_rows(units)
        for row in rows:
            row.update(stage="merge", role="judge", judge="j", instance_id=f"{row['instance_id']}#{content}")
        return rows

    a = pa.Table.from_pylist(shard_rows([("q1", 0, "1"), ("q2", 0, "1")]) + merged([("q1", 0, "1")], "aaa"),
                             schema=SHARD_SCHEMA)
    b = pa.Table.from_pylist(shard_rows([("q1", 0, "0"), ("q3", 0, "1")]) + merged([("q1", 0, "1")], "bbb"),
                             schema=SHARD_SCHEMA)
    mask_a, mask_b, sharing = shared_units(a, b)
    assert mask_a.to_pylist() == [True, False, True] and mask_b.to_pylist() == [True, False, True]
    by_stage = {r["stage"]: r for r in sharing.to_pylist()}
    assert by_stage["merge"]["whole"] and (by_stage["merge"]["shared"], by_stage["merge"]["only_a"]) == (0, 1)
    assert not by_stage["answer"]["whole"]
    # an evaluated model's stage with nothing in common is never kept whole: those answers differ
    c = pa.Table.from_pylist(shard_rows([("q9", 0, "1")]), schema=SHARD_SCHEMA)
    assert not any(shared_units(a, c)[0].to_pylist()[:2])


def toy_scores(rows: pa.Table, settings=None) -> pa.Table:
    """Per unit: its parsed value, clustered by the profile (the instance id's part before '-')."""
    out = [{"benchmark": r["benchmark"], "model": r["model"], "condition": r["condition"], "judge": "",
            "metric": "value", "cluster": r["instance_id"].split("-")[0],
            "value": json.loads(r["parsed_json"])["value"]}
           for r in rows.to_pylist() if r["status"] == "ok"]
    return pa.Table.from_pylist(out, schema=UNIT_SCORE_SCHEMA)


class Toy(Benchmark):
    """The toy benchmark the run dirs below name, installed for a test by the `toy` fixture."""

    name = "toy"

    def unit_scores(self, rows: pa.Table, settings) -> pa.Table:
        return toy_scores(rows)


TOY = Toy()


@pytest.fixture
def toy(monkeypatch):
    """The catalog with the toy benchmark installed beside the others (as a plugin would be), under
    two names: "elsewhere" is a benchmark no toy run shares a unit with."""
    toys = {name: catalog.Installed(name, "tests.test_compare:TOY", Path(__file__).parent, False)
            for name in ("toy", "elsewhere")}
    everything = {**catalog.installed(), **toys}
    monkeypatch.setattr(catalog, "installed", lambda: everything)


def test_compare_rows_scores_only_the_shared_units():
    a = pa.Table.from_pylist(shard_rows([("p1-q1", 0, "1"), ("p1-q2", 0, "1"), ("p2-q1", 0, "0")]),
                             schema=SHARD_SCHEMA)
    b = pa.Table.from_pylist(shard_rows([("p1-q1", 0, "0"), ("p2-q1", 0, "1")]), schema=SHARD_SCHEMA)
    table, sharing = compare_rows(a, b, toy_scores, toy_scores, names=("A", "B"))
    (row,) = table.to_pylist()
    # p1-q2 is A's only: left out, so A's value is (1 + 0) / 2, not 2/3
    assert (row["value_a"], row["value_b"], row["delta"]) == (0.5, 0.5, 0.0)
    assert (row["n_pairs"], row["n_clusters"], row["run_a"], row["run_b"]) == (2, 2, "A", "B")
    assert sharing.to_pylist()[0]["only_a"] == 1
    c = pa.Table.from_pylist(shard_rows([("p9-q9", 0, "1")], benchmark="other"), schema=SHARD_SCHEMA)
    with pytest.raises(NotComparable, match="share no unit"):
        compare_rows(a, c, toy_scores, toy_scores)


def test_across_the_model_pairs_two_models_on_the_same_units():
    a = pa.Table.from_pylist(shard_rows([("p1-q1", 0, "1"), ("p2-q1", 0, "1")], model="m"), schema=SHARD_SCHEMA)
    b = pa.Table.from_pylist(shard_rows([("p1-q1", 0, "0"), ("p2-q1", 0, "1")], model="n"), schema=SHARD_SCHEMA)
    with pytest.raises(NotComparable, match="share no unit"):
        compare_rows(a, b, toy_scores, toy_scores)
    table, sharing = compare_rows(a, b, toy_scores, toy_scores, across=("model",))
    (row,) = table.to_pylist()
    assert (row["model"], row["versus"], row["value_a"], row["value_b"], row["delta"]) == ("m", "model=n", 1.0, 0.5,
                                                                                          -0.5)
    assert sharing.to_pylist()[0]["shared"] == 2


def write_run(run_dir: Path, rows: list[dict]) -> Path:
    """A run dir as a launch leaves it, as far as compare reads: its manifest and its shards."""
    config = {"benchmark": {"name": rows[0]["benchmark"], "impl": "tests.test_compare:TOY"}, "model": {"name": "m"},
              "condition": {"name": "c"}, "judge": {"name": ""}, "run": {"dir": str(run_dir)}}
    run_dir.mkdir(parents=True)
    (run_dir / "manifest.json").write_text(json.dumps(
        {"runs": [{"jobs": [{"benchmark": rows[0]["benchmark"], "model": "m", "condition": "c", "judge": "",
                             "config": config}]}]}))
    write_shard(run_dir / "shards" / f"benchmark={rows[0]['benchmark']}" / "model=m" / "condition=c", "answer", rows)
    return run_dir


def planted_run(run_dir: Path, rng: np.random.Generator, rate: float) -> Path:
    units = [(f"p{p}-q{q}", 0, str(int(rng.random() < rate))) for p in range(30) for q in range(4)]
    return write_run(run_dir, shard_rows(units))


def test_the_command_writes_the_csv_and_the_forest_plot(tmp_path, capsys, toy):
    rng = np.random.default_rng(1)
    first = planted_run(tmp_path / "a", rng, 0.2)
    second = planted_run(tmp_path / "b", rng, 0.7)
    same = planted_run(tmp_path / "c", rng, 0.2)
    out = tmp_path / "out" / "compare.csv"
    code = app.main("compare", [str(first), str(second), str(same), "--csv", str(out), "--adjust", "bh"])
    assert code == 0, capsys.readouterr()
    table = pacsv.read_csv(out)
    for column in ("delta", "ci_low", "ci_high", "p", "p_adjusted", "benchmark", "metric", "model", "condition",
                   "judge", "n_pairs", "n_clusters", "value_a", "value_b"):
        assert column in table.column_names
    rows = {r["run_b"]: r for r in table.to_pylist()}
    assert rows[str(second)]["p_adjusted"] < 0.01 and rows[str(second)]["delta"] > 0.3
    assert rows[str(same)]["p_adjusted"] > 0.05
    assert rows[str(second)]["n_pairs"] == 120 and rows[str(second)]["n_clusters"] == 30
    assert out.with_suffix(".png").stat().st_size > 0
    assert (tmp_path / "out" / "compare-units.csv").exists()
    printed = capsys.readouterr().out
    assert "120 unit(s) shared" in printed and "delta" in printed


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, toy):
    rng = np.random.default_rng(2)
    first = planted_run(tmp_path / "a", rng, 0.5)
    (tmp_path / "empty").mkdir()
    other = write_run(tmp_path / "other", shard_rows([("z1-q1", 0, "1")], benchmark="elsewhere"))
    for argv, says in (([str(first), str(tmp_path / "empty")], "not a prefray run directory"),
                       ([str(first), str(tmp_path / "missing")], "no such run directory"),
                       ([str(first), str(other)], "share no unit"),
                       ([str(first)], "at least two runs"),
                       ([str(first), str(first), "--adjust", "bonferroni"], "invalid choice")):
        assert app.main("compare", argv) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and says in err, err
