"""Cost and time estimates before anything is sent.

The estimate runs the real job runner against a simulated dispatcher, in a scratch copy of the
run directory, so it sees exactly the units a launch (or rerun) would send: resume and the
response cache are honoured, and later stages are built from simulated answers of earlier ones.
Tokens: input = characters / 4 plus a few per message (the same estimate the limiter uses);
output = `run.estimate_output_ratio` × the request's max tokens (the maximum is shown too).

Rows are keyed by benchmark, evaluated model option (not model id: two options of one model are
two rows) and stage, and name who answers the stage and the job's judge. Rate limits apply per
lane, one provider endpoint and model id (every option and stage on it shares the lane): a lane's
time bound is the larger of its calls / rpm and input tokens / tpm, and the sweep's bound is the
largest lane bound. No schedule can finish sooner under the configured rate limits.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq

from prefray.engine.benchmark import Benchmark, Job
from prefray.engine.money.budget import call_cost, max_output_tokens
from prefray.engine.calls.dispatch import SimulatedGateways
from prefray.engine.flow.runner import RunSettings
from prefray.engine.results.store import SHARD_SCHEMA
from prefray.engine.types import ChatRequest, ModelSpec


@dataclass
class EstimateLine:
    """One plan row: a benchmark's stage for one evaluated model option (all its conditions)."""

    benchmark: str
    model: str            # the evaluated model option (not its model id)
    stage: str
    answered_by: str      # the option answering the stage: the evaluated model, the judge or a role model
    role: str             # subject (the evaluated model) or the scoring role (judge, matcher, ...)
    judge: str            # the job's judge
    conditions: str = ""  # the conditions whose calls this row counts, comma-separated
    calls: int = 0
    cached: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    output_budget: int = 0  # max output tokens sent per call (the runner's final_request); stage's largest
    cost_usd: float = 0.0
    max_cost_usd: float = 0.0
    tier: str = "interactive"  # the answering model's tier (batch-tier calls wait for no rate limit)
    lane: str = ""        # where rate limits apply: provider endpoint and model id
    lane_rpm: float | None = None
    lane_tpm: float | None = None
    min_minutes: float = 0.0  # the lane's time bound (every row on that lane together)


def _scratch_copy(run_dir: Path) -> tuple[Path, set[str]]:
    """A scratch run dir holding hard links to the stored shards; returns it and their names."""
    scratch = Path(tempfile.mkdtemp(prefix="prefray-estimate-"))
    source = run_dir / "shards"
    if source.is_dir():
        shutil.copytree(source, scratch / "shards", copy_function=_link_or_copy)
    existing = {str(p.relative_to(scratch)) for p in scratch.glob("shards/**/*.parquet")}
    return scratch, existing


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _new_rows(scratch: Path, existing: set[str]) -> pa.Table:
    new = [p for p in scratch.glob("shards/**/*.parquet") if str(p.relative_to(scratch)) not in existing]
    return pa.concat_tables([SHARD_SCHEMA.empty_table(), *(pq.read_table(p, schema=SHARD_SCHEMA) for p in new)])


def simulate(jobs: Sequence[Job], benchmarks: dict[str, Benchmark], instances: dict[int, Sequence[Any]],
             run_dir: Path, settings: dict[str, Any]) -> pa.Table:
    """The rows a run would add to `run_dir`, answered by the simulation."""
    from prefray.engine.flow.session import drive

    settings = dict(settings)
    ratio = float(settings.pop("output_ratio", 0.5))
    scratch, existing = _scratch_copy(Path(run_dir))
    try:
        settings.pop("compact", None)   # new rows are told apart by their files: keep them small
        run_settings = RunSettings(run_dir=scratch, write_cache=False, simulated=True, compact=False, **settings)
        crashed = asyncio.run(drive(jobs, benchmarks, instances, run_settings, SimulatedGateways(ratio)))
        for job, error in crashed:
            raise RuntimeError(f"estimate of {job.benchmark}/{job.model.name}/{job.condition} failed: {error}")
        return _new_rows(scratch, existing)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


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


def lane_name(spec: ModelSpec) -> str:
    """Provider endpoint and model id: what a gateway rate-limits as one lane (batch-tier calls
    go through the provider's batch API instead, a lane of their own)."""
    host = urlparse(spec.base_url).netloc if spec.base_url else f"{spec.provider} API"
    return f"{host} {spec.model_id}" + (" (batch tier)" if spec.tier == "batch" else "")


def summarize(rows: pa.Table, jobs: Sequence[Job]) -> list[EstimateLine]:
    """Plan rows keyed by benchmark, evaluated model option and stage (and who answers it).

    The output budget is read from each row's params: they are what the runner's `final_request`
    made of the call (the one rule for stage params over the model's, within its cap).
    """
    specs = _answering_specs(jobs)
    judges: dict[tuple[str, str], set[str]] = {}
    for job in jobs:
        judges.setdefault((job.benchmark, job.model.name), set()).add(job.roles["judge"].name)
    lines: dict[tuple[str, str, str, str], EstimateLine] = {}
    conditions: dict[tuple[str, str, str, str], set[str]] = {}
    lane_specs: dict[str, dict[str, ModelSpec]] = {}
    for row in rows.to_pylist():
        spec = _answering_spec(specs, row)
        key = (row["benchmark"], row["model"], row["stage"], spec.name)
        if key not in lines:
            judge = ",".join(sorted(judges[(row["benchmark"], row["model"])]))
            lines[key] = EstimateLine(*key[:3], spec.name, row["role"], judge, tier=spec.tier,
                                      lane=lane_name(spec))
            lane_specs.setdefault(lane_name(spec), {})[spec.name] = spec
        conditions.setdefault(key, set()).add(row["condition"])
        _add(lines[key], spec, row)
    for key, names in conditions.items():
        lines[key].conditions = ",".join(sorted(names))
    _bound_lanes(list(lines.values()), lane_specs)
    return sorted(lines.values(), key=lambda x: (x.benchmark, x.model, x.stage, x.answered_by))


def _add(line: EstimateLine, spec: ModelSpec, row: dict[str, Any]) -> None:
    budget = max_output_tokens(ChatRequest(messages=(), params=json.loads(row["params_json"])))
    line.output_budget = max(line.output_budget, budget)
    if row["cached"]:
        line.cached += 1
        return
    line.calls += 1
    line.input_tokens += row["input_tokens"]
    line.output_tokens += row["output_tokens"]
    line.cost_usd += row["cost_usd"]
    line.max_cost_usd += call_cost(spec, row["input_tokens"], budget)


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


def min_minutes(spec: ModelSpec, calls: int, input_tokens: int) -> float:
    """Lower bound on the minutes one model's calls take under its rate limits."""
    return lane_minutes(spec.rpm, spec.tpm, calls, input_tokens)


def lane_minutes(rpm: float | None, tpm: float | None, calls: int, input_tokens: int) -> float:
    """Lower bound on the minutes a lane's calls take under its rate limits."""
    bounds = [0.0]
    if rpm:
        bounds.append(calls / rpm)
    if tpm:
        bounds.append(input_tokens / tpm)
    return max(bounds)


from prefray.engine.money.estimate_table import print_estimate, write_estimate_csv  # noqa: E402,F401
