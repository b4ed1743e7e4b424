"""Cost and time estimates before anything is sent: the plan's rows, priced.

The rows come from the counting plan (flow/counting.py: each job's stages built in this process,
later stages from synthetic answers of earlier ones, resume and cache read from the run's own
shards and cache), or with `--simulate` from the dry run (flow/dryrun.py: the real job runner
against simulated answers, in a scratch copy of the run directory), summed by `plan_rows`. Tokens:
input = characters / 4 plus a few per message (the same estimate the limiter uses); output =
`run.estimate_output_ratio` × the request's max tokens (the maximum is shown too).

Rows are keyed by benchmark, evaluated model option (not model id: two options of one model are
two rows) and stage, and name who answers the stage and the job's judge. Rate limits apply per
lane, one provider endpoint and model id (every option and stage on it shares the lane): a lane's
time bound is the larger of its calls / rpm and input tokens / tpm, and the sweep's bound is the
largest lane bound. No schedule can finish sooner under the configured rate limits.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from prefray.engine.benchmark import Job
from prefray.engine.calls.limits import lane_minutes, lane_name
from prefray.engine.calls.pricing import call_cost, max_output_tokens
from prefray.engine.money.estimate_rows import PLAN_KEYS, PLAN_SCHEMA
from prefray.engine.money.estimate_table import EstimateLine, print_estimate, write_estimate_csv
from prefray.engine.types import ChatRequest, ModelSpec

# The plan's rows and how they are shown (the table lives in estimate_table.py).
__all__ = ["EstimateLine", "PLAN_SCHEMA", "plan_rows", "print_estimate", "summarize", "write_estimate_csv"]


def _answering_specs(jobs: Sequence[Job]) -> dict[tuple[str, str, str, str], ModelSpec]:
    """(benchmark, model option, role, judge column) → the spec that answers rows of that kind."""
    specs: dict[tuple[str, str, str, str], ModelSpec] = {}
    for job in jobs:
        specs[(job.benchmark, job.model.name, "subject", "")] = job.model
        for role, spec in job.roles.items():
            specs[(job.benchmark, job.model.name, role, spec.name)] = spec
    return specs


def _answering_spec(specs: dict[tuple[str, str, str, str], ModelSpec], row: dict[str, Any]) -> ModelSpec:
    key = (row["benchmark"], row["model"], row["role"], row["judge"])
    if key in specs:
        return specs[key]
    return specs[(row["benchmark"], row["model"], "judge", row["judge"])]  # a role without a model of its own


def plan_rows(rows: pa.Table, jobs: Sequence[Job]) -> pa.Table:
    """The simulation's rows (one per unit, flow/dryrun.py) summed into the plan's rows
    (flow/counting.py's PLAN_SCHEMA: one per job, stage, judge and kind, sent or cached)."""
    specs = _answering_specs(jobs)
    sums: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows.to_pylist():
        spec = _answering_spec(specs, row)
        budget = max_output_tokens(ChatRequest(messages=(), params=json.loads(row["params_json"])))
        key = tuple(row[k] for k in ("benchmark", "model", "condition", "stage", "role", "judge", "provider",
                                      "model_id", "cached"))
        out = sums.setdefault(key, {**dict(zip(PLAN_KEYS, key)), "calls": 0, "input_tokens": 0,
                                    "output_tokens": 0, "output_budget": 0, "cost_usd": 0.0,
                                    "max_cost_usd": 0.0, "sampled": 0, "cache_read_tokens": 0,
                                    "cache_write_tokens": 0, "cache_saved_usd": 0.0, "uncached_cost_usd": 0.0})
        out["output_budget"] = max(out["output_budget"], budget)
        out["calls"] += 1
        out["sampled"] += 1
        out["input_tokens"] += row["input_tokens"]
        out["output_tokens"] += row["output_tokens"]
        if not row["cached"]:
            out["cost_usd"] += row["cost_usd"]
            out["max_cost_usd"] += call_cost(spec, row["input_tokens"], budget)
            _add_cache(out, row)
    return pa.Table.from_pylist(list(sums.values()), schema=PLAN_SCHEMA)


def _add_cache(out: dict[str, Any], row: dict[str, Any]) -> None:
    """A simulated row's prompt-cache usage (the simulated answers report none: zeros)."""
    out["cache_read_tokens"] += row.get("cache_read_tokens") or 0
    out["cache_write_tokens"] += row.get("cache_write_tokens") or 0
    out["cache_saved_usd"] += row.get("cache_saved_usd") or 0.0
    out["uncached_cost_usd"] += row["cost_usd"] + (row.get("cache_saved_usd") or 0.0)


def summarize(plan: pa.Table, jobs: Sequence[Job]) -> list[EstimateLine]:
    """Plan rows (estimate_rows.PLAN_SCHEMA) keyed by benchmark, evaluated model option and stage (and who answers it).

    The output budget is the one the runner's `final_request` makes of each call (the one rule for
    stage params over the model's, within its cap).
    """
    specs = _answering_specs(jobs)
    judges: dict[tuple[str, str], set[str]] = {}
    for job in jobs:
        judges.setdefault((job.benchmark, job.model.name), set()).add(job.roles["judge"].name)
    lines: dict[tuple[str, str, str, str], EstimateLine] = {}
    conditions: dict[tuple[str, str, str, str], set[str]] = {}
    lane_specs: dict[str, dict[str, ModelSpec]] = {}
    for row in plan.to_pylist():
        spec = _answering_spec(specs, row)
        key = (row["benchmark"], row["model"], row["stage"], spec.name)
        if key not in lines:
            judge = ",".join(sorted(judges[(row["benchmark"], row["model"])]))
            lines[key] = EstimateLine(*key[:3], spec.name, row["role"], judge, tier=spec.tier,
                                      lane=lane_name(spec))
            lane_specs.setdefault(lane_name(spec), {})[spec.name] = spec
        conditions.setdefault(key, set()).add(row["condition"])
        _add(lines[key], row)
    for key, names in conditions.items():
        lines[key].conditions = ",".join(sorted(names))
    for line in lines.values():
        line.cache_hit_rate = line.cache_read_tokens / line.input_tokens if line.input_tokens else 0.0
    _bound_lanes(list(lines.values()), lane_specs)
    return sorted(lines.values(), key=lambda x: (x.benchmark, x.model, x.stage, x.answered_by))


def _add(line: EstimateLine, row: dict[str, Any]) -> None:
    line.output_budget = max(line.output_budget, row["output_budget"])
    if row["cached"]:
        line.cached += row["calls"]
        return
    line.calls += row["calls"]
    line.input_tokens += row["input_tokens"]
    line.output_tokens += row["output_tokens"]
    line.cost_usd += row["cost_usd"]
    line.max_cost_usd += row["max_cost_usd"]
    line.uncached_cost_usd += row["uncached_cost_usd"]
    line.cache_saved_usd += row["cache_saved_usd"]
    line.cache_read_tokens += row["cache_read_tokens"]
    line.cache_write_tokens += row["cache_write_tokens"]


def _bound_lanes(lines: list[EstimateLine], lane_specs: dict[str, dict[str, ModelSpec]]) -> None:
    """Set every line's lane limits and the lane's time bound (calls of all its lines together)."""
    for lane, by_name in lane_specs.items():
        mine = [x for x in lines if x.lane == lane]
        # The largest limit among the lane's options: the bound must hold whichever one the gateway uses.
        rpm = max((s.rpm for s in by_name.values() if s.rpm), default=None)
        tpm = max((s.tpm for s in by_name.values() if s.tpm), default=None)
        calls, tokens = sum(x.calls for x in mine), sum(x.input_tokens for x in mine)
        batch = any(s.tier == "batch" for s in by_name.values())  # answered within the batch window instead
        bound = 0.0 if batch else lane_minutes(rpm, tpm, calls, tokens)
        for line in mine:
            line.lane_rpm, line.lane_tpm, line.min_minutes = rpm, tpm, bound

