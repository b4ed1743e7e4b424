"""What a benchmark author needs, in one import: `from prefray.sdk import ...`.

- `RubricBenchmark` (+ `read_items`, `Item`, `user`, `assistant`, `RubricSettings`): the common
  shape — answer, judge each answer on a rubric, mean — as a dataset loader, two prompt files, a
  parser and a metric.
- `BenchmarkSettings` and `ConditionSettings`: the typed keys of a benchmark's config and of its
  conditions; a benchmark subclasses them with its own keys (`prefray.sdk.settings` holds the
  helpers a field is made with) and names them as `settings_type` and `condition_type`.
- `Benchmark`: the base class of any benchmark (stages of your own), with `Stage`, `StageContext`,
  `Job`, `WorkUnit`, `ChatRequest`, `metric_rows`, `parsed` and the two schemas.
- `DataError` (a dataset or prompt that cannot be used) and `ParseError` (an answer without the
  required form: asked once more, then a failure counted by the failure policy).
- `Comparison`: a paired difference a benchmark declares in `comparisons`; `Combined`: a metric
  computed from other metrics' means (e.g. an F1 of mean precision and recall), declared in
  `combined_metrics`, whose interval recomputes it from resampled means.

The rest of what a benchmark may use sits in submodules: `prefray.sdk.settings` (its settings' keys),
`prefray.sdk.tables` (its paper's tables),
`prefray.sdk.figures`, `prefray.sdk.judgecheck`, `prefray.sdk.failures` (the failure policy),
`prefray.sdk.prompts` and `prefray.sdk.data`. The built-in benchmarks reach the engine through these
alone (an import contract in pyproject.toml holds them to it).

A benchmark is registered under the `prefray.benchmarks` entry point group; docs/add-a-benchmark.md
walks through `examples/stated_preference`.
"""

from prefray.engine.benchmark import (
    METRIC_SCHEMA,
    UNIT_SCORE_SCHEMA,
    Benchmark,
    DataError,
    Job,
    ParseError,
    Stage,
    StageContext,
    metric_rows,
    parsed,
)
from prefray.engine.config.schema import BenchmarkSettings, ConditionSettings
from prefray.engine.hooks import Combined, Comparison
from prefray.engine.types import ChatRequest, WorkUnit
from prefray.sdk.rubric import Item, RubricBenchmark, RubricSettings, assistant, read_items, user

__all__ = ["METRIC_SCHEMA", "UNIT_SCORE_SCHEMA", "Benchmark", "BenchmarkSettings", "ChatRequest", "Combined",
           "Comparison", "ConditionSettings", "DataError", "Item", "Job", "ParseError", "RubricBenchmark",
           "RubricSettings", "Stage", "StageContext", "WorkUnit", "assistant", "metric_rows", "parsed", "read_items",
           "user"]
