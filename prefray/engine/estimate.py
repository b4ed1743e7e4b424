"""Cost and time estimates before anything is sent.

The estimate runs the real job runner against a simulated dispatcher, in a scratch copy of the
run directory, so it sees exactly the units a launch (or rerun) would send: resume and the
response cache are honoured, and later stages are built from simulated answers of earlier ones.
Tokens: input = characters / 4 plus a few per message (the same estimate the limiter uses);
output = `run.estimate_output_ratio` × the request's max tokens (the maximum is shown too).
The time bound per model is the larger of calls / rpm and input tokens / tpm: no schedule can
finish sooner under the configured rate limits.
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

import pyarrow as pa
import pyarrow.parquet as pq

from prefray.engine.benchmark import Benchmark, Job
from prefray.engine.budget import call_cost, max_output_tokens
from prefray.engine.dispatch import SimulatedGateways
from prefray.engine.runner import RunSettings
from prefray.engine.store import SHARD_SCHEMA
from prefray.engine.types import ModelSpec


@dataclass
class EstimateLine:
    model: str
    stage: str
    calls: int
    cached: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    max_cost_usd: float
    min_minutes: float


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
    from prefray.engine.session import drive

    settings = dict(settings)
    ratio = float(settings.pop("output_ratio", 0.5))
    scratch, existing = _scratch_copy(Path(run_dir))
    try:
        run_settings = RunSettings(run_dir=scratch, write_cache=False, simulated=True, **settings)
        crashed = asyncio.run(drive(jobs, benchmarks, instances, run_settings, SimulatedGateways(ratio)))
        for job, error in crashed:
            raise RuntimeError(f"estimate of {job.benchmark}/{job.model.name}/{job.condition} failed: {error}")
        return _new_rows(scratch, existing)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _specs(jobs: Sequence[Job]) -> dict[tuple[str, str], ModelSpec]:
    return {(s.provider, s.model_id): s for j in jobs for s in (j.model, *j.roles.values())}


def summarize(rows: pa.Table, jobs: Sequence[Job]) -> list[EstimateLine]:
    specs = _specs(jobs)
    lines: dict[tuple[str, str], EstimateLine] = {}
    for row in rows.to_pylist():
        spec = specs[(row["provider"], row["model_id"])]
        line = lines.setdefault((spec.name, row["stage"]), EstimateLine(spec.name, row["stage"], 0, 0, 0, 0, 0.0, 0.0, 0.0))
        if row["cached"]:
            line.cached += 1
            continue
        line.calls += 1
        line.input_tokens += row["input_tokens"]
        line.output_tokens += row["output_tokens"]
        line.cost_usd += row["cost_usd"]
        params = json.loads(row["params_json"])
        line.max_cost_usd += call_cost(spec, row["input_tokens"], _max_tokens(params))
    by_model: dict[str, list[EstimateLine]] = {}
    for line in lines.values():
        by_model.setdefault(line.model, []).append(line)
    for name, model_lines in by_model.items():
        spec = next(s for s in specs.values() if s.name == name)
        minutes = min_minutes(spec, sum(x.calls for x in model_lines), sum(x.input_tokens for x in model_lines))
        for line in model_lines:
            line.min_minutes = minutes
    return sorted(lines.values(), key=lambda x: (x.model, x.stage))


def _max_tokens(params: dict[str, Any]) -> int:
    from prefray.engine.types import ChatRequest

    return max_output_tokens(ChatRequest(messages=(), params=params))


def min_minutes(spec: ModelSpec, calls: int, input_tokens: int) -> float:
    """Lower bound on the minutes this model's calls take under its rate limits."""
    bounds = [0.0]
    if spec.rpm:
        bounds.append(calls / spec.rpm)
    if spec.tpm:
        bounds.append(input_tokens / spec.tpm)
    return max(bounds)


def write_estimate_csv(lines: list[EstimateLine], path: str | Path) -> None:
    import csv
    from dataclasses import asdict, fields

    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[f.name for f in fields(EstimateLine)])
        writer.writeheader()
        writer.writerows(asdict(line) for line in lines)


def print_estimate(lines: list[EstimateLine]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="prefray estimate (nothing sent)")
    columns = ["model", "stage", "calls", "cached", "input_tokens", "output_tokens", "cost_usd", "max_cost_usd",
               "min_minutes"]
    for column in columns:
        table.add_column(column, justify="left" if column in ("model", "stage") else "right")
    for line in lines:
        values = [getattr(line, c) for c in columns]
        table.add_row(*(f"{v:.4f}" if isinstance(v, float) else str(v) for v in values))
    console = Console()
    console.print(table)
    total = sum(x.cost_usd for x in lines)
    ceiling = sum(x.max_cost_usd for x in lines)
    bound = max((x.min_minutes for x in lines), default=0.0)
    console.print(f"total: {sum(x.calls for x in lines)} calls, ~{total:.4f} USD (at most {ceiling:.4f} USD); "
                  f"rate limits allow no less than {bound:.1f} min")
