"""Metrics the engine adds to every cell, whatever the benchmark: how answers ended.

Per benchmark × model × condition (and per judge for judge rows):
- `truncated_share`  share of the evaluated model's answers cut by the output budget (n = answers);
                     with a judge name: the same for that judge's answers.
The counts per failure class (`failures_no_answer`, `failures_model`, `failures_judge`) are each
benchmark's own metrics, since what a unit is differs between benchmarks; `no_answer_units` gives the
engine's completeness mark.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from prefray.engine.benchmark import METRIC_SCHEMA
from prefray.engine.failures import failure_classes

CELL = ["benchmark", "model", "condition", "judge"]


def _counts(best: pa.Table) -> pa.Table:
    answered = pc.equal(failure_classes(best), "answered")
    table = best.select(CELL).append_column("units", pa.array([1] * best.num_rows, pa.int64()))
    table = table.append_column("answered", answered.cast(pa.int64()))
    table = table.append_column("truncated", pc.and_(answered, best["truncated"].fill_null(False)).cast(pa.int64()))
    grouped = table.group_by(CELL).aggregate([(c, "sum") for c in ("units", "answered", "truncated")])
    return grouped.rename_columns([c.removesuffix("_sum") for c in grouped.column_names])


def outcome_metrics(best: pa.Table) -> pa.Table:
    """`truncated_share` per cell from the best attempt of every unit (METRIC_SCHEMA rows)."""
    if best.num_rows == 0:
        return METRIC_SCHEMA.empty_table()
    rows = []
    for cell in _counts(best).to_pylist():
        share = cell["truncated"] / cell["answered"] if cell["answered"] else float("nan")
        rows.append({**{k: cell[k] for k in CELL}, "metric": "truncated_share", "value": share,
                     "n": cell["answered"], "excluded": cell["units"] - cell["answered"]})
    return pa.Table.from_pylist(rows, schema=METRIC_SCHEMA)


def no_answer_units(best: pa.Table) -> dict[tuple[str, str, str], int]:
    """Units with no answer (excluded; the cell is incomplete) per benchmark × model × condition."""
    if best.num_rows == 0:
        return {}
    flag = pc.equal(failure_classes(best), "no_answer").cast(pa.int64())
    table = best.select(["benchmark", "model", "condition"]).append_column("missing", flag)
    grouped = table.group_by(["benchmark", "model", "condition"]).aggregate([("missing", "sum")])
    return {(r["benchmark"], r["model"], r["condition"]): r["missing_sum"] for r in grouped.to_pylist()}
