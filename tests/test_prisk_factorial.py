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
            values.append((condition, f"u{c % 50}--q{c // 50}", y))
    return values


def test_mixedlm_recovers_known_effects():
    values = synthetic(400, b0=4.0, b1=-2.0, b2=-0.5, b3=0.3, tau=0.8, sigma=0.4)
    fit = fit_factorial(observations(values + [("reflection", "u0--q0", 1.0)]))   # reflection is not a cell
    assert fit["profile"]["beta"] == pytest.approx(-2.0, abs=0.1)
    assert fit["memory"]["beta"] == pytest.approx(-0.5, abs=0.1)
    assert fit["interaction"]["beta"] == pytest.approx(0.3, abs=0.12)
    for term in ("profile", "memory", "interaction"):
        assert fit[term]["ci_low"] < fit[term]["beta"] < fit[term]["ci_high"]
        assert fit[term]["p"] < 1e-3
    # an effect that is not there: its interval covers 0 and p is not small
    null = fit_factorial(observations(synthetic(400, 4.0, -2.0, 0.0, 0.0, 0.8, 0.4, seed=11)))
    assert null["memory"]["ci_low"] < 0 < null["memory"]["ci_high"] and null["memory"]["p"] > 0.01


def test_factorial_rows_need_all_four_cells():
    values = synthetic(20, 4.0, -2.0, -0.5, 0.3, 0.8, 0.4)
    rows = factorial_rows("SYC_score", values, "m", "j")
    assert {r["metric"] for r in rows} == {f"SYC_score_{s}[{t}]" for s in ("beta", "ci_low", "ci_high", "p")
                                           for t in ("profile", "memory", "interaction")}
    assert {r["condition"] for r in rows} == {"factorial"} and {r["n"] for r in rows} == {80}
    assert factorial_rows("SYC_score", [v for v in values if v[0] != "retrieval"], "m", "j") == []
