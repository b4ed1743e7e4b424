"""Which figures the metrics table turns into."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest

from prefray.engine.benchmark import metric_rows
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


from prefray.engine.results.plots import ScatterSpec, family_scales, figure_specs, scatter_points, write_plots  # noqa: E402


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
    written = write_plots(tmp_path, table)
    assert sorted(p.name for p in written) == ["b__MR.png", "b__MR.svg"]
    assert all(p.stat().st_size > 0 for p in written)
    svg = (tmp_path / "plots" / "b__MR.svg").read_text()
    assert {"n=7", "n=9", "n=8"} <= set(re.findall(r"n=\d+", svg))  # the 0.0 bar is drawn with its n
    assert svg.count(">no data<") == 1  # m2/defense has no value: labelled, not a zero bar
    assert "hatch" in svg.lower() or "pattern" in svg.lower()  # the incomplete cell is hatched


class _Bench:
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
    specs = figure_specs({"b": _Bench(), "other": object()})
    assert specs == {"b": [ScatterSpec("AAR", "MR")], "other": []}
    points = scatter_points(table, "b", specs["b"][0])
    assert [(p["model"], p["condition"], p["usable"]) for p in points] == [
        ("m1", "default", True), ("m1", "defense", True), ("m2", "default", False)]
    written = write_plots(tmp_path, table, specs)
    assert {"b__MR_vs_AAR.png", "b__MR_vs_AAR.svg"} <= {p.name for p in written}
    svg = (tmp_path / "plots" / "b__MR_vs_AAR.svg").read_text()
    assert "m1 / default (n=6/5)" in svg and "no data: m2 / default" in svg


def test_a_family_of_negative_values_keeps_zero_on_its_scale():
    table = _metrics([{"benchmark": "b", "model": "m", "condition": "c", "metric": "AAR-MR", "value": -0.25, "n": 5}])
    low, high = family_scales(table)[("b", "AAR-MR")]
    assert low == pytest.approx(-0.25 - 0.02) and high == pytest.approx(0.02)
