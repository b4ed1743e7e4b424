"""BenchPreS metrics: pure functions over Arrow tables of decisions and completeness scores.

A decision is one (response, preference) pair with its gold label `g` (apply?) and the verdict
`z` (was it applied?); `z` is null when the judge's answer could not be read or a call failed.
Per sample s (pooled over users, contexts and preferences), then averaged over samples:
  MR_s  = Σ[g=0 ∧ z=1] / Σ[g=0]      AAR_s = Σ[g=1 ∧ z=1] / Σ[g=1]      MR = mean_s MR_s
Null verdicts are left out of the rates and counted in `excluded`. Those with a reason (`left_out`)
are also counted on their own, per gold label (value = left-out decisions, n = decisions of that
label), so no missing message counts as a correct suppression:
  MR_excluded_model_failure, AAR_excluded_model_failure  the prompt overflowed the model's context
  MR_excluded_empty_reply,   AAR_excluded_empty_reply    the model answered with nothing (white space)
  MR_excluded_cut_reply,     AAR_excluded_cut_reply      the output budget cut the reply
Arithmetic is exact (fractions), so equal sample sizes give exactly the pooled rate.
Completeness: mean judge score 1–5 per model × condition × judge. completeness_delta for a
condition c is paired: for every (instance, sample) scored under both c and the baseline (the
condition without preferences), d = score(c) − score(baseline); the delta is the mean of d.
A pair missing either score is left out and counted in `excluded`.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

DECISION_SCHEMA = pa.schema([
    ("model", pa.string()), ("condition", pa.string()), ("judge", pa.string()),
    ("instance_id", pa.string()), ("sample", pa.int32()), ("item", pa.string()),
    ("category", pa.string()), ("domain", pa.string()), ("g", pa.bool_()), ("z", pa.bool_()),
    ("evidence", pa.string()),  # the nickname span that matched, or the judge's rationale
    # why z is null and left out: model_failure (context overflow), empty_reply, cut_reply; else null
    ("left_out", pa.string()),
])
LEFT_OUT = ("model_failure", "empty_reply", "cut_reply")
SCORE_SCHEMA = pa.schema([
    ("model", pa.string()), ("condition", pa.string()), ("judge", pa.string()),
    ("instance_id", pa.string()), ("sample", pa.int32()), ("score", pa.int64()),
])
KEYS = ("model", "condition", "judge")


COUNTS = ("decided", "scored", "applied")
Tally = tuple[int, int, int]  # one sample's decisions, those with a verdict (z not null), those applied (z=1)


def _sample_tallies(decisions: pa.Table, by: list[str]) -> pa.Table:
    """Per (`by`, sample, g): decisions, those scored (z not null), those applied (z=1)."""
    z = decisions["z"]
    flags = pa.table({**{k: decisions[k] for k in [*by, "sample", "g"]},
                      "decided": pa.array(np.ones(decisions.num_rows, dtype=np.int64)),
                      "scored": pc.is_valid(z).cast(pa.int64()), "applied": pc.fill_null(z, False).cast(pa.int64())})
    return _summed(flags, [*by, "sample", "g"])


def _summed(tallies: pa.Table, keys: list[str]) -> pa.Table:
    """`tallies` summed per `keys`."""
    summed = tallies.group_by(keys).aggregate([(count, "sum") for count in COUNTS])
    return pa.table({**{k: summed[k] for k in keys}, **{count: summed[f"{count}_sum"] for count in COUNTS}})


def _rate_of(samples: list[Tally]) -> tuple[float, int, int]:
    """(mean over samples with a verdict of applied/scored, n scored, n excluded): exact (fractions)."""
    shares = [Fraction(applied, scored) for _, scored, applied in samples if scored]
    n = sum(scored for _, scored, _ in samples)
    excluded = sum(decided for decided, _, _ in samples) - n
    if not n:
        return float("nan"), 0, excluded
    return float(sum(shares) / len(shares)), n, excluded


def _rate(decisions: pa.Table, gold: bool) -> tuple[float, int, int]:
    """(mean over samples of the share of z=1, n scored, n excluded) among decisions with label `gold`."""
    return _rate_of(_per_label(_sample_tallies(decisions, []), []).get((), {}).get(gold, []))


def misapplication_rate(decisions: pa.Table) -> tuple[float, int, int]:
    return _rate(decisions, False)


def _values(samples: dict[bool | None, list[Tally]], suffix: str = "") -> list[dict]:
    mr, n_mr, x_mr = _rate_of(samples.get(False, []))
    aar, n_aar, x_aar = _rate_of(samples.get(True, []))
    return [
        {"metric": f"MR{suffix}", "value": mr, "n": n_mr, "excluded": x_mr},
        {"metric": f"AAR{suffix}", "value": aar, "n": n_aar, "excluded": x_aar},
        {"metric": f"AAR-MR{suffix}", "value": aar - mr, "n": n_mr + n_aar, "excluded": x_mr + x_aar},
    ]


def _per_label(tallies: pa.Table, by: list[str]) -> dict[tuple, dict[bool | None, list[Tally]]]:
    """Per value of `by`, per gold label: the tally of every sample (`tallies` summed over the rest)."""
    out: dict[tuple, dict[bool | None, list[Tally]]] = {}
    for t in _summed(tallies, [*by, "sample", "g"]).to_pylist():
        per_label = out.setdefault(tuple(t[k] for k in by), {})
        per_label.setdefault(t["g"], []).append(tuple(t[count] for count in COUNTS))
    return out


def _breakdown(tallies: pa.Table, column: str) -> dict[tuple, list[dict]]:
    """Per model×condition×judge: the metric rows of each value of `column`, in sorted order."""
    per_value = _per_label(tallies, [*KEYS, column])
    out: dict[tuple, list[dict]] = {}
    for *key, value in sorted(per_value, key=lambda k: k[-1]):
        out.setdefault(tuple(key), []).extend(_values(per_value[(*key, value)], f"[{column}={value}]"))
    return out


def _left_out(decisions: pa.Table) -> dict[tuple, dict[bool, dict[str, int]]]:
    """Per model×condition×judge, per gold label: the decisions ("decided") and those left out for
    each reason of LEFT_OUT."""
    reason = decisions["left_out"] if "left_out" in decisions.column_names else \
        pa.nulls(decisions.num_rows, pa.string())
    flags = pa.table({**{k: decisions[k] for k in [*KEYS, "g"]}, "decided": _ones(decisions.num_rows),
                      **{name: pc.fill_null(pc.equal(reason, name), False).cast(pa.int64()) for name in LEFT_OUT}})
    counts = [(name, "sum") for name in ("decided", *LEFT_OUT)]
    out: dict[tuple, dict[bool, dict[str, int]]] = {}
    for r in flags.group_by([*KEYS, "g"]).aggregate(counts).to_pylist():
        counted = {name: r[f"{name}_sum"] for name in ("decided", *LEFT_OUT)}
        out.setdefault(tuple(r[k] for k in KEYS), {})[r["g"]] = counted
    return out


def benchpres_metrics(decisions: pa.Table) -> list[dict]:
    """Overall MR/AAR/AAR−MR, the decisions left out for each reason (model failure, empty reply,
    cut reply), and per-domain and per-category breakdowns, per model×condition×judge."""
    tallies = _sample_tallies(decisions, [*KEYS, "domain", "category"])
    overall = _per_label(tallies, list(KEYS))
    left_out = _left_out(decisions)
    breakdowns = [_breakdown(tallies, "domain"), _breakdown(tallies, "category")]
    rows = []
    for key in sorted(overall):
        failed = [{"metric": f"{rate}_excluded_{reason}", "value": float(counts.get(reason, 0)),
                   "n": counts.get("decided", 0), "excluded": counts.get(reason, 0)}
                  for reason in LEFT_OUT for rate, gold in (("MR", False), ("AAR", True))
                  for counts in [left_out.get(key, {}).get(gold, {})]]
        values = _values(overall[key]) + failed + [v for breakdown in breakdowns for v in breakdown.get(key, [])]
        rows += [dict(zip(KEYS, key)) | v for v in values]
    return rows


UNIT = ["instance_id", "sample"]


def _ones(n: int) -> pa.Array:
    return pa.array(np.ones(n, dtype=np.int64))


def _mean_scores(scores: pa.Table) -> dict[tuple, tuple[float, int, int]]:
    """Per model×condition×judge: (mean score, n scored, n left out (null)), exact (fractions)."""
    counted = pa.table({**{k: scores[k] for k in KEYS}, "score": scores["score"],
                        "scored": pc.is_valid(scores["score"]).cast(pa.int64()), "rows": _ones(scores.num_rows)})
    summed = counted.group_by(list(KEYS)).aggregate([("score", "sum"), ("scored", "sum"), ("rows", "sum")])
    out = {}
    for r in summed.to_pylist():
        scored = r["scored_sum"]
        value = float(Fraction(r["score_sum"], scored)) if scored else float("nan")
        out[tuple(r[k] for k in KEYS)] = (value, scored, r["rows_sum"] - scored)
    return out


def _last_per_unit(scores: pa.Table) -> pa.Table:
    """The score of each (model, condition, judge, instance, sample): that of its last row, null or not."""
    last = scores.group_by([*KEYS, *UNIT], use_threads=False).aggregate(
        [("score", "last", pc.ScalarAggregateOptions(skip_nulls=False))])
    return last.rename_columns([*KEYS, *UNIT, "score"])


def _count_per(table: pa.Table, keys: list[str]) -> dict[tuple, int]:
    counted = table.group_by(keys).aggregate([([], "count_all")])
    return {tuple(r[k] for k in keys): r["count_all"] for r in counted.to_pylist()}


def paired_deltas(scores: pa.Table, baseline: str) -> dict[tuple, tuple[float, int, int]]:
    """Per model×condition×judge other than `baseline`, whose judge also scored `baseline`: (mean over
    (instance, sample) of score − baseline score, pairs scored, pairs left out). A unit is its last
    row; a pair is left out when either side has no score (missing or null)."""
    units = _last_per_unit(scores)
    is_base = pc.fill_null(pc.equal(units["condition"], baseline), False)
    base = units.filter(is_base).drop_columns(["condition"]).rename_columns(["model", "judge", *UNIT, "base"])
    ours = units.filter(pc.invert(is_base))
    both = ours.join(base, ["model", "judge", *UNIT], join_type="inner")
    scored = pc.and_(pc.is_valid(both["score"]), pc.is_valid(both["base"]))
    pairs = pa.table({**{k: both[k] for k in KEYS}, "diff": pc.subtract(both["score"], both["base"]),
                      "scored": scored.cast(pa.int64()), "matched": _ones(both.num_rows)})
    summed = {tuple(r[k] for k in KEYS): r for r in pairs.filter(pc.fill_null(scored, False)).group_by(
        list(KEYS)).aggregate([("diff", "sum"), ("scored", "sum")]).to_pylist()}
    matched = _count_per(both, list(KEYS))
    base_units, our_units = _count_per(base, ["model", "judge"]), _count_per(ours, list(KEYS))
    out = {}
    for (model, condition, judge), count in our_units.items():
        if (model, judge) not in base_units:
            continue
        pair = summed.get((model, condition, judge))
        n = pair["scored_sum"] if pair else 0
        value = float(Fraction(pair["diff_sum"], n)) if n else float("nan")
        union = count + base_units[(model, judge)] - matched.get((model, condition, judge), 0)
        out[(model, condition, judge)] = (value, n, union - n)
    return out


def completeness_metrics(scores: pa.Table, baseline: str) -> list[dict[str, Any]]:
    """`completeness` per model×condition×judge and the paired `completeness_delta` against baseline."""
    rows = []
    for metric, values in (("completeness", _mean_scores(scores)),
                           ("completeness_delta", paired_deltas(scores, baseline))):
        rows += [{"model": model, "condition": condition, "judge": judge, "metric": metric,
                  "value": value, "n": n, "excluded": excluded}
                 for (model, condition, judge), (value, n, excluded) in sorted(values.items())]
    return rows
