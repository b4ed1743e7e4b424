"""PRISK irrelevant-personalization (IRP): does personal context hurt answers that need none?

Benchmark-adapted items (GSM8K / CSQA / MMLU rewritten in the first person) are scored by exact
match (IRP_accuracy, percent). Synthetic factual items are scored by a judge, 1-5, on how free the
answer is of superfluous profile references (IRP_score = (s-1)/4*100). The base condition has no
personal context, and its answers are judged with "nothing shown" as context (a reference point:
an answer given the query alone can only mention a person by accident). The judge always sees the
context the model saw: the profile, the retrieved passages, both, or nothing.
Under the four factorial conditions the IRP score is also fitted with the mixed model of
`factorial.py` (the base answer to a query is the base observation of every persona–query cluster
of that query, since the base model saw the same input for all of them).

Paper: "Evaluating the Hidden Costs of Personalization in Large Language Models".
Run: python -m prefray.launch -m benchmark=prisk_irp condition=all model=local judge=local limit=1
"""

from __future__ import annotations

import json
from typing import Any

from prefray.benchmarks.prisk.benchmark import PriskBenchmark
from prefray.benchmarks.prisk.data import IrpItem
from prefray.benchmarks.prisk.metrics import (
    cluster_of, expected_units, judge_scores, judges_of, metric, model_conditions,
)
from prefray.benchmarks.prisk.factorial import factorial_rows
from prefray.benchmarks.prisk.pipeline import (Condition, by_instance, current_rows, params, render, shown_context,
                                               template)
from prefray.benchmarks.prisk.scoring import SCORE_SCHEMA, is_correct, parse_score
from prefray.engine.benchmark import Job, Stage, StageContext
from prefray.engine.failures import is_model_failure
from prefray.engine.types import ChatRequest, WorkUnit


def irp_judge_prompt(context_text: str, query: str, response: str, settings: Any = None) -> str:
    """`context_text`: the context block the model saw ("" = the query alone)."""
    shown = context_text.strip() or template("no_context", settings).strip()
    return render("irp_judge", settings, context=shown, query=query, response=response)


def judge_units(ctx: StageContext) -> list[WorkUnit]:
    cond, settings = Condition.of(ctx.job), ctx.job.settings
    items = {inst.item.item_id: inst for inst in ctx.instances}
    instances, units = by_instance(ctx.instances), []
    for row in current_rows(ctx, "generate"):
        inst = instances.get(row["instance_id"]) or items.get(row["instance_id"])
        if inst is None or inst.item.kind != "synthetic":
            continue
        meta = json.loads(row["meta_json"]) if row["meta_json"] else {}
        profile = inst.profile if cond.personalized else None
        context = shown_context(cond, profile, meta.get("passages", []), settings).block(settings)
        prompt = irp_judge_prompt(context, inst.item.query, row["text"], settings)
        request = ChatRequest(messages=({"role": "user", "content": prompt},), params=params(ctx.job, "judge_params"),
                              json_schema=SCORE_SCHEMA, seed=ctx.job.seed)
        units.append(WorkUnit(row["instance_id"], request, item=inst.item.item_id, sample=row["sample"],
                              meta={"kind": "synthetic", "domain": inst.item.domain,
                                    "profile_id": meta.get("profile_id", "")}))
    return units


def _accuracy(recs: list[dict[str, Any]], suffix: str = "") -> list[dict[str, Any]]:
    rows = [r for r in recs if r["stage"] == "generate"]
    # the failure policy: an answered row is scored as given, a model failure (e.g. context overflow)
    # scores 0, a row without an answer is excluded
    values = [100.0 * is_correct(r["text"], tuple(r["meta"]["choices"]), r["meta"]["gold"]) if r["status"] == "ok"
              else 0.0 for r in rows if r["status"] == "ok" or is_model_failure(r)]
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
                        **metric(name, values, max(0, owed - len(values)), [cluster_of(r) for r in part])})
    return out


class Irp(PriskBenchmark):
    kind = "irp"

    def item_meta(self, item: IrpItem) -> dict[str, Any]:  # type: ignore[override]
        return {"kind": item.kind, "source": item.source, "domain": item.domain,
                "choices": list(item.choices), "gold": item.gold}

    def scoring_stages(self, job: Job) -> list[Stage]:
        # each verdict needs only its own answer: judging starts as answers arrive
        return [Stage("irp_judge", judge_units, role="judge", parse=parse_score, inputs=("generate",), per_unit=True)]

    def values(self, recs: list[dict[str, Any]], settings: dict[str, Any]) -> list[dict[str, Any]]:
        out = []
        for model, condition in model_conditions(recs):
            out += accuracy_metrics(recs, model, condition) + score_metrics(recs, model, condition)
        return out + irp_factorial(recs)


def clustered(recs: list[dict[str, Any]], stage: str, model: str, judge: str) -> list[tuple[str, str, float]]:
    """(condition, persona--item cluster, 1-5 score) of one judge's ok scores; a base score (no
    persona) stands for every persona the personalized conditions paired with that item. The fit
    uses the judge's own 1-5 scale, as the paper's coefficients do (β1 = -2.08 for the profile)."""
    rows = [r for r in recs if r["stage"] == stage and r["model"] == model and r["judge"] == judge
            and r["status"] == "ok"]
    personas: dict[str, set[str]] = {}
    for r in rows:
        if r["meta"].get("profile_id"):
            personas.setdefault(r["item"], set()).add(r["meta"]["profile_id"])
    out = []
    for r in rows:
        score = float(r["value"]["score"])
        ids = [r["meta"]["profile_id"]] if r["meta"].get("profile_id") else sorted(personas.get(r["item"], ()))
        out += [(r["condition"], f"{p}--{r['item']}", score) for p in ids]
    return out


def irp_factorial(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keys = sorted({(r["model"], r["judge"]) for r in recs if r["stage"] == "irp_judge"})
    return [row for model, judge in keys
            for row in factorial_rows("IRP_score", clustered(recs, "irp_judge", model, judge), model, judge)]
