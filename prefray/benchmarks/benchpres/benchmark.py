"""BenchPreS assembled: stages (generate → judge → completeness) and metrics for the engine.

Paper: BenchPreS (arXiv 2603.16557). Run:
  prefray launch -m benchmark=benchpres condition=all model=local judge=local limit=2
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from prefray.benchmarks.benchpres.conditions import apply_condition
from prefray.benchmarks.benchpres.data import Instance, load_instances
from prefray.benchmarks.benchpres.judge_check import PREFERENCE_JUDGE_CHECK
from prefray.benchmarks.benchpres.metrics import benchpres_metrics, completeness_metrics
from prefray.benchmarks.benchpres.paper_tables import PAPER_TABLES
from prefray.benchmarks.benchpres.render import context_key, memory_layout
from prefray.benchmarks.benchpres.scoring import (
    COMPLETENESS_SCHEMA,
    VERDICT_SCHEMA,
    nickname_decisions,
    nickname_of,
    parse_score,
    parse_verdict,
)
from prefray.benchmarks.benchpres.settings import BenchPresCondition, BenchPresSettings
from prefray.benchmarks.benchpres.tables import (
    completeness_scores,
    decisions,
    failure_counts,
    stored_decision_missing,
    unmapped_contexts,
)
from prefray.benchmarks.benchpres.templates import fill, template_problems
from prefray.benchmarks.benchpres.units import profiles_by_instance, unit_score_table
from prefray.sdk import Benchmark, ChatRequest, Comparison, DataError, Job, Stage, StageContext, WorkUnit, metric_rows
from prefray.sdk.figures import CellsSpec, ScatterSpec
from prefray.sdk.prompts import check_prompt_overrides

PROMPTS = Path(__file__).parent / "prompts"


def by_profile(instances: Sequence[Any]) -> list[Any]:
    """The instances with each profile's together, profiles in order of first appearance (the
    loaders already yield them so; a hub file need not)."""
    first: dict[str, int] = {}
    for index, inst in enumerate(instances):
        first.setdefault(inst.name, index)
    return sorted(instances, key=lambda inst: first[inst.name])


def profile_prefixes(instances: Sequence[Any]) -> dict[str, int]:
    """Per profile: the characters its prompts share from the start (the memory block, which the
    CIMemories template puts first), the part of its generation requests that repeats."""
    prompts: dict[str, list[str]] = {}
    for inst in instances:
        prompts.setdefault(inst.name, []).append(inst.prompt)
    return {name: len(os.path.commonprefix(texts)) for name, texts in prompts.items()}


def judge_messages(preference: str, response: str,
                   settings: BenchPresSettings | None = None) -> tuple[dict[str, str], ...]:
    """The preference judge's request: is this one preference reflected in the response?"""
    return ({"role": "user", "content": fill("judge", settings, preference=preference, response=response)},)


def completeness_messages(recipient: str, task: str, response: str,
                          settings: BenchPresSettings | None = None) -> tuple[dict[str, str], ...]:
    """The completeness judge's request: how well does the response do the task (1–5)?"""
    return ({"role": "user", "content": fill("completeness", settings, recipient=recipient, task=task,
                                             response=response)},)


# Figure 4: the variants that differ only in reasoning (non-reasoning first), per family; the
# paper draws the Qwen3 and K-EXAONE pairs (its IFBench bars come from outside the benchmark).
REASONING_PAIRS = (("Qwen3 235B A22B 2507", "qwen3-235b-a22b-instruct", "qwen3-235b-a22b-thinking"),
                   ("K-EXAONE-236B-A23B", "k-exaone-236b-a23b-non-reasoning", "k-exaone-236b-a23b-reasoning"),
                   ("GPT-5.2", "gpt-5.2", "gpt-5.2-reasoning"))


def reasoning_figures() -> list[CellsSpec]:
    """Figure 4 per pair (MR and AAR, non-reasoning against reasoning, default condition) and Figure 5
    per pair (MR and AAR of each variant under default and defense)."""
    figures = []
    for family, plain, reasoning in REASONING_PAIRS:
        figures.append(CellsSpec(("MR", "AAR"), ((plain, "default"), (reasoning, "default")),
                                 title=f"BenchPreS Fig. 4: reasoning off / on — {family}",
                                 name=f"fig4_reasoning__{plain}", percent=True))
        figures.append(CellsSpec(("MR", "AAR"), ((plain, "default"), (plain, "defense"), (reasoning, "default"),
                                                 (reasoning, "defense")),
                                 title=f"BenchPreS Fig. 5: defense effect per variant — {family}",
                                 name=f"fig5_defense__{plain}", percent=True))
    return figures


class BenchPreS(Benchmark):
    name = "benchpres"
    # its config's keys (benchpres.yaml) and its conditions' (conditions/*.yaml): settings.py
    settings_type = BenchPresSettings
    condition_type = BenchPresCondition
    # `prefray judge-check benchmark=benchpres`: the preference judge against people (judge_check.py)
    judge_check = PREFERENCE_JUDGE_CHECK
    # `prefray report`: Table 1 (paper_tables.py)
    paper_tables = PAPER_TABLES
    # The paper's main figure (Figure 1): AAR against MR per model × condition, the ideal point at
    # MR 0, AAR 1, and the y = x line where a model applies preferences regardless of context.
    # Figures 4 and 5 (below) are drawn when the run has their models and conditions. The paper
    # plots percentages; metrics.csv keeps rates in 0–1.
    figures = [ScatterSpec(x="MR", y="AAR", title="BenchPreS: AAR against MR", diagonal=True, ideal=(0.0, 1.0),
                           percent=True), *reasoning_figures()]
    # Paired differences on the same profiles (defense − default; preferences − none for completeness).
    comparisons = [Comparison("condition", "defense", "default"), Comparison("condition", "default", "no_preferences"),
                   Comparison("model", "gpt-5.2-reasoning", "gpt-5.2"),
                   Comparison("model", "qwen3-235b-a22b-thinking", "qwen3-235b-a22b-instruct"),
                   Comparison("model", "k-exaone-236b-a23b-reasoning", "k-exaone-236b-a23b-non-reasoning")]

    def load(self, job: Job) -> Sequence[Instance]:
        problems = check_prompt_overrides(PROMPTS, job.settings)
        if not problems:  # every template's placeholders, before anything is loaded or sent
            problems = template_problems(job.settings)
        if problems:
            raise DataError("; ".join(problems))
        memory_layout(job.settings)
        instances = load_instances(job.settings.data, job.limit, job.settings)
        return apply_condition(instances, job.condition_settings, job.settings)

    def stages(self, job: Job) -> list[Stage]:
        return [
            # the nickname decision is made as each answer arrives and stored with it (parsed_json)
            Stage("generate", self._generation_units, read=read_nicknames),
            # Each verdict needs only its own answer: judging starts as answers arrive, beside completeness.
            Stage("judge", self._judge_units, role="judge", parse=parse_verdict, inputs=("generate",), per_unit=True),
            Stage("completeness", self._completeness_units, role="judge", parse=parse_score,
                  inputs=("generate",), per_unit=True),
        ]

    def _generation_units(self, ctx: StageContext) -> Iterator[WorkUnit]:
        """Yielded one by one (the runner takes them as it sends); an instance's samples share
        its message and meta."""
        params = dict(ctx.job.settings.generation)
        shared = profile_prefixes(ctx.instances)
        for inst in by_profile(ctx.instances):   # a profile's calls together, within the cache's lifetime
            messages = ({"role": "user", "content": inst.prompt},)
            meta = _generation_meta(inst)
            for sample in range(ctx.job.settings.samples):
                request = ChatRequest(messages=messages, params=params, seed=ctx.job.seed + sample,
                                      cache_prefix=shared[inst.name])
                yield WorkUnit(inst.instance_id, request, sample=sample, meta=meta)

    def _judge_units(self, ctx: StageContext) -> list[WorkUnit]:
        """One verdict per (answered response, non-nickname preference). An answered response is
        sent as given, even when it is empty or was cut at the token limit (the verdict is kept for
        the record; MR and AAR leave such a reply's decisions out and count them, tables.py)."""
        params = dict(ctx.job.settings.judge_params)
        units = []
        for row, inst in ctx.answered("generate"):
            for index, pref in enumerate(inst.preferences):
                if pref.category == "nickname":
                    continue  # decided by exact match, no call
                request = ChatRequest(messages=judge_messages(pref.statement, row["text"] or "", ctx.job.settings),
                                      params=params, json_schema=VERDICT_SCHEMA, seed=ctx.job.seed)
                meta = {"g": pref.applies, "category": pref.category, "domain": inst.domain}
                units.append(WorkUnit(inst.instance_id, request, item=str(index), sample=row["sample"], meta=meta))
        return units

    def _completeness_units(self, ctx: StageContext) -> list[WorkUnit]:
        params = dict(ctx.job.settings.judge_params)
        units = []
        for row, inst in ctx.answered("generate"):
            messages = completeness_messages(inst.recipient, inst.task, row["text"] or "", ctx.job.settings)
            request = ChatRequest(messages=messages, params=params, json_schema=COMPLETENESS_SCHEMA, seed=ctx.job.seed)
            units.append(WorkUnit(inst.instance_id, request, sample=row["sample"], meta={"domain": inst.domain}))
        return units

    def text_needed(self, rows: pa.Table) -> pa.Array:
        """Only answered generation rows without a stored record (stored before the nickname decision
        and the reply's emptiness were recorded) are read again from their text."""
        return stored_decision_missing(rows)

    def unit_scores(self, rows: pa.Table, settings: BenchPresSettings) -> pa.Table:
        """Per-unit MR/AAR decisions and completeness scores, clustered by profile (for CIs)."""
        return unit_score_table(decisions(rows), completeness_scores(rows), profiles_by_instance(rows))

    def metrics(self, rows: pa.Table, settings: BenchPresSettings) -> pa.Table:
        baseline = settings.completeness_baseline
        values = (benchpres_metrics(decisions(rows)) + completeness_metrics(completeness_scores(rows), baseline)
                  + failure_counts(rows) + unmapped_contexts(rows))
        return metric_rows([{"benchmark": self.name, **r} for r in values])


def read_nicknames(unit: WorkUnit, text: str) -> dict[str, Any]:
    """The generation row's stored record: {"nicknames": {preference index: {"nickname", "span",
    "start"}}, "empty": bool} (span and start None when the nickname is absent; no entry without a
    nickname preference; `empty`: the reply is nothing but white space, left out of MR and AAR)."""
    decided = nickname_decisions(unit.meta.get("preferences", []), text or "")
    return {"nicknames": decided, "empty": not (text or "").strip()}


def _generation_meta(inst: Instance) -> dict[str, Any]:
    prefs = []
    for p in inst.preferences:
        pref = {"statement": p.statement, "g": p.applies, "category": p.category}
        if p.category == "nickname":
            pref["nickname"] = nickname_of(p.statement)
        prefs.append(pref)
    return {"domain": inst.domain, "profile": inst.name, "context": context_key(inst.recipient, inst.task),
            "context_known": inst.context_known, "preferences": prefs}
