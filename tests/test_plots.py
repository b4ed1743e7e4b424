"""Which figures the metrics table turns into."""

from __future__ import annotations

import re
import subprocess
import sys

import pyarrow as pa
import pytest

from prefray.engine.benchmark import Benchmark, metric_rows
from prefray.engine.results.plots import figure_groups


def test_headline_and_breakdown_dimensions_become_separate_figures():
    rows = [
        {"benchmark": "b", "model": m, "condition": "c", "metric": name, "value": v, "n": 4}
        for m in ("m1", "m2")
        for name, v in (("MR", 0.5), ("MR[category=tone]", 0.25), ("MR[category=role]", 0.75),
                        ("MR[domain=legal]", 0.1), ("MR[vs_base]", -0.2), ("AAR", float("nan")))
    ]
    groups = figure_groups(metric_rows(rows))
    assert sorted(groups) == [("b", "MR"), ("b", "MR[category]"), ("b", "MR[domain]")]  # no NaN, no vs_base
    assert sorted(r["slice"] for r in groups[("b", "MR[category]")]) == ["role", "role", "tone", "tone"]
    assert {r["model"] for r in groups[("b", "MR")]} == {"m1", "m2"}
    # by default (run.figures=headline) only the headline metrics get a bar figure, not the run's
    # bookkeeping (failures, truncated or unparsed answers)
    diagnostics = [{**rows[0], "metric": name}
                   for name in ("failures_judge", "parse_failures_infer", "truncated_share")]
    assert sorted(figure_groups(metric_rows(rows + diagnostics), breakdowns=False)) == [("b", "MR")]
    assert len(figure_groups(metric_rows(rows + diagnostics))) == 6


def test_exclusion_counts_and_unmapped_contexts_are_bookkeeping_drawn_only_with_every_figure():
    """BenchPreS counts the units left out of MR and AAR by cause (MR_excluded_cut_reply, ...) and the
    contexts no rule mapped: bookkeeping, as the found line treats them, so the default figures
    (run.figures=headline) leave them to the tables; run.figures=all draws them."""
    from prefray.engine.results.report import found_line

    names = ("MR", "AAR", "MR_excluded_cut_reply", "AAR_excluded_model_failure", "unmapped_contexts")
    rows = metric_rows([{"benchmark": "benchpres", "model": "m", "condition": "c", "metric": name, "value": 1.0,
                         "n": 4} for name in names])
    assert sorted(figure_groups(rows, breakdowns=False)) == [("benchpres", "AAR"), ("benchpres", "MR")]
    assert sorted(name for _, name in figure_groups(rows)) == sorted(names)
    line = found_line(rows, "RUN")
    assert "MR 1.000 (n=4)" in line and "excluded" not in line and "unmapped" not in line


def test_figures_key_selects_headline_all_or_none(tmp_path):
    from prefray.engine.config.schema import RunConfig

    assert RunConfig().figures == "headline"
    rows = [{"benchmark": "b", "model": "m", "condition": "c", "metric": name, "value": 0.5, "n": 4}
            for name in ("MR", "MR[category=tone]")]
    (tmp_path / "headline").mkdir()
    (tmp_path / "all").mkdir()
    headline = write_plots(RunDir(tmp_path / "headline"), _metrics(rows), {"b": [ScatterSpec(x="MR", y="MR")]},
                           breakdowns=False)
    assert sorted(p.stem for p in headline) == ["b__MR", "b__MR", "b__MR_vs_MR", "b__MR_vs_MR"]
    every = write_plots(RunDir(tmp_path / "all"), _metrics(rows), {"b": [ScatterSpec(x="MR", y="MR")]})
    assert sorted({p.stem for p in every}) == ["b__MR", "b__MR_category", "b__MR_vs_MR"]


from prefray.engine.results.plots import ScatterSpec, family_scales, figure_specs, scatter_points, write_plots  # noqa: E402
from prefray.engine.rundir import RunDir  # noqa: E402


def _metrics(rows):
    table = metric_rows([{k: v for k, v in r.items() if k not in ("complete", "ci_low", "ci_high")} for r in rows])
    table = table.append_column("complete", pa.array([r.get("complete", True) for r in rows]))
    table = table.append_column("ci_low", pa.array([r.get("ci_low") for r in rows], pa.float64()))
    return table.append_column("ci_high", pa.array([r.get("ci_high") for r in rows], pa.float64()))


def test_one_scale_per_metric_family():
    table = _metrics([
        {"benchmark": "b", "model": "m", "condition": "c", "metric": "MR", "value": 0.2, "n": 4},
        {"benchmark": "b", "model": "m", "condition": "c", "metric": "MR[category=tone]", "value": 0.9, "n": 2,
         "ci_low": 0.5, "ci_high": 1.0},
        {"benchmark": "b", "model": "m", "condition": "c", "metric": "delta", "value": -0.5, "n": 4,
         "ci_low": -1.5, "ci_high": 0.5},
    ])
    scales = family_scales(table)
    assert scales[("b", "MR")] == (0.0, 1.08)  # rates: one [0, 1] scale for MR and every MR[...]
    low, high = scales[("b", "delta")]
    assert low == pytest.approx(-1.5 - 0.16) and high == pytest.approx(0.5 + 0.16)  # CI bounds included


def test_bars_show_n_intervals_no_data_and_incomplete_cells_in_png_and_svg(tmp_path):
    table = _metrics([
        {"benchmark": "b", "model": "m1", "condition": "default", "metric": "MR", "value": 0.0, "n": 7,
         "ci_low": 0.0, "ci_high": 0.2},
        {"benchmark": "b", "model": "m1", "condition": "defense", "metric": "MR", "value": 0.5, "n": 9,
         "complete": False},
        {"benchmark": "b", "model": "m2", "condition": "default", "metric": "MR", "value": 0.25, "n": 8},
        {"benchmark": "b", "model": "m2", "condition": "defense", "metric": "MR", "value": float("nan"), "n": 0},
    ])
    written = write_plots(RunDir(tmp_path), table)
    assert sorted(p.name for p in written) == ["b__MR.png", "b__MR.svg"]
    assert all(p.stat().st_size > 0 for p in written)
    svg = (tmp_path / "plots" / "b__MR.svg").read_text()
    assert {"n=7", "n=9", "n=8"} <= set(re.findall(r"n=\d+", svg))  # the 0.0 bar is drawn with its n
    assert svg.count(">no data<") == 1  # m2/defense has no value: labelled, not a zero bar
    # the incomplete cell, and not its legend entry, is hatched
    assert len(re.findall(r"fill: url\(#h[0-9a-f]+\)", svg)) == 1


class _Bench(Benchmark):
    figures = [ScatterSpec(x="AAR", y="MR")]


def test_scatter_pairs_one_point_per_model_and_condition_with_whiskers(tmp_path):
    rows = []
    for model, condition, mr, aar in (("m1", "default", 0.4, 0.8), ("m1", "defense", 0.1, 0.6),
                                      ("m2", "default", 0.3, None)):
        rows.append({"benchmark": "b", "model": model, "condition": condition, "metric": "MR", "value": mr, "n": 5,
                     "ci_low": mr - 0.1, "ci_high": mr + 0.1})
        if aar is not None:
            rows.append({"benchmark": "b", "model": model, "condition": condition, "metric": "AAR", "value": aar,
                         "n": 6})
    table = _metrics(rows)
    specs = figure_specs({"b": _Bench(), "other": Benchmark()})
    assert specs == {"b": [ScatterSpec("AAR", "MR")], "other": []}
    points = scatter_points(table, "b", specs["b"][0])
    assert [(p["model"], p["condition"], p["usable"]) for p in points] == [
        ("m1", "default", True), ("m1", "defense", True), ("m2", "default", False)]
    written = write_plots(RunDir(tmp_path), table, specs)
    assert {"b__MR_vs_AAR.png", "b__MR_vs_AAR.svg"} <= {p.name for p in written}
    svg = (tmp_path / "plots" / "b__MR_vs_AAR.svg").read_text()
    assert "m1 / default (n=6/5)" in svg and "no data: m2 / default" in svg


def test_a_relative_change_row_does_not_stretch_its_family_scale():
    # PRISK reports NAR_CR[vs_base] = (value - base) / |base|: a different quantity, not drawn with NAR_CR
    table = _metrics([
        {"benchmark": "b", "model": "m", "condition": "profile", "metric": "NAR_CR", "value": 0.3, "n": 4},
        {"benchmark": "b", "model": "m", "condition": "profile", "metric": "NAR_CR[vs_base]", "value": -0.6, "n": 4},
        {"benchmark": "b", "model": "m", "condition": "profile", "metric": "NAR_CR[item=q1]", "value": 0.5, "n": 2},
    ])
    assert family_scales(table)[("b", "NAR_CR")] == (0.0, 1.08)


def test_a_family_of_negative_values_keeps_zero_on_its_scale():
    table = _metrics([{"benchmark": "b", "model": "m", "condition": "c", "metric": "AAR-MR", "value": -0.25, "n": 5}])
    low, high = family_scales(table)[("b", "AAR-MR")]
    assert low == pytest.approx(-0.25 - 0.02) and high == pytest.approx(0.02)


def _text_order(svg: str, labels: list[str]) -> list[int]:
    """Where each label first appears as a whole SVG text element."""
    return [svg.index(f">{label}<") for label in labels]


def test_benchpres_main_figure_follows_the_paper_axes_with_the_diagonal_and_ideal_point(tmp_path):
    from prefray.benchmarks.benchpres import BENCHMARK

    spec = figure_specs({"benchpres": BENCHMARK})["benchpres"][0]
    assert (spec.x, spec.y, spec.diagonal, spec.ideal) == ("MR", "AAR", True, (0.0, 1.0))  # paper Figure 1
    rows = [{"benchmark": "benchpres", "model": "m", "condition": c, "metric": name, "value": v, "n": 6,
             "ci_low": v - 0.1, "ci_high": v + 0.1}
            for c, mr, aar in (("default", 0.6, 0.7), ("defense", 0.2, 0.5)) for name, v in (("MR", mr), ("AAR", aar))]
    write_plots(RunDir(tmp_path), _metrics(rows), {"benchpres": [spec]})
    svg = (tmp_path / "plots" / "benchpres__AAR_vs_MR.svg").read_text()
    assert "> y = x<" in svg and ">ideal<" in svg and "m / defense (n=6/6)" in svg
    assert (tmp_path / "plots" / "benchpres__AAR_vs_MR.png").stat().st_size > 0


def test_prisk_conditions_stand_side_by_side_in_the_factorial_order(tmp_path):
    from prefray.benchmarks.prisk import IRP
    from prefray.engine.results.plots import condition_orders

    conditions = ["base", "profile", "retrieval", "profile_retrieval", "reflection"]
    rows = [{"benchmark": "prisk_irp", "model": m, "condition": c, "metric": "IRP_score", "value": 10.0 * i, "n": 4}
            for m in ("m1", "m2") for i, c in enumerate(sorted(conditions))]
    orders = condition_orders({"prisk_irp": IRP})
    assert orders["prisk_irp"][:4] == ("base", "profile", "retrieval", "profile_retrieval")
    write_plots(RunDir(tmp_path), _metrics(rows), orders=orders)
    svg = (tmp_path / "plots" / "prisk_irp__IRP_score.svg").read_text()
    positions = _text_order(svg, conditions)                  # the legend lists the bars left to right
    assert positions == sorted(positions)
    (tmp_path / "plain").mkdir()
    write_plots(RunDir(tmp_path / "plain"), _metrics(rows))                 # no declared order: by name
    plain = (tmp_path / "plain" / "plots" / "prisk_irp__IRP_score.svg").read_text()
    assert _text_order(plain, sorted(conditions)) == sorted(_text_order(plain, sorted(conditions)))


def test_cupid_precision_recall_f1_side_by_side_by_instance_type(tmp_path):
    from prefray.benchmarks.cupid import BENCHMARK as CUPID
    from prefray.engine.results.plots import MetricsSpec, metrics_rows

    spec = next(s for s in figure_specs({"cupid": CUPID})["cupid"] if isinstance(s, MetricsSpec))
    assert spec.metrics == ("precision", "recall", "F1") and spec.dimension == "instance_type"
    rows = []
    for condition in ("full", "oracle"):
        for suffix in ("", "[instance_type=consistent]", "[instance_type=changing]"):
            for name, value in (("precision", 0.5), ("recall", 0.0), ("F1", 0.0)):
                missing = condition == "oracle" and name == "F1" and suffix.endswith("changing]")
                rows.append({"benchmark": "cupid", "model": "m", "condition": condition, "metric": name + suffix,
                             "value": float("nan") if missing else value, "n": 3 if suffix else 6,
                             "complete": condition == "full"})
    rows.append({"benchmark": "cupid", "model": "m", "condition": "full", "metric": "precision[task=x]",
                 "value": 0.9, "n": 1})                                 # another dimension: not in this figure
    table = _metrics(rows)
    cells = metrics_rows(table, "cupid", spec)
    assert sorted(cells) == [("m", "full", ""), ("m", "oracle", "")]
    assert sorted((r["model"], r["slice"]) for r in cells[("m", "full", "")]) == sorted(
        (name, s) for name in ("precision", "recall", "F1") for s in ("all", "consistent", "changing"))
    written = write_plots(RunDir(tmp_path), table, {"cupid": [spec]})
    names = {p.name for p in written}
    assert {"cupid__precision_recall_F1_by_instance_type__m_full.svg",
            "cupid__precision_recall_F1_by_instance_type__m_oracle.png"} <= names
    full = (tmp_path / "plots" / "cupid__precision_recall_F1_by_instance_type__m_full.svg").read_text()
    assert _text_order(full, ["precision", "recall", "F1"]) == sorted(_text_order(full, ["precision", "recall", "F1"]))
    assert _text_order(full, ["all", "consistent", "changing"]) == sorted(
        _text_order(full, ["all", "consistent", "changing"]))         # "all" first, then the paper's order
    assert full.count(">no data<") == 0 and {"n=6", "n=3"} <= set(re.findall(r"n=\d+", full))
    oracle = (tmp_path / "plots" / "cupid__precision_recall_F1_by_instance_type__m_oracle.svg").read_text()
    assert oracle.count(">no data<") == 1                              # F1 of changing: missing, not zero
    assert "hatch" in oracle.lower() or "pattern" in oracle.lower()   # incomplete cell


def test_figures_drawn_in_several_processes_are_the_ones_drawn_in_one(tmp_path):
    """The same files, in the same order, with the same pixels, whether one process draws every
    figure or two share them (each figure is drawn whole by one process)."""
    rows = [{"benchmark": "b", "model": f"m{i}", "condition": c, "metric": metric, "value": 0.1 * i, "n": 3 + i,
             "ci_low": 0.0, "ci_high": 0.1 * i + 0.05, "complete": i != 2}
            for i in range(3) for c in ("default", "defense") for metric in ("MR", "AAR", "MR[category=x]")]
    specs = {"b": [ScatterSpec(x="AAR", y="MR", diagonal=True)]}
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one = write_plots(RunDir(tmp_path / "one"), _metrics(rows), specs, workers=1)
    two = write_plots(RunDir(tmp_path / "two"), _metrics(rows), specs, workers=2)
    # scatter + MR, AAR, MR[category]: × 2 formats
    assert [p.name for p in one] == [p.name for p in two] and len(one) == 8
    for a, b in zip(one, two):
        if a.suffix == ".png":
            assert a.read_bytes() == b.read_bytes(), a.name
        else:  # SVG ids and date differ from file to file; the drawn texts do not
            assert re.findall(r">([^<>]+)</text>", a.read_text()) == re.findall(r">([^<>]+)</text>", b.read_text())


def test_a_figure_is_drawn_again_only_when_what_it_shows_changed(tmp_path):
    from prefray.engine.results.plots import ScatterSpec, write_plots

    rows = [{"benchmark": "b", "model": f"m{i}", "condition": "default", "metric": metric, "value": 0.1 * i + 0.01,
             "n": 4} for i in range(3) for metric in ("MR", "AAR", "MR[category=x]")]
    specs = {"b": [ScatterSpec(x="MR", y="AAR")]}
    files = write_plots(RunDir(tmp_path), _metrics(rows), specs)
    assert len(files) == 8 and all(p.exists() for p in files)
    for path in files:   # mark every file: a redraw replaces it
        path.write_bytes(b"old")
    assert write_plots(RunDir(tmp_path), _metrics(rows), specs) == files
    assert {p.read_bytes() for p in files} == {b"old"}   # nothing changed: nothing drawn

    rows[1]["value"] = 0.9   # m0's AAR: the AAR bars and the scatter change, MR and MR[category] do not
    (tmp_path / "plots" / "b__MR.svg").unlink()   # a missing file is drawn again too
    write_plots(RunDir(tmp_path), _metrics(rows), specs)
    redrawn = sorted(p.name for p in files if p.read_bytes() != b"old")
    assert redrawn == ["b__AAR.png", "b__AAR.svg", "b__AAR_vs_MR.png", "b__AAR_vs_MR.svg",
                       "b__MR.png", "b__MR.svg"]


def _benchpres_rows(cells):
    return [{"benchmark": "benchpres", "model": m, "condition": c, "judge": "j", "metric": name, "value": v, "n": 30}
            for (m, c), (mr, aar) in cells.items() for name, v in (("MR", mr), ("AAR", aar))]


def test_benchpres_figures_4_and_5_are_drawn_in_percent_when_the_run_has_their_cells(tmp_path):
    from prefray.benchmarks.benchpres import BENCHMARK
    from prefray.engine.results.plots import CellsSpec, draw, run_figures

    cells = {("qwen3-235b-a22b-instruct", "default"): (0.40, 0.60),
             ("qwen3-235b-a22b-thinking", "default"): (0.55, 0.75),
             ("qwen3-235b-a22b-instruct", "defense"): (0.20, 0.50),
             ("qwen3-235b-a22b-thinking", "defense"): (0.10, 0.65),
             # only one variant of the K-EXAONE pair, and no defense for GPT-5.2's: those figures are not drawn
             ("k-exaone-236b-a23b-reasoning", "default"): (0.5, 0.8),
             ("gpt-5.2", "default"): (0.3, 0.7), ("gpt-5.2-reasoning", "default"): (0.35, 0.8)}
    specs = {"benchpres": figure_specs({"benchpres": BENCHMARK})["benchpres"]}
    assert {s.name for s in specs["benchpres"] if isinstance(s, CellsSpec)} >= {
        "fig4_reasoning__qwen3-235b-a22b-instruct", "fig5_defense__qwen3-235b-a22b-instruct",
        "fig4_reasoning__k-exaone-236b-a23b-non-reasoning"}
    table = _metrics(_benchpres_rows(cells))
    drawn = [f for f in run_figures(table, tmp_path, specs) if f[0] is draw]
    figures = {f[1][2].name: f for f in drawn if f[1][2].name.startswith("benchpres__fig")}
    assert set(figures) == {"benchpres__fig4_reasoning__qwen3-235b-a22b-instruct__j",
                            "benchpres__fig5_defense__qwen3-235b-a22b-instruct__j",
                            "benchpres__fig4_reasoning__gpt-5.2__j"}
    rows, title, _, scale = figures["benchpres__fig5_defense__qwen3-235b-a22b-instruct__j"][1]
    assert title.startswith("BenchPreS Fig. 5") and "(%)" in title and scale == (0.0, 108.0)
    got = {(r["model"], r["slice"]): r["value"] for r in rows}     # percentages, the cells in the declared order
    assert got == {(f"{m} / {c}", name): pytest.approx(100 * v) for (m, c), (mr, aar) in cells.items()
                   if m.startswith("qwen") for name, v in (("MR", mr), ("AAR", aar))}
    assert [r["model"] for r in rows][::2] == ["qwen3-235b-a22b-instruct / default",
                                               "qwen3-235b-a22b-instruct / defense",
                                               "qwen3-235b-a22b-thinking / default",
                                               "qwen3-235b-a22b-thinking / defense"]
    written = {p.name for p in write_plots(RunDir(tmp_path), table, specs)}
    assert "benchpres__fig4_reasoning__qwen3-235b-a22b-instruct__j.svg" in written
    fig4 = (tmp_path / "plots" / "benchpres__fig4_reasoning__qwen3-235b-a22b-instruct__j.svg").read_text()
    assert "n=30" in fig4 and ">100<" in fig4                       # a 0-100 axis
    scatter = (tmp_path / "plots" / "benchpres__AAR_vs_MR.svg").read_text()
    assert "MR (%)" in scatter and "AAR (%)" in scatter


def test_pyplot_is_imported_on_a_thread_with_the_agg_backend():
    """A launch that draws its figures imports pyplot while its calls run (session._run_owned): in a
    fresh interpreter the plots module alone leaves pyplot unimported; the thread imports it, on Agg."""
    code = ("import sys\n"
            "from prefray.engine.results.plots import import_pyplot_meanwhile\n"
            "before = 'matplotlib.pyplot' in sys.modules\n"
            "thread = import_pyplot_meanwhile()\n"
            "thread.join()\n"
            "import matplotlib\n"
            "print(before, 'matplotlib.pyplot' in sys.modules, thread.name, matplotlib.get_backend().lower())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True", "prefray-import-pyplot", "agg"]
