"""PRISK irrelevant-personalization (IRP): does personal context hurt answers that need none?

Benchmark-adapted items (GSM8K / CSQA / MMLU rewritten in the first person) are scored by exact
match (IRP_accuracy, percent). Every answer, synthetic and benchmark-adapted alike (paper §3.3: for
benchmark-sourced queries "we additionally compare exact-match accuracy"), is scored by a judge, 1-5,
on how free it is of superfluous profile references (IRP_score = (s-1)/4*100; broken down by
`kind`, `domain` and `source`). The judge's score is σ_irp(r̂, u, q): it always sees the user u (the
rendered profile) and, separately, what the model was shown besides the question (the profile, the
retrieved passages, both, or nothing). Every job, base included, pairs each persona with each item;
under base the answer is generated once per item (the query alone) and judged once per persona, each
time against that persona's profile.
An empty answer (no visible text) is not sent to the judge: it is excluded from IRP_score and
counted in IRP_empty_answers (the judge's 5, "no superfluous profile references", would reward saying
nothing); IRP_accuracy scores it as given. IRP_accuracy carries per-answer units (`persona|item`, a
base answer `|item`), so it has intervals and paired differences (Table 4's Δ).
Under the four factorial conditions the IRP score is also fitted with the mixed model of
`factorial.py` (crossed random intercepts for query, persona and pair; one observation per answer,
a base answer once).

Paper: "Evaluating the Hidden Costs of Personalization in Large Language Models".
Run: prefray launch -m benchmark=prisk_irp condition=all model=local judge=local limit=1
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import Any

from prefray.benchmarks.prisk.benchmark import PriskBenchmark
from prefray.benchmarks.prisk.data import Instance, IrpItem, load_instances
from prefray.benchmarks.prisk.extraction import read_answer
from prefray.benchmarks.prisk.factorial import Observation, factorial_rows
from prefray.benchmarks.prisk.judge_check import IRP_JUDGE_CHECK
from prefray.benchmarks.prisk.metrics import (
    cluster_key,
    cluster_of,
    judge_scores,
    judges_of,
    metric,
    model_conditions,
    owes_answer,
)
from prefray.benchmarks.prisk.pipeline import (
    Condition,
    current_rows,
    render,
    render_profile,
    shown_context,
    template,
)
from prefray.benchmarks.prisk.scoring import SCORE_SCHEMA, parse_score
from prefray.benchmarks.prisk.settings import PriskSettings
from prefray.sdk import ChatRequest, Job, Stage, StageContext, WorkUnit
from prefray.sdk.failures import is_model_failure


def irp_judge_prompt(user_text: str, context_text: str, query: str, response: str,
                     settings: PriskSettings | None = None) -> str:
    """`user_text`: the user's rendered profile (u, always); `context_text`: the context block the
    model saw ("" = the query alone)."""
    shown = context_text.strip() or template("no_context", settings).strip()
    return render("irp_judge", settings, user=user_text.strip(), context=shown, query=query, response=response)


def judge_units(ctx: StageContext) -> list[WorkUnit]:
    """One unit per (persona, item) answer; a base answer (instance id = item id) is judged for every
    persona of its item."""
    cond, settings = Condition.of(ctx.job), ctx.job.settings
    answers: dict[str, list[dict[str, Any]]] = {}
    for row in sorted(current_rows(ctx, "generate"), key=lambda r: r["sample"]):
        answers.setdefault(row["instance_id"], []).append(row)
    units = []
    for inst in ctx.instances:
        if inst.profile is None:
            continue
        user = render_profile(inst.profile, settings)
        for row in answers.get(inst.instance_id, []) + answers.get(inst.item.item_id, []):
            if is_empty(row["text"]):
                continue  # nothing to judge: excluded from IRP_score and counted (IRP_empty_answers)
            meta = json.loads(row["meta_json"]) if row["meta_json"] else {}
            context = shown_context(cond, inst.profile, meta.get("passages", []), settings).block(settings)
            prompt = irp_judge_prompt(user, context if cond.personalized else "", inst.item.query, row["text"],
                                      settings)
            request = ChatRequest(messages=({"role": "user", "content": prompt},),
                                  params=dict(ctx.job.settings.judge_params), json_schema=SCORE_SCHEMA,
                                  seed=ctx.job.seed)
            units.append(WorkUnit(inst.instance_id, request, item=inst.item.item_id, sample=row["sample"],
                                  meta={"kind": inst.item.kind, "domain": inst.item.domain,
                                        "source": inst.item.source, "profile_id": inst.profile.profile_id,
                                        "answer_instance": row["instance_id"]}))
    return units


def is_empty(text: str | None) -> bool:
    """An answer with no visible text (empty, or cut by the output budget before any)."""
    return not (text or "").strip()


def _accuracy(recs: list[dict[str, Any]], read: dict[int, tuple[bool, bool]], suffix: str = "") -> list[dict[str, Any]]:
    # the failure policy: an answered row is scored as given (an empty answer matches nothing), a
    # model failure (e.g. context overflow) scores 0, a row without an answer is excluded; an answer
    # the extractor cannot read (none, a range, two candidates) is wrong and stays in the denominator,
    # and IRP_unparsed reports its share. `read`: (correct, unparsed) by id of each answered row
    rows = [r for r in recs if r["stage"] == "generate" and (r["status"] == "ok" or is_model_failure(r))]
    values = [100.0 * read[id(r)][0] if r["status"] == "ok" else 0.0 for r in rows]
    answered = [r for r in rows if r["status"] == "ok"]
    unparsed = [100.0 * read[id(r)][1] for r in answered]
    owed = sum(1 for r in recs if owes_answer(r))
    # clusters: `persona|item`, a base answer `|item`, so its paired differences pair on the query
    return [metric(f"IRP_accuracy{suffix}", values, owed - len(values), [cluster_of(r) for r in rows]),
            metric(f"IRP_unparsed{suffix}", unparsed, owed - len(unparsed))]


def accuracy_metrics(recs: list[dict[str, Any]], model: str, condition: str,
                     reader: Callable[[str, tuple[str, ...], str], tuple[bool, bool]] = read_answer
                     ) -> list[dict[str, Any]]:
    """IRP_accuracy and IRP_unparsed of one cell, overall and per source; `reader`: `read_answer`,
    or the same function remembering what it read."""
    mine = [r for r in recs if r["model"] == model and r["condition"] == condition
            and r["stage"] in ("generate", "reflect") and r["meta"].get("kind") == "benchmark"]
    # each answer is read once, for the cell and for its source's row
    read = {id(r): reader(r["text"], tuple(r["meta"]["choices"]), r["meta"]["gold"]) for r in mine
            if r["stage"] == "generate" and r["status"] == "ok"}
    out = _accuracy(mine, read) if mine else []
    for source in sorted({r["meta"]["source"] for r in mine}):
        out += _accuracy([r for r in mine if r["meta"]["source"] == source], read, f"[source={source}]")
    return [{"model": model, "condition": condition, "judge": "", **v} for v in out]


def answer_cluster(rec: dict[str, Any]) -> str:
    """The bootstrap cluster of a judged answer: `persona|item`, or `|item` for a base answer (one
    answer judged for several personas stays one unit)."""
    if rec["meta"].get("answer_instance", rec["instance_id"]) == rec["item"]:
        return cluster_key("", rec["item"])
    return cluster_of(rec)


def _judgements_per_answer(recs: list[dict[str, Any]], model: str, condition: str) -> int:
    """1, or under base (an answer without persona) the number of personas each answer is judged for."""
    base = any(r["stage"] == "generate" and r["model"] == model and r["condition"] == condition
               and not r["meta"].get("profile_id") for r in recs)
    if not base:
        return 1
    personas = {r["meta"]["profile_id"] for r in recs if r["model"] == model and r["stage"] in ("generate", "irp_judge")
                and r["meta"].get("profile_id")}
    return max(1, len(personas))


def _owed_answers(cell: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The metas of the answers a cell's records owe (`owes_answer`)."""
    return [r["meta"] for r in cell if owes_answer(r)]


def score_metrics(recs: list[dict[str, Any]], model: str, condition: str) -> list[dict[str, Any]]:
    out = []
    cell = [r for r in recs if r["model"] == model and r["condition"] == condition]
    owed_answers, per_answer = _owed_answers(cell), _judgements_per_answer(recs, model, condition)
    # an empty answer is not judged (a judgement stored by an earlier version is not read either)
    empty = {(r["instance_id"], r["sample"]) for r in _empty_answers(cell, model, condition)}
    for judge in judges_of(cell, model, condition, "irp_judge"):
        judged = [r for r in cell if r["stage"] == "irp_judge" and r["judge"] == judge and r["status"] == "ok"
                  and (r["meta"].get("answer_instance", r["instance_id"]), r["sample"]) not in empty]
        groups: list[tuple[str, Any]] = [("IRP_score", lambda m: True)]
        for field in ("kind", "source", "domain"):
            for value in sorted({r["meta"].get(field) for r in judged if r["meta"].get(field)}):
                groups.append((f"IRP_score[{field}={value}]",
                               lambda m, f=field, v=value: m.get(f) == v))
        for name, keep in groups:
            part = [r for r in judged if keep(r["meta"])]
            owed = per_answer * sum(1 for meta in owed_answers if keep(meta))
            values = judge_scores(r["value"]["score"] for r in part)
            out.append({"model": model, "condition": condition, "judge": judge,
                        **metric(name, values, max(0, owed - len(values)), [answer_cluster(r) for r in part])})
        out.append({"model": model, "condition": condition, "judge": judge,
                    **_empty_answers_row(len(empty), per_answer, len(owed_answers))})
    return out


def _empty_answers(recs: list[dict[str, Any]], model: str, condition: str) -> list[dict[str, Any]]:
    return [r for r in recs if r["stage"] == "generate" and r["model"] == model and r["condition"] == condition
            and r["status"] == "ok" and is_empty(r["text"])]


def _empty_answers_row(empty: int, per_answer: int, owed_answers: int) -> dict[str, Any]:
    """`IRP_empty_answers`: judgements IRP_score owes but does not ask because the answer has no
    text (a base answer counts once per persona it is judged for); they are among IRP_score's
    `excluded`. n = the judgements owed."""
    return {"metric": "IRP_empty_answers", "value": float(empty * per_answer), "n": owed_answers * per_answer,
            "excluded": 0}


class Irp(PriskBenchmark):
    kind = "irp"
    # IRP_accuracy: exact match of a benchmark item's answer; IRP_score: an empty answer is not judged
    text_stages = ("generate",)
    # `prefray judge-check benchmark=prisk_irp`: the IRP judge against people (judge_check.py)
    judge_check = IRP_JUDGE_CHECK

    def load(self, job: Job) -> Sequence[Instance]:
        # every condition pairs each persona with each item: base answers once per item, and the
        # judge scores that answer against each persona u (σ_irp(r̂, u, q) always includes u)
        self.check(job)
        return load_instances(self.kind, job.settings.data.path, job.limit, personalized=True)

    def item_meta(self, item: IrpItem) -> dict[str, Any]:  # type: ignore[override]
        return {"kind": item.kind, "source": item.source, "domain": item.domain,
                "choices": list(item.choices), "gold": item.gold}

    def scoring_stages(self, job: Job) -> list[Stage]:
        # each verdict needs only its own answer: judging starts as answers arrive
        return [Stage("irp_judge", judge_units, role="judge", parse=parse_score, inputs=("generate",), per_unit=True)]

    def across_models(self, recs: list[dict[str, Any]]) -> Any:
        """The answer reader every model's cells share: an answer text met again, in any model's
        cell, is read once (`read_answer` is a pure function of the text, choices and gold)."""
        return functools.cache(read_answer)

    def values(self, recs: list[dict[str, Any]], settings: PriskSettings,
               shared: Any = None) -> list[dict[str, Any]]:
        out = []
        reader = shared or read_answer
        for model, condition in model_conditions(recs):
            out += accuracy_metrics(recs, model, condition, reader) + score_metrics(recs, model, condition)
        return out + irp_factorial(recs)


def clustered(recs: list[dict[str, Any]], stage: str, model: str, judge: str) -> list[Observation]:
    """One observation (condition, query, persona, 1-5 score) per judged answer of one judge's ok
    scores. A personalized answer is its own observation. A base answer (no persona, or an answer
    instance that is the item itself) enters once, with persona "": when it was judged once per
    persona, its observation is the mean of those judgements, so one answer is never counted as
    several. The fit uses the judge's own 1-5 scale, as the paper's coefficients do (β1 = -2.08)."""
    rows = [r for r in recs if r["stage"] == stage and r["model"] == model and r["judge"] == judge
            and r["status"] == "ok"]
    out, base = [], {}
    for r in rows:
        score = float(r["value"]["score"])
        persona = r["meta"].get("profile_id", "")
        answer = r["meta"].get("answer_instance", r["instance_id"])
        if not persona or answer == r["item"]:
            base.setdefault((r["condition"], r["item"], answer, r["sample"]), []).append(score)
        else:
            out.append(Observation(r["condition"], r["item"], persona, score))
    out += [Observation(condition, item, "", sum(scores) / len(scores))
            for (condition, item, _, _), scores in sorted(base.items())]
    return out


def irp_factorial(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keys = sorted({(r["model"], r["judge"]) for r in recs if r["stage"] == "irp_judge"})
    return [row for model, judge in keys
            for row in factorial_rows("IRP_score", clustered(recs, "irp_judge", model, judge), model, judge)]
