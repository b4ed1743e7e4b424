"""CUPID per-unit scores for confidence intervals: the persona is the independent unit.

Precision and recall are micro-averaged (Σ rated items ÷ Σ items), so an instance contributes its k
inferred items (each carrying the instance's mean rating) to precision and its t true items to
recall: the cluster bootstrap's Σ sums ÷ Σ sizes then recomputes exactly the reported ratio. An
instance scored as a model failure contributes its zeros; excluded instances contribute nothing.
`alignment` has one unit per scored instance. F1 is not a mean of units and gets no interval.
"""

from __future__ import annotations

import pyarrow as pa

from prefray.benchmarks.cupid.metrics import Group, cells, generation_outcome, inference_outcome
from prefray.engine.benchmark import UNIT_SCORE_SCHEMA


def persona_of(instance_id: str) -> str:
    """Instance ids are `persona|instance type`: the three instances of a persona share a cluster."""
    return instance_id.split("|", 1)[0]


def _units(metric: str, hits: float, items: int, cluster: str) -> list[tuple[str, str, float]]:
    return [(metric, cluster, hits / items)] * items if items else []


def group_units(group: Group, judge: str) -> list[tuple[str, str, float]]:
    out: list[tuple[str, str, float]] = []
    for instance in group.universe("infer", "inference"):
        outcome, sums, _ = inference_outcome(group, instance, judge)
        if outcome in ("scored", "model_failure") and sums is not None:
            out += _units("precision", sums[0], sums[1], persona_of(instance))
            out += _units("recall", sums[2], sums[3], persona_of(instance))
    for instance in group.universe("generate", "generation"):
        _, score = generation_outcome(group, instance, judge)
        if score is not None:
            out.append(("alignment", persona_of(instance), float(score)))
    return out


def cupid_unit_scores(rows: pa.Table) -> pa.Table:
    out = [{"benchmark": "cupid", "model": model, "condition": condition, "judge": judge,
            "metric": metric, "cluster": cluster, "value": value}
           for model, condition, judge, group in cells(rows) for metric, cluster, value in group_units(group, judge)]
    return pa.Table.from_pylist(out, schema=UNIT_SCORE_SCHEMA)
