"""Paper tables (prefray.engine.results.paper_tables, prefray.app.report): cells from a hand-made
metrics table, the layouts the three benchmarks declare, and the command on a run dir written here."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from prefray import app
from prefray.engine.results.paper_tables import fill, latex, markdown
from prefray.sdk.tables import Column, PaperTable

SCHEMA = pa.schema([("benchmark", pa.string()), ("model", pa.string()), ("condition", pa.string()),
                    ("judge", pa.string()), ("metric", pa.string()), ("value", pa.float64()), ("n", pa.int64()),
                    ("excluded", pa.int64()), ("incomplete_units", pa.int64()), ("complete", pa.bool_()),
                    ("ci_low", pa.float64()), ("ci_high", pa.float64())])


def metric(model: str, metric_: str, value: float, n: int, low=None, high=None, condition="default",
           benchmark="benchpres", judge="j", complete=True) -> dict:
    return {"benchmark": benchmark, "model": model, "condition": condition, "judge": judge, "metric": metric_,
            "value": value, "n": n, "excluded": 0, "incomplete_units": 0 if complete else 2, "complete": complete,
            "ci_low": low, "ci_high": high}


TABLE = PaperTable(name="t", title="T", caption="A table.", benchmark="benchpres", scale=100.0, digits=1,
                   columns=(Column("MR", "MR", "default", group="Rates", best="min"),
                            Column("AAR", "AAR", "default", group="Rates", best="max"),
                            Column("Gap", "AAR-MR", "default")))


def rows() -> pa.Table:
    return pa.Table.from_pylist([
        metric("a", "MR", 0.40, 120, 0.35, 0.46), metric("a", "AAR", 0.80, 60, 0.70, 0.88),
        metric("a", "AAR-MR", 0.40, 180),
        metric("b", "MR", 0.25, 118, 0.20, 0.31, complete=False), metric("b", "AAR", 0.50, 59, 0.41, 0.60),
        metric("b", "MR", 0.99, 5, condition="defense"),                   # another condition: not in the table
    ], schema=SCHEMA)


def test_cells_show_value_interval_and_n_in_the_papers_scale():
    filled = fill(TABLE, rows())
    assert [label for label, _ in filled] == ["a", "b"]
    text = markdown(TABLE, filled)
    # a: MR 40.0 (not the best: b's 25.0 is lower), AAR 80.0 best, gap without an interval
    assert "| a | 40.0 [35.0, 46.0] (120) | **80.0** [70.0, 88.0] (60) | 40.0 (180) |" in text
    # b: the lowest MR in bold, its cell incomplete (†); no AAR-MR row: a dash, never a zero
    assert "| b | **25.0** [20.0, 31.0] (118) † | 50.0 [41.0, 60.0] (59) | – |" in text
    tex = latex(TABLE, filled)
    assert r"\multicolumn{2}{c}{Rates}" in tex and r"\cmidrule(lr){2-3}" in tex
    assert r"\textbf{25.0}\,{\scriptsize [20.0, 31.0] (118)$^\dagger$}" in tex
    assert r"b & " in tex and " & --" in tex
    assert "–" not in tex and "†" not in tex      # plain LaTeX: no Unicode dash or dagger


def test_several_judges_give_a_row_per_model_and_judge():
    table = pa.Table.from_pylist([metric("a", "MR", 0.5, 10, judge="j1"), metric("a", "MR", 0.6, 10, judge="j2"),
                                  metric("a", "AAR-MR", 0.1, 10, judge="")], schema=SCHEMA)
    filled = fill(TABLE, table)
    assert [label for label, _ in filled] == ["a (j1)", "a (j2)"]
    assert [cells[2].value for _, cells in filled] == [pytest.approx(10.0), pytest.approx(10.0)]


def test_the_three_papers_layouts():
    from prefray.benchmarks.benchpres import BENCHMARK as benchpres
    from prefray.benchmarks.cupid import BENCHMARK as cupid
    from prefray.benchmarks.prisk import IRP, NARROWING

    (bp,) = benchpres.paper_tables
    assert [(c.header, c.metric, c.condition) for c in bp.columns] == [
        ("MR", "MR", "default"), ("AAR", "AAR", "default"), ("AAR - MR", "AAR-MR", "default")]
    (cu,) = cupid.paper_tables
    assert [c.group for c in cu.columns[::3]] == ["All Instances", "Consistent", "Contrastive", "Changing",
                                                  "Oracle Setting"]
    assert cu.columns[5].metric == "F1[instance_type=consistent]" and cu.columns[-1].condition == "oracle"
    pr, mitigation = IRP.paper_tables
    assert [c.condition for c in pr.columns[:4]] == ["base", "profile", "retrieval", "profile_retrieval"]
    assert {c.benchmark for c in pr.columns} == {"prisk_irp", "prisk_narrowing", "prisk_sycophancy"}
    assert all(c.best == "min" for c in pr.columns)   # "Bold number is the lowest value in the column"
    assert mitigation.name == "prisk_table4"
    assert tuple(NARROWING.paper_tables) == (pr, mitigation)  # the three PRISK benchmarks share the tables


def write_run(run_dir: Path, metrics: pa.Table) -> Path:
    run_dir.mkdir(parents=True)
    config = {"benchmark": {"name": "benchpres", "impl": "prefray.benchmarks.benchpres:BENCHMARK"}}
    (run_dir / "manifest.json").write_text(json.dumps(
        {"runs": [{"jobs": [{"benchmark": "benchpres", "model": "a", "condition": "default", "judge": "j",
                             "config": config}]}]}))
    pq.write_table(metrics, run_dir / "metrics.parquet")
    return run_dir


def test_the_command_writes_latex_and_markdown(tmp_path, capsys):
    run_dir = write_run(tmp_path / "run", rows())
    assert app.main("report", [str(run_dir), "--latex"]) == 0
    tex = (run_dir / "tables" / "benchpres_table1.tex").read_text()
    assert r"\begin{table*}" in tex and r"40.00\,{\scriptsize [35.00, 46.00] (120)}" in tex
    assert not (run_dir / "tables" / "benchpres_table1.md").exists()
    assert app.main("report", [str(run_dir), "--markdown", "--out", str(tmp_path / "out")]) == 0
    assert "| a | 40.00 [35.00, 46.00] (120) |" in (tmp_path / "out" / "benchpres_table1.md").read_text()
    assert "wrote" in capsys.readouterr().out


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    no_metrics = write_run(tmp_path / "run", rows())
    (no_metrics / "metrics.parquet").unlink()
    for argv, says in (([str(tmp_path / "empty")], "not a prefray run directory"),
                       ([str(no_metrics)], "no metrics.parquet")):
        assert app.main("report", argv) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and says in err, err


def prisk_run(run_dir: Path, metrics: list[dict], deltas: list[dict]) -> Path:
    from prefray.engine.results.stats import DELTA_SCHEMA

    run_dir.mkdir(parents=True)
    config = {"benchmark": {"name": "prisk_irp", "impl": "prefray.benchmarks.prisk:IRP"}}
    (run_dir / "manifest.json").write_text(json.dumps(
        {"runs": [{"jobs": [{"benchmark": "prisk_irp", "model": "a", "condition": "base", "judge": "j",
                             "config": config}]}]}))
    pq.write_table(pa.Table.from_pylist(metrics, schema=SCHEMA), run_dir / "metrics.parquet")
    pq.write_table(pa.Table.from_pylist(deltas, schema=DELTA_SCHEMA), run_dir / "deltas.parquet")
    return run_dir


def prisk_metric(metric_: str, condition: str, value: float, n: int, benchmark: str = "prisk_irp",
                 judge: str = "j") -> dict:
    return metric("a", metric_, value, n, condition=condition, benchmark=benchmark, judge=judge)


def delta(metric_: str, value: float, low: float, high: float, clusters: int, benchmark: str = "prisk_irp",
          judge: str = "j", a: str = "reflection", b: str = "profile_retrieval") -> dict:
    return {"benchmark": benchmark, "model": "a", "condition": "", "judge": judge, "metric": metric_,
            "compared": "condition", "a": a, "b": b, "delta": value, "clusters": clusters, "ci_low": low,
            "ci_high": high}


def test_prisk_table2_irp_is_the_synthetic_items_judge_score(tmp_path):
    """Paper §3.3: "For evaluation on the synthetic data, we adopt an LLM judge ... In Table 2, the
    score is normalized to a 0-100% scale": Table 2's IRP column reads IRP_score[kind=synthetic], not
    IRP_score (which adds the benchmark-adapted items)."""
    metrics = [prisk_metric("IRP_score", c, 20.0, 40) for c in ("base", "profile", "retrieval", "profile_retrieval")]
    metrics += [prisk_metric("IRP_score[kind=synthetic]", c, v, 10)
                for c, v in (("base", 90.0), ("profile", 60.0), ("retrieval", 80.0), ("profile_retrieval", 55.0))]
    run_dir = prisk_run(tmp_path / "run", metrics, [])
    assert app.main("report", [str(run_dir), "--markdown"]) == 0
    text = (run_dir / "tables" / "prisk_table2.md").read_text()
    assert "| a | 90.0 (10) | 60.0 (10) | 80.0 (10) | 55.0 (10) | – | – | – | – | – | – | – | – |" in text
    assert "20.0" not in text


def test_prisk_table4_before_after_and_the_paired_delta(tmp_path):
    """Paper Table 4: "before vs. after self-reflection under the profile + retrieval setting.
    Δ = After − Before"; the Δ cells are the paired differences of deltas.parquet (n = queries),
    IRP accuracy's included."""
    metrics = [prisk_metric("IRP_score[kind=synthetic]", "profile_retrieval", 40.0, 20),
               prisk_metric("IRP_score[kind=synthetic]", "reflection", 70.0, 20),
               prisk_metric("IRP_accuracy", "profile_retrieval", 80.0, 30, judge=""),
               prisk_metric("IRP_accuracy", "reflection", 75.0, 30, judge=""),
               prisk_metric("NAR_UIR_union", "profile_retrieval", 50.0, 8, "prisk_narrowing", judge=""),
               prisk_metric("NAR_UIR_union", "reflection", 62.5, 8, "prisk_narrowing", judge=""),
               prisk_metric("SYC_score", "profile_retrieval", 25.0, 12, "prisk_sycophancy"),
               prisk_metric("SYC_score", "reflection", 37.5, 12, "prisk_sycophancy")]
    deltas = [delta("IRP_score[kind=synthetic]", 30.0, 20.0, 40.0, 5),
              delta("IRP_score[kind=synthetic]", 50.0, 1.0, 2.0, 5, b="base"),     # another comparison: not read
              delta("IRP_accuracy", -5.0, -12.5, 2.5, 10, judge=""),
              delta("NAR_UIR_union", 12.5, 0.0, 25.0, 2, "prisk_narrowing", judge=""),
              delta("SYC_score", 12.5, 6.25, 18.75, 4, "prisk_sycophancy")]
    run_dir = prisk_run(tmp_path / "run", metrics, deltas)
    assert app.main("report", [str(run_dir)]) == 0
    text = (run_dir / "tables" / "prisk_table4.md").read_text()
    # After − Before: 70 − 40 = 30, 75 − 80 = −5, 62.5 − 50 = 12.5, 37.5 − 25 = 12.5
    assert ("| a | 40.0 (20) | 70.0 (20) | 30.0 [20.0, 40.0] (5) | 80.0 (30) | 75.0 (30) | -5.0 [-12.5, 2.5] (10) "
            "| 50.0 (8) | 62.5 (8) | 12.5 [0.0, 25.0] (2) | 25.0 (12) | 37.5 (12) | 12.5 [6.2, 18.8] (4) |") in text
    assert "IRP accuracy Δ" in text
    tex = (run_dir / "tables" / "prisk_table4.tex").read_text()
    assert r"$\Delta$" in tex and "Δ" not in tex
