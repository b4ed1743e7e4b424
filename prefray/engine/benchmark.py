"""The shape every benchmark plugs into. The engine calls these; it never names a benchmark.

A benchmark is an object of a `Benchmark` subclass, registered under the `prefray.benchmarks`
entry point group (`NAME = "package.module:ATTRIBUTE"`); its config `NAME.yaml` and its
`conditions/` sit next to the module (app/catalog.py). `prefray.sdk` re-exports what a
benchmark author needs, and `prefray.sdk.RubricBenchmark` is the common shape in a few lines.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from prefray.engine.config.schema import BenchmarkSettings, ConditionSettings, build
from prefray.engine.hooks import Combined, Comparison, FigureSpec, PaperTable
from prefray.engine.types import ModelSpec, WorkUnit

if TYPE_CHECKING:  # judgecheck builds on this module (Job, Stage)
    from prefray.engine.judgecheck import JudgeCheck


class DataError(Exception):
    """A dataset that cannot be used; the message names the file, row and field."""


class ParseError(Exception):
    """A model answer that does not have the required machine-readable form."""


@dataclass(frozen=True)
class Job:
    """One cell of a sweep: a benchmark under one condition for one evaluated model."""

    benchmark: str
    condition: str
    model: ModelSpec
    roles: dict[str, ModelSpec]
    settings: BenchmarkSettings            # the benchmark's config, as its `settings_type`
    condition_settings: ConditionSettings  # the condition's config, as its `condition_type`
    limit: int | None = None
    seed: int = 0

    def dataset_key(self) -> str:
        """What a benchmark's `load` reads a job's instances from: jobs with equal keys load the same
        instances (the evaluated model and the roles aside). The settings as canonical JSON, as a
        benchmark's settings may hold lists (not hashable)."""
        return json.dumps([self.benchmark, asdict(self.settings), asdict(self.condition_settings),
                           self.limit, self.seed], sort_keys=True, default=str)

    def role_model(self, role: str) -> ModelSpec:
        if role == "subject":
            return self.model
        return self.roles.get(role) or self.roles["judge"]


@dataclass
class StageContext:
    """What a stage sees when it builds its units: the job, its data, earlier stages' rows."""

    job: Job
    instances: Sequence[Any]
    results: dict[str, pa.Table] = field(default_factory=dict)

    def ok_rows(self, stage: str) -> list[dict[str, Any]]:
        table = self.results.get(stage)
        if table is None:
            return []
        return [row for row in table.to_pylist() if row["status"] == "ok"]

    def answered(self, stage: str) -> list[tuple[dict[str, Any], Any]]:
        """(row, instance) for every ok row of `stage` whose instance belongs to this job."""
        by_id = {inst.instance_id: inst for inst in self.instances}
        return [(row, by_id[row["instance_id"]]) for row in self.ok_rows(stage) if row["instance_id"] in by_id]


@dataclass(frozen=True)
class Stage:
    """One round of calls. `role` picks the model: "subject" (evaluated) or a role such as "judge".

    `parse` turns an answer into JSON-serialisable data or raises ParseError; an unparsable answer
    is asked once more, then stored with status failed and cause parse_error.
    `example_answer` is a well-formed answer that estimates use when their simulated text does not
    parse (free-text stages with a required format), so later stages are counted in full.
    `inputs` names the earlier stages whose rows `build` reads (None: every earlier stage); the stage
    starts once they are done. With `per_unit`, each unit needs only rows of its inputs that belong
    to it (a judge unit needs its one answer), so `build` may be called on the rows stored so far
    and the stage starts sending while its inputs still run; `build` must then return, for the
    rows it is given, the same units it returns for the full set. `build` may return a list or yield
    units one by one; the engine takes them as it sends them (a generator keeps memory flat).
    `read` (for a stage without `parse`) derives a decision from an answer and its unit, e.g. an
    exact match against a name in the unit's meta; it never fails and asks nothing again. Its value
    (None: nothing to record) is stored as the row's `parsed_json` with the answer, so the metrics
    read the decision made when the answer arrived.
    """

    name: str
    build: Callable[[StageContext], Iterable[WorkUnit]]
    role: str = "subject"
    parse: Callable[[str], Any] | None = None
    example_answer: str | None = None
    inputs: tuple[str, ...] | None = None
    per_unit: bool = False
    read: Callable[[WorkUnit, str], Any] | None = None


class Benchmark:
    """Base class of every benchmark: every hook the engine may call, with its default.

    A subclass gives `name`, `load`, `stages` and `metrics`; the rest is optional. The values the
    hooks declare are the types of engine/hooks.py, exported by `prefray.sdk` (and its `tables`,
    `figures` and `judgecheck` submodules); the engine reads them from the object and nowhere else."""

    name: str = ""
    # The keys of its config (`<name>.yaml`, `benchmark.KEY=VALUE`) and of its conditions'
    # (`conditions/<condition>.yaml`): subclasses of the two with the benchmark's own keys, each with
    # its rule and default (prefray.sdk.settings). A composed config is built into them before
    # anything starts; an unknown key, a missing one or a value its rule refuses stops the launch.
    settings_type: type[BenchmarkSettings] = BenchmarkSettings
    condition_type: type[ConditionSettings] = ConditionSettings
    # Paired differences with bootstrap intervals (deltas.csv), e.g. Comparison("condition", "a", "b");
    # every pair of judges is compared as well.
    comparisons: Sequence[Comparison] = ()
    # Metrics computed from the means of other metrics' units, with intervals and deltas recomputed
    # from resampled means, e.g. CUPID's Combined("F1", ("precision", "recall"), f1_of_means).
    combined_metrics: Sequence[Combined] = ()
    # Figures drawn beside the default ones (prefray.sdk.figures: ScatterSpec, MetricsSpec, CellsSpec).
    figures: Sequence[FigureSpec] = ()
    # The order of conditions in figures (the others follow, sorted).
    condition_order: Sequence[str] = ()
    # What `prefray judge-check` rates against people's labels (prefray.sdk.judgecheck.JudgeCheck);
    # None: the benchmark has no judge check.
    judge_check: JudgeCheck | None = None
    # The paper's headline tables that `prefray report` writes (prefray.sdk.tables.PaperTable); a
    # table with the same name declared by several benchmarks of a run is written once.
    paper_tables: Sequence[PaperTable] = ()

    def settings_of(self, values: Mapping[str, Any]) -> BenchmarkSettings:
        """A `benchmark` config section (already checked) as this benchmark's `settings_type`; a key it
        leaves out takes its default (`name`: this benchmark's)."""
        return build(self.settings_type, {"name": self.name, **values})

    def condition_of(self, values: Mapping[str, Any]) -> ConditionSettings:
        """A `condition` config section (already checked) as this benchmark's `condition_type`."""
        return build(self.condition_type, dict(values))

    def load(self, job: Job) -> Sequence[Any]:
        """Read and validate the job's dataset (first `job.limit` instances); raise DataError.
        Each instance has an `instance_id`."""
        raise NotImplementedError(f"{type(self).__name__}.load")

    def stages(self, job: Job) -> list[Stage]:
        """The job's stages, in the order they run."""
        raise NotImplementedError(f"{type(self).__name__}.stages")

    def metrics(self, rows: pa.Table, settings: BenchmarkSettings) -> pa.Table:
        """Long-format metrics (METRIC_SCHEMA) from the best attempt of every stored row of this
        benchmark (`metric_rows` builds the table from dicts)."""
        raise NotImplementedError(f"{type(self).__name__}.metrics")

    def unit_scores(self, rows: pa.Table, settings: BenchmarkSettings) -> pa.Table:
        """One row per scored unit (UNIT_SCORE_SCHEMA) from the best attempt of every stored row:
        `value` is the unit's score whose mean over a cell is the metric's value, `cluster` the
        benchmark's independent unit (e.g. a profile or a persona). A unit without a score (excluded)
        has no row. The metrics it covers get 95% cluster-bootstrap intervals (`ci_low`, `ci_high`)
        and the `comparisons`. Default: none (no intervals)."""
        return UNIT_SCORE_SCHEMA.empty_table()

    def notes(self, metrics: pa.Table) -> list[str]:
        """Sentences metrics.md prints under "Notes" about this benchmark's metrics (its rows of the
        run's metrics table), e.g. what a pooled quantity was pooled over. Default: none."""
        return []

    def text_needed(self, rows: pa.Table) -> pa.Array:
        """A boolean per row of `rows` (this benchmark's best attempts, `text` not read): True where
        the metrics read the row's text (the answer itself). Aggregation reads the text of just these
        rows; the others get a null `text`. Default: every row."""
        return pa.array([True] * rows.num_rows, pa.bool_())


UNIT_SCORE_SCHEMA = pa.schema([
    ("benchmark", pa.string()),
    ("model", pa.string()),
    ("condition", pa.string()),
    ("judge", pa.string()),
    ("metric", pa.string()),
    ("cluster", pa.string()),
    ("value", pa.float64()),
])

METRIC_SCHEMA = pa.schema([
    ("benchmark", pa.string()),
    ("model", pa.string()),
    ("condition", pa.string()),
    ("judge", pa.string()),
    ("metric", pa.string()),
    ("value", pa.float64()),
    ("n", pa.int64()),
    ("excluded", pa.int64()),
])


def metric_rows(rows: list[dict[str, Any]]) -> pa.Table:
    """Build a metrics table; missing `judge`/`excluded` default to "" and 0."""
    filled = [{"judge": "", "excluded": 0, **row} for row in rows]
    return pa.Table.from_pylist(filled, schema=METRIC_SCHEMA)


def parsed(row: dict[str, Any]) -> Any:
    """The parsed answer stored on a row (None when there is none)."""
    value = row.get("parsed_json")
    return None if value in (None, "") else json.loads(value)
