"""CUPID assembled: per-condition stages (summarize → infer → decompose → match, generate → judge).

Stage names and roles:
  summarize  subject     one unit per (instance, prior session); only in conditions with summarize
  infer      subject     the single most likely preference, from the log and the new request
  decompose  decomposer  inferred preference → checklist of at most 4 yes/no questions
  match      matcher     precision: inferred items vs the true preference;
                         recall: true items vs the inferred preference
  rematch    matcher     a match answer with the wrong number of ratings, asked once more
  generate   subject     the answer to the new request
  judge      judge      1–10 alignment of that answer with the true preference and checklist
Every scorer unit carries the sweep judge's name in `item` and `meta.judge`, so jobs that differ
only in their judge never share a unit whose input differs (e.g. a fixed matcher fed by two
decomposers) and metrics are reported per sweep judge.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from prefray.benchmarks.cupid.data import INSTANCE_TYPES, Instance, load_instances, oracle_indices
from prefray.benchmarks.cupid.judge_check import MATCHER_CHECK
from prefray.benchmarks.cupid.metrics import cupid_metrics, instance_f1
from prefray.benchmarks.cupid.paper_tables import PAPER_TABLES
from prefray.benchmarks.cupid.prompting import (
    check_prompts,
    decompose_messages,
    generate_messages,
    infer_messages,
    judge_prompt,
    match_messages,
    rematch_message,
    render_log,
    render_session,
    summarize_messages,
)
from prefray.benchmarks.cupid.scoring import (
    DECOMPOSE_SCHEMA,
    JUDGE_SCHEMA,
    match_schema,
    parse_checklist,
    parse_match,
    parse_preference,
    parse_score,
)
from prefray.benchmarks.cupid.settings import HISTORIES, TASKS, CupidCondition, CupidSettings
from prefray.benchmarks.cupid.units import cupid_unit_scores
from prefray.sdk import (
    Benchmark,
    ChatRequest,
    Combined,
    Comparison,
    DataError,
    Job,
    Stage,
    StageContext,
    WorkUnit,
    metric_rows,
    parsed,
)
from prefray.sdk.failures import is_model_failure
from prefray.sdk.figures import MetricsSpec
from prefray.sdk.prompts import cache_through

# A well-formed inference answer for cost estimates (simulated answers rarely carry the section).
EXAMPLE_INFERENCE = ("The user asked for tables twice in this kind of work.\n"
                     "<preference>The user wants the answer shaped to the situation this request comes from."
                     "</preference>")

__all__ = ["Cupid", "infer_messages", "render_log", "render_session", "summarize_messages"]


def history(inst: Instance, condition: CupidCondition) -> tuple[int, ...]:
    """Indices of the prior sessions a condition shows: all 8, the oracle ones, or none."""
    mode = condition.history
    if mode == "oracle":
        return oracle_indices(inst)
    return tuple(range(len(inst.sessions))) if mode == "all" else ()


def parse_summary(text: str) -> dict[str, str]:
    """A summary is used as the model wrote it, even empty (an empty summary remembers nothing)."""
    return {"summary": text.strip()}


# -- the benchmark ---------------------------------------------------------------------------
class Cupid(Benchmark):
    name = "cupid"
    # its config's keys (cupid.yaml) and its conditions' (conditions/*.yaml): settings.py
    settings_type = CupidSettings
    condition_type = CupidCondition
    # Paired differences on the same personas: what the oracle sessions and the summary change.
    comparisons = [Comparison("condition", "oracle", "full"), Comparison("condition", "summary", "full"),
                   Comparison("condition", "oracle_preference", "oracle")]
    # F1 = 2 P̄ R̄ / (P̄ + R̄) of the means (metrics.py): its interval and deltas resample personas and
    # recompute the F1 of the resampled mean precision and recall.
    combined_metrics = [Combined("F1", ("precision", "recall"), instance_f1)]
    # The paper's Table 1 / Figure 8 view: P, R, F1 side by side per instance type (alignment gets
    # its own figure by instance type from its breakdown rows).
    figures = [MetricsSpec(("precision", "recall", "F1"), "instance_type", title="CUPID inference",
                           slices=INSTANCE_TYPES)]
    # `prefray judge-check benchmark=cupid`: the matcher against people (judge_check.py)
    judge_check = MATCHER_CHECK
    # `prefray report`: Table 1 (paper_tables.py)
    paper_tables = PAPER_TABLES

    def load(self, job: Job) -> Sequence[Instance]:
        mode, tasks = job.condition_settings.history, self._tasks(job)
        if mode not in HISTORIES or not tasks or set(tasks) - set(TASKS):
            raise DataError(f"condition={job.condition}: history must be one of {HISTORIES} and tasks a "
                            f"non-empty subset of {TASKS}")
        problems = check_prompts(job.settings)
        data = job.settings.data
        try:
            instances = load_instances(data.source, data.path, job.limit, data.split)
        except DataError as exc:
            problems.append(str(exc))
        if problems:  # prompt and data problems together, so one run shows them all
            raise DataError("\n    ".join(problems))
        return instances

    @staticmethod
    def _tasks(job: Job) -> list[str]:
        return list(job.condition_settings.tasks)

    def stages(self, job: Job) -> list[Stage]:
        """Each stage reads only the stages named in its `inputs` and streams per instance, so the
        generation chain runs beside the inference chain and a scorer call goes out as soon as the
        answer it scores is stored."""
        summarize = job.condition_settings.summarize
        history_from = ("summarize",) if summarize else ()
        out = []
        if summarize:
            out.append(Stage("summarize", self._summary_units, parse=parse_summary, inputs=()))
        if "inference" in self._tasks(job):
            out += [Stage("infer", self._infer_units, parse=parse_preference, example_answer=EXAMPLE_INFERENCE,
                          inputs=history_from, per_unit=True),
                    Stage("decompose", self._decompose_units, role="decomposer", parse=parse_checklist,
                          inputs=("infer",), per_unit=True),
                    Stage("match", self._match_units, role="matcher", parse=parse_match,
                          inputs=("infer", "decompose"), per_unit=True),
                    Stage("rematch", self._rematch_units, role="matcher", parse=parse_match,
                          inputs=("infer", "decompose", "match"), per_unit=True)]
        if "generation" in self._tasks(job):
            out += [Stage("generate", self._generate_units, inputs=history_from, per_unit=True),
                    Stage("judge", self._judge_units, role="judge", parse=parse_score,
                          inputs=("generate",), per_unit=True)]
        return out

    # subject stages
    def _summary_units(self, ctx: StageContext) -> list[WorkUnit]:
        params = dict(ctx.job.settings.params.summary)
        units = []
        for inst in ctx.instances:
            for index in history(inst, ctx.job.condition_settings):
                system, messages = summarize_messages(inst.sessions[index], ctx.job.settings)
                request = ChatRequest(messages, system=system, params=params, seed=ctx.job.seed)
                meta = {**_subject_meta(inst), "tasks": self._tasks(ctx.job)}
                units.append(WorkUnit(inst.instance_id, request, item=f"session{index}", meta=meta))
        return units

    def _logs(self, ctx: StageContext) -> dict[str, str]:
        """The rendered log of every instance whose history is complete: every summary answered,
        or failed by the model itself (context overflow), which leaves that summary empty."""
        summaries: dict[tuple[str, str], str] = {}
        summarize = ctx.job.condition_settings.summarize
        if summarize:
            table = ctx.results.get("summarize")
            for r in table.to_pylist() if table is not None else []:
                if r["status"] == "ok" or is_model_failure(r):
                    summaries[(r["instance_id"], r["item"])] = (parsed(r) or {}).get("summary", "")
        logs = {}
        for inst in ctx.instances:
            indices = history(inst, ctx.job.condition_settings)
            if summarize:
                blocks = [summaries.get((inst.instance_id, f"session{i}")) for i in indices]
                if any(b is None for b in blocks):
                    continue  # a summary never answered: counted as no answer by the metrics
            else:
                blocks = [render_session(inst.sessions[i]) for i in indices]
            logs[inst.instance_id] = render_log(blocks)
        return logs

    def _infer_units(self, ctx: StageContext) -> list[WorkUnit]:
        params, logs = dict(ctx.job.settings.params.inference), self._logs(ctx)
        units = []
        for inst in ctx.instances:
            if inst.instance_id in logs:
                system, messages = infer_messages(logs[inst.instance_id], inst.request, ctx.job.settings)
                request = ChatRequest(messages, system=system, params=params, seed=ctx.job.seed,
                                      cache_prefix=cache_through(system, messages, logs[inst.instance_id]))
                units.append(WorkUnit(inst.instance_id, request, meta=_subject_meta(inst)))
        return units

    def _generate_units(self, ctx: StageContext) -> list[WorkUnit]:
        params = dict(ctx.job.settings.params.generation)
        reveal = ctx.job.condition_settings.reveal_preference
        logs = {} if reveal else self._logs(ctx)
        units = []
        for inst in ctx.instances:
            if reveal or inst.instance_id in logs:
                system, messages = generate_messages(logs.get(inst.instance_id), inst.request,
                                                     inst.preference if reveal else None, ctx.job.settings)
                request = ChatRequest(messages, system=system, params=params, seed=ctx.job.seed)
                units.append(WorkUnit(inst.instance_id, request, meta=_subject_meta(inst)))
        return units

    # scorer stages
    def _decompose_units(self, ctx: StageContext) -> list[WorkUnit]:
        judge, params = _judge_name(ctx), dict(ctx.job.settings.params.decomposer)
        return [WorkUnit(row["instance_id"],
                         ChatRequest(decompose_messages(parsed(row)["preference"], ctx.job.settings), params=params,
                                     json_schema=DECOMPOSE_SCHEMA, seed=ctx.job.seed),
                         item=judge, meta={"judge": judge})
                for row in ctx.ok_rows("infer")]

    def _match_pairs(self, ctx: StageContext) -> list[tuple[str, str, tuple[str, ...], str]]:
        """(instance_id, direction, checklist, preference) of every matcher call of this judge."""
        judge = _judge_name(ctx)
        by_id = {inst.instance_id: inst for inst in ctx.instances}
        inferred = {r["instance_id"]: parsed(r)["preference"] for r in ctx.ok_rows("infer")}
        pairs = []
        for row in ctx.ok_rows("decompose"):
            inst, checklist = by_id.get(row["instance_id"]), tuple(parsed(row)["checklist"])
            if inst is None or row["item"] != judge or not checklist or inst.instance_id not in inferred:
                continue  # an empty inferred checklist needs no call: it scores zero matches
            pairs += [(inst.instance_id, "precision", checklist, inst.preference),
                      (inst.instance_id, "recall", inst.checklist, inferred[inst.instance_id])]
        return pairs

    def _match_units(self, ctx: StageContext) -> list[WorkUnit]:
        judge, params = _judge_name(ctx), dict(ctx.job.settings.params.matcher)
        units = []
        for instance_id, direction, items, preference in self._match_pairs(ctx):
            request = ChatRequest(match_messages(items, preference, ctx.job.settings), params=params,
                                  json_schema=match_schema(len(items)), seed=ctx.job.seed)
            meta = {"judge": judge, "direction": direction, "n_items": len(items)}
            units.append(WorkUnit(instance_id, request, item=f"{judge}|{direction}", meta=meta))
        return units

    def _rematch_units(self, ctx: StageContext) -> list[WorkUnit]:
        """A matcher answer that rated another number of entries than the checklist holds is asked
        once more, in the same conversation, saying what was wrong; the metrics read that answer."""
        judge, params = _judge_name(ctx), dict(ctx.job.settings.params.matcher)
        answered = {(r["instance_id"], r["item"]): r for r in ctx.ok_rows("match")}
        units = []
        for instance_id, direction, items, preference in self._match_pairs(ctx):
            row = answered.get((instance_id, f"{judge}|{direction}"))
            if row is None or len(parsed(row)["scores"]) == len(items):
                continue
            note = rematch_message(len(items), len(parsed(row)["scores"]), ctx.job.settings)
            messages = (*match_messages(items, preference, ctx.job.settings),
                        {"role": "assistant", "content": row["text"]}, *note)
            request = ChatRequest(messages, params=params, json_schema=match_schema(len(items)), seed=ctx.job.seed)
            meta = {"judge": judge, "direction": direction, "n_items": len(items)}
            units.append(WorkUnit(instance_id, request, item=f"{judge}|{direction}", meta=meta))
        return units

    def _judge_units(self, ctx: StageContext) -> list[WorkUnit]:
        judge, params = _judge_name(ctx), dict(ctx.job.settings.params.judge)
        units = []
        for row, inst in ctx.answered("generate"):
            system, messages = judge_prompt(inst.preference, inst.checklist, inst.request, row["text"],
                                            ctx.job.settings)
            request = ChatRequest(messages, system=system, params=params, json_schema=JUDGE_SCHEMA, seed=ctx.job.seed)
            units.append(WorkUnit(inst.instance_id, request, item=judge, meta={"judge": judge}))
        return units

    def metrics(self, rows: pa.Table, settings: CupidSettings) -> pa.Table:
        return metric_rows([{"benchmark": self.name, **r} for r in cupid_metrics(rows)])

    def text_needed(self, rows: pa.Table) -> pa.Array:
        """No row: the metrics read the judges' parsed verdicts, never an answer's text."""
        return pa.array(np.zeros(rows.num_rows, dtype=bool))

    def unit_scores(self, rows: pa.Table, settings: CupidSettings) -> pa.Table:
        """Per-unit precision, recall, F1_i and alignment, clustered by persona (for CIs; F1's from the
        precision and recall units, as a combined metric)."""
        return cupid_unit_scores(rows)


def _judge_name(ctx: StageContext) -> str:
    return ctx.job.role_model("judge").name


def _subject_meta(inst: Instance) -> dict[str, Any]:
    return {"instance_type": inst.instance_type, "n_true": len(inst.checklist)}
