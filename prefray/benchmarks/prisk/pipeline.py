"""The stages every PRISK sub-benchmark shares: route → (reflect) → generate.

Conditions (conditions/*.yaml in this package) switch four things: `profile` (render the 10-attribute profile),
`retrieval` (add BM25 passages from the user's memory, after a routing call that may say no),
`routing_query` (`query` or `profile_query`: what the router and the retriever see) and
`reflection` (the model first writes notes on whether the profile and memories matter for this
query, then answers with those notes).

Prompt order follows the paper (§3.2): the query comes first and the personal context is appended
to it; under profile+retrieval the context is the retrieved passages, then the profile. Under
`profile_query` routing the router sees the joint [profile; query], as the retriever does.

Every prompt is read through `prefray.sdk.prompts.read_prompt`, so `benchmark.prompts.<name>=PATH`
replaces it for a run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from prefray.benchmarks.prisk.data import Instance, Item, Profile
from prefray.benchmarks.prisk.retrieval import Passage, passages, retrieve, routing_query
from prefray.benchmarks.prisk.scoring import ROUTE_SCHEMA, parse_route
from prefray.benchmarks.prisk.settings import PriskSettings, Switches
from prefray.sdk import ChatRequest, Job, Stage, StageContext, WorkUnit, parsed
from prefray.sdk.prompts import prompt_path

PROMPTS = Path(__file__).parent / "prompts"
ItemMeta = Callable[[Item], dict[str, Any]]
Settings = PriskSettings | None


@cache
def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def template(name: str, settings: Settings = None) -> str:
    return _read(prompt_path(PROMPTS, name, settings))


def render(name: str, settings: Settings = None, **fields: Any) -> str:
    return template(name, settings).format(**fields).strip()


def render_profile(profile: Profile, settings: Settings = None) -> str:
    return render("profile", settings, **dict(profile.attributes))


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
    def from_settings(cls, name: str, s: Switches) -> Condition:
        return cls(name, s.profile, s.retrieval, s.routing_query, s.reflection)

    @classmethod
    def of(cls, job: Job) -> Condition:
        """The job's condition (a PriskCondition: its name and switches)."""
        return cls.from_settings(job.condition_settings.name, job.condition_settings)


@dataclass(frozen=True)
class Context:
    """What the model is shown besides the query."""

    profile_text: str = ""
    passages: tuple[Passage, ...] = ()

    def block(self, settings: Settings = None) -> str:
        """Passages, then profile (paper §3.2: c_pr = [M_k; p(u)])."""
        parts = []
        if self.passages:
            text = "\n\n".join(f"[{i}] {p.text}" for i, p in enumerate(self.passages, start=1))
            parts.append(template("section_memory", settings).format(passages=text))
        if self.profile_text:
            parts.append(template("section_profile", settings).format(profile=self.profile_text))
        return "".join(parts)


def shown_context(cond: Condition, profile: Profile | None, passage_ids: Sequence[str],
                  settings: Settings = None) -> Context:
    """The context a stored answer was given (profile if the condition shows it, passages by id)."""
    if profile is None:
        return Context()
    memory = {p.passage_id: p for p in passages(profile)}
    return Context(render_profile(profile, settings) if cond.profile else "",
                   tuple(memory[i] for i in passage_ids) if cond.retrieval else ())


def samples(job: Job) -> int:
    return job.settings.samples


def routes(ctx: StageContext, stage: str = "route") -> dict[str, bool]:
    """Routing decisions by instance id; an instance whose routing failed is absent."""
    return {r["instance_id"]: parsed(r)["retrieve"] for r in current_rows(ctx, stage)}


def context_of(job: Job, inst: Instance, decisions: dict[str, bool],
               cond: Condition | None = None) -> tuple[Context, bool | None]:
    """The instance's context and its routing decision (None = routing failed: retrieve anyway)."""
    cond = cond or Condition.of(job)
    if inst.profile is None or not cond.personalized:
        return Context(), None
    profile_text = render_profile(inst.profile, job.settings)
    shown = profile_text if cond.profile else ""
    if not cond.retrieval:
        return Context(shown), None
    decision = decisions.get(inst.instance_id)
    if decision is False:
        return Context(shown), False
    top_k = job.settings.retrieval.top_k
    query = routing_query(cond.routing_query, profile_text, inst.item.query)
    return Context(shown, tuple(retrieve(inst.profile, query, top_k))), decision


def answer_prompt(context: Context, query: str, reflection: str | None = None, settings: Settings = None) -> str:
    block = context.block(settings)
    if reflection is not None:
        return render("answer_reflected", settings, context=block, query=query, reflection=reflection)
    return render("answer", settings, context=block, query=query) if block else query


def route_prompt(cond: Condition, inst: Instance, settings: Settings = None) -> str:
    """The routing call: the query, or the joint [profile; query] under `profile_query` routing."""
    about = ""
    if cond.routing_query == "profile_query" and inst.profile is not None:
        about = template("section_profile", settings).format(profile=render_profile(inst.profile, settings))
    return render("route", settings, profile=about, query=inst.item.query)


def _request(job: Job, prompt: str, sample: int) -> ChatRequest:
    return ChatRequest(messages=({"role": "user", "content": prompt},), params=dict(job.settings.generation),
                       seed=job.seed + sample)


def _personal(ctx: StageContext) -> list[Instance]:
    return [inst for inst in ctx.instances if inst.profile is not None]


def route_builder(cond: Condition) -> Callable[[StageContext], Iterator[WorkUnit]]:
    def build(ctx: StageContext) -> Iterator[WorkUnit]:
        job = ctx.job
        for inst in _personal(ctx):
            yield WorkUnit(inst.instance_id, ChatRequest(
                messages=({"role": "user", "content": route_prompt(cond, inst, job.settings)},),
                params=dict(job.settings.routing.params), json_schema=ROUTE_SCHEMA, seed=job.seed),
                item=inst.item.item_id)
    return build


def _meta(item_meta: ItemMeta, inst: Instance, context: Context, decision: bool | None,
          cond: Condition) -> dict[str, Any]:
    return {**item_meta(inst.item), "item_id": inst.item.item_id, "route": decision, "condition": cond.name,
            "profile_id": inst.profile.profile_id if inst.profile else "",
            "passages": [p.passage_id for p in context.passages]}


def reflect_builder(item_meta: ItemMeta, cond: Condition,
                    suffix: str = "") -> Callable[[StageContext], Iterator[WorkUnit]]:
    def build(ctx: StageContext) -> Iterator[WorkUnit]:
        decisions = routes(ctx, f"route{suffix}")
        for inst in _personal(ctx):
            context, decision = context_of(ctx.job, inst, decisions, cond)
            prompt = render("reflect", ctx.job.settings, context=context.block(ctx.job.settings), query=inst.item.query)
            meta = _meta(item_meta, inst, context, decision, cond)
            for s in range(samples(ctx.job)):
                yield WorkUnit(inst.instance_id, _request(ctx.job, prompt, s), item=inst.item.item_id, sample=s,
                               meta=meta)
    return build


def generate_builder(item_meta: ItemMeta, cond: Condition,
                     suffix: str = "") -> Callable[[StageContext], Iterator[WorkUnit]]:
    if not cond.personalized:
        return base_builder(item_meta, cond=cond)

    def build(ctx: StageContext) -> Iterator[WorkUnit]:
        settings, decisions = ctx.job.settings, routes(ctx, f"route{suffix}")
        notes = {(r["instance_id"], r["sample"]): r["text"] for r in current_rows(ctx, f"reflect{suffix}")}
        for inst in _personal(ctx):
            context, decision = context_of(ctx.job, inst, decisions, cond)
            meta = _meta(item_meta, inst, context, decision, cond)
            for s in range(samples(ctx.job)):
                if cond.reflection and (inst.instance_id, s) not in notes:
                    continue  # its reflection failed; counted as excluded from the reflect rows
                prompt = answer_prompt(context, inst.item.query, notes.get((inst.instance_id, s)), settings)
                yield WorkUnit(inst.instance_id, _request(ctx.job, prompt, s), item=inst.item.item_id,
                               sample=s, meta=meta)
    return build


def base_builder(item_meta: ItemMeta, sample_count: Callable[[Job], int] = samples, seed_offset: int = 0,
                 cond: Condition | None = None) -> Callable[[StageContext], Iterator[WorkUnit]]:
    """The query alone, once per distinct item (instance id = item id)."""
    def build(ctx: StageContext) -> Iterator[WorkUnit]:
        items = {inst.item.item_id: inst.item for inst in ctx.instances}
        name = cond.name if cond else "base"
        for item_id, item in items.items():
            for s in range(sample_count(ctx.job)):
                yield WorkUnit(item_id, _request(ctx.job, item.query, s + seed_offset), item=item_id, sample=s,
                               meta={**item_meta(item), "item_id": item_id, "profile_id": "", "route": None,
                                     "passages": [], "condition": name})
    return build


def answer_stages(job: Job, item_meta: ItemMeta, cond: Condition | None = None, suffix: str = "") -> list[Stage]:
    """route (retrieval conditions) → reflect (reflection) → generate; stage names carry `suffix`.
    Each names the stages it reads (route reads none), so a narrowing job's conditions run side by
    side instead of one after another."""
    cond = cond or Condition.of(job)
    stages: list[Stage] = []
    read: tuple[str, ...] = ()
    if cond.retrieval:
        role = job.settings.routing.role
        stages.append(Stage(f"route{suffix}", route_builder(cond), role=role, parse=parse_route, inputs=()))
        read = (f"route{suffix}",)
    if cond.reflection:
        stages.append(Stage(f"reflect{suffix}", reflect_builder(item_meta, cond, suffix), inputs=read))
        read = (*read, f"reflect{suffix}")
    stages.append(Stage(f"generate{suffix}", generate_builder(item_meta, cond, suffix), inputs=read))
    return stages


def current_rows(ctx: StageContext, stage: str) -> list[dict[str, Any]]:
    """ok rows of an earlier stage that belong to this job's instances (or, for base stages, its
    items): a run dir may hold rows of an earlier run with a larger limit."""
    ids = {inst.instance_id for inst in ctx.instances} | {inst.item.item_id for inst in ctx.instances}
    return [r for r in ctx.ok_rows(stage) if r["instance_id"] in ids]
