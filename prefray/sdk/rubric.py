"""The common shape of a benchmark in a few lines: the evaluated model answers each item, a judge
scores each answer on a rubric, the metric is the mean score per model × condition × judge.

A subclass gives a dataset loader (`items`, e.g. with `read_items`), two prompt files in its
`prompts` folder (`answer.txt`: the question; `judge.txt`: the rubric, with `{answer}`), a parser
of the judge's answer (`parse`: text → score, or ParseError) and its metric's name (`metric`).
Placeholders in a prompt are the item's fields, the condition's keys and (judge) `{answer}`.
Its config's keys are `RubricSettings` (samples, generation, judge_params, prompts); a benchmark
whose conditions carry keys declares them in a `ConditionSettings` subclass (`condition_type`).
Optional: `judge_schema` (the JSON schema the judge answers in), `conversation` (the turns the
model answers, e.g. earlier turns a condition adds), `model_failure_score`.

Failures follow the engine's one failure policy (prefray.engine.failures): an answer the model
failed to give (its context overflowed) scores `model_failure_score`, never left out; an answer a
judge could not score (unreadable after its re-ask) or a call that never got an answer is left out
of the mean and counted in `excluded`. Rows `failures_model`, `failures_judge` and
`failures_no_answer` count each class per cell.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from prefray.engine.benchmark import (
    UNIT_SCORE_SCHEMA,
    Benchmark,
    BenchmarkSettings,
    DataError,
    Job,
    Stage,
    StageContext,
    metric_rows,
    parsed,
)
from prefray.engine.config.schema import params_key
from prefray.engine.datafiles import read_records
from prefray.engine.failures import failure_classes
from prefray.engine.prompts import check_prompt_overrides, read_prompt
from prefray.engine.types import ChatRequest, WorkUnit

ANSWER, JUDGE = "answer", "judge"  # the two stages, and the two prompt files


@dataclass(frozen=True)
class Item:
    """One dataset row: its id and its fields (the prompts' placeholders)."""

    instance_id: str
    fields: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        return self.fields[name]


def read_items(path: Path, required: Sequence[str], limit: int | None = None, id_field: str = "id") -> list[Item]:
    """The rows of a JSONL, JSON or Parquet file as Items (the first `limit`); a row without
    `id_field` or a required field is a DataError naming the file, row and field."""
    items = []
    for number, row in enumerate(read_records(path), start=1):
        for name in (id_field, *required):
            if not isinstance(row, dict) or row.get(name) in (None, ""):
                raise DataError(f"{path}: row {number}: field '{name}' is missing")
        items.append(Item(str(row[id_field]), dict(row)))
    return items[:limit] if limit is not None else items


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


@dataclass(frozen=True)
class RubricSettings(BenchmarkSettings):
    """The config keys of a rubric benchmark: the answer's and the judge's request parameters."""

    generation: dict[str, Any] = params_key({}, "request parameters of the answers")
    judge_params: dict[str, Any] = params_key({}, "request parameters of the judge")


class RubricBenchmark(Benchmark):
    """Answer → judge on a rubric → mean. See the module docstring for what a subclass gives."""

    settings_type: type[RubricSettings] = RubricSettings
    prompts: Path = Path()       # the folder with answer.txt and judge.txt
    metric: str = "score"
    judge_schema: dict[str, Any] | None = None
    model_failure_score: float = 0.0

    def items(self, job: Job) -> Sequence[Item]:
        """The job's dataset (its first `job.limit` items), e.g. `read_items(FILE, fields, job.limit)`."""
        raise NotImplementedError(f"{type(self).__name__}.items")

    def parse(self, text: str) -> float:
        """The judge's answer → the unit's score; raise ParseError when it cannot be read."""
        raise NotImplementedError(f"{type(self).__name__}.parse")

    def prompt(self, name: str, item: Item, job: Job, **extra: Any) -> str:
        """Prompt file `name` (or its `benchmark.prompts.<name>` override) filled with the item's
        fields, the condition's keys and `extra`."""
        text = read_prompt(self.prompts, name, job.settings)
        try:
            return text.format(**{**asdict(job.condition_settings), **item.fields, **extra})
        except KeyError as exc:
            raise DataError(f"prompt '{name}': placeholder {exc} is no field of item {item.instance_id}, "
                            "no key of the condition and not given") from None

    def conversation(self, item: Item, job: Job) -> list[dict[str, str]]:
        """The turns the evaluated model answers. Default: answer.txt as one user turn."""
        return [user(self.prompt(ANSWER, item, job))]

    def judge_conversation(self, item: Item, answer: str, job: Job) -> list[dict[str, str]]:
        return [user(self.prompt(JUDGE, item, job, answer=answer))]

    def load(self, job: Job) -> Sequence[Item]:
        """`items`, after the prompt overrides and every prompt's placeholders are checked (before
        any call)."""
        problems = check_prompt_overrides(self.prompts, job.settings)
        if problems:
            raise DataError("; ".join(problems))
        items = self.items(job)
        for item in items:
            self.conversation(item, job), self.judge_conversation(item, "", job)
        return items

    def stages(self, job: Job) -> list[Stage]:
        return [Stage(ANSWER, self._answers),
                Stage(JUDGE, self._judgements, role="judge", parse=self.parse, inputs=(ANSWER,), per_unit=True)]

    def _answers(self, ctx: StageContext) -> Iterator[WorkUnit]:
        settings: RubricSettings = ctx.job.settings
        params = dict(settings.generation)
        for item in ctx.instances:
            messages = tuple(self.conversation(item, ctx.job))
            for sample in range(settings.samples):
                request = ChatRequest(messages=messages, params=params, seed=ctx.job.seed + sample)
                yield WorkUnit(item.instance_id, request, sample=sample)

    def _judgements(self, ctx: StageContext) -> Iterator[WorkUnit]:
        settings: RubricSettings = ctx.job.settings
        params = dict(settings.judge_params)
        for row, item in ctx.answered(ANSWER):
            messages = tuple(self.judge_conversation(item, row["text"] or "", ctx.job))
            request = ChatRequest(messages=messages, params=params, json_schema=self.judge_schema, seed=ctx.job.seed)
            yield WorkUnit(item.instance_id, request, sample=row["sample"])

    # ------------------------------------------------------------------ metrics (Arrow in, rows out)

    def text_needed(self, rows: pa.Table) -> pa.Array:
        return pa.array([False] * rows.num_rows, pa.bool_())  # scores are read from parsed_json only

    def _units(self, rows: pa.Table) -> dict[tuple[str, str, str], dict[str, Any]]:
        """Per (model, condition, judge): each answer's score (None: excluded) and the class tallies."""
        classes = failure_classes(rows).to_pylist()
        answers: dict[tuple[str, str], dict[tuple[str, int], str]] = {}
        verdicts: dict[tuple[str, str, str], dict[tuple[str, int], tuple[str, Any]]] = {}
        for row, kind in zip(rows.to_pylist(), classes):
            unit = (row["instance_id"], row["sample"])
            if row["stage"] == ANSWER:
                answers.setdefault((row["model"], row["condition"]), {})[unit] = kind
            elif row["stage"] == JUDGE:
                score = parsed(row) if kind == "answered" else None
                verdicts.setdefault((row["model"], row["condition"], row["judge"]), {})[unit] = (kind, score)
        cells: dict[tuple[str, str, str], dict[str, Any]] = {}
        for (model, condition), units in answers.items():
            judges = sorted(j for m, c, j in verdicts if (m, c) == (model, condition)) or [""]
            for judge in judges:
                mine = verdicts.get((model, condition, judge), {})
                tally = {"no_answer": 0, "model_failure": 0, "judge_failure": 0}
                scores: dict[tuple[str, int], float | None] = {}
                for unit, kind in units.items():
                    verdict_kind, score = mine.get(unit, ("no_answer", None))
                    if kind == "model_failure":
                        scores[unit] = self.model_failure_score
                        tally["model_failure"] += 1
                    elif kind == "answered" and verdict_kind == "answered":
                        scores[unit] = float(score)
                    else:
                        scores[unit] = None
                        tally["no_answer" if kind != "answered" else verdict_kind] += 1
                cells[(model, condition, judge)] = {"scores": scores, "tally": tally}
        return cells

    def metrics(self, rows: pa.Table, settings: BenchmarkSettings) -> pa.Table:
        out = []
        for (model, condition, judge), cell in sorted(self._units(rows).items()):
            key = {"benchmark": self.name, "model": model, "condition": condition, "judge": judge}
            scored = [s for s in cell["scores"].values() if s is not None]
            units, excluded = len(cell["scores"]), len(cell["scores"]) - len(scored)
            value = sum(scored) / len(scored) if scored else None
            out.append({**key, "metric": self.metric, "value": value, "n": len(scored), "excluded": excluded})
            for metric, kind in (("failures_model", "model_failure"), ("failures_judge", "judge_failure"),
                                 ("failures_no_answer", "no_answer")):
                count = cell["tally"][kind]
                out.append({**key, "metric": metric, "value": float(count), "n": units,
                            "excluded": 0 if kind == "model_failure" else count})
        return metric_rows(out)

    def unit_scores(self, rows: pa.Table, settings: BenchmarkSettings) -> pa.Table:
        out = [{"benchmark": self.name, "model": model, "condition": condition, "judge": judge,
                "metric": self.metric, "cluster": instance_id, "value": score}
               for (model, condition, judge), cell in sorted(self._units(rows).items())
               for (instance_id, _), score in sorted(cell["scores"].items()) if score is not None]
        return pa.Table.from_pylist(out, schema=UNIT_SCORE_SCHEMA)
