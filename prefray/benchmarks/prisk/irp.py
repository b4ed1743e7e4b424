"""PRISK irrelevant-personalization (IRP): does personal context hurt answers that need none?

Benchmark-adapted items (GSM8K / CSQA / MMLU rewritten in the first person) are scored by exact
match (IRP_accuracy, percent). Synthetic factual items are scored by a judge, 1-5, on how free the
answer is of superfluous profile references (IRP_score = (s-1)/4*100); the base condition has no
profile, so it has no IRP_score.

Paper: "Evaluating the Hidden Costs of Personalization in Large Language Models".
Run: python -m prefray.launch -m benchmark=prisk_irp condition=all model=local judge=local limit=1
"""

from __future__ import annotations

from typing import Any

from prefray.benchmarks.prisk.benchmark import PriskBenchmark
from prefray.benchmarks.prisk.data import IrpItem
from prefray.benchmarks.prisk.metrics import expected_units, judge_scores, judges_of, metric, model_conditions
from prefray.benchmarks.prisk.pipeline import Condition, by_instance, current_rows, params, render, render_profile
from prefray.benchmarks.prisk.scoring import SCORE_SCHEMA, is_correct, parse_score
from prefray.engine.benchmark import Job, Stage, StageContext
from prefray.engine.types import ChatRequest, WorkUnit


def irp_judge_prompt(profile_text: str, query: str, response: str) -> str:
    return render("irp_judge", profile=profile_text, query=query, response=response)


def judge_units(ctx: StageContext) -> list[WorkUnit]:
    instances, units = by_instance(ctx.instances), []
    for row in current_rows(ctx, "generate"):
        inst = instances.get(row["instance_id"])
        if inst is None or inst.profile is None or inst.item.kind != "synthetic":
            continue
        prompt = irp_judge_prompt(render_profile(inst.profile), inst.item.query, row["text"])
        request = ChatRequest(messages=({"role": "user", "content": prompt},), params=params(ctx.job, "judge_params"),
                              json_schema=SCORE_SCHEMA, seed=ctx.job.seed)
        units.append(WorkUnit(inst.instance_id, request, item=inst.item.item_id, sample=row["sample"],
                              meta={"kind": "synthetic", "domain": inst.item.domain}))
    return units


def _accuracy(recs: list[dict[str, Any]], suffix: str = "") -> list[dict[str, Any]]:
    rows = [r for r in recs if r["stage"] == "generate"]
    values = [100.0 * is_correct(r["text"], tuple(r["meta"]["choices"]), r["meta"]["gold"])
              for r in rows if r["status"] == "ok"]
    failed_reflections = sum(1 for r in recs if r["stage"] == "reflect" and r["status"] != "ok")
    return [metric(f"IRP_accuracy{suffix}", values, len(rows) - len(values) + failed_reflections)]


def accuracy_metrics(recs: list[dict[str, Any]], model: str, condition: str) -> list[dict[str, Any]]:
    mine = [r for r in recs if r["model"] == model and r["condition"] == condition
            and r["stage"] in ("generate", "reflect") and r["meta"].get("kind") == "benchmark"]
    out = _accuracy(mine) if mine else []
    for source in sorted({r["meta"]["source"] for r in mine}):
        out += _accuracy([r for r in mine if r["meta"]["source"] == source], f"[source={source}]")
    return [{"model": model, "condition": condition, "judge": "", **v} for v in out]


def score_metrics(recs: list[dict[str, Any]], model: str, condition: str) -> list[dict[str, Any]]:
    out = []
    for judge in judges_of(recs, model, condition, "irp_judge"):
        judged = [r for r in recs if r["stage"] == "irp_judge" and r["judge"] == judge
                  and r["model"] == model and r["condition"] == condition and r["status"] == "ok"]
        for domain in [None, *sorted({r["meta"]["domain"] for r in judged})]:
            part = [r for r in judged if domain is None or r["meta"]["domain"] == domain]
            owed = expected_units(recs, model, condition, lambda m: m.get("kind") == "synthetic"
                                  and (domain is None or m.get("domain") == domain))
            name = "IRP_score" if domain is None else f"IRP_score[domain={domain}]"
            values = judge_scores(r["value"]["score"] for r in part)
            out.append({"model": model, "condition": condition, "judge": judge,
                        **metric(name, values, max(0, owed - len(values)))})
    return out


class Irp(PriskBenchmark):
    kind = "irp"

    def item_meta(self, item: IrpItem) -> dict[str, Any]:  # type: ignore[override]
        return {"kind": item.kind, "source": item.source, "domain": item.domain,
                "choices": list(item.choices), "gold": item.gold}

    def scoring_stages(self, job: Job) -> list[Stage]:
        if not Condition.of(job).personalized:
            return []
        return [Stage("irp_judge", judge_units, role="judge", parse=parse_score)]

    def values(self, recs: list[dict[str, Any]], settings: dict[str, Any]) -> list[dict[str, Any]]:
        out = []
        for model, condition in model_conditions(recs):
            out += accuracy_metrics(recs, model, condition) + score_metrics(recs, model, condition)
        return out
