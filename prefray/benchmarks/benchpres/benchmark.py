"""BenchPreS assembled: stages (generate → judge) and metrics for the engine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import pyarrow as pa

from prefray.benchmarks.benchpres.data import Instance, load_instances
from prefray.benchmarks.benchpres.metrics import DECISION_SCHEMA, benchpres_metrics
from prefray.benchmarks.benchpres.scoring import VERDICT_SCHEMA, nickname_applied, parse_verdict
from prefray.engine.benchmark import Job, Stage, StageContext, metric_rows, parsed
from prefray.engine.types import ChatRequest, WorkUnit

PROMPTS = Path(__file__).parent / "prompts"


def judge_messages(preference: str, response: str) -> tuple[dict[str, str], ...]:
    template = (PROMPTS / "judge.txt").read_text(encoding="utf-8")
    return ({"role": "user", "content": template.format(preference=preference, response=response)},)


class BenchPreS:
    name = "benchpres"

    def load(self, job: Job) -> Sequence[Instance]:
        data = job.settings.get("data", {})
        return load_instances(data.get("source", "sample"), data.get("path"), job.limit)

    def stages(self, job: Job) -> list[Stage]:
        return [
            Stage("generate", self._generation_units),
            Stage("judge", self._judge_units, role="judge", parse=parse_verdict),
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
        by_id = {inst.instance_id: inst for inst in ctx.instances}
        units = []
        for row in ctx.ok_rows("generate"):
            inst = by_id.get(row["instance_id"])
            if inst is None:
                continue
            for index, pref in enumerate(inst.preferences):
                if pref.category == "nickname":
                    continue  # decided by exact match, no call
                request = ChatRequest(messages=judge_messages(pref.statement, row["text"]), params=params,
                                      json_schema=VERDICT_SCHEMA, seed=ctx.job.seed)
                meta = {"g": pref.applies, "category": pref.category, "domain": inst.domain}
                units.append(WorkUnit(inst.instance_id, request, item=str(index), sample=row["sample"], meta=meta))
        return units

    def metrics(self, rows: pa.Table, settings: dict[str, Any]) -> pa.Table:
        return metric_rows([{"benchmark": self.name, **r} for r in benchpres_metrics(decisions(rows))])


def _generation_meta(inst: Instance) -> dict[str, Any]:
    return {"domain": inst.domain,
            "preferences": [{"statement": p.statement, "g": p.applies, "category": p.category}
                            for p in inst.preferences]}


def decisions(rows: pa.Table) -> pa.Table:
    """One decision per (response, preference): judge verdicts plus nickname exact matches."""
    records = rows.to_pylist()
    judged = [r for r in records if r["stage"] == "judge"]
    judges_of: dict[tuple[str, str], set[str]] = {}
    out = []
    for r in judged:
        meta, verdict = json.loads(r["meta_json"]), parsed(r)
        judges_of.setdefault((r["model"], r["condition"]), set()).add(r["judge"])
        out.append({"model": r["model"], "condition": r["condition"], "judge": r["judge"],
                    "instance_id": r["instance_id"], "sample": r["sample"], "item": r["item"],
                    "category": meta["category"], "domain": meta["domain"], "g": meta["g"],
                    "z": verdict["applied"] if r["status"] == "ok" and verdict else None})
    for r in records:
        if r["stage"] != "generate" or r["status"] != "ok":
            continue
        meta = json.loads(r["meta_json"])
        for judge in sorted(judges_of.get((r["model"], r["condition"]), {""})):
            for index, pref in enumerate(meta["preferences"]):
                if pref["category"] == "nickname":
                    out.append({"model": r["model"], "condition": r["condition"], "judge": judge,
                                "instance_id": r["instance_id"], "sample": r["sample"], "item": str(index),
                                "category": "nickname", "domain": meta["domain"], "g": pref["g"],
                                "z": nickname_applied(pref["statement"], r["text"])})
    return pa.Table.from_pylist(out, schema=DECISION_SCHEMA)
