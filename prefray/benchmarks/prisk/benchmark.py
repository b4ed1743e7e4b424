"""What the three PRISK sub-benchmarks share: loading, the answer stages, the metric wrapper."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from prefray.benchmarks.prisk.data import Instance, Item, load_instances
from prefray.benchmarks.prisk.metrics import (
    failure_metrics,
    query_of,
    records,
    relative_to_base,
    route_metrics,
    unit_rows,
    without_units,
)
from prefray.benchmarks.prisk.paper_tables import PAPER_TABLES
from prefray.benchmarks.prisk.pipeline import PROMPTS, Condition, answer_stages
from prefray.benchmarks.prisk.settings import PriskCondition, PriskSettings
from prefray.sdk import (
    UNIT_SCORE_SCHEMA,
    Benchmark,
    Comparison,
    ConditionSettings,
    DataError,
    Job,
    Stage,
    metric_rows,
)
from prefray.sdk.prompts import check_prompt_overrides

PERSONALIZED = ("profile", "retrieval", "profile_retrieval", "reflection")


class PriskBenchmark(Benchmark):
    """One PRISK sub-benchmark; subclasses set `kind` and add item meta, scoring stages, metrics."""

    kind = ""
    # its config's keys (prisk_<kind>.yaml) and its conditions' (conditions/*.yaml): settings.py
    settings_type: type[PriskSettings] = PriskSettings
    condition_type: type[ConditionSettings] = PriskCondition
    # each personalized condition − base, paired on the query (a base answer serves every persona)
    comparisons = [Comparison("condition", c, "base", pair_on=query_of) for c in PERSONALIZED]
    # Table 4: the mitigation's effect, "Δ = After − Before" under profile + retrieval
    comparisons.append(Comparison("condition", "reflection", "profile_retrieval", pair_on=query_of))
    # figures: the four factorial conditions side by side in the paper's order, then reflection
    condition_order = ("base", *PERSONALIZED)
    # `prefray report`: Tables 2 and 4 (paper_tables.py), whose columns span the three sub-benchmarks;
    # each declares them, and a run writes each table once
    paper_tables = PAPER_TABLES

    # the stages whose answer text a metric reads (aggregation reads no other row's text)
    text_stages: tuple[str, ...] = ()

    def __init__(self, name: str):
        self.name = name
        self._last_values: tuple[pa.Table, PriskSettings, list[dict[str, Any]]] | None = None

    def check(self, job: Job) -> None:
        problems = check_prompt_overrides(PROMPTS, job.settings)
        if problems:
            raise DataError(problems[0])

    def load(self, job: Job) -> Sequence[Instance]:
        self.check(job)
        return load_instances(self.kind, job.settings.data.path, job.limit, Condition.of(job).personalized)

    def item_meta(self, item: Item) -> dict[str, Any]:
        return {}

    def scoring_stages(self, job: Job) -> list[Stage]:
        return []

    def stages(self, job: Job) -> list[Stage]:
        return answer_stages(job, self.item_meta) + self.scoring_stages(job)

    def text_needed(self, rows: pa.Table) -> pa.Array:
        return pc.is_in(rows["stage"], value_set=pa.array(self.text_stages, pa.string())).combine_chunks()

    def values(self, recs: list[dict[str, Any]], settings: PriskSettings,
               shared: Any = None) -> list[dict[str, Any]]:
        """Metric rows (model, condition, judge, metric, value, n, excluded) of this sub-benchmark;
        `shared`: what `across_models` read from every model's records."""
        raise NotImplementedError

    # the stages whose records `across_models` reads, of every model
    shared_stages: tuple[str, ...] = ()

    def across_models(self, recs: list[dict[str, Any]]) -> Any:
        """What one model's values need from every model's records of the `shared_stages` (models in
        order); None by default."""
        return None

    def values_by_model(self, rows: pa.Table, settings: PriskSettings) -> list[dict[str, Any]]:
        """`values` of each model's records on their own, models in order: every value is one model's
        (a cell, a fit), so only one model's records are held at a time, and what every model shares
        (narrowing's V_q) is read first from the `shared_stages` alone (`across_models`).
        Aggregation asks for the metrics and then the unit scores of the same rows:
        the values are computed once and kept until the unit scores take them."""
        last = self._last_values
        if last is not None and last[1] == settings and last[0].equals(rows):
            return last[2]
        parts = model_parts(rows)
        stages = pa.array(self.shared_stages, pa.string())
        shared = self.across_models([rec for part in parts
                                     for rec in records(part.filter(pc.is_in(part["stage"], stages)))])
        values = [value for part in parts for value in self.values(records(part), settings, shared)]
        self._last_values = (rows, settings, values)
        return values

    def metrics(self, rows: pa.Table, settings: PriskSettings) -> pa.Table:
        routes = records(rows.filter(pc.starts_with(rows["stage"], "route")))
        values = without_units(self.values_by_model(rows, settings)) + route_metrics(routes)
        values += relative_to_base(values, settings.reference_condition)
        values += failure_metrics(rows)
        return metric_rows([{"benchmark": self.name, **v} for v in values])

    def unit_scores(self, rows: pa.Table, settings: PriskSettings) -> pa.Table:
        """Per-unit judge scores and attributions, clustered by persona–query pair (for CIs)."""
        values = self.values_by_model(rows, settings)
        self._last_values = None   # the values' last reader: nothing is held past it
        return pa.Table.from_pylist(unit_rows(self.name, values), schema=UNIT_SCORE_SCHEMA)


def model_parts(rows: pa.Table) -> list[pa.Table]:
    """The rows of each model, models in order (each part in the rows' order; rows without a model last)."""
    models = rows["model"]
    return [rows.filter(pc.is_null(models) if model is None else pc.equal(models, model))
            for model in sorted(pc.unique(models).to_pylist(), key=lambda m: (m is None, m or ""))]
