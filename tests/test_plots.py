"""Which figures the metrics table turns into."""

from __future__ import annotations

from prefray.engine.benchmark import metric_rows
from prefray.engine.plots import figure_groups


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
