"""BenchPreS metrics: pure functions over Arrow tables of decisions and completeness scores.

A decision is one (response, preference) pair with its gold label `g` (apply?) and the verdict
`z` (was it applied?); `z` is null when the judge's answer could not be read or a call failed.
Per sample s (pooled over users, contexts and preferences), then averaged over samples:
  MR_s  = Σ[g=0 ∧ z=1] / Σ[g=0]      AAR_s = Σ[g=1 ∧ z=1] / Σ[g=1]      MR = mean_s MR_s
Null verdicts are left out of the rates and counted in `excluded`. Arithmetic is exact
(fractions), so equal sample sizes give exactly the pooled rate.
Completeness: mean judge score 1–5 per model × condition × judge. completeness_delta for a
condition c is paired: for every (instance, sample) scored under both c and the baseline (the
condition without preferences), d = score(c) − score(baseline); the delta is the mean of d.
A pair missing either score is left out and counted in `excluded`.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

DECISION_SCHEMA = pa.schema([
    ("model", pa.string()), ("condition", pa.string()), ("judge", pa.string()),
    ("instance_id", pa.string()), ("sample", pa.int32()), ("item", pa.string()),
    ("category", pa.string()), ("domain", pa.string()), ("g", pa.bool_()), ("z", pa.bool_()),
    ("evidence", pa.string()),  # the nickname span that matched, or the judge's rationale
])
SCORE_SCHEMA = pa.schema([
    ("model", pa.string()), ("condition", pa.string()), ("judge", pa.string()),
    ("instance_id", pa.string()), ("sample", pa.int32()), ("score", pa.int64()),
])
KEYS = ("model", "condition", "judge")


def _rate(decisions: pa.Table, gold: bool) -> tuple[float, int, int]:
    """(mean over samples of the share of z=1, n scored, n excluded) among decisions with label `gold`."""
    subset = decisions.filter(pc.equal(decisions["g"], gold))
    per_sample: dict[int, list[int]] = {}
    for sample, z in zip(subset["sample"].to_pylist(), subset["z"].to_pylist()):
        if z is not None:
            counts = per_sample.setdefault(sample, [0, 0])
            counts[0] += int(z)
            counts[1] += 1
    n = sum(total for _, total in per_sample.values())
    if not n:
        return float("nan"), 0, subset.num_rows
    mean = sum(Fraction(hit, total) for hit, total in per_sample.values()) / len(per_sample)
    return float(mean), n, subset.num_rows - n


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


def _groups(table: pa.Table) -> list[tuple[tuple[str, str, str], pa.Table]]:
    keys = sorted(set(zip(*(table[k].to_pylist() for k in KEYS))))
    out = []
    for model, condition, judge in keys:
        mask = pc.and_(pc.and_(pc.equal(table["model"], model), pc.equal(table["condition"], condition)),
                       pc.equal(table["judge"], judge))
        out.append(((model, condition, judge), table.filter(mask)))
    return out


def benchpres_metrics(decisions: pa.Table) -> list[dict]:
    """Overall MR/AAR/AAR−MR and per-domain and per-category breakdowns, per model×condition×judge."""
    rows = []
    for (model, condition, judge), part in _groups(decisions):
        values = _values(part) + _breakdown(part, "domain") + _breakdown(part, "category")
        rows += [{"model": model, "condition": condition, "judge": judge, **v} for v in values]
    return rows


def _mean_score(part: pa.Table) -> tuple[float, int, int]:
    scores = [s for s in part["score"].to_pylist() if s is not None]
    value = float(Fraction(sum(scores), len(scores))) if scores else float("nan")
    return value, len(scores), part.num_rows - len(scores)


def _by_unit(part: pa.Table) -> dict[tuple[str, int], int | None]:
    return {(iid, sample): score for iid, sample, score in
            zip(part["instance_id"].to_pylist(), part["sample"].to_pylist(), part["score"].to_pylist())}


def paired_delta(scores: pa.Table, base: pa.Table) -> tuple[float, int, int]:
    """(mean over (instance, sample) of score − baseline score, pairs scored, pairs left out)."""
    ours, theirs = _by_unit(scores), _by_unit(base)
    units = set(ours) | set(theirs)
    diffs = [ours[u] - theirs[u] for u in units if ours.get(u) is not None and theirs.get(u) is not None]
    value = float(Fraction(sum(diffs), len(diffs))) if diffs else float("nan")
    return value, len(diffs), len(units) - len(diffs)


def completeness_metrics(scores: pa.Table, baseline: str) -> list[dict[str, Any]]:
    """`completeness` per model×condition×judge and the paired `completeness_delta` against baseline."""
    groups = dict(_groups(scores))
    rows = []
    for (model, condition, judge), part in groups.items():
        value, n, excluded = _mean_score(part)
        rows.append({"model": model, "condition": condition, "judge": judge, "metric": "completeness",
                     "value": value, "n": n, "excluded": excluded})
    for (model, condition, judge), part in groups.items():
        base = groups.get((model, baseline, judge))
        if condition == baseline or base is None:
            continue
        value, n, excluded = paired_delta(part, base)
        rows.append({"model": model, "condition": condition, "judge": judge, "metric": "completeness_delta",
                     "value": value, "n": n, "excluded": excluded})
    return rows
