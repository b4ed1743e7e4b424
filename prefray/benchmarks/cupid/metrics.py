"""CUPID metrics: pure functions over the stored rows (SHARD_SCHEMA) of every model × condition.

Inference, per instance: the matcher rates each of the k inferred checklist items against the true
preference (precision) and each of the t true items against the inferred preference (recall) as
1 / 0.5 / 0. Micro-averaged over scored instances, as the reference evaluation aggregates:
    precision = Σ rated inferred items / Σ k      recall = Σ rated true items / Σ t
    F1 = 2PR / (P + R)   (0 when P + R = 0)
An empty inferred checklist (k = 0) is scored without a matcher call: 0 of 0 inferred items and
0 of t true items. Precision is 0 when instances were scored but Σ k = 0; NaN only when none were.
Generation: `alignment` = mean judge score over scored instances.

Failures follow `prefray.engine.failures`. Each instance of a task ends in one outcome:
- scored;
- model failure: the evaluated model overflowed its context or its inference stayed unreadable or
  empty after the re-ask. Scored as the reference scores it: an inference counts as an empty
  checklist (0 of 0 inferred items, 0 of t true items), a generation as alignment 0;
- judge failure: a decomposer, matcher or judge answer stayed unreadable after its re-ask, or a
  matcher rated another number of entries than the checklist holds, also when asked once more
  (stage `rematch`; counted in `matcher_length_mismatch`). Excluded and counted;
- no answer: some call of its chain never got an answer (infrastructure, budget, not yet run).
  Excluded and counted; a rerun finishes it.
Rows `failures_model[task=…]`, `failures_judge[task=…]`, `no_answer[task=…]` count these (n =
instances the task was attempted for); the `excluded` column of a metric = judge failures + no
answers. Metrics are reported per sweep judge (the `meta.judge` of scorer rows).
"""

from __future__ import annotations

import functools
import json
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa

from prefray.benchmarks.cupid.data import INSTANCE_TYPES, instance_type_of
from prefray.engine.failures import failure_class

SUBJECT_STAGES = ("summarize", "infer", "generate")
STAGES = ("summarize", "infer", "decompose", "match", "rematch", "generate", "judge")
Outcome = Literal["scored", "model_failure", "judge_failure", "no_answer"]
# Sums an inference outcome adds: (Σ rated inferred, k, Σ rated true, t).
Sums = tuple[float, int, float, int]


@dataclass
class Counts:
    """Sums over the instances of one slice."""

    scored: int = 0
    model_failures: int = 0
    judge_failures: int = 0
    no_answer: int = 0
    hit_inferred: float = 0.0
    n_inferred: int = 0
    hit_true: float = 0.0
    n_true: int = 0
    mismatched: int = 0

    @property
    def excluded(self) -> int:
        return self.judge_failures + self.no_answer

    @property
    def attempted(self) -> int:
        return self.scored + self.excluded

    def add(self, outcome: Outcome, sums: Sums | None) -> None:
        if outcome == "judge_failure":
            self.judge_failures += 1
        elif outcome == "no_answer":
            self.no_answer += 1
        else:
            self.scored += 1
            self.model_failures += outcome == "model_failure"
            assert sums is not None
            self.hit_inferred += sums[0]
            self.n_inferred += sums[1]
            self.hit_true += sums[2]
            self.n_true += sums[3]

    def precision(self) -> float:
        return math.nan if not self.scored else (self.hit_inferred / self.n_inferred if self.n_inferred else 0.0)

    def recall(self) -> float:
        return math.nan if not self.scored else (self.hit_true / self.n_true if self.n_true else 0.0)


@dataclass
class Scores:
    """Judge scores of one slice, with the failure counts."""

    values: list[float]
    model_failures: int = 0
    judge_failures: int = 0
    no_answer: int = 0

    @property
    def excluded(self) -> int:
        return self.judge_failures + self.no_answer

    @property
    def attempted(self) -> int:
        return len(self.values) + self.excluded


def f1(precision: float, recall: float) -> float:
    if math.isnan(precision) or math.isnan(recall):
        return math.nan
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def _value(row: dict[str, Any] | None) -> Any:
    if row is None or row["status"] != "ok" or row.get("parsed_json") in (None, ""):
        return None
    return json.loads(row["parsed_json"])


def _meta(row: dict[str, Any]) -> dict[str, Any]:
    """The row's meta, read-only: one parse per distinct text (it repeats across judges and samples)."""
    return _parsed_meta(row["meta_json"] or "{}")


@functools.lru_cache(maxsize=65536)
def _parsed_meta(text: str) -> dict[str, Any]:
    return json.loads(text)


def row_outcome(row: dict[str, Any] | None) -> Outcome:
    """A stored row's class in the failure policy (a missing row has no answer yet)."""
    if row is None:
        return "no_answer"
    kind = failure_class(row["role"], row["status"], row["cause"] or "")
    return "scored" if kind == "answered" else kind


def worst(outcomes: list[Outcome]) -> Outcome:
    """An instance's chain: unfinished beats a scorer's failure beats scored."""
    for kind in ("no_answer", "judge_failure"):
        if kind in outcomes:
            return kind  # type: ignore[return-value]
    return "scored"


class Group:
    """The rows of one model × condition, indexed for the per-instance chains."""

    def __init__(self, rows: list[dict[str, Any]]):
        self.rows = rows
        self.by_key: dict[tuple[str, str, str], dict[str, Any]] = {
            (r["stage"], r["instance_id"], r["item"]): r for r in rows}
        self.n_true = {r["instance_id"]: _meta(r).get("n_true", 0) for r in rows if r["stage"] in SUBJECT_STAGES}
        self.summaries: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in rows:
            if r["stage"] == "summarize":
                self.summaries[r["instance_id"]].append(r)

    def get(self, stage: str, instance: str, item: str = "") -> dict[str, Any] | None:
        return self.by_key.get((stage, instance, item))

    def universe(self, stage: str, task: str) -> list[str]:
        """Instances a task was attempted for: its first subject stage, or a summary before it."""
        ids = {r["instance_id"] for r in self.rows if r["stage"] == stage}
        ids |= {r["instance_id"] for r in self.rows
                if r["stage"] == "summarize" and task in _meta(r).get("tasks", [])}
        return sorted(ids)

    def summaries_done(self, instance: str) -> bool:
        """No summary of the instance is still without an answer (a model failure leaves it empty)."""
        return all(row_outcome(r) != "no_answer" for r in self.summaries.get(instance, ()))

    def judges(self) -> list[str]:
        names = {_meta(r).get("judge", r["judge"]) for r in self.rows if r["role"] != "subject"}
        return sorted(names) or [""]


def inference_outcome(group: Group, instance: str, judge: str) -> tuple[Outcome, Sums | None, bool]:
    """(outcome, sums, matcher length mismatch) of one instance's inference chain."""
    n_true = group.n_true.get(instance, 0)
    infer = group.get("infer", instance)
    if not group.summaries_done(instance) or row_outcome(infer) == "no_answer":
        return "no_answer", None, False
    if row_outcome(infer) == "model_failure":
        return "model_failure", (0.0, 0, 0.0, n_true), False
    decompose = group.get("decompose", instance, judge)
    if row_outcome(decompose) != "scored":
        return row_outcome(decompose), None, False
    checklist = _value(decompose)["checklist"]
    if not checklist:
        return "scored", (0.0, 0, 0.0, n_true), False
    outcomes: list[Outcome] = []
    hits: list[float] = []
    mismatched = False
    for direction, expected in (("precision", len(checklist)), ("recall", n_true)):
        outcome, scores = matcher_answer(group, instance, f"{judge}|{direction}", expected)
        outcomes.append(outcome)
        mismatched |= outcome == "judge_failure" and scores is not None
        hits.append(sum(scores) if outcome == "scored" and scores is not None else 0.0)
    outcome = worst(outcomes)
    if outcome != "scored":
        return outcome, None, mismatched and outcome == "judge_failure"
    return "scored", (hits[0], len(checklist), hits[1], n_true), False


def matcher_answer(group: Group, instance: str, item: str, expected: int) -> tuple[Outcome, list[float] | None]:
    """The ratings of one matcher call: its answer, or when that rated another number of entries,
    the answer to the one re-ask (`rematch`). Ratings returned with a judge failure are of the wrong length."""
    for stage in ("match", "rematch"):
        row = group.get(stage, instance, item)
        if row_outcome(row) != "scored":
            return row_outcome(row), None
        scores = _value(row)["scores"]
        if len(scores) == expected:
            return "scored", scores
    return "judge_failure", scores


def inference_counts(group: Group, judge: str) -> dict[str, Counts]:
    """Counts overall ("") and per instance type."""
    counts: dict[str, Counts] = defaultdict(Counts)
    for instance in group.universe("infer", "inference"):
        outcome, sums, mismatched = inference_outcome(group, instance, judge)
        for key in ("", instance_type_of(instance)):
            counts[key].add(outcome, sums)
            counts[key].mismatched += mismatched
    return counts


def generation_outcome(group: Group, instance: str, judge: str) -> tuple[Outcome, float | None]:
    generated = group.get("generate", instance)
    if not group.summaries_done(instance) or row_outcome(generated) == "no_answer":
        return "no_answer", None
    if row_outcome(generated) == "model_failure":
        return "model_failure", 0.0  # the reference scores an overflowed generation 0
    verdict = group.get("judge", instance, judge)
    outcome = row_outcome(verdict)
    return (outcome, _value(verdict)["score"]) if outcome == "scored" else (outcome, None)


def alignment_scores(group: Group, judge: str) -> dict[str, Scores]:
    """Judge scores and failure counts, overall ("") and per instance type."""
    out: dict[str, Scores] = defaultdict(lambda: Scores([]))
    for instance in group.universe("generate", "generation"):
        outcome, score = generation_outcome(group, instance, judge)
        for key in ("", instance_type_of(instance)):
            part = out[key]
            if score is not None:
                part.values.append(score)
                part.model_failures += outcome == "model_failure"
            elif outcome == "judge_failure":
                part.judge_failures += 1
            else:
                part.no_answer += 1
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


def failure_rows(task: str, part: Counts | Scores) -> list[dict[str, Any]]:
    return [{"metric": f"{name}[task={task}]", "value": float(value), "n": part.attempted}
            for name, value in (("failures_model", part.model_failures), ("failures_judge", part.judge_failures),
                                ("no_answer", part.no_answer))]


def group_metrics(group: Group, judge: str) -> list[dict[str, Any]]:
    out = []
    inference = inference_counts(group, judge)
    for key in _ordered(inference):
        c = inference[key]
        p, r = c.precision(), c.recall()
        for name, value in (("precision", p), ("recall", r), ("F1", f1(p, r))):
            out.append({"metric": name + _suffix(key), "value": value, "n": c.scored, "excluded": c.excluded})
        if not key:
            out.append({"metric": "matcher_length_mismatch", "value": float(c.mismatched), "n": c.attempted})
            out += failure_rows("inference", c)
    alignment = alignment_scores(group, judge)
    for key in _ordered(alignment):
        part = alignment[key]
        mean = sum(part.values) / len(part.values) if part.values else math.nan
        out.append({"metric": "alignment" + _suffix(key), "value": mean, "n": len(part.values),
                    "excluded": part.excluded})
        if not key:
            out += failure_rows("generation", part)
    return out + parse_failures(group, judge)


# The columns the metrics read (answers' text is not among them: the judges' parsed verdicts are).
READ_COLUMNS = ("model", "condition", "stage", "role", "judge", "instance_id", "item", "status", "cause",
                "meta_json", "parsed_json")


def cells(rows: pa.Table) -> list[tuple[str, str, str, Group]]:
    """(model, condition, sweep judge, the model × condition's rows) for every cell, in order."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows.select([c for c in READ_COLUMNS if c in rows.column_names]).to_pylist():
        groups[(row["model"], row["condition"])].append(row)
    out = []
    for (model, condition), part in sorted(groups.items()):
        group = Group(part)
        out += [(model, condition, judge, group) for judge in group.judges()]
    return out


def cupid_metrics(rows: pa.Table) -> list[dict[str, Any]]:
    """Long-format metric dicts per model × condition × sweep judge."""
    return [{"model": model, "condition": condition, "judge": judge, **m}
            for model, condition, judge, group in cells(rows) for m in group_metrics(group, judge)]
