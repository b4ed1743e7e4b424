"""Run the jobs of a sweep concurrently: stages in order within a job, shards in parallel.

The driver plans units, skips those already stored (resume), answers what it can from the
response cache, hands the rest of each shard to the gateway of the model that answers it, parses
answers where a stage asks for it, and writes one Parquet shard per batch as soon as it returns.
Those small shards are rolled into large files every `compact_every` shards and when the job ends.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import pyarrow as pa
import pyarrow.dataset as ds

from prefray.engine.benchmark import Benchmark, Job, ParseError, Stage, StageContext
from prefray.engine.money.cache import ResponseCache, cache_key
from prefray.engine.calls.dispatch import Dispatcher
from prefray.engine.calls.output_budget import final_request
from prefray.engine.flow.progress import CALL_TAG, call_tag
from prefray.engine.results.request_store import RequestStore
from prefray.engine.results.store import compact_folder, job_dir, latest_attempts, read_rows, write_shard
from prefray.engine.types import CallResult, ChatRequest, ModelSpec, WorkUnit, stable_id

ProgressFn = Callable[[Job, str, int, int], None]
ALL_CAUSES = frozenset({"rate_limit", "timeout", "server_error", "connection", "bad_response",
                        "client_error", "auth", "parse_error", "budget", "context_overflow", "model_not_found"})


@dataclass
class RunSettings:
    run_dir: Path
    shard_size: int = 16
    progress: ProgressFn | None = None
    cache: ResponseCache | None = None
    write_cache: bool = True
    # Rerun: stored units that ended failed/skipped with one of these causes are run again.
    rerun_causes: frozenset[str] = frozenset()
    # Re-judge: stages answered by the evaluated model are never sent (only stored rows are used).
    subject_stages_stored_only: bool = False
    # Estimates: answers are simulated; a stage's example answer stands in for unparsable ones.
    simulated: bool = False
    # Every distinct request sent is kept under RUN_DIR/requests/ (created from run_dir when unset).
    request_store: RequestStore | None = None
    # Compaction: small shards of a job folder are rolled into one large file every `compact_every`
    # shards this job writes (0: never while it runs), and all its files merged when it ends.
    compact: bool = True
    compact_every: int = 256

    def __post_init__(self) -> None:
        if self.request_store is None and not self.simulated:
            self.request_store = RequestStore(self.run_dir)


def unit_id(job: Job, stage: Stage, judge: str, unit: WorkUnit) -> str:
    return stable_id(job.benchmark, job.condition, job.model.name, stage.name, judge,
                     unit.instance_id, unit.item, unit.sample)


@dataclass
class Pending:
    uid: str
    unit: WorkUnit
    attempt: int


class JobRunner:
    def __init__(self, job: Job, benchmark: Benchmark, instances: Sequence[Any],
                 settings: RunSettings, dispatcher: Dispatcher):
        self.job = job
        self.benchmark = benchmark
        self.instances = instances
        self.settings = settings
        self.dispatcher = dispatcher
        self.folder = job_dir(settings.run_dir, job.benchmark, job.model.name, job.condition)
        self.flow: StageFlow | None = None
        self._shards_since_roll = 0
        self._rolling = False

    async def run(self) -> None:
        """Every stage as its own task: a stage starts when the rows it needs are stored.

        A `per_unit` stage builds and sends units as soon as its inputs' rows arrive (a judge unit
        goes out when its answer is stored); any other stage waits until all its inputs are done.
        """
        context = StageContext(self.job, self.instances)
        stages = self.benchmark.stages(self.job)
        flow = self.flow = StageFlow({s.name: self._stage_model(s)[1] for s in stages})
        tasks = [asyncio.ensure_future(self._run_stage_when_ready(stage, stages[:i], context, flow))
                 for i, stage in enumerate(stages)]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
        if self.settings.compact:
            await asyncio.to_thread(compact_folder, self.folder)

    async def _roll_when_due(self) -> None:
        """Roll the folder's small shards into a large file once `compact_every` were written."""
        self._shards_since_roll += 1
        every = self.settings.compact_every
        if not self.settings.compact or every <= 0 or self._shards_since_roll < every or self._rolling:
            return
        self._rolling, self._shards_since_roll = True, 0
        try:
            await asyncio.to_thread(compact_folder, self.folder, True)
        finally:
            self._rolling = False

    async def _run_stage_when_ready(self, stage: Stage, earlier: list[Stage], context: StageContext,
                                    flow: "StageFlow") -> None:
        inputs = [s.name for s in earlier] if stage.inputs is None else list(stage.inputs)
        try:
            if stage.per_unit and inputs:
                await self._stream_stage(stage, inputs, context, flow)
            else:
                await flow.wait_done(inputs)
                context.results[stage.name] = await self.run_stage(stage, context)
        finally:
            flow.finish(stage.name)

    def stored(self, stage: Stage, judge: str) -> pa.Table:
        expr = (ds.field("stage") == stage.name) & (ds.field("judge") == judge)
        return latest_attempts(read_rows(self.folder, expr))

    def _stored_states(self, stage: Stage, judge: str) -> dict[str, tuple[str, str, int]]:
        table = self.stored(stage, judge).select(["unit_id", "status", "cause", "attempt"])
        return {u: (st, c, a) for u, st, c, a in zip(*(table[k].to_pylist() for k in table.column_names))}

    def pending_units(self, stage: Stage, judge: str, units: list[WorkUnit],
                      states: dict[str, tuple[str, str, int]] | None = None) -> list[Pending]:
        """Units to send: never stored, or stored as failed/skipped with a cause being rerun."""
        states = self._stored_states(stage, judge) if states is None else states
        pending = []
        for unit in units:
            uid = unit_id(self.job, stage, judge, unit)
            state = states.get(uid)
            if state is None:
                pending.append(Pending(uid, unit, 1))
            elif state[0] != "ok" and state[1] in self.settings.rerun_causes:
                pending.append(Pending(uid, unit, state[2] + 1))
        return pending

    def _stage_model(self, stage: Stage) -> tuple[ModelSpec, str]:
        spec = self.job.role_model(stage.role)
        return spec, ("" if stage.role == "subject" else spec.name)

    def _skip_sending(self, stage: Stage) -> bool:
        return stage.role == "subject" and self.settings.subject_stages_stored_only

    async def run_stage(self, stage: Stage, context: StageContext) -> pa.Table:
        spec, judge = self._stage_model(stage)
        units = stage.build(context)
        pending = [] if self._skip_sending(stage) else self.pending_units(stage, judge, units)
        size = max(1, self.settings.shard_size)
        shards = [pending[i:i + size] for i in range(0, len(pending), size)]
        total, finished = len(units), len(units) - len(pending)
        self._report(stage.name, finished, total)

        async def run_one(shard: list[Pending]) -> None:
            nonlocal finished
            await self.run_shard(stage, spec, judge, shard)
            finished += len(shard)
            self._report(stage.name, finished, total)

        await asyncio.gather(*(run_one(shard) for shard in shards))
        return self.stored(stage, judge)

    async def _stream_stage(self, stage: Stage, inputs: list[str], context: StageContext,
                            flow: "StageFlow") -> None:
        """Build and send this stage's units while its inputs are still arriving."""
        spec, judge = self._stage_model(stage)
        states = self._stored_states(stage, judge)
        seen: set[str] = set()
        running: list[asyncio.Future] = []
        finished = 0
        size = max(1, self.settings.shard_size)

        async def run_one(shard: list[Pending]) -> None:
            nonlocal finished
            await self.run_shard(stage, spec, judge, shard)
            finished += len(shard)
            self._report(stage.name, finished, len(seen))

        while True:
            last_round = flow.all_done(inputs)
            version = flow.version
            partial = StageContext(self.job, self.instances,
                                   {**context.results, **{name: flow.rows(name, self) for name in inputs}})
            fresh = {unit_id(self.job, stage, judge, u): u for u in stage.build(partial)}
            units = [u for uid, u in fresh.items() if uid not in seen]
            seen.update(fresh)
            pending = [] if self._skip_sending(stage) else self.pending_units(stage, judge, units, states)
            finished += len(units) - len(pending)
            for i in range(0, len(pending), size):
                running.append(asyncio.ensure_future(run_one(pending[i:i + size])))
            self._report(stage.name, finished, len(seen))
            if last_round:
                break
            await flow.wait_change(version)
        await asyncio.gather(*running)
        context.results[stage.name] = self.stored(stage, judge)

    def _report(self, stage: str, finished: int, total: int) -> None:
        if self.settings.progress is not None:
            self.settings.progress(self.job, stage, finished, total)

    async def run_shard(self, stage: Stage, spec: ModelSpec, judge: str, shard: list[Pending]) -> None:
        requests = [final_request(spec, p.unit.request) for p in shard]
        if self.settings.request_store is not None:
            self.settings.request_store.add(spec.model_id, requests)
        keys = [cache_key(spec, r, p.unit.sample) for r, p in zip(requests, shard)]
        results = await self._answers(spec, requests, keys, stage.name)
        parsed: list[Any] = [None] * len(results)
        if stage.parse is not None:
            await self._parse_with_one_retry(stage, spec, requests, results, parsed)
        elif stage.read is not None:
            parsed = [stage.read(p.unit, r.text) if r.status == "ok" else None for p, r in zip(shard, results)]
        if self.settings.cache is not None and self.settings.write_cache:
            self.settings.cache.put_many([(k, r) for k, r in zip(keys, results) if r.status == "ok"])
        rows = [self._row(stage, spec, judge, p, request, result, value)
                for p, request, result, value in zip(shard, requests, results, parsed)]
        write_shard(self.folder, stage.name, rows)
        if self.flow is not None:
            self.flow.stored(stage.name)
        await self._roll_when_due()

    async def _answers(self, spec: ModelSpec, requests: list[ChatRequest], keys: list[str],
                       stage_name: str) -> list[CallResult]:
        """Cached answers where there are any; the rest from the dispatcher."""
        cache = self.settings.cache
        hits = cache.get_many(keys) if cache is not None else {}
        missing = [i for i, key in enumerate(keys) if key not in hits]
        tag = CALL_TAG.set(call_tag(self.job, stage_name))   # gateways count this batch's calls per job and stage
        try:
            sent = await self.dispatcher.run_batch(spec, [requests[i] for i in missing]) if missing else []
        finally:
            CALL_TAG.reset(tag)
        results: list[CallResult | None] = [hits.get(key) for key in keys]
        for i, result in zip(missing, sent):
            results[i] = result
        return results  # type: ignore[return-value]

    async def _parse_with_one_retry(self, stage: Stage, spec: ModelSpec, requests: list[ChatRequest],
                                    results: list[CallResult], parsed: list[Any]) -> None:
        failed = [i for i, r in enumerate(results) if r.status == "ok" and not _try_parse(stage, r, parsed, i)]
        if self.settings.simulated and stage.example_answer is not None:
            for i in failed:
                results[i].text = stage.example_answer
            failed = [i for i in failed if not _try_parse(stage, results[i], parsed, i)]
        if not failed:
            return
        again = await self.dispatcher.run_batch(spec, [requests[i] for i in failed])
        for i, second in zip(failed, again):
            first = results[i]
            second.tries += first.tries
            second.input_tokens += first.input_tokens
            second.output_tokens += first.output_tokens
            second.cost_usd += first.cost_usd
            results[i] = second
            if second.status == "ok" and not _try_parse(stage, second, parsed, i):
                second.status, second.cause = "failed", "parse_error"

    def _row(self, stage: Stage, spec: ModelSpec, judge: str, pending: Pending, request: ChatRequest,
             result: CallResult, value: Any) -> dict[str, Any]:
        unit = pending.unit
        return {
            "unit_id": pending.uid, "attempt": pending.attempt,
            "benchmark": self.job.benchmark, "model": self.job.model.name, "condition": self.job.condition,
            "stage": stage.name, "role": stage.role, "judge": judge,
            "instance_id": unit.instance_id, "item": unit.item, "sample": unit.sample, "seed": request.seed,
            "meta_json": json.dumps(unit.meta, sort_keys=True, ensure_ascii=False),
            "request_hash": request.prompt_hash(spec.model_id),
            "provider": spec.provider, "model_id": spec.model_id, "model_version": result.model_version,
            "params_json": json.dumps(request.params, sort_keys=True),
            "status": result.status, "cause": result.cause, "error": result.error, "text": result.text,
            "parsed_json": None if value is None else json.dumps(value, ensure_ascii=False),
            "finish_reason": result.finish_reason, "truncated": result.truncated,
            "input_tokens": result.input_tokens, "output_tokens": result.output_tokens,
            "cost_usd": 0.0 if result.cached else result.cost_usd, "cached": result.cached,
            "tries": result.tries, "latency_s": result.latency_s,
            "started_at": result.started_at, "finished_at": result.finished_at,
        }


class StageFlow:
    """Which stages of one job are done, and a signal each time any stage stores rows."""

    def __init__(self, judges: dict[str, str]):
        self.judges = judges  # stage name → the judge its rows are stored under ("" for the subject)
        self.done = {name: asyncio.Event() for name in judges}
        self.version = 0
        self._changed = asyncio.Event()
        self._cache: dict[str, tuple[int, pa.Table]] = {}

    def stored(self, name: str) -> None:
        self.version += 1
        self._changed.set()

    def finish(self, name: str) -> None:
        self.done[name].set()
        self.stored(name)

    def all_done(self, names: list[str]) -> bool:
        return all(self.done[n].is_set() for n in names if n in self.done)

    async def wait_done(self, names: list[str]) -> None:
        for name in names:
            if name in self.done:
                await self.done[name].wait()

    async def wait_change(self, version: int) -> None:
        while self.version == version:
            self._changed.clear()
            await self._changed.wait()

    def rows(self, name: str, runner: "JobRunner") -> pa.Table:
        """Stored rows of stage `name` of this job (read again only after new rows were stored)."""
        cached = self._cache.get(name)
        if cached is not None and cached[0] == self.version:
            return cached[1]
        expr = (ds.field("stage") == name) & (ds.field("judge") == self.judges.get(name, ""))
        table = latest_attempts(read_rows(runner.folder, expr))
        self._cache[name] = (self.version, table)
        return table


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
