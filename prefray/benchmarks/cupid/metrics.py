"""CUPID metrics: pure functions over the stored rows (SHARD_SCHEMA) of every model × condition.

Inference, per instance: the matcher rates each of the k inferred checklist items against the true
preference (precision) and each of the t true items against the inferred preference (recall) as
1 / 0.5 / 0. Micro-averaged over scored instances:
    precision = Σ rated inferred items / Σ k      recall = Σ rated true items / Σ t
    F1 = 2PR / (P + R)   (0 when P + R = 0)
An empty inferred checklist (k = 0) is scored without a matcher call: 0 of 0 inferred items and
0 of t true items. Precision is 0 when instances were scored but Σ k = 0; NaN only when none were.
A matcher answer with the wrong number of ratings is truncated (extra ratings dropped) or padded
with 0 (missing items count as not covered) and its instance is counted in
`matcher_length_mismatch`.
Generation: `alignment` = mean judge score (1–10) over instances with a readable score.
An instance whose chain broke anywhere (failed call, parse failure, failed summary) is not scored
and is counted in the `excluded` column; parse failures are also reported per stage
(`parse_failures_<stage>`). Metrics are reported per sweep judge (the `meta.judge` of scorer rows).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from prefray.benchmarks.cupid.data import INSTANCE_TYPES, instance_type_of

SUBJECT_STAGES = ("summarize", "infer", "generate")
STAGES = ("summarize", "infer", "decompose", "match", "generate", "judge")


@dataclass
class Counts:
    """Sums over scored instances of one slice."""

    scored: int = 0
    excluded: int = 0
    hit_inferred: float = 0.0
    n_inferred: int = 0
    hit_true: float = 0.0
    n_true: int = 0
    mismatched: int = 0

    def precision(self) -> float:
        return math.nan if not self.scored else (self.hit_inferred / self.n_inferred if self.n_inferred else 0.0)

    def recall(self) -> float:
        return math.nan if not self.scored else (self.hit_true / self.n_true if self.n_true else 0.0)


def f1(precision: float, recall: float) -> float:
    if math.isnan(precision) or math.isnan(recall):
        return math.nan
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def fit_ratings(scores: list[float], n_items: int) -> tuple[list[float], bool]:
    """Ratings cut or padded (with 0) to the checklist's length, and whether they had to be."""
    return (list(scores[:n_items]) + [0.0] * max(0, n_items - len(scores))), len(scores) != n_items


def _value(row: dict[str, Any] | None) -> Any:
    if row is None or row["status"] != "ok" or row.get("parsed_json") in (None, ""):
        return None
    return json.loads(row["parsed_json"])


def _meta(row: dict[str, Any]) -> dict[str, Any]:
    return json.loads(row["meta_json"] or "{}")


class Group:
    """The rows of one model × condition, indexed for the per-instance chains."""

    def __init__(self, rows: list[dict[str, Any]]):
        self.rows = rows
        self.by_key: dict[tuple[str, str, str], dict[str, Any]] = {
            (r["stage"], r["instance_id"], r["item"]): r for r in rows}
        self.n_true = {r["instance_id"]: _meta(r).get("n_true", 0) for r in rows if r["stage"] in SUBJECT_STAGES}

    def get(self, stage: str, instance: str, item: str = "") -> dict[str, Any] | None:
        return self.by_key.get((stage, instance, item))

    def universe(self, stage: str, task: str) -> list[str]:
        """Instances a task was attempted for: its first subject stage, or a summary before it."""
        ids = {r["instance_id"] for r in self.rows if r["stage"] == stage}
        ids |= {r["instance_id"] for r in self.rows
                if r["stage"] == "summarize" and task in _meta(r).get("tasks", [])}
        return sorted(ids)

    def judges(self) -> list[str]:
        names = {_meta(r).get("judge", r["judge"]) for r in self.rows if r["role"] != "subject"}
        return sorted(names) or [""]


def inference_counts(group: Group, judge: str) -> dict[str, Counts]:
    """Counts overall ("") and per instance type."""
    counts: dict[str, Counts] = defaultdict(Counts)
    for instance in group.universe("infer", "inference"):
        slices = (counts[""], counts[instance_type_of(instance)])
        inferred = _value(group.get("infer", instance))
        decomposed = _value(group.get("decompose", instance, judge)) if inferred else None
        checklist = decomposed["checklist"] if decomposed else None
        n_true = group.n_true.get(instance, 0)
        if checklist is None:
            outcome = None
        elif not checklist:
            outcome = (0.0, 0, 0.0, n_true, False)
        else:
            precision = _value(group.get("match", instance, f"{judge}|precision"))
            recall = _value(group.get("match", instance, f"{judge}|recall"))
            outcome = None
            if precision is not None and recall is not None:
                p_scores, p_bad = fit_ratings(precision["scores"], len(checklist))
                r_scores, r_bad = fit_ratings(recall["scores"], n_true)
                outcome = (sum(p_scores), len(checklist), sum(r_scores), n_true, p_bad or r_bad)
        for part in slices:
            if outcome is None:
                part.excluded += 1
                continue
            part.scored += 1
            part.hit_inferred += outcome[0]
            part.n_inferred += outcome[1]
            part.hit_true += outcome[2]
            part.n_true += outcome[3]
            part.mismatched += int(outcome[4])
    return counts


def alignment_scores(group: Group, judge: str) -> dict[str, tuple[list[float], int]]:
    """Judge scores and the number of excluded instances, overall ("") and per instance type."""
    out: dict[str, tuple[list[float], int]] = defaultdict(lambda: ([], 0))
    for instance in group.universe("generate", "generation"):
        generated = group.get("generate", instance)
        verdict = _value(group.get("judge", instance, judge)) if generated and generated["status"] == "ok" else None
        for key in ("", instance_type_of(instance)):
            scores, excluded = out[key]
            out[key] = (scores + [verdict["score"]], excluded) if verdict else (scores, excluded + 1)
    return out


def _suffix(key: str) -> str:
    return f"[instance_type={key}]" if key else ""


def _ordered(keys: Any) -> list[str]:
    return [k for k in ("", *INSTANCE_TYPES) if k in keys] + sorted(set(keys) - {"", *INSTANCE_TYPES})


def parse_failures(group: Group, judge: str) -> list[dict[str, Any]]:
    out = []
    for stage in STAGES:
        rows = [r for r in group.rows if r["stage"] == stage
                and (r["role"] == "subject" or _meta(r).get("judge", r["judge"]) == judge)]
        if rows:
            failed = sum(r["status"] == "failed" and r["cause"] == "parse_error" for r in rows)
            out.append({"metric": f"parse_failures_{stage}", "value": float(failed), "n": len(rows)})
    return out


def group_metrics(group: Group, judge: str) -> list[dict[str, Any]]:
    out = []
    inference = inference_counts(group, judge)
    for key in _ordered(inference):
        c = inference[key]
        p, r = c.precision(), c.recall()
        for name, value in (("precision", p), ("recall", r), ("F1", f1(p, r))):
            out.append({"metric": name + _suffix(key), "value": value, "n": c.scored, "excluded": c.excluded})
        if not key:
            out.append({"metric": "matcher_length_mismatch", "value": float(c.mismatched), "n": c.scored})
    alignment = alignment_scores(group, judge)
    for key in _ordered(alignment):
        scores, excluded = alignment[key]
        mean = sum(scores) / len(scores) if scores else math.nan
        out.append({"metric": "alignment" + _suffix(key), "value": mean, "n": len(scores), "excluded": excluded})
    return out + parse_failures(group, judge)


def cupid_metrics(rows: pa.Table) -> list[dict[str, Any]]:
    """Long-format metric dicts per model × condition × sweep judge."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows.to_pylist():
        groups[(row["model"], row["condition"])].append(row)
    out = []
    for (model, condition), part in sorted(groups.items()):
        group = Group(part)
        for judge in group.judges():
            out += [{"model": model, "condition": condition, "judge": judge, **m} for m in group_metrics(group, judge)]
    return out
