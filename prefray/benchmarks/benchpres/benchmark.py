"""BenchPreS assembled: stages (generate → judge → completeness) and metrics for the engine.

Paper: BenchPreS (arXiv 2603.16557). Run:
  python -m prefray.launch -m benchmark=benchpres condition=all model=local judge=local limit=2
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import pyarrow as pa

from prefray.benchmarks.benchpres.conditions import apply_condition
from prefray.benchmarks.benchpres.data import Instance, load_instances
from prefray.benchmarks.benchpres.metrics import benchpres_metrics, completeness_metrics
from prefray.benchmarks.benchpres.scoring import COMPLETENESS_SCHEMA, VERDICT_SCHEMA, parse_score, parse_verdict
from prefray.benchmarks.benchpres.tables import completeness_scores, decisions, unparsable_counts
from prefray.engine.benchmark import Job, Stage, StageContext, metric_rows
from prefray.engine.types import ChatRequest, WorkUnit

PROMPTS = Path(__file__).parent / "prompts"


def judge_messages(preference: str, response: str) -> tuple[dict[str, str], ...]:
    """The preference judge's request: is this one preference reflected in the response?"""
    template = (PROMPTS / "judge.txt").read_text(encoding="utf-8")
    return ({"role": "user", "content": template.format(preference=preference, response=response)},)


def completeness_messages(recipient: str, task: str, response: str) -> tuple[dict[str, str], ...]:
    """The completeness judge's request: how well does the response do the task (1–5)?"""
    template = (PROMPTS / "completeness.txt").read_text(encoding="utf-8")
    content = template.format(recipient=recipient, task=task, response=response)
    return ({"role": "user", "content": content},)


class BenchPreS:
    name = "benchpres"

    def load(self, job: Job) -> Sequence[Instance]:
        instances = load_instances(job.settings.get("data") or {}, job.limit)
        return apply_condition(instances, job.condition_settings or {})

    def stages(self, job: Job) -> list[Stage]:
        return [
            Stage("generate", self._generation_units),
            Stage("judge", self._judge_units, role="judge", parse=parse_verdict),
            Stage("completeness", self._completeness_units, role="judge", parse=parse_score),
        ]

    def _generation_units(self, ctx: StageContext) -> list[WorkUnit]:
        params = dict(ctx.job.settings.get("generation", {}))
        units = []
        for inst in ctx.instances:
            for sample in range(int(ctx.job.settings.get("samples", 1))):
                request = ChatRequest(messages=({"role": "user", "content": inst.prompt},),
                                      params=params, seed=ctx.job.seed + sample)
                units.append(WorkUnit(inst.instance_id, request, sample=sample, meta=_generation_meta(inst)))
        return units

    def _judge_units(self, ctx: StageContext) -> list[WorkUnit]:
        params = dict(ctx.job.settings.get("judge_params", {}))
        units = []
        for row, inst in ctx.answered("generate"):
            for index, pref in enumerate(inst.preferences):
                if pref.category == "nickname":
                    continue  # decided by exact match, no call
                request = ChatRequest(messages=judge_messages(pref.statement, row["text"]), params=params,
                                      json_schema=VERDICT_SCHEMA, seed=ctx.job.seed)
                meta = {"g": pref.applies, "category": pref.category, "domain": inst.domain}
                units.append(WorkUnit(inst.instance_id, request, item=str(index), sample=row["sample"], meta=meta))
        return units

    def _completeness_units(self, ctx: StageContext) -> list[WorkUnit]:
        params = dict(ctx.job.settings.get("judge_params", {}))
        units = []
        for row, inst in ctx.answered("generate"):
            request = ChatRequest(messages=completeness_messages(inst.recipient, inst.task, row["text"]),
                                  params=params, json_schema=COMPLETENESS_SCHEMA, seed=ctx.job.seed)
            units.append(WorkUnit(inst.instance_id, request, sample=row["sample"], meta={"domain": inst.domain}))
        return units

    def metrics(self, rows: pa.Table, settings: dict[str, Any]) -> pa.Table:
        baseline = str(settings.get("completeness_baseline") or "no_preferences")
        values = (benchpres_metrics(decisions(rows)) + completeness_metrics(completeness_scores(rows), baseline)
                  + unparsable_counts(rows))
        return metric_rows([{"benchmark": self.name, **r} for r in values])


def _generation_meta(inst: Instance) -> dict[str, Any]:
    return {"domain": inst.domain,
            "preferences": [{"statement": p.statement, "g": p.applies, "category": p.category}
                            for p in inst.preferences]}
