"""The one failure policy every benchmark follows. Each stored row falls in exactly one class:

- ``answered``       the call returned an answer (possibly empty, refused or truncated: it is the
                     model's answer and is scored as given; truncation is flagged on the row).
- ``no_answer``      every try ended in an infrastructure failure or the budget skipped it (a cause
                     in NO_ANSWER_CAUSES below; the causes are ``engine.types.Cause``). The unit is
                     excluded, its cell is marked incomplete, and ``prefray rerun``
                     finishes it.
- ``model_failure``  the evaluated model's own failure: its answer was unparsable where the benchmark
                     asks for a format (after one re-ask), or the provider refused the prompt as longer
                     than the model's context. Scored as the paper's reference scores it (for example
                     0), never dropped from a denominator.
- ``judge_failure``  a judge's answer stayed unreadable after its one re-ask. Excluded, counted per judge.

The classes are computed from ``role``, ``status`` and ``cause``, so they hold for old runs too.
The cause table of the docs' config reference is generated from these sets (prefray/app/table.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from prefray.engine.types import Cause

FailureClass = Literal["answered", "no_answer", "model_failure", "judge_failure"]
FAILURE_CLASSES: tuple[FailureClass, ...] = ("answered", "no_answer", "model_failure", "judge_failure")

# Causes that are the evaluated model's own doing (when the row belongs to the subject role).
MODEL_FAILURE_CAUSES = frozenset({Cause.PARSE_ERROR, Cause.CONTEXT_OVERFLOW})
# Causes that are the judge's own doing (when the row belongs to a judge role).
JUDGE_FAILURE_CAUSES = frozenset({Cause.PARSE_ERROR})
# Causes of a row with no answer: infrastructure and budget, what a rerun finishes by default.
NO_ANSWER_CAUSES = frozenset(Cause) - MODEL_FAILURE_CAUSES


def failure_class(role: str, status: str, cause: str) -> FailureClass:
    """The class of one row (see the module docstring)."""
    if status == "ok":
        return "answered"
    if role == "subject" and cause in MODEL_FAILURE_CAUSES:
        return "model_failure"
    if role != "subject" and cause in JUDGE_FAILURE_CAUSES:
        return "judge_failure"
    return "no_answer"


def failure_classes(rows: pa.Table) -> pa.Array:
    """``failure_class`` for every row of a shard table, as a string column."""
    ok = pc.equal(rows["status"], "ok")
    subject = pc.equal(rows["role"], "subject")
    model_cause = pc.is_in(rows["cause"], pa.array(sorted(map(str, MODEL_FAILURE_CAUSES)), pa.string()))
    judge_cause = pc.is_in(rows["cause"], pa.array(sorted(map(str, JUDGE_FAILURE_CAUSES)), pa.string()))
    return pc.case_when(
        pc.make_struct(ok, pc.and_(subject, model_cause), pc.and_(pc.invert(subject), judge_cause)),
        "answered", "model_failure", "judge_failure", "no_answer")


def class_counts(rows: pa.Table, keys: Sequence[str]) -> dict[tuple, dict[FailureClass, int]]:
    """Stored rows per failure class for each distinct value of `keys` (every class listed, 0 when
    none); a row without a role counts as the evaluated model's, one without a cause as causeless."""
    classes = failure_classes(pa.table({"status": pc.fill_null(rows["status"], ""),
                                        "role": pc.fill_null(rows["role"], "subject"),
                                        "cause": pc.fill_null(rows["cause"], "")}))
    grouped = rows.select(list(keys)).append_column("class", classes).group_by([*keys, "class"]).aggregate(
        [("class", "count")])
    out: dict[tuple, dict[FailureClass, int]] = {}
    for r in grouped.to_pylist():
        out.setdefault(tuple(r[k] for k in keys), dict.fromkeys(FAILURE_CLASSES, 0))[r["class"]] = r["class_count"]
    return out


def is_model_failure(row: dict) -> bool:
    return failure_class(row.get("role", "subject"), row["status"], row.get("cause", "")) == "model_failure"


def cause_classes(cause: Cause) -> tuple[FailureClass, FailureClass]:
    """The class of a failed row with this cause: on the evaluated model's row, and on a judge's."""
    return failure_class("subject", "failed", cause), failure_class("judge", "failed", cause)
