"""PRISK preference narrowing: does personalization shrink the set of options a user is offered?

One narrowing job runs the whole design for one model (condition `factorial`, whose config lists
the inner conditions): for each inner condition c its answer stages (`route@c`, `reflect@c`,
`generate@c`, `samples` answers per unit at T=0.8), then, once for all conditions:
  extract  an extractor call (role `extractor`, the judge unless set) lists each answer's options
  merge    one judge call per query groups the options of every answer of every condition and
           persona by meaning: V_q (see narrowing_sets.py)
  useful   one judge call per (persona, query) marks every V_q item useful or not: A(u, q) ⊆ V_q
Merge and useful units are named `<item>#<digest>` and `<persona>--<item>#<digest>`, the digest of
the query's option keys: a rerun that adds answers (a failed extraction finished) sends a new merge
and new usefulness calls over the larger set, identical requests come from the response cache, and
the metrics read the merge over the most keys with the usefulness rows of its digest.
Because V_q and A(u, q) are judged once and read by every condition's metrics, CR and UIR are
comparable across conditions, and UIR exists for base (a base answer is scored against A(u, q) of
every persona of the run). The engine runs one job per benchmark × condition × model and a stage
sees only its own job's rows, so this whole-design job is how the set-level step can see every
condition's answers.

Metrics per inner condition: NAR_CR = |C|/|V_q|, NAR_UIR = |C ∩ A|/|A|, NAR_RelCR = mean|C| /
mean|C_base| per (persona, query), Fisher tests on useful-item exclusion per attribute split;
NAR_Vq_size[item=q] and NAR_Vq_size (condition `factorial`).

Paper: "Evaluating the Hidden Costs of Personalization in Large Language Models".
Run: prefray launch -m benchmark=prisk_narrowing condition=all model=local judge=local limit=1 \
         benchmark.samples=2
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from prefray.benchmarks.prisk import narrowing_sets as sets
from prefray.benchmarks.prisk.benchmark import PriskBenchmark
from prefray.benchmarks.prisk.data import Instance, NarrowingItem, load_instances
from prefray.benchmarks.prisk.metrics import Split
from prefray.benchmarks.prisk.pipeline import Condition, answer_stages, current_rows, render, render_profile
from prefray.benchmarks.prisk.scoring import (
    OPTIONS_SCHEMA,
    merge_schema,
    parse_merge,
    parse_options,
    parse_useful,
    useful_schema,
)
from prefray.benchmarks.prisk.settings import FactorialCondition, NarrowingSettings, PriskSettings
from prefray.sdk import ChatRequest, Job, Stage, StageContext, WorkUnit, parsed


def inner_conditions(job: Job) -> list[Condition]:
    inner = job.condition_settings.conditions
    if not inner:
        return [Condition(job.condition)]
    return [Condition.from_settings(name, spec) for name, spec in inner.items()]


def extract_prompt(query: str, response: str, settings: PriskSettings | None = None) -> str:
    return render("extract", settings, query=query, response=response)


def listing_prompt(name: str, options: list[str], settings: PriskSettings | None = None, **fields: Any) -> str:
    listing = "\n".join(f"{i}. {o}" for i, o in enumerate(options, start=1))
    return render(name, settings, options=listing, count=len(options), **fields)


def _judge_request(ctx: StageContext, prompt: str, schema: dict[str, Any], entries: int = 0) -> ChatRequest:
    judge_params = dict(ctx.job.settings.judge_params)
    if entries:  # one entry per listed option: a long list needs more room than the usual budget
        judge_params["max_tokens"] = max(int(judge_params.get("max_tokens", 512)), 8 * entries + 200)
    return ChatRequest(messages=({"role": "user", "content": prompt},), params=judge_params, json_schema=schema,
                       seed=ctx.job.seed)


def extract_units(ctx: StageContext) -> list[WorkUnit]:
    queries = {inst.item.item_id: inst.item.query for inst in ctx.instances}
    units = []
    for cond in inner_conditions(ctx.job):
        for row in current_rows(ctx, f"generate@{cond.name}"):
            prompt = extract_prompt(queries[row["item"]], row["text"], ctx.job.settings)
            units.append(WorkUnit(f"{cond.name}/{row['instance_id']}", _judge_request(ctx, prompt, OPTIONS_SCHEMA),
                                  item=row["item"], sample=row["sample"],
                                  meta={"condition": cond.name, "answer_instance": row["instance_id"]}))
    return units


def merge_units(ctx: StageContext) -> list[WorkUnit]:
    extracted = current_rows_any(ctx, "extract")
    queries = {inst.item.item_id: inst.item.query for inst in ctx.instances}
    by_item: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(extracted, key=lambda r: (r["instance_id"], r["sample"])):
        by_item.setdefault(r["item"], []).append(r)
    units = []
    for item in sorted(queries):
        rows = by_item.get(item, [])
        listing = sets.key_listing([parsed(r)["options"] for r in rows])
        if not listing:
            continue
        keys = [k for k, _ in listing]
        prompt = listing_prompt("merge", [w for _, w in listing], ctx.job.settings, query=queries[item])
        digest = sets.digest(keys)
        units.append(WorkUnit(f"{item}#{digest}", _judge_request(ctx, prompt, merge_schema(len(keys)), len(keys)),
                              item=item, meta={"keys": keys, "wording": [w for _, w in listing], "digest": digest}))
    return units


def latest_merges(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """item → the merge row over the most option keys: extractions are only ever added (a rerun
    finishing a failed one), so the largest key set is the current V_q; older merges stay stored."""
    out: dict[str, dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: r["instance_id"]):
        size = len(json_meta(r)["keys"])
        if r["item"] not in out or size > len(json_meta(out[r["item"]])["keys"]):
            out[r["item"]] = r
    return out


def useful_units(ctx: StageContext) -> list[WorkUnit]:
    items = {inst.item.item_id for inst in ctx.instances}
    merged = latest_merges([r for r in ctx.ok_rows("merge") if r["item"] in items])
    units = []
    for inst in ctx.instances:
        row = merged.get(inst.item.item_id)
        if inst.profile is None or row is None:
            continue
        meta = json_meta(row)
        item_of = sets.merge_groups(meta["keys"], parsed(row)["same_as"])
        listing = sets.item_listing(item_of, dict(zip(meta["keys"], meta["wording"])))
        prompt = listing_prompt("useful", [w for _, w in listing], ctx.job.settings,
                                profile=render_profile(inst.profile, ctx.job.settings), query=inst.item.query)
        request = _judge_request(ctx, prompt, useful_schema(len(listing)), len(listing))
        units.append(WorkUnit(f"{inst.instance_id}#{meta['digest']}", request, item=inst.item.item_id,
                              meta={"items": [i for i, _ in listing], "profile_id": inst.profile.profile_id,
                                    "attributes": dict(inst.profile.attributes), "digest": meta["digest"]}))
    return units


def json_meta(row: dict[str, Any]) -> dict[str, Any]:
    return json.loads(row["meta_json"]) if row.get("meta_json") else {}


def current_rows_any(ctx: StageContext, stage: str) -> list[dict[str, Any]]:
    """ok rows of a stage whose unit ids carry a condition prefix (`<condition>/<instance>`)."""
    ids = {inst.instance_id for inst in ctx.instances} | {inst.item.item_id for inst in ctx.instances}
    return [r for r in ctx.ok_rows(stage) if r["instance_id"].split("/", 1)[-1] in ids]


class Narrowing(PriskBenchmark):
    kind = "narrowing"
    settings_type = NarrowingSettings
    condition_type = FactorialCondition

    def load(self, job: Job) -> Sequence[Instance]:
        self.check(job)
        path = job.settings.data.path
        base = load_instances(self.kind, path, job.limit, personalized=False)
        return base + load_instances(self.kind, path, job.limit, personalized=True)

    def item_meta(self, item: NarrowingItem) -> dict[str, Any]:  # type: ignore[override]
        return {}

    def stages(self, job: Job) -> list[Stage]:
        stages = []
        for cond in inner_conditions(job):
            stages += answer_stages(job, self.item_meta, cond, suffix=f"@{cond.name}")
        return stages + [Stage("extract", extract_units, role="extractor", parse=parse_options),
                         Stage("merge", merge_units, role="judge", parse=parse_merge),
                         Stage("useful", useful_units, role="judge", parse=parse_useful)]

    def notes(self, metrics: pa.Table) -> list[str]:
        """What V_q holds: one model's answers (a run of one model) or every model's."""
        pooled = sorted({(r["value"], r["model"]) for r in metrics.to_pylist() if r["metric"] == "NAR_Vq_models"})
        models = [model for _, model in pooled]
        if not models:
            return []
        if len(models) == 1:
            return [f"{self.name}: V_q holds the answers of one model ({models[0]}) only; the paper builds V_q "
                    "from every evaluated model's answers, so NAR_Vq_size and the coverage NAR_CR divides by it "
                    "are this model's alone (run the models together for the paper's V_q)."]
        return [f"{self.name}: V_q holds the answers of {len(models)} models ({', '.join(models)}); each "
                "model's own V_q is read in NAR_CR[Vq=model], NAR_CR_union[Vq=model], NAR_Vq_size[Vq=model]."]

    shared_stages = ("merge",)

    def across_models(self, recs: list[dict[str, Any]]) -> Any:
        """V_q across every model of the run (the merge rows alone are read)."""
        from prefray.benchmarks.prisk.narrowing_metrics import pooled_universe

        return pooled_universe(recs)

    def values(self, recs: list[dict[str, Any]], settings: NarrowingSettings,  # type: ignore[override]
               shared: Any = None) -> list[dict[str, Any]]:
        from prefray.benchmarks.prisk.narrowing_metrics import narrowing_values

        splits = [Split.of(s) for s in settings.fisher_splits]
        return narrowing_values(recs, splits, shared)

