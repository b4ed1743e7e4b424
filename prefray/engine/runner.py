"""Run the jobs of a sweep concurrently: stages in order within a job, shards in parallel.

The driver plans units, skips those already stored (resume), hands each shard to the gateway of
the model that answers it, parses answers where a stage asks for it, and writes one Parquet
shard per batch as soon as it returns.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import pyarrow as pa
import pyarrow.dataset as ds

from prefray.engine.benchmark import Benchmark, Job, ParseError, Stage, StageContext
from prefray.engine.gateway import get_gateway
from prefray.engine.store import job_dir, latest_attempts, read_rows, write_shard
from prefray.engine.types import CallResult, ChatRequest, ModelSpec, WorkUnit, stable_id

ProgressFn = Callable[[Job, str, int, int], None]


@dataclass
class RunSettings:
    run_dir: Path
    shard_size: int = 16
    attempt: int = 1
    progress: ProgressFn | None = None


@dataclass
class Gateways:
    """One gateway handle per endpoint and key, created on first use."""

    handles: dict[str, Any] = field(default_factory=dict)
    servers: dict[tuple[str, int], Any] = field(default_factory=dict)
    ready: dict[tuple[str, int], asyncio.Future] = field(default_factory=dict)

    async def for_model(self, spec: ModelSpec) -> Any:
        if spec.serve:
            from prefray.engine.local_servers import host_port

            address = host_port(spec.base_url)
            if address not in self.ready:
                from prefray.engine.gateway import on_this_node
                from prefray.engine.local_servers import get_local_server

                server = self.servers[address] = get_local_server(spec.serve, spec.base_url, on_this_node())
                self.ready[address] = asyncio.ensure_future(server.ensure.remote())
            await self.ready[address]
        handle = self.handles.get(spec.endpoint_key)
        if handle is None:
            api_key = os.environ.get(spec.api_key_env, "") if spec.api_key_env else "prefray-local"
            handle = self.handles[spec.endpoint_key] = get_gateway(spec, api_key)
        return handle

    async def run_batch(self, spec: ModelSpec, requests: list[ChatRequest]) -> list[CallResult]:
        """Send one batch to the model's gateway; survive a gateway that is briefly unavailable
        or died (a new one is started), which can re-send at most this batch."""
        from ray.exceptions import ActorUnavailableError, RayActorError

        for attempt in range(ACTOR_ATTEMPTS):
            gateway = await self.for_model(spec)
            try:
                return await gateway.run_batch.remote(spec, requests)
            except (ActorUnavailableError, RayActorError):
                if attempt == ACTOR_ATTEMPTS - 1:
                    raise
                if not await _alive(gateway):
                    self.handles.pop(spec.endpoint_key, None)
                await asyncio.sleep(1.0 + attempt)
        raise AssertionError("unreachable")

    async def close(self) -> None:
        import ray

        for handle in self.handles.values():
            await _quietly(handle.close.remote())
            ray.kill(handle)
        for server in self.servers.values():
            await _quietly(server.stop.remote())
            ray.kill(server)
        self.handles.clear()
        self.servers.clear()
        self.ready.clear()


ACTOR_ATTEMPTS = 3


async def _alive(handle: Any) -> bool:
    try:
        return await handle.ping.remote()
    except Exception:  # noqa: BLE001 - any failure to answer means: start a new one
        return False


async def _quietly(ref: Any) -> None:
    try:
        await ref
    except Exception:  # noqa: BLE001 - an actor that is already gone needs no closing
        pass


def unit_id(job: Job, stage: Stage, judge: str, unit: WorkUnit) -> str:
    return stable_id(job.benchmark, job.condition, job.model.name, stage.name, judge,
                     unit.instance_id, unit.item, unit.sample)


def final_request(spec: ModelSpec, request: ChatRequest) -> ChatRequest:
    """The model's default params overlaid by the stage's own, within the model's output cap."""
    params = {**spec.params, **request.params}
    if spec.max_output_tokens is not None:
        for name in ("max_tokens", "max_completion_tokens"):
            if name in params:
                params[name] = min(int(params[name]), spec.max_output_tokens)
    return replace(request, params=params)


def cost_usd(spec: ModelSpec, result: CallResult) -> float:
    return (result.input_tokens * spec.price_input_per_mtok
            + result.output_tokens * spec.price_output_per_mtok) / 1e6


class JobRunner:
    def __init__(self, job: Job, benchmark: Benchmark, instances: Sequence[Any],
                 settings: RunSettings, gateways: Gateways):
        self.job = job
        self.benchmark = benchmark
        self.instances = instances
        self.settings = settings
        self.gateways = gateways
        self.folder = job_dir(settings.run_dir, job.benchmark, job.model.name, job.condition)

    async def run(self) -> None:
        context = StageContext(self.job, self.instances)
        for stage in self.benchmark.stages(self.job):
            context.results[stage.name] = await self.run_stage(stage, context)

    def stored(self, stage: Stage, judge: str) -> pa.Table:
        expr = (ds.field("stage") == stage.name) & (ds.field("judge") == judge)
        return latest_attempts(read_rows(self.folder, expr))

    async def run_stage(self, stage: Stage, context: StageContext) -> pa.Table:
        spec = self.job.role_model(stage.role)
        judge = "" if stage.role == "subject" else spec.name
        done = set(self.stored(stage, judge)["unit_id"].to_pylist())
        units = stage.build(context)
        pending = [(unit_id(self.job, stage, judge, u), u) for u in units]
        pending = [(uid, u) for uid, u in pending if uid not in done]
        size = max(1, self.settings.shard_size)
        shards = [pending[i:i + size] for i in range(0, len(pending), size)]
        total, finished = len(units), len(units) - len(pending)
        self._report(stage.name, finished, total)

        async def run_one(shard: list[tuple[str, WorkUnit]]) -> None:
            nonlocal finished
            await self.run_shard(stage, spec, judge, shard)
            finished += len(shard)
            self._report(stage.name, finished, total)

        await asyncio.gather(*(run_one(shard) for shard in shards))
        return self.stored(stage, judge)

    def _report(self, stage: str, finished: int, total: int) -> None:
        if self.settings.progress is not None:
            self.settings.progress(self.job, stage, finished, total)

    async def run_shard(self, stage: Stage, spec: ModelSpec, judge: str,
                        shard: list[tuple[str, WorkUnit]]) -> None:
        requests = [final_request(spec, unit.request) for _, unit in shard]
        results = await self.gateways.run_batch(spec, requests)
        parsed: list[Any] = [None] * len(results)
        if stage.parse is not None:
            await self._parse_with_one_retry(stage, spec, requests, results, parsed)
        rows = [self._row(stage, spec, judge, uid, unit, request, result, value)
                for (uid, unit), request, result, value in zip(shard, requests, results, parsed)]
        write_shard(self.folder, stage.name, rows)

    async def _parse_with_one_retry(self, stage: Stage, spec: ModelSpec,
                                    requests: list[ChatRequest], results: list[CallResult],
                                    parsed: list[Any]) -> None:
        failed = [i for i, r in enumerate(results) if r.status == "ok" and not _try_parse(stage, r, parsed, i)]
        if not failed:
            return
        again = await self.gateways.run_batch(spec, [requests[i] for i in failed])
        for i, second in zip(failed, again):
            second.tries += results[i].tries
            second.input_tokens += results[i].input_tokens
            second.output_tokens += results[i].output_tokens
            results[i] = second
            if second.status == "ok" and not _try_parse(stage, second, parsed, i):
                second.status, second.cause = "failed", "parse_error"

    def _row(self, stage: Stage, spec: ModelSpec, judge: str, uid: str, unit: WorkUnit,
             request: ChatRequest, result: CallResult, value: Any) -> dict[str, Any]:
        return {
            "unit_id": uid, "attempt": self.settings.attempt,
            "benchmark": self.job.benchmark, "model": self.job.model.name, "condition": self.job.condition,
            "stage": stage.name, "role": stage.role, "judge": judge,
            "instance_id": unit.instance_id, "item": unit.item, "sample": unit.sample, "seed": request.seed,
            "meta_json": json.dumps(unit.meta, sort_keys=True, ensure_ascii=False),
            "request_hash": request.content_hash(spec.model_id),
            "provider": spec.provider, "model_id": spec.model_id, "model_version": result.model_version,
            "params_json": json.dumps(request.params, sort_keys=True),
            "status": result.status, "cause": result.cause, "error": result.error, "text": result.text,
            "parsed_json": None if value is None else json.dumps(value, ensure_ascii=False),
            "input_tokens": result.input_tokens, "output_tokens": result.output_tokens,
            "cost_usd": cost_usd(spec, result), "tries": result.tries, "latency_s": result.latency_s,
            "started_at": result.started_at, "finished_at": result.finished_at,
        }


def _try_parse(stage: Stage, result: CallResult, parsed: list[Any], index: int) -> bool:
    try:
        parsed[index] = stage.parse(result.text)
        return True
    except ParseError as exc:
        result.error = f"unparsable answer: {exc}"
        return False


async def run_jobs(runners: list[JobRunner]) -> list[tuple[Job, BaseException]]:
    """Run every job concurrently; return the jobs that crashed (others are unaffected)."""
    outcomes = await asyncio.gather(*(r.run() for r in runners), return_exceptions=True)
    return [(r.job, o) for r, o in zip(runners, outcomes) if isinstance(o, BaseException)]
