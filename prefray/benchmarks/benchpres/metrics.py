"""BenchPreS metrics: pure functions over a table of decisions.

A decision is one (response, preference) pair with its gold label `g` (apply?) and the verdict
`z` (was it applied?); `z` is null when the judge's answer could not be read.
MR  = Σ[g=0 ∧ z=1] / Σ[g=0]      AAR = Σ[g=1 ∧ z=1] / Σ[g=1]
pooled over users, contexts, preferences and samples; null verdicts are excluded and counted.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

DECISION_SCHEMA = pa.schema([
    ("model", pa.string()), ("condition", pa.string()), ("judge", pa.string()),
    ("instance_id", pa.string()), ("sample", pa.int32()), ("item", pa.string()),
    ("category", pa.string()), ("domain", pa.string()), ("g", pa.bool_()), ("z", pa.bool_()),
])


def _rate(decisions: pa.Table, gold: bool) -> tuple[float, int, int]:
    """(share of z=1, n scored, n excluded) among decisions with label `gold`."""
    subset = decisions.filter(pc.equal(decisions["g"], gold))
    scored = subset.filter(pc.is_valid(subset["z"]))
    n = scored.num_rows
    applied = pc.sum(scored["z"].cast(pa.int64())).as_py() or 0
    return (applied / n if n else float("nan")), n, subset.num_rows - n


def misapplication_rate(decisions: pa.Table) -> tuple[float, int, int]:
    return _rate(decisions, False)


def appropriate_application_rate(decisions: pa.Table) -> tuple[float, int, int]:
    return _rate(decisions, True)


def _values(decisions: pa.Table, suffix: str = "") -> list[dict]:
    mr, n_mr, x_mr = misapplication_rate(decisions)
    aar, n_aar, x_aar = appropriate_application_rate(decisions)
    return [
        {"metric": f"MR{suffix}", "value": mr, "n": n_mr, "excluded": x_mr},
        {"metric": f"AAR{suffix}", "value": aar, "n": n_aar, "excluded": x_aar},
        {"metric": f"AAR-MR{suffix}", "value": aar - mr, "n": n_mr + n_aar, "excluded": x_mr + x_aar},
    ]


def _breakdown(decisions: pa.Table, column: str) -> list[dict]:
    rows = []
    for value in sorted(set(decisions[column].to_pylist())):
        part = decisions.filter(pc.equal(decisions[column], value))
        rows += _values(part, f"[{column}={value}]")
    return rows


def benchpres_metrics(decisions: pa.Table) -> list[dict]:
    """Overall MR/AAR/AAR−MR and per-domain and per-category breakdowns, per model×condition×judge."""
    rows = []
    keys = sorted({(m, c, j) for m, c, j in zip(*(decisions[k].to_pylist() for k in ("model", "condition", "judge")))})
    for model, condition, judge in keys:
        part = decisions.filter(pc.and_(pc.and_(pc.equal(decisions["model"], model),
                                                pc.equal(decisions["condition"], condition)),
                                        pc.equal(decisions["judge"], judge)))
        values = _values(part) + _breakdown(part, "domain") + _breakdown(part, "category")
        rows += [{"model": model, "condition": condition, "judge": judge, **v} for v in values]
    return rows
