"""The stages every PRISK sub-benchmark shares: route → (reflect) → generate, plus base answers.

Conditions (conf/condition/*.yaml) switch four things: `profile` (render the 10-attribute profile),
`retrieval` (add BM25 passages from the user's memory, after a routing call that may say no),
`routing_query` (`query` or `profile_query`) and `reflection` (the model first writes notes on
whether the profile and memories matter for this query, then answers with those notes).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Sequence

from prefray.benchmarks.prisk.data import Instance, Item, Profile
from prefray.benchmarks.prisk.retrieval import Passage, retrieve, routing_query
from prefray.benchmarks.prisk.scoring import ROUTE_SCHEMA, parse_route
from prefray.engine.benchmark import Job, Stage, StageContext, parsed
from prefray.engine.types import ChatRequest, WorkUnit

PROMPTS = Path(__file__).parent / "prompts"
ItemMeta = Callable[[Item], dict[str, Any]]


@lru_cache(maxsize=None)
def template(name: str) -> str:
    return (PROMPTS / f"{name}.txt").read_text(encoding="utf-8")


def render(name: str, **fields: Any) -> str:
    return template(name).format(**fields).strip()


def render_profile(profile: Profile) -> str:
    return render("profile", **dict(profile.attributes))


@dataclass(frozen=True)
class Condition:
    name: str
    profile: bool = False
    retrieval: bool = False
    routing_query: str | None = None
    reflection: bool = False

    @property
    def personalized(self) -> bool:
        return self.profile or self.retrieval

    @classmethod
    def of(cls, job: Job) -> "Condition":
        s = job.condition_settings
        return cls(str(s.get("name", job.condition)), bool(s.get("profile")), bool(s.get("retrieval")),
                   s.get("routing_query"), bool(s.get("reflection")))


@dataclass(frozen=True)
class Context:
    """What the model is shown besides the query."""

    profile_text: str = ""
    passages: tuple[Passage, ...] = ()

    def block(self) -> str:
        parts = []
        if self.profile_text:
            parts.append(template("section_profile").format(profile=self.profile_text))
        if self.passages:
            text = "\n\n".join(f"[{i}] {p.text}" for i, p in enumerate(self.passages, start=1))
            parts.append(template("section_memory").format(passages=text))
        return "".join(parts)


def params(job: Job, key: str) -> dict[str, Any]:
    """Sampling params from the benchmark config: `generation`, `judge_params` or `routing.params`."""
    if key == "routing":
        return dict((job.settings.get("routing") or {}).get("params") or {})
    return dict(job.settings.get(key) or {})


def samples(job: Job) -> int:
    return int(job.settings.get("samples", 1))


def routes(ctx: StageContext) -> dict[str, bool]:
    """Routing decisions by instance id; an instance whose routing failed is absent."""
    return {r["instance_id"]: parsed(r)["retrieve"] for r in current_rows(ctx, "route")}


def context_of(job: Job, inst: Instance, decisions: dict[str, bool]) -> tuple[Context, bool | None]:
    """The instance's context and its routing decision (None = routing failed: retrieve anyway)."""
    cond = Condition.of(job)
    if inst.profile is None:
        return Context(), None
    profile_text = render_profile(inst.profile)
    shown = profile_text if cond.profile else ""
    if not cond.retrieval:
        return Context(shown), None
    decision = decisions.get(inst.instance_id)
    if decision is False:
        return Context(shown), False
    top_k = int((job.settings.get("retrieval") or {}).get("top_k", 3))
    query = routing_query(cond.routing_query, profile_text, inst.item.query)
    return Context(shown, tuple(retrieve(inst.profile, query, top_k))), decision


def answer_prompt(context: Context, query: str, reflection: str | None = None) -> str:
    block = context.block()
    if reflection is not None:
        return render("answer_reflected", context=block, query=query, reflection=reflection)
    return render("answer", context=block, query=query) if block else query


def _request(job: Job, prompt: str, sample: int) -> ChatRequest:
    return ChatRequest(messages=({"role": "user", "content": prompt},), params=params(job, "generation"),
                       seed=job.seed + sample)


def route_units(ctx: StageContext) -> list[WorkUnit]:
    job = ctx.job
    return [WorkUnit(inst.instance_id, ChatRequest(
        messages=({"role": "user", "content": render("route", query=inst.item.query)},),
        params=params(job, "routing"), json_schema=ROUTE_SCHEMA, seed=job.seed),
        item=inst.item.item_id) for inst in ctx.instances]


def _meta(item_meta: ItemMeta, inst: Instance, context: Context, decision: bool | None) -> dict[str, Any]:
    return {**item_meta(inst.item), "item_id": inst.item.item_id, "route": decision,
            "profile_id": inst.profile.profile_id if inst.profile else "",
            "passages": [p.passage_id for p in context.passages]}


def reflect_builder(item_meta: ItemMeta) -> Callable[[StageContext], list[WorkUnit]]:
    def build(ctx: StageContext) -> list[WorkUnit]:
        decisions, units = routes(ctx), []
        for inst in ctx.instances:
            context, decision = context_of(ctx.job, inst, decisions)
            prompt = render("reflect", context=context.block(), query=inst.item.query)
            meta = _meta(item_meta, inst, context, decision)
            units += [WorkUnit(inst.instance_id, _request(ctx.job, prompt, s), item=inst.item.item_id, sample=s,
                               meta=meta) for s in range(samples(ctx.job))]
        return units
    return build


def generate_builder(item_meta: ItemMeta) -> Callable[[StageContext], list[WorkUnit]]:
    def build(ctx: StageContext) -> list[WorkUnit]:
        cond, decisions = Condition.of(ctx.job), routes(ctx)
        notes = {(r["instance_id"], r["sample"]): r["text"] for r in current_rows(ctx, "reflect")}
        units = []
        for inst in ctx.instances:
            context, decision = context_of(ctx.job, inst, decisions)
            meta = _meta(item_meta, inst, context, decision)
            for s in range(samples(ctx.job)):
                if cond.reflection and (inst.instance_id, s) not in notes:
                    continue  # its reflection failed; counted as excluded from the reflect rows
                prompt = answer_prompt(context, inst.item.query, notes.get((inst.instance_id, s)))
                units.append(WorkUnit(inst.instance_id, _request(ctx.job, prompt, s), item=inst.item.item_id,
                                      sample=s, meta=meta))
        return units
    return build


def base_builder(item_meta: ItemMeta, sample_count: Callable[[Job], int] = samples
                 ) -> Callable[[StageContext], list[WorkUnit]]:
    """The query alone, once per distinct item (instance id = item id): the in-job base answers."""
    def build(ctx: StageContext) -> list[WorkUnit]:
        items = {inst.item.item_id: inst.item for inst in ctx.instances}
        return [WorkUnit(item_id, _request(ctx.job, item.query, s), item=item_id, sample=s,
                         meta={**item_meta(item), "item_id": item_id, "profile_id": "", "route": None,
                               "passages": []})
                for item_id, item in items.items() for s in range(sample_count(ctx.job))]
    return build


def answer_stages(job: Job, item_meta: ItemMeta) -> list[Stage]:
    """route (retrieval conditions) → reflect (reflection) → generate."""
    cond = Condition.of(job)
    stages = []
    if cond.retrieval:
        role = str((job.settings.get("routing") or {}).get("role", "subject"))
        stages.append(Stage("route", route_units, role=role, parse=parse_route))
    if cond.reflection:
        stages.append(Stage("reflect", reflect_builder(item_meta)))
    stages.append(Stage("generate", generate_builder(item_meta)))
    return stages


def by_instance(instances: Sequence[Instance]) -> dict[str, Instance]:
    return {inst.instance_id: inst for inst in instances}


def current_rows(ctx: StageContext, stage: str) -> list[dict[str, Any]]:
    """ok rows of an earlier stage that belong to this job's instances (or, for base stages, its
    items): a run dir may hold rows of an earlier run with a larger limit."""
    ids = {inst.instance_id for inst in ctx.instances} | {inst.item.item_id for inst in ctx.instances}
    return [r for r in ctx.ok_rows(stage) if r["instance_id"] in ids]
