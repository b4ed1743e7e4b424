"""CUPID per-unit scores for confidence intervals: the persona is the independent unit.

`precision`, `recall` and `F1_instance_mean` are means of per-instance values (see `metrics`): one
unit per counted instance (scored or model failure), carrying its P_i, R_i, F1_i. `F1` is not a mean
of units but 2 P̄ R̄ / (P̄ + R̄) of the precision and recall means: the benchmark declares it as a
combined metric (prefray.sdk.Combined), whose interval resamples personas and recomputes
the F1 of the resampled means from these precision and recall units. The pooled ratios (Σ rated items ÷
Σ items) get item units instead: an instance contributes its k inferred items (each carrying the
instance's mean rating) to `precision_pooled` and its t true items to `recall_pooled`, so the cluster
bootstrap's Σ sums ÷ Σ sizes recomputes exactly the reported ratio. Excluded instances contribute
nothing. `alignment` has one unit per scored instance. `F1_pooled` is not a mean of units and gets
no interval.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prefray.benchmarks.cupid.metrics import instance_f1, instance_ratios
from prefray.benchmarks.cupid.outcomes import MODEL_FAILURE, SCORED, instance_outcomes
from prefray.sdk import UNIT_SCORE_SCHEMA

METRICS = ("precision_pooled", "recall_pooled", "alignment", "precision", "recall", "F1_instance_mean")


def persona_of(instance_id: str) -> str:
    """Instance ids are `persona|instance type`: the three instances of a persona share a cluster."""
    return instance_id.split("|", 1)[0]


def inference_units(inference: pa.Table) -> pa.Table:
    """Per counted instance, in order: its k precision_pooled units, its t recall_pooled units, then
    one unit each of precision, recall and F1_instance_mean."""
    counted = pc.is_in(inference["outcome"], pa.array([SCORED, MODEL_FAILURE], pa.int8()))
    part = inference.filter(counted)
    column = lambda name: np.asarray(part[name].to_numpy())  # noqa: E731
    precision = instance_ratios(column("hit_inferred"), column("n_inferred"))
    recall = instance_ratios(column("hit_true"), column("n_true"))
    ones = np.ones(part.num_rows, np.int64)
    items = np.stack([column("n_inferred"), column("n_true"), ones, ones, ones], axis=1).ravel()
    values = np.stack([precision, recall, precision, recall, instance_f1(precision, recall)], axis=1).ravel()
    instance = np.repeat(np.arange(part.num_rows), 5)
    metric = np.tile(np.array([0, 1, 3, 4, 5], np.int8), part.num_rows)
    picks = pa.array(np.repeat(instance, items), pa.int64())
    return pa.table({"cell": part["cell"].take(picks), "metric": pa.array(np.repeat(metric, items)),
                     "cluster": part["persona"].take(picks), "value": pa.array(np.repeat(values, items))})


def alignment_units(generation: pa.Table) -> pa.Table:
    """One unit per scored generation, in order."""
    part = generation.filter(generation["score"].is_valid())
    return pa.table({"cell": part["cell"], "metric": pa.array(np.full(part.num_rows, 2, np.int8)),
                     "cluster": part["persona"], "value": part["score"].cast(pa.float64())})


def cupid_unit_scores(rows: pa.Table) -> pa.Table:
    """UNIT_SCORE_SCHEMA rows per cell: its precision and recall units, then its alignment units."""
    outcomes = instance_outcomes(rows)
    units = pa.concat_tables([inference_units(outcomes.inference), alignment_units(outcomes.generation)])
    order = np.lexsort((np.asarray(units["metric"].to_numpy()) == 2, np.asarray(units["cell"].to_numpy())))
    units = units.take(pa.array(order, pa.int64()))
    cells = outcomes.cells.take(units["cell"])
    return pa.table({"benchmark": pa.array(["cupid"] * units.num_rows, pa.string()), "model": cells["model"],
                     "condition": cells["condition"], "judge": cells["judge"],
                     "metric": pa.array(METRICS).take(units["metric"]), "cluster": units["cluster"],
                     "value": units["value"]}, schema=UNIT_SCORE_SCHEMA)
