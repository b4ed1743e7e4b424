"""PRISK preference narrowing: does personalization shrink the set of options a user is offered?

Each (persona, query) answer is sampled `samples` times (20, T=0.8). Personalized jobs also sample
the query alone (`base_generate`, the base condition's exact requests) so a job is self-contained.
An extractor call (role `extractor`, the judge unless set) lists each response's options; options
are merged by `canonical_option`. A judge (`useful`, one call per (persona, query)) marks which of
the options seen for that persona and query (its own samples plus the base samples) are useful to
the persona: A(u,q). At metrics time V_q is the union of canonical options over every stored
extraction of that model and extractor for q (all conditions, personas and base answers).

Paper: "Evaluating the Hidden Costs of Personalization in Large Language Models".
Run: python -m prefray.launch -m benchmark=prisk_narrowing condition=all model=local judge=local limit=1 benchmark.samples=2
"""

from __future__ import annotations

import json
from typing import Any

from prefray.benchmarks.prisk.benchmark import PriskBenchmark
from prefray.benchmarks.prisk.data import NarrowingItem
from prefray.benchmarks.prisk.metrics import (Split, coverage_ratio, expected_units, fisher_split, metric,
                                              model_conditions, relative_coverage, useful_inclusion_rate)
from prefray.benchmarks.prisk.pipeline import Condition, base_builder, current_rows, params, render, render_profile
from prefray.benchmarks.prisk.scoring import (OPTIONS_SCHEMA, canonical_option, parse_options, parse_useful,
                                              useful_schema)
from prefray.engine.benchmark import Job, Stage, StageContext, parsed
from prefray.engine.types import ChatRequest, WorkUnit


def extract_prompt(query: str, response: str) -> str:
    return render("extract", query=query, response=response)


def useful_prompt(profile_text: str, query: str, options: list[str]) -> str:
    listing = "\n".join(f"{i}. {o}" for i, o in enumerate(options, start=1))
    return render("useful", profile=profile_text, query=query, options=listing, count=len(options))


def extract_units(ctx: StageContext) -> list[WorkUnit]:
    queries = {inst.item.item_id: inst.item.query for inst in ctx.instances}
    units = []
    for stage in ("generate", "base_generate"):
        for row in current_rows(ctx, stage):
            request = ChatRequest(messages=({"role": "user", "content": extract_prompt(queries[row["item"]], row["text"])},),
                                  params=params(ctx.job, "judge_params"), json_schema=OPTIONS_SCHEMA, seed=ctx.job.seed)
            units.append(WorkUnit(row["instance_id"], request, item=row["item"], sample=row["sample"],
                                  meta={"source": stage, "item_id": row["item"],
                                        "profile_id": parsed_meta(row).get("profile_id", "")}))
    return units


def parsed_meta(row: dict[str, Any]) -> dict[str, Any]:
    return json.loads(row["meta_json"]) if row.get("meta_json") else {}


def option_pool(rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(canonical key, first raw wording) of every option in the rows, sorted by key."""
    pool: dict[str, str] = {}
    for row in sorted(rows, key=lambda r: (r["instance_id"], r["sample"])):
        for option in parsed(row)["options"]:
            pool.setdefault(canonical_option(option), option)
    return sorted((k, v) for k, v in pool.items() if k)


def useful_units(ctx: StageContext) -> list[WorkUnit]:
    extracted = current_rows(ctx, "extract")
    units = []
    for inst in ctx.instances:
        own = [r for r in extracted if r["instance_id"] in (inst.instance_id, inst.item.item_id)]
        pool = option_pool(own)
        if not pool or inst.profile is None:
            continue
        prompt = useful_prompt(render_profile(inst.profile), inst.item.query, [raw for _, raw in pool])
        judge_params = params(ctx.job, "judge_params")
        # one true/false per option: a long pool needs more room than the usual judge budget
        judge_params["max_tokens"] = max(int(judge_params.get("max_tokens", 512)), 8 * len(pool) + 64)
        request = ChatRequest(messages=({"role": "user", "content": prompt},), params=judge_params,
                              json_schema=useful_schema(len(pool)), seed=ctx.job.seed)
        meta = {"item_id": inst.item.item_id, "profile_id": inst.profile.profile_id,
                "options": [key for key, _ in pool], "attributes": dict(inst.profile.attributes),
                "extractor": own[0]["judge"]}
        units.append(WorkUnit(inst.instance_id, request, item=inst.item.item_id, meta=meta))
    return units


def option_sets(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Extraction rows with their canonical option set (`options`: None when the call failed)."""
    out = []
    for r in recs:
        if r["stage"] == "extract":
            keys = {canonical_option(o) for o in r["value"]["options"]} - {""} if r["status"] == "ok" else None
            out.append({**r, "options": keys})
    return out


def universes(extracted: list[dict[str, Any]]) -> dict[tuple[str, str, str], set[str]]:
    """V_q per (model, extractor, item): union of every ok extraction's canonical options."""
    v: dict[tuple[str, str, str], set[str]] = {}
    for r in extracted:
        if r["options"] is not None:
            v.setdefault((r["model"], r["judge"], r["item"]), set()).update(r["options"])
    return v


def useful_sets(recs: list[dict[str, Any]], model: str, condition: str,
                extractor: str) -> dict[str, dict[str, set[str] | None]]:
    """judge -> instance -> A(u,q) over that extractor's options; None when the judge call failed
    or returned a different number of flags than options listed."""
    out: dict[str, dict[str, set[str] | None]] = {}
    for r in recs:
        if (r["stage"], r["model"], r["condition"]) == ("useful", model, condition) \
                and r["meta"].get("extractor") == extractor:
            flags = r["value"]["useful"] if r["status"] == "ok" else None
            ok = flags is not None and len(flags) == len(r["meta"]["options"])
            a = {k for k, f in zip(r["meta"]["options"], flags) if f} if ok else None
            out.setdefault(r["judge"], {})[r["instance_id"]] = a
    return out


def narrowing_metrics(recs: list[dict[str, Any]], model: str, condition: str, splits: list[Split],
                      v: dict[tuple[str, str, str], set[str]], extracted: list[dict[str, Any]]) -> list[dict]:
    out = []
    mine = [r for r in extracted if r["model"] == model and r["condition"] == condition]
    owed = expected_units(recs, model, condition, lambda m: True)
    for extractor in sorted({r["judge"] for r in mine}):
        rows = [r for r in mine if r["judge"] == extractor]
        personal = [r for r in rows if r["meta"]["source"] == "generate" and r["options"] is not None]
        base_source = "base_generate" if any(r["meta"]["source"] == "base_generate" for r in rows) else "generate"
        base_sizes: dict[str, list[int]] = {}
        for r in rows:
            if r["meta"]["source"] == base_source and r["options"] is not None:
                base_sizes.setdefault(r["item"], []).append(len(r["options"]))
        head = {"model": model, "condition": condition, "judge": extractor}
        cr = [coverage_ratio(r["options"], v[(model, extractor, r["item"])]) for r in personal]
        out.append({**head, **metric("NAR_CR", cr, max(0, owed - len(cr)))})
        sizes: dict[str, list[int]] = {}
        for r in personal:
            sizes.setdefault(r["instance_id"], []).append(len(r["options"]))
        items = {r["instance_id"]: r["item"] for r in personal}
        rel = [relative_coverage(s, base_sizes.get(items[i], [])) for i, s in sorted(sizes.items())]
        kept = [x for x in rel if x == x]
        out.append({**head, **metric("NAR_RelCR", kept, len(rel) - len(kept))})
        out += _useful_metrics(recs, model, condition, extractor, personal, splits, owed)
    return out


def _useful_metrics(recs: list[dict[str, Any]], model: str, condition: str, extractor: str,
                    personal: list[dict[str, Any]], splits: list[Split], owed: int) -> list[dict]:
    """NAR_UIR and the Fisher tests per useful-judge, over the answers' option sets `personal`."""
    attributes = {r["instance_id"]: r["meta"]["attributes"] for r in recs
                  if (r["stage"], r["model"], r["condition"]) == ("useful", model, condition)}
    out = []
    for judge, sets in sorted(useful_sets(recs, model, condition, extractor).items()):
        uir, incidences, missing = [], [], 0
        for r in personal:
            if r["instance_id"] not in sets:
                continue  # no options were seen for this pair: nothing to judge
            a = sets[r["instance_id"]]
            if a is None:
                missing += 1
            elif a:
                uir.append(useful_inclusion_rate(r["options"], a))
                incidences += [(attributes[r["instance_id"]], k not in r["options"]) for k in sorted(a)]
        head = {"model": model, "condition": condition, "judge": judge}
        out.append({**head, **metric("NAR_UIR", uir, max(0, owed - len(personal)) + missing)})
        for split in splits:
            result = fisher_split([(split.member(attrs), excluded) for attrs, excluded in incidences])
            if result is not None:
                odds, p, table = result
                n = sum(map(sum, table))
                out.append({**head, "metric": f"NAR_fisher_p[{split.name}]", "value": p, "n": n, "excluded": 0})
                out.append({**head, "metric": f"NAR_fisher_or[{split.name}]", "value": odds, "n": n, "excluded": 0})
    return out


class Narrowing(PriskBenchmark):
    kind = "narrowing"

    def item_meta(self, item: NarrowingItem) -> dict[str, Any]:  # type: ignore[override]
        return {}

    def scoring_stages(self, job: Job) -> list[Stage]:
        extract = Stage("extract", extract_units, role="extractor", parse=parse_options)
        if not Condition.of(job).personalized:
            return [extract]
        return [Stage("base_generate", base_builder(self.item_meta)), extract,
                Stage("useful", useful_units, role="judge", parse=parse_useful)]

    def values(self, recs: list[dict[str, Any]], settings: dict[str, Any]) -> list[dict[str, Any]]:
        splits = [Split.of(s) for s in settings.get("fisher_splits") or []]
        extracted = option_sets(recs)
        v = universes(extracted)
        out = []
        for model, condition in model_conditions(recs):
            out += narrowing_metrics(recs, model, condition, splits, v, extracted)
        return out
