"""The 2×2 factorial analysis of PRISK's paper (§5.2): profile × memory, a linear mixed model (REML)
with crossed random intercepts for the query, the persona and the persona–query pair.

    y = β0 + β1·profile + β2·memory + β3·profile·memory + a_query + b_persona + c_pair + ε

Cells: base (0, 0), profile (1, 0), retrieval (0, 1), profile_retrieval (1, 1); `memory` is the
condition's retrieval switch, whatever the routing call decided.

One observation per answer. A base answer is one answer to a query, whoever it is later judged
for: it enters the fit once, with the query's random intercept and no persona (its persona and
pair columns are zero). When a base answer was judged once per persona, its observation is the mean
of those judgements. Copying it into every persona's cluster instead (the earlier design) counts
one answer as several independent ones and makes the p-values and intervals anti-conservative (in
a simulation with no memory effect, 28 of 60 fits rejected at α = 0.05).

The paper's own words: "a random intercept per persona–query cluster" is implied by "the 200
query-persona clusters observed across all four experimental conditions"; the pair intercept is
kept, and query and persona intercepts are added because base answers and personas are shared
across pairs. Each component needs two levels or more (and the pair component a pair with two
observations), else it is left out.

Each coefficient is written as five metric rows under condition `factorial`: `<name>_beta[<term>]`,
`<name>_ci_low[<term>]`, `<name>_ci_high[<term>]` (95% interval), `<name>_p[<term>]` and
`<name>_df[<term>]`, with n = observations = answers fitted. The fit needs all four cells and two
queries; otherwise nothing is written.

Small-sample reference. p and the interval come from t = β/se against a t distribution with
Satterthwaite's degrees of freedom (`satterthwaite`, as lmerTest computes them), not the normal.
The memory and interaction contrasts carry the persona intercept (a base answer has none), whose
variance is estimated from as many levels as there are personas: with 4 or 5 personas the normal
reference rejected too often on null data (bench/factorial_size.py measures it).

The fit is `fit_crossed` below: REML by the penalized least-squares form with sparse matrices and
a block factorization, so 6,050 answers of 40 personas × 50 queries fit, with their df, in about a
second (`python bench/factorial_size.py --time`).
The criterion is minimised over the relative variances θ_k² (SLSQP, bounded below by 0): in the
standard deviations θ_k its slope at θ_k = 0 is 0, so the gradient method used before stopped at a
component it had driven to 0, short of the optimum, and some of its steps went so far out that the
factorization failed. statsmodels' MixedLM fits the same model (one group, the intercepts as
variance components) but with dense matrices: minutes at that size. prisk/tests/test_prisk_factorial.py
checks that both agree.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

CELLS = {"base": (0, 0), "profile": (1, 0), "retrieval": (0, 1), "profile_retrieval": (1, 1)}
TERMS = {"profile": "profile", "memory": "memory", "interaction": "profile:memory"}
DENSE_BLOCK = 20_000   # A_sb's entries up to which it is kept dense (beyond, sparse products are faster)
RELATIVE_VARIANCE_MAX = 1e6   # θ_k² ≤ this: a component's sd at most 1,000 residual sds


class Observation(NamedTuple):
    """One answer's score: its condition, query, persona ("" for a base answer) and value."""

    condition: str
    query: str
    persona: str
    y: float


def observations(values: list[Observation] | list[tuple[str, str, str, float]]) -> pd.DataFrame:
    """(condition, query, persona, y) → a table with profile/memory indicators; other conditions and
    missing scores dropped."""
    kept = [(CELLS[c][0], CELLS[c][1], query, persona, y) for c, query, persona, y in values
            if c in CELLS and y == y]
    return pd.DataFrame(kept, columns=["profile", "memory", "query", "persona", "y"])


def _indicators(labels: list[str]):
    """Levels and the sparse n × levels 0/1 matrix; an empty label has a zero row."""
    from scipy import sparse

    levels = sorted({label for label in labels if label})
    index = {label: i for i, label in enumerate(levels)}
    rows = [row for row, label in enumerate(labels) if label]
    cols = [index[labels[row]] for row in rows]
    matrix = sparse.csc_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(labels), len(levels)))
    return levels, matrix


def components(data: pd.DataFrame) -> dict[str, list[str]]:
    """The random-intercept components the data can carry (see the module docstring)."""
    pairs = [f"{p}--{q}" if p else "" for p, q in zip(data["persona"], data["query"])]
    out = {"query": list(data["query"])}
    if len({p for p in data["persona"] if p}) >= 2:
        out["persona"] = list(data["persona"])
    counts = pd.Series([p for p in pairs if p], dtype=object).value_counts()
    if len(counts) >= 2 and (counts >= 2).any():
        out["pair"] = pairs
    return out


class _Reml:
    """The REML criterion of y = Xβ + Σ_k Z_k b_k + ε, b_k ~ N(0, θ_k² σ² I), ε ~ N(0, σ² I), as a
    function of the relative standard deviations θ, with β and σ² profiled out (the penalized
    least-squares form of Bates et al., lme4, with A = ΛZᵀZΛ + I factored by blocks, `_factor`):

        V* = I + ZΛ²Zᵀ, log|V*| = log|A|, V*⁻¹ = I − ZΛ A⁻¹ ΛZᵀ (Woodbury)
        M = Xᵀ V*⁻¹ X,  β = M⁻¹ Xᵀ V*⁻¹ y,  r² = (y − Xβ)ᵀ V*⁻¹ (y − Xβ)
        REML deviance = log|A| + log|M| + (n − p)(1 + log(2π r² / (n − p)))
        σ² = r² / (n − p),  Cov(β) = σ² M⁻¹
    """

    def __init__(self, y: np.ndarray, x: np.ndarray, zs: list):
        from scipy import sparse

        self.y, self.x, self.n, self.p = y, x, len(y), x.shape[1]
        self.z = sparse.hstack(zs, format="csc") if zs else sparse.csc_matrix((len(y), 0))
        self.sizes = [z.shape[1] for z in zs]
        self.ztx, self.zty, self.zt = self.z.T @ x, self.z.T @ y, self.z.T.tocsr()
        # A's blocks: the component with the most levels (b) apart from the others (s); an answer is
        # in one level of a component, so ZᵀZ's b block is diagonal
        first = int(np.argmax(self.sizes)) if zs else 0
        offset = int(np.sum(self.sizes[:first]))
        self.b = np.arange(offset, offset + (self.sizes[first] if zs else 0))
        self.s = np.setdiff1d(np.arange(self.z.shape[1]), self.b)
        ztz = (self.z.T @ self.z).tocsr()
        self.ztz_ss, self.ztz_bb = ztz[self.s][:, self.s].toarray(), ztz[self.b][:, self.b].diagonal()
        ztz_sb = ztz[self.s][:, self.b]
        self.ztz_sb = ztz_sb.toarray() if len(self.s) * len(self.b) <= DENSE_BLOCK else ztz_sb.tocoo()

    def _factor(self, lam: np.ndarray):
        """(log|A|, solve) for A = ΛZᵀZΛ + I by block elimination: A_bb = D is diagonal, so
        |A| = |D|·|S| with the Schur complement S = A_ss − A_sb D⁻¹ A_bs (dense, as small as the
        components other than the largest), and A x = r is solved through S's Cholesky factor."""
        from scipy import sparse
        from scipy.linalg import cho_factor, cho_solve

        lam_s, lam_b = lam[self.s], lam[self.b]
        d = lam_b * lam_b * self.ztz_bb + 1.0
        if isinstance(self.ztz_sb, np.ndarray):
            c = lam_s[:, None] * self.ztz_sb * lam_b[None, :]
            cdc = (c / d[None, :]) @ c.T
        else:       # C = Λ_s (ZᵀZ)_sb Λ_b on ZᵀZ's own sparsity pattern
            rows, cols = self.ztz_sb.row, self.ztz_sb.col
            values = self.ztz_sb.data * lam_s[rows] * lam_b[cols]
            c = sparse.csr_matrix((values, (rows, cols)), shape=self.ztz_sb.shape)
            cdc = (sparse.csr_matrix((values / d[cols], (rows, cols)), shape=self.ztz_sb.shape) @ c.T).toarray()
        schur = lam_s[:, None] * self.ztz_ss * lam_s[None, :] + np.eye(len(lam_s)) - cdc
        factor = cho_factor(schur, check_finite=False) if len(lam_s) else None
        logdet = float(np.sum(np.log(d))) + (2.0 * float(np.sum(np.log(np.diag(factor[0])))) if factor else 0.0)

        def solve(r: np.ndarray) -> np.ndarray:
            scale = d if r.ndim == 1 else d[:, None]
            out = np.empty_like(r, dtype=float)
            x_s = cho_solve(factor, r[self.s] - c @ (r[self.b] / scale), check_finite=False) if factor else r[self.s]
            out[self.s] = x_s
            out[self.b] = (r[self.b] - c.T @ x_s) / scale
            return out

        return logdet, solve

    def _gls(self, theta: np.ndarray) -> tuple[float, np.ndarray, np.ndarray, float]:
        """(log|A|, M, β, r²) at the relative standard deviations θ."""
        lam = np.repeat(theta, self.sizes)
        logdet_a, solve = self._factor(lam)
        lzx, lzy = lam[:, None] * self.ztx, lam * self.zty
        ainv_zx, ainv_zy = solve(lzx), solve(lzy)
        m = self.x.T @ self.x - lzx.T @ ainv_zx
        rhs = self.x.T @ self.y - lzx.T @ ainv_zy
        beta = np.linalg.solve(m, rhs)
        e = self.y - self.x @ beta
        lze = lam * (self.zt @ e)
        return logdet_a, m, beta, float(e @ e - lze @ solve(lze))

    def solve(self, theta: np.ndarray) -> dict[str, Any]:
        logdet_a, m, beta, r2 = self._gls(theta)
        dof = self.n - self.p
        deviance = logdet_a + float(np.linalg.slogdet(m)[1]) + dof * (1 + math.log(2 * math.pi * r2 / dof))
        sigma2 = r2 / dof
        return {"deviance": deviance, "beta": beta, "cov": sigma2 * np.linalg.inv(m), "sigma2": sigma2}

    def deviance_at(self, sds: np.ndarray) -> float:
        """The REML deviance (−2 log restricted likelihood) at the standard deviations
        sds = (τ_1, …, τ_k, σ), σ not profiled out:
            (n − p)·log(2πσ²) + log|A| + log|M| + r²/σ²,  θ = τ/σ
        (at σ² = r²/(n − p) it equals `solve`'s profiled deviance). Even in every τ_k, so a
        component estimated at 0 has a symmetric neighbourhood for the numerical derivatives."""
        sigma2 = float(sds[-1]) ** 2
        logdet_a, m, _, r2 = self._gls(np.asarray(sds[:-1]) / sds[-1])
        return ((self.n - self.p) * math.log(2 * math.pi * sigma2) + logdet_a + float(np.linalg.slogdet(m)[1])
                + r2 / sigma2)

    def variances_at(self, sds: np.ndarray) -> np.ndarray:
        """The diagonal of Cov(β) = σ² M⁻¹ at the standard deviations sds = (τ_1, …, τ_k, σ)."""
        _, m, _, _ = self._gls(np.asarray(sds[:-1]) / sds[-1])
        return float(sds[-1]) ** 2 * np.diag(np.linalg.inv(m))


def satterthwaite(reml: _Reml, sds: np.ndarray) -> np.ndarray:
    """Satterthwaite's degrees of freedom of each coefficient's t statistic (as lmerTest computes
    them): for v_j = Var(β̂_j) as a function of the standard deviations φ = (τ_1, …, τ_k, σ),

        df_j = 2 v_j² / (g_jᵀ W g_j),  g_j = ∂v_j/∂φ,  W = Cov(φ̂) = 2 H⁻¹,

    with H the Hessian of the REML deviance (−2 log L_R) at φ̂; both derivatives are statsmodels'
    central differences. A component at 0 has g = 0 in its place (v depends on τ² only)."""
    from statsmodels.tools.numdiff import approx_fprime, approx_hess3

    hessian = approx_hess3(sds, reml.deviance_at)
    cov_sds = 2.0 * np.linalg.pinv(hessian)
    variances = reml.variances_at(sds)
    grads = np.reshape(approx_fprime(sds, reml.variances_at, centered=True), (len(variances), len(sds)))
    spread = np.einsum("ij,jk,ik->i", grads, cov_sds, grads)
    dof = float(reml.n - reml.p)
    return np.array([2.0 * v * v / s if s > 0 and math.isfinite(s) else dof for v, s in zip(variances, spread)])


def fit_crossed(y: np.ndarray, x: np.ndarray, zs: list) -> dict[str, Any]:
    """REML fit of the crossed random intercepts `zs` (one sparse indicator matrix each): β, Cov(β),
    σ², the variance components θ_k² σ² and each coefficient's Satterthwaite degrees of freedom."""
    from scipy.optimize import minimize

    reml = _Reml(y, x, zs)
    if not zs:
        out = reml.solve(np.zeros(0))
        return {**out, "variances": [], "df": np.full(reml.p, float(reml.n - reml.p))}
    result = minimize(lambda v: reml.solve(np.sqrt(v))["deviance"], np.ones(len(zs)), method="SLSQP",
                      bounds=[(0.0, RELATIVE_VARIANCE_MAX)] * len(zs), options={"ftol": 1e-10, "maxiter": 500})
    variances = np.clip(result.x, 0.0, RELATIVE_VARIANCE_MAX)
    theta = np.sqrt(variances)
    out = reml.solve(theta)
    sigma = math.sqrt(out["sigma2"])
    df = (satterthwaite(reml, np.append(theta * sigma, sigma)) if sigma > 0
          else np.full(reml.p, float(reml.n - reml.p)))
    return {**out, "variances": list(out["sigma2"] * variances), "converged": bool(result.success), "df": df}


def fit_factorial(data: pd.DataFrame) -> dict[str, dict[str, float]] | None:
    """term → {beta, ci_low, ci_high, p, df}: 95% intervals and two-sided p-values from a t
    reference with Satterthwaite's degrees of freedom (df); None when a cell is empty or there are
    under two queries."""
    from scipy.stats import t as student

    cells = {(p, m) for p, m in zip(data["profile"], data["memory"])}
    if len(cells) < 4 or data["query"].nunique() < 2:
        return None
    # one order for the same observations, so the optimizer's path (and its last digits) does not
    # depend on the order the records were read in
    data = data.sort_values(["query", "persona", "profile", "memory", "y"], kind="mergesort", ignore_index=True)
    profile, memory = data["profile"].to_numpy(float), data["memory"].to_numpy(float)
    x = np.column_stack([np.ones(len(data)), profile, memory, profile * memory])
    zs = [_indicators(labels)[1] for labels in components(data).values()]
    fit = fit_crossed(data["y"].to_numpy(float), x, zs)
    out = {}
    for column, name in enumerate(TERMS, start=1):
        beta, se = float(fit["beta"][column]), math.sqrt(max(float(fit["cov"][column, column]), 0.0))
        df = float(fit["df"][column])
        half = student.ppf(0.975, df) * se
        p = float(2 * student.sf(abs(beta / se), df)) if se > 0 else float("nan")
        out[name] = {"beta": beta, "ci_low": beta - half, "ci_high": beta + half, "p": p, "df": df}
    return out


def factorial_rows(name: str, values: list[Observation], model: str, judge: str) -> list[dict[str, Any]]:
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
