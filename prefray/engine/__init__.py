"""The engine: plan, providers, gateways, limits, shards, aggregate, report. Knows no benchmark."""

from prefray.engine.benchmark import (
    METRIC_SCHEMA,
    Benchmark,
    DataError,
    Job,
    ParseError,
    Stage,
    StageContext,
    metric_rows,
    parsed,
)
from prefray.engine.types import CallResult, ChatRequest, ModelSpec, WorkUnit, stable_id

__all__ = [
    "METRIC_SCHEMA", "Benchmark", "CallResult", "ChatRequest", "DataError", "Job", "ModelSpec",
    "ParseError", "Stage", "StageContext", "WorkUnit", "metric_rows", "parsed", "stable_id",
]
