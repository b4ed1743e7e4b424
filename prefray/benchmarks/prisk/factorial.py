"""The 2×2 factorial analysis of PRISK's paper (§5.2): profile × memory, a random intercept per
persona–query cluster, fitted with statsmodels' MixedLM (REML).

    y = β0 + β1·profile + β2·memory + β3·profile·memory + u_cluster + ε

Cells: base (0, 0), profile (1, 0), retrieval (0, 1), profile_retrieval (1, 1); `memory` is the
condition's retrieval switch, whatever the routing call decided. Each coefficient is written as
four metric rows under condition `factorial`: `<name>_beta[<term>]`, `<name>_ci_low[<term>]`,
`<name>_ci_high[<term>]` (95% Wald interval) and `<name>_p[<term>]`, with n = observations.
The fit needs all four cells and at least two clusters; otherwise nothing is written.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import pandas as pd

CELLS = {"base": (0, 0), "profile": (1, 0), "retrieval": (0, 1), "profile_retrieval": (1, 1)}
TERMS = {"profile": "profile", "memory": "memory", "interaction": "profile:memory"}


def observations(values: list[tuple[str, str, float]]) -> pd.DataFrame:
    """(condition, cluster, y) → a table with profile/memory indicators; other conditions dropped."""
    kept = [(CELLS[c][0], CELLS[c][1], cluster, y) for c, cluster, y in values
            if c in CELLS and y == y]
    return pd.DataFrame(kept, columns=["profile", "memory", "cluster", "y"])


def fit_factorial(data: pd.DataFrame) -> dict[str, dict[str, float]] | None:
    """term → {beta, ci_low, ci_high, p}; None when a cell is empty or there are under two clusters."""
    cells = {(p, m) for p, m in zip(data["profile"], data["memory"])}
    if len(cells) < 4 or data["cluster"].nunique() < 2:
        return None
    import statsmodels.formula.api as smf

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = smf.mixedlm("y ~ profile * memory", data, groups=data["cluster"]).fit(reml=True)
    ci = result.conf_int(alpha=0.05)
    return {name: {"beta": float(result.params[term]), "ci_low": float(ci.loc[term, 0]),
                   "ci_high": float(ci.loc[term, 1]), "p": float(result.pvalues[term])}
            for name, term in TERMS.items()}


def factorial_rows(name: str, values: list[tuple[str, str, float]], model: str, judge: str) -> list[dict[str, Any]]:
    """Metric rows of the fit (see the module docstring) for one score."""
    data = observations(values)
    fit = fit_factorial(data)
    if fit is None:
        return []
    out = []
    for term, stats in fit.items():
        for stat, value in stats.items():
            out.append({"model": model, "condition": "factorial", "judge": judge,
                        "metric": f"{name}_{stat}[{term}]", "value": value if math.isfinite(value) else float("nan"),
                        "n": len(data), "excluded": 0})
    return out
