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
    assert {r["metric"] for r in rows} == {f"SYC_score_{s}[{t}]" for s in ("beta", "ci_low", "ci_high", "p", "df")
                                           for t in ("profile", "memory", "interaction")}
    assert {r["condition"] for r in rows} == {"factorial"} and {r["n"] for r in rows} == {80}
    assert factorial_rows("SYC_score", [v for v in values if v[0] != "retrieval"], "m", "j") == []


# ---------------------------------------------------------------- PRISK-shaped data

QUERY_SD, PERSONA_SD, PAIR_SD, ANSWER_SD, JUDGE_SD = 0.6, 1.0, 0.4, 0.6, 0.3


def prisk_records(rng, queries: int, personas: int, memory: float = 0.0, interaction: float = 0.0) -> list[dict]:
    """IRP judge rows shaped like a PRISK run: personas × queries × the 2×2 cells. Per query one base
    answer (the query alone), judged once against each persona; per persona–query pair a profile, a
    retrieval and a profile_retrieval answer, judged once. Scores on the judge's 1-5 scale: 4, a
    profile effect of −2 (the paper's β1 = −2.08), the given memory and interaction effects; random
    query, persona and pair intercepts, an answer's own deviation and the judge's noise per judgement."""
    rows = []

    def judged(condition, item, persona, answer, score):
        rows.append({"stage": "irp_judge", "model": "m", "judge": "j", "status": "ok", "condition": condition,
                     "item": item, "instance_id": f"{persona}--{item}", "sample": 0, "value": {"score": score},
                     "meta": {"profile_id": persona, "answer_instance": answer}})

    person = [rng.gauss(0, PERSONA_SD) for _ in range(personas)]
    for q in range(queries):
        a = rng.gauss(0, QUERY_SD)
        base = 4 + a + rng.gauss(0, ANSWER_SD)
        for u in range(personas):
            judged("base", f"q{q}", f"u{u}", f"q{q}", base + rng.gauss(0, JUDGE_SD))
        for u in range(personas):
            pair = rng.gauss(0, PAIR_SD)
            for condition, (p, m) in (("profile", (1, 0)), ("retrieval", (0, 1)), ("profile_retrieval", (1, 1))):
                y = 4 - 2 * p + memory * m + interaction * p * m + a + person[u] + pair
                judged(condition, f"q{q}", f"u{u}", f"u{u}--q{q}", y + rng.gauss(0, ANSWER_SD) + rng.gauss(0, JUDGE_SD))
    return rows


def fitted_rows(records: list[dict]) -> dict[str, dict]:
    """The project's path: IRP rows → one observation per answer → the crossed fit's metric rows."""
    from prefray.benchmarks.prisk.irp import clustered

    values = clustered(records, "irp_judge", "m", "j")
    return {r["metric"]: r for r in factorial_rows("IRP", values, "m", "j")}


@pytest.mark.parametrize("personas", [4, 5, 10])
def test_null_effects_are_rejected_at_their_nominal_rate_with_few_personas(personas):
    """200 datasets with no memory and no interaction effect, 8 queries (the size of the sample's
    narrowing set) and 4, 5 or 10 personas: each term's p < 0.05 in a number of datasets within the
    central 99.9% of Binomial(200, 0.05). With 4 personas the persona intercept, which the memory
    and interaction contrasts carry (a base answer has none), is estimated from 4 levels: a normal
    reference rejected too often there (measured with bench/factorial_size.py: see the PRISK README)."""
    from scipy.stats import binom

    rng, runs = random.Random(1000 + personas), 200
    rejected = {"memory": 0, "interaction": 0}
    for _ in range(runs):
        rows = fitted_rows(prisk_records(rng, queries=8, personas=personas))
        assert rows["IRP_p[memory]"]["n"] == 8 + 8 * personas * 3          # every answer once, a base answer too
        for term in rejected:
            assert 1 <= rows[f"IRP_df[{term}]"]["value"] <= rows[f"IRP_df[{term}]"]["n"] - 4
            rejected[term] += rows[f"IRP_p[{term}]"]["value"] < 0.05
    low, high = binom.interval(0.999, runs, 0.05)
    assert all(low <= count <= high for count in rejected.values()), (rejected, low, high)


def test_a_real_effect_is_detected():
    """The same design with a memory effect of −1.5 and an interaction of +1.5 at 10 personas: the
    expected standard error of either contrast is about sqrt(PERSONA_SD²/10 + …) ≈ 0.4, so
    |t| ≈ 3.7 and nearly every dataset rejects; a test that always accepted would reject none."""
    rng, runs = random.Random(77), 40
    rejected = {"memory": 0, "interaction": 0}
    for _ in range(runs):
        rows = fitted_rows(prisk_records(rng, queries=8, personas=10, memory=-1.5, interaction=1.5))
        for term in rejected:
            rejected[term] += rows[f"IRP_p[{term}]"]["value"] < 0.05
    assert all(count >= 0.8 * runs for count in rejected.values()), rejected


def test_p_and_interval_use_a_t_reference_with_satterthwaite_df():
    """Each term's p and 95% interval follow from β, its standard error and the df row:
    p = 2·P(T_df > |β/se|), interval β ± t_{0.975, df}·se; a normal reference would give other
    numbers (at df ≈ 3–15 the 0.975 quantile is 2.1–3.2, not 1.96)."""
    from scipy.stats import t as student

    rows = fitted_rows(prisk_records(random.Random(5), queries=8, personas=4))
    for term in ("profile", "memory", "interaction"):
        beta, df = rows[f"IRP_beta[{term}]"]["value"], rows[f"IRP_df[{term}]"]["value"]
        low, high = rows[f"IRP_ci_low[{term}]"]["value"], rows[f"IRP_ci_high[{term}]"]["value"]
        assert 1 < df < 8 + 8 * 4 * 3 - 4
        se = (high - low) / 2 / student.ppf(0.975, df)
        assert (low + high) / 2 == pytest.approx(beta)
        assert rows[f"IRP_p[{term}]"]["value"] == pytest.approx(2 * student.sf(abs(beta / se), df), rel=1e-9)
    assert rows["IRP_df[memory]"]["value"] < 20      # 4 personas carry the memory contrast's variance


def test_satterthwaite_df_of_a_balanced_one_way_mean_is_groups_minus_one():
    """y_gi = μ + a_g + e_gi with g groups of m: the REML estimates are the ANOVA ones (when the
    between mean square exceeds the within one) and Var(μ̂) = MSB/(g·m), a multiple of a mean
    square with g − 1 degrees of freedom, so Satterthwaite's df is exactly g − 1."""
    import numpy as np

    from prefray.benchmarks.prisk.factorial import _indicators, fit_crossed

    rng = random.Random(8)
    groups, size = 5, 6
    labels = [f"g{g}" for g in range(groups) for _ in range(size)]
    shift = {f"g{g}": rng.gauss(0, 2) for g in range(groups)}
    y = np.array([3 + shift[label] + rng.gauss(0, 1) for label in labels])
    fit = fit_crossed(y, np.ones((len(y), 1)), [_indicators(labels)[1]])
    means = y.reshape(groups, size).mean(axis=1)
    msb = size * float(np.sum((means - y.mean()) ** 2)) / (groups - 1)
    msw = float(np.sum((y.reshape(groups, size) - means[:, None]) ** 2)) / (groups * (size - 1))
    assert msb > msw
    assert fit["variances"][0] == pytest.approx((msb - msw) / size, rel=1e-4)
    assert fit["sigma2"] == pytest.approx(msw, rel=1e-4)
    assert fit["cov"][0, 0] == pytest.approx(msb / (groups * size), rel=1e-4)
    assert fit["df"][0] == pytest.approx(groups - 1, rel=1e-3)


def test_the_crossed_fit_agrees_with_statsmodels_mixedlm():
    """The same model through statsmodels (one group, the intercepts as variance components): the
    coefficients, their standard errors and the variance components. Dataset 2 of this generator
    has its REML optimum away from the corner where the former optimizer stopped (it left a
    component at 0, where the criterion's slope in the standard deviation is 0)."""
    import warnings

    import numpy as np
    import pandas as pd
    from statsmodels.regression.mixed_linear_model import MixedLM, VCSpec

    from prefray.benchmarks.prisk.factorial import _indicators, components, fit_crossed
    from prefray.benchmarks.prisk.irp import clustered

    rng = random.Random(3)
    for _ in range(2):                         # datasets 0 and 1
        prisk_records(rng, 8, 4)
    data = observations(clustered(prisk_records(rng, 8, 4), "irp_judge", "m", "j"))
    exog = pd.DataFrame({"Intercept": 1.0, "profile": data["profile"], "memory": data["memory"],
                         "profile:memory": data["profile"] * data["memory"]}).astype(float)
    names, columns, matrices = [], [], []
    for name, labels in components(data).items():
        levels, matrix = _indicators(labels)
        names.append(name), columns.append([levels]), matrices.append([matrix.toarray()])
    ours = fit_crossed(data["y"].to_numpy(float), exog.to_numpy(), [_indicators(labels)[1]
                                                                    for labels in components(data).values()])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = MixedLM(data["y"].to_numpy(float), exog, np.zeros(len(data)),
                         exog_vc=VCSpec(names, columns, matrices)).fit(reml=True, method=["lbfgs"])
    assert names == ["query", "persona", "pair"]
    assert ours["beta"] == pytest.approx(np.asarray(theirs.fe_params), abs=1e-4)
    assert np.sqrt(np.diag(ours["cov"])) == pytest.approx(np.asarray(theirs.bse_fe), rel=1e-3)
    assert ours["variances"] == pytest.approx(np.asarray(theirs.vcomp), rel=1e-3)
    assert ours["sigma2"] == pytest.approx(theirs.scale, rel=1e-4)
    assert ours["deviance"] <= -2 * theirs.llf + 1e-6           # the same REML criterion, at its minimum
    assert min(ours["variances"]) > 0.01                        # no component left at 0
