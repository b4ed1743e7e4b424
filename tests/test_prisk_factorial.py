"""PRISK factorial analysis: MixedLM recovers known effects from a synthetic 2×2 table."""

from __future__ import annotations

import random

import pytest

from prefray.benchmarks.prisk.factorial import factorial_rows, fit_factorial, observations

CONDITIONS = {"base": (0, 0), "profile": (1, 0), "retrieval": (0, 1), "profile_retrieval": (1, 1)}


def synthetic(clusters: int, b0: float, b1: float, b2: float, b3: float, tau: float, sigma: float, seed: int = 7):
    rng = random.Random(seed)
    values = []
    for c in range(clusters):
        u = rng.gauss(0, tau)                       # the cluster's random intercept
        for condition, (p, m) in CONDITIONS.items():
            y = b0 + b1 * p + b2 * m + b3 * p * m + u + rng.gauss(0, sigma)
            values.append((condition, f"q{c // 10}", f"u{c % 10}", y))
    return values


def test_mixedlm_recovers_known_effects():
    values = synthetic(200, b0=4.0, b1=-2.0, b2=-0.5, b3=0.3, tau=0.8, sigma=0.4)
    fit = fit_factorial(observations(values + [("reflection", "q0", "u0", 1.0)]))   # reflection is not a cell
    assert fit["profile"]["beta"] == pytest.approx(-2.0, abs=0.1)
    assert fit["memory"]["beta"] == pytest.approx(-0.5, abs=0.1)
    assert fit["interaction"]["beta"] == pytest.approx(0.3, abs=0.12)
    for term in ("profile", "memory", "interaction"):
        assert fit[term]["ci_low"] < fit[term]["beta"] < fit[term]["ci_high"]
        assert fit[term]["p"] < 1e-3
    # an effect that is not there: its interval covers 0 and p is not small
    null = fit_factorial(observations(synthetic(200, 4.0, -2.0, 0.0, 0.0, 0.8, 0.4, seed=11)))
    assert null["memory"]["ci_low"] < 0 < null["memory"]["ci_high"] and null["memory"]["p"] > 0.01


def test_factorial_rows_need_all_four_cells():
    values = synthetic(20, 4.0, -2.0, -0.5, 0.3, 0.8, 0.4)
    rows = factorial_rows("SYC_score", values, "m", "j")
    assert {r["metric"] for r in rows} == {f"SYC_score_{s}[{t}]" for s in ("beta", "ci_low", "ci_high", "p")
                                           for t in ("profile", "memory", "interaction")}
    assert {r["condition"] for r in rows} == {"factorial"} and {r["n"] for r in rows} == {80}
    assert factorial_rows("SYC_score", [v for v in values if v[0] != "retrieval"], "m", "j") == []


# ---------------------------------------------------------------- a null memory effect

def copied_base_records(rng, queries: int, personas: int) -> list[dict]:
    """IRP judge rows in the shape that used to be copied: one base answer per query (no persona),
    three personalized answers per persona–query pair. Profile effect −2, memory and interaction 0;
    random query, persona and pair intercepts and residual noise."""
    rows = []

    def judged(condition, item, persona, score):
        instance = f"{persona}--{item}" if persona else item
        rows.append({"stage": "irp_judge", "model": "m", "judge": "j", "status": "ok", "condition": condition,
                     "item": item, "instance_id": instance, "sample": 0, "value": {"score": score},
                     "meta": {"profile_id": persona, "answer_instance": instance}})

    person = [rng.gauss(0, 0.5) for _ in range(personas)]
    for q in range(queries):
        a = rng.gauss(0, 0.8)
        judged("base", f"q{q}", "", 4 + a + rng.gauss(0, 0.5))
        for u in range(personas):
            pair = rng.gauss(0, 0.5)
            for condition, (p, _) in (("profile", (1, 0)), ("retrieval", (0, 1)), ("profile_retrieval", (1, 1))):
                judged(condition, f"q{q}", f"u{u}", 4 - 2 * p + a + person[u] + pair + rng.gauss(0, 0.5))
    return rows


def test_a_null_memory_effect_is_rejected_at_its_nominal_rate():
    """200 datasets with no memory effect, through the project's path (IRP rows → one observation
    per answer → the crossed fit): the memory term's p < 0.05 about 5% of the time. Tolerance: the
    central 99.9% of Binomial(200, 0.05), i.e. 2..22 rejections (the earlier copied-base fit rejected
    28 of 60)."""
    from scipy.stats import binom

    from prefray.benchmarks.prisk.irp import clustered

    rng, runs, rejected = random.Random(2024), 200, 0
    for _ in range(runs):
        records = copied_base_records(rng, queries=6, personas=3)
        values = clustered(records, "irp_judge", "m", "j")
        assert len(values) == 6 + 6 * 3 * 3                        # every answer once, the base answer too
        rows = {r["metric"]: r for r in factorial_rows("IRP", values, "m", "j")}
        assert rows["IRP_p[memory]"]["n"] == len(values)
        rejected += rows["IRP_p[memory]"]["value"] < 0.05
    low, high = binom.ppf(0.0005, runs, 0.05), binom.isf(0.0005, runs, 0.05)
    assert low <= rejected <= high, (rejected, low, high)


def test_the_crossed_fit_agrees_with_statsmodels_mixedlm():
    """The same model through statsmodels (one group, the intercepts as variance components)."""
    import warnings

    import numpy as np
    import pandas as pd
    from statsmodels.regression.mixed_linear_model import MixedLM, VCSpec

    from prefray.benchmarks.prisk.factorial import _indicators, components
    from prefray.benchmarks.prisk.irp import clustered

    data = observations(clustered(copied_base_records(random.Random(3), 6, 4), "irp_judge", "m", "j"))
    ours = fit_factorial(data)
    exog = pd.DataFrame({"Intercept": 1.0, "profile": data["profile"], "memory": data["memory"],
                         "profile:memory": data["profile"] * data["memory"]}).astype(float)
    names, columns, matrices = [], [], []
    for name, labels in components(data).items():
        levels, matrix = _indicators(labels)
        names.append(name), columns.append([levels]), matrices.append([matrix.toarray()])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = MixedLM(data["y"].to_numpy(float), exog, np.zeros(len(data)),
                         exog_vc=VCSpec(names, columns, matrices)).fit(reml=True, method=["lbfgs"])
    assert names == ["query", "persona", "pair"]
    for term, column in (("profile", "profile"), ("memory", "memory"), ("interaction", "profile:memory")):
        assert ours[term]["beta"] == pytest.approx(theirs.params[column], abs=1e-4)
        assert ours[term]["p"] == pytest.approx(theirs.pvalues[column], rel=0.02, abs=1e-6)
