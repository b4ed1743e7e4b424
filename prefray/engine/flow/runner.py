"""Run the jobs of a sweep concurrently: stages in order within a job, shards in parallel.

The driver plans units, skips those already stored (resume), answers what it can from the
response cache, hands the rest of each shard to the gateway of the model that answers it, parses
answers where a stage asks for it, and writes one Parquet shard per batch as soon as it returns.
Those small shards are rolled into large files every `compact_every` shards and when the job ends.

The driver's memory does not grow with the number of calls: a stage's units are taken from its
`build` as shards are sent (at most `inflight_shards` shards of a stage are in flight), streaming
stages see only the rows stored since their last round, and stored rows stay on disk until a
stage that needs all of them starts.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from prefray.engine.benchmark import Job, ParseError, Stage, StageContext
from prefray.engine.calls.dispatch import CALL_RANK, CALL_TAG, Dispatcher
from prefray.engine.calls.output_budget import final_request
from prefray.engine.flow.critical import LaneEstimate, stage_ranks
from prefray.engine.flow.progress import call_tag
from prefray.engine.results.request_store import RequestStore
from prefray.engine.rundir.cache import ResponseCache, cache_key
from prefray.engine.rundir.layout import RunDir
from prefray.engine.rundir.shards import (
    BEST_ROW_COLUMNS,
    SHARD_SCHEMA,
    compact_folder,
    latest_attempts,
    read_rows,
    write_shard,
)
from prefray.engine.sweep import PreparedJob, Sweep
from prefray.engine.types import CallResult, Cause, ChatRequest, ModelSpec, WorkUnit, stable_id

ProgressFn = Callable[[Job, str, int, int], None]
# Calls of one stage in flight: this many times its lane's ceiling (`max_concurrency`), so the lane
# never waits for the driver; and never fewer than MIN_INFLIGHT_SHARDS shards.
INFLIGHT_MARGIN = 2
MIN_INFLIGHT_SHARDS = 4
# Stored rows a streaming stage builds units from at once when it resumes.
RESUME_CHUNK_ROWS = 2048
# Rows a streaming stage may have waiting before the stage that stores them sends no more shards:
# enough to keep the streaming stage's lane busy, few enough to keep the driver's memory flat.
FEED_BACKLOG_ROWS = 2048


# A shard of a rate-limited lane holds about this many seconds of the lane's sends: its answers,
# and the next stage's first units, come back a second after its first call went out, not
# shard_size ÷ rate later (16 units at 300 rpm: 3.2 s).
SHARD_PACE_S = 1.0
# Units per shard when run.shard_size is left unset: a lane's max_concurrency within these bounds
# (every unit of a shard is answered in about one call's latency, so streaming waits no longer; a
# wide fast lane makes fewer files and gateway calls, the driver's and the gateways' main cost per
# call at zero latency), and at most SHARD_PACE_S of a rate-limited lane's sends; the batch tier
# takes the least.
AUTO_SHARD_MIN, AUTO_SHARD_MAX = 16, 64


def shard_units(spec: ModelSpec, shard_size: int | None) -> int:
    """Units per shard of a stage answered by `spec`: `run.shard_size` if set (else AUTO_SHARD_*),
    fewer on a rate-limited lane (about SHARD_PACE_S of its sends)."""
    if shard_size is not None:
        size = max(1, shard_size)
    elif spec.tier == "batch":
        size = AUTO_SHARD_MIN
    else:
        size = min(AUTO_SHARD_MAX, max(AUTO_SHARD_MIN, spec.max_concurrency))
    if spec.tier == "batch" or not spec.rpm:
        return size
    return max(1, min(size, math.floor(spec.rpm / 60.0 * SHARD_PACE_S)))


def inflight_shards(spec: ModelSpec, shard_size: int) -> int | None:
    """Shards of one stage sent at once (None: no bound, for the batch tier, which gathers as many
    calls as it can into one provider batch)."""
    if spec.tier == "batch":
        return None
    return max(MIN_INFLIGHT_SHARDS, math.ceil(INFLIGHT_MARGIN * spec.max_concurrency / max(1, shard_size)))


@dataclass
class Outlets:
    """The live objects a runner writes to besides its shards: progress, the response cache, the
    request store (every distinct request sent, under RUN_DIR/requests/) and the turn every job
    takes to compact its folder: one folder at a time, so jobs that end together do not each hold
    a compaction's Arrow buffers in the driver at once (they run on threads)."""

    requests: RequestStore | None
    progress: ProgressFn | None = None
    cache: ResponseCache | None = None
    compacting: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(1))

    @classmethod
    def of(cls, run_dir: RunDir, progress: ProgressFn | None = None, cache: ResponseCache | None = None) -> Outlets:
        return cls(RequestStore(run_dir), progress, cache)


def unit_id(job: Job, stage: Stage, judge: str, unit: WorkUnit) -> str:
    return stable_id(job.benchmark, job.condition, job.model.name, stage.name, judge,
                     unit.instance_id, unit.item, unit.sample)


@dataclass
class Pending:
    uid: str
    unit: WorkUnit
    attempt: int


class JobRunner:
    def __init__(self, prepared: PreparedJob, sweep: Sweep, outlets: Outlets, dispatcher: Dispatcher,
                 lanes: LaneEstimate | None = None):
        job = self.job = prepared.job
        self.benchmark = prepared.benchmark
        self.instances = prepared.instances
        self.config, self.policy, self.outlets = sweep.run, sweep.policy, outlets
        self.dispatcher = dispatcher
        self.folder = sweep.run_dir.job(job.benchmark, job.model.name, job.condition)
        # Resuming (rows stored already): every unit this launch builds, stored or sent, by stage and
        # judge, so the metrics of those stages cover what it asked for, not rows of a larger limit or
        # more samples stored before (another judge's stored verdicts are not this launch's to narrow).
        self.asked: dict[tuple[str, str], set[str]] | None = {} if self.folder.is_dir() else None
        self.samples: int | None = job.settings.samples
        self.flow: StageFlow | None = None
        self.lanes = lanes or LaneEstimate()   # the lanes' estimate the stages are ranked by
        self.ranks: dict[str, int] = {}   # each stage's place on the sweep's critical path (flow/critical.py)
        self._shards_since_roll = 0
        self._roll: asyncio.Future | None = None   # the roll of small shards under way, if any

    async def run(self) -> None:
        """Every stage as its own task: a stage starts when the rows it needs are stored.

        A `per_unit` stage builds and sends units as soon as its inputs' rows arrive (a judge unit
        goes out when its answer is stored); any other stage waits until all its inputs are done.
        """
        stages = self.benchmark.stages(self.job)
        self.ranks = self.stage_ranks(stages)
        flow = self.flow = StageFlow({s.name: self._stage_model(s)[1] for s in stages})
        tasks = [asyncio.ensure_future(self._run_stage_when_ready(stage, stages[:i], flow))
                 for i, stage in enumerate(stages)]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            if self._roll is not None:
                await asyncio.wait([self._roll])   # a thread is not stopped part way
        if self._roll is not None:
            self._roll.result()   # a roll that failed stops the job
        if self.config.compact:
            await self._compact(small_only=False)

    async def _compact(self, small_only: bool) -> None:
        """Compact this job's folder on a thread, when no other job is compacting (Outlets.compacting)."""
        async with self.outlets.compacting:
            await asyncio.to_thread(compact_folder, self.folder, small_only)

    def _roll_when_due(self) -> None:
        """Start rolling the folder's small shards into a large file once `compact_every` were
        written (in the background: writers go on adding shards meanwhile)."""
        self._shards_since_roll += 1
        every = self.config.compact_every
        if not self.config.compact or every <= 0 or self._shards_since_roll < every:
            return
        if self._roll is not None:
            if not self._roll.done():
                return
            self._roll.result()   # a roll that failed stops the job here
        self._shards_since_roll = 0
        self._roll = asyncio.ensure_future(self._compact(small_only=True))

    async def _run_stage_when_ready(self, stage: Stage, earlier: list[Stage], flow: StageFlow) -> None:
        inputs = [s.name for s in earlier] if stage.inputs is None else list(stage.inputs)
        try:
            if stage.per_unit and inputs:
                await self._stream_stage(stage, inputs, flow)
            else:
                await flow.wait_done(inputs)
                # the inputs' stored rows are read now, and let go once this stage's units are sent
                context = StageContext(self.job, self.instances, {name: flow.rows(name, self) for name in inputs})
                await self.run_stage(stage, context)
        finally:
            flow.finish(stage.name)

    def stored(self, stage: Stage, judge: str, columns: list[str] | None = None) -> pa.Table:
        """The best stored row of each unit of this stage (only `columns` and what picks the best, if given)."""
        expr = (ds.field("stage") == stage.name) & (ds.field("judge") == judge)
        wanted = None if columns is None else list(dict.fromkeys(BEST_ROW_COLUMNS + columns))
        return latest_attempts(read_rows(self.folder, expr, wanted))

    def _stored_states(self, stage: Stage, judge: str) -> dict[str, tuple[str, str, int]]:
        table = self.stored(stage, judge, ["cause"]).select(["unit_id", "status", "cause", "attempt"])
        return {u: (st, c, a) for u, st, c, a in zip(*(table[k].to_pylist() for k in table.column_names))}

    def _pending(self, stage: Stage, judge: str, units: Iterable[WorkUnit],
                 states: dict[str, tuple[str, str, int]]) -> Iterator[Pending | None]:
        """Per unit, in order: its Pending if it is to be sent, else None (stored already)."""
        asked = None if self.asked is None else self.asked.setdefault((stage.name, judge), set())
        for unit in units:
            uid = unit_id(self.job, stage, judge, unit)
            if asked is not None:
                asked.add(uid)
            state = states.get(uid)
            if state is None:
                yield Pending(uid, unit, 1)
            elif state[0] != "ok" and state[1] in self.policy.resend_causes:
                yield Pending(uid, unit, state[2] + 1)
            else:
                yield None

    def stage_ranks(self, stages: list[Stage]) -> dict[str, int]:
        """Each stage's rank on its lane: the slowest lane its rows lead to, then its chain."""
        return stage_ranks(stages, lambda stage: self.lanes.tier(self._stage_model(stage)[0]))

    def _stage_model(self, stage: Stage) -> tuple[ModelSpec, str]:
        spec = self.job.role_model(stage.role)
        return spec, ("" if stage.role == "subject" else spec.name)

    def _skip_sending(self, stage: Stage) -> bool:
        return stage.role == "subject" and self.policy.subject_stored_only

    async def run_stage(self, stage: Stage, context: StageContext) -> None:
        """Send a stage's units shard by shard as its `build` yields them, a bounded number at once.

        A `build` that returns a list is counted as it is; one that yields units is counted in a
        first pass (units are not kept), so progress shows the stage's total from the start.
        """
        spec, judge = self._stage_model(stage)
        states = self._stored_states(stage, judge)
        skip = self._skip_sending(stage)
        built = stage.build(context)
        total, to_send = self._count(stage, judge, built, states)
        to_send = 0 if skip else to_send
        if not isinstance(built, list):
            built = stage.build(context)   # the counting pass kept none of its units
        self._report(stage.name, total - to_send, total)
        if skip:
            return
        sender = ShardSender(self, stage, spec, judge, total - to_send, lambda: total)
        units = handed_over(built) if isinstance(built, list) else built
        del built   # a unit sent is let go (the list no longer holds it)
        await sender.send(p for p in self._pending(stage, judge, units, states) if p is not None)
        await sender.drain()

    def _count(self, stage: Stage, judge: str, units: Iterable[WorkUnit],
               states: dict[str, tuple[str, str, int]]) -> tuple[int, int]:
        """How many units `units` holds, and how many of them are to be sent."""
        total = to_send = 0
        for pending in self._pending(stage, judge, units, states):
            total += 1
            to_send += pending is not None
        return total, to_send

    async def _stream_stage(self, stage: Stage, inputs: list[str], flow: StageFlow) -> None:
        """Build and send this stage's units while its inputs are still arriving: each round builds
        units from the input rows stored since the last round only (rows stored before this launch,
        on resume, in chunks)."""
        spec, judge = self._stage_model(stage)
        states = self._stored_states(stage, judge)
        feed = flow.subscribe(inputs)   # rows stored from now on; those stored before are read below, at once
        try:
            await self._send_as_rows_arrive(stage, spec, judge, states,
                                            {name: flow.rows(name, self) for name in inputs}, feed)
        finally:
            flow.unsubscribe(feed)

    async def _send_as_rows_arrive(self, stage: Stage, spec: ModelSpec, judge: str,
                                   states: dict[str, tuple[str, str, int]], earlier: dict[str, pa.Table],
                                   feed: RowFeed) -> None:
        """With one input, each round builds from the new rows only (a unit needs its own row). With
        several, a unit may pair rows that arrive in different rounds: each round builds from every
        row so far and sends the units not built before."""
        built = 0
        sender = ShardSender(self, stage, spec, judge, 0, lambda: built)
        skip = self._skip_sending(stage)
        joined = len(earlier) > 1
        seen: set[str] = set()
        batches: Iterable[dict[str, pa.Table]] = [earlier] if joined else _chunks(earlier)
        so_far = earlier if joined else {}
        del earlier   # one input: read in chunks, then let go
        while True:
            for rows in batches:
                units = stage.build(StageContext(self.job, self.instances, rows))
                if joined:
                    fresh = {unit_id(self.job, stage, judge, u): u for u in units}
                    units = [u for uid, u in fresh.items() if uid not in seen]
                    seen.update(fresh)
                for p in self._pending(stage, judge, units, states):
                    built += 1
                    if p is None or skip:
                        sender.finished += 1
                    else:
                        await sender.add(p)
                sender.report()
            new = await feed.next_rows()
            if not new:
                break
            if joined:
                so_far = {name: latest_attempts(pa.concat_tables([so_far[name], new[name]])) for name in so_far}
                batches = [so_far]
            else:
                batches = [new]
        await sender.drain()

    def _report(self, stage: str, finished: int, total: int) -> None:
        if self.outlets.progress is not None:
            self.outlets.progress(self.job, stage, finished, total)

    async def run_shard(self, stage: Stage, spec: ModelSpec, judge: str, shard: list[Pending]) -> None:
        requests = [final_request(spec, p.unit.request) for p in shard]
        self.keep_requests(spec, requests)
        keys = [cache_key(spec, r, p.unit.sample) for r, p in zip(requests, shard)]
        rank = CALL_RANK.set(self.ranks.get(stage.name, 0))   # the lane serves higher ranks first
        try:
            results = await self._answers(spec, requests, keys, stage.name)
            parsed: list[Any] = [None] * len(results)
            if stage.parse is not None:
                await self._parse_with_one_retry(stage, spec, requests, results, parsed)
        finally:
            CALL_RANK.reset(rank)
        if stage.parse is None and stage.read is not None:
            parsed = [stage.read(p.unit, r.text) if r.status == "ok" else None for p, r in zip(shard, results)]
        self.keep_answers(keys, results)
        rows = [stored_row(self.job, stage, spec, judge, p.uid, p.unit, p.attempt, request, result, value)
                for p, request, result, value in zip(shard, requests, results, parsed)]
        write_shard(self.folder, stage.name, rows)
        if self.flow is not None:
            self.flow.stored(stage.name, rows)
        self._roll_when_due()

    def keep_requests(self, spec: ModelSpec, requests: list[ChatRequest]) -> None:
        """Every distinct request sent is kept in the run's request store."""
        if self.outlets.requests is not None:
            self.outlets.requests.add(spec.model_id, requests)

    def keep_answers(self, keys: list[str], results: list[CallResult]) -> None:
        """Answers are kept in the response cache (when the run has one)."""
        if self.outlets.cache is not None:
            self.outlets.cache.put_many([(k, r) for k, r in zip(keys, results) if r.status == "ok"])

    def unparsed(self, stage: Stage, results: list[CallResult], parsed: list[Any], failed: list[int]) -> list[int]:
        """Of the answers `stage.parse` could not read, those to ask again (all of them here)."""
        return failed

    async def _answers(self, spec: ModelSpec, requests: list[ChatRequest], keys: list[str],
                       stage_name: str) -> list[CallResult]:
        """Cached answers where there are any; the rest from the dispatcher."""
        cache = self.outlets.cache
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
        failed = [i for i, r in enumerate(results) if r.status == "ok" and not try_parse(stage, r, parsed, i)]
        failed = self.unparsed(stage, results, parsed, failed)
        if not failed:
            return
        again = await self.dispatcher.run_batch(spec, [requests[i] for i in failed])
        for i, second in zip(failed, again):
            first = results[i]
            second.tries += first.tries
            second.input_tokens += first.input_tokens
            second.output_tokens += first.output_tokens
            second.cost_usd += first.cost_usd
            second.cache_read_tokens += first.cache_read_tokens
            second.cache_write_tokens += first.cache_write_tokens
            second.cache_saved_usd += first.cache_saved_usd
            results[i] = second
            if second.status == "ok" and not try_parse(stage, second, parsed, i):
                second.status, second.cause = "failed", Cause.PARSE_ERROR


def stored_row(job: Job, stage: Stage, spec: ModelSpec, judge: str, uid: str, unit: WorkUnit, attempt: int,
               request: ChatRequest, result: CallResult, value: Any) -> dict[str, Any]:
    """The row (SHARD_SCHEMA) stored for one answered unit: by the runner, and by the counting plan
    for the rows later stages build from. A cached answer cost nothing and saved nothing."""
    return {
        "unit_id": uid, "attempt": attempt,
        "benchmark": job.benchmark, "model": job.model.name, "condition": job.condition,
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
        "cache_read_tokens": result.cache_read_tokens, "cache_write_tokens": result.cache_write_tokens,
        "cache_saved_usd": 0.0 if result.cached else result.cache_saved_usd,
        "tries": result.tries, "latency_s": result.latency_s,
        "started_at": result.started_at, "finished_at": result.finished_at,
    }


class StageFlow:
    """Which stages of one job are done; the rows each stage stores, handed to the streaming stages
    that read them (each takes them once, then they are let go). A stage whose rows wait unread
    in quantity holds its next shard back (`room`), so rows never pile up in the driver."""

    def __init__(self, judges: dict[str, str]):
        self.judges = judges  # stage name → the judge its rows are stored under ("" for the subject)
        self.done = {name: asyncio.Event() for name in judges}
        self.feeds: list[RowFeed] = []
        self.taken = asyncio.Event()

    def stored(self, name: str, rows: list[dict[str, Any]] | None = None) -> None:
        readers = [feed for feed in self.feeds if name in feed.waiting]
        table = pa.Table.from_pylist(rows, schema=SHARD_SCHEMA) if rows and readers else None
        for feed in readers:
            feed.stored(name, table)

    def finish(self, name: str) -> None:
        self.done[name].set()
        self.stored(name)

    def all_done(self, names: list[str]) -> bool:
        return all(self.done[n].is_set() for n in names if n in self.done)

    async def wait_done(self, names: list[str]) -> None:
        for name in names:
            if name in self.done:
                await self.done[name].wait()

    def subscribe(self, names: list[str]) -> RowFeed:
        feed = RowFeed(self, names)
        self.feeds.append(feed)
        return feed

    def unsubscribe(self, feed: RowFeed) -> None:
        if feed in self.feeds:
            self.feeds.remove(feed)
        self.taken.set()

    async def room(self, name: str) -> None:
        """Wait while a streaming stage has FEED_BACKLOG_ROWS or more of stage `name`'s rows unread."""
        while any(feed.backlog(name) >= FEED_BACKLOG_ROWS for feed in self.feeds):
            self.taken.clear()
            await self.taken.wait()

    def rows(self, name: str, runner: JobRunner) -> pa.Table:
        """Stored rows of stage `name` of this job, read from disk: of the samples it asks for (a resume
        with fewer samples builds no later-stage unit from the others)."""
        expr = (ds.field("stage") == name) & (ds.field("judge") == self.judges.get(name, ""))
        if runner.samples is not None:
            expr = expr & (ds.field("sample") < runner.samples)
        return latest_attempts(read_rows(runner.folder, expr))


class RowFeed:
    """The rows of some stages stored since a streaming stage last looked (Arrow tables)."""

    def __init__(self, flow: StageFlow, names: list[str]):
        self.flow = flow
        self.names = names
        self.waiting: dict[str, list[pa.Table]] = {name: [] for name in names}
        self.changed = asyncio.Event()

    def stored(self, name: str, table: pa.Table | None) -> None:
        if table is not None:
            self.waiting[name].append(table)
        self.changed.set()

    def backlog(self, name: str) -> int:
        return sum(t.num_rows for t in self.waiting.get(name, ()))

    async def next_rows(self) -> dict[str, pa.Table]:
        """Rows stored since the last call, per stage; waits for some. Empty once the stages are
        done and every row was taken."""
        while True:
            self.changed.clear()
            inputs_done = self.flow.all_done(self.names)
            if any(self.waiting.values()):
                taken = {name: latest_attempts(pa.concat_tables(tables)) if tables else SHARD_SCHEMA.empty_table()
                         for name, tables in self.waiting.items()}
                self.waiting = {name: [] for name in self.names}
                self.flow.taken.set()
                return taken
            if inputs_done:
                return {}
            await self.changed.wait()


def handed_over(items: list[Any]) -> Iterator[Any]:
    """The items of `items` in order, each taken out of the list as it is handed over (the list is
    emptied): a stage's built units are let go as they are sent, not when the whole stage is."""
    items.reverse()
    while items:
        yield items.pop()


def _chunks(tables: dict[str, pa.Table]) -> Iterator[dict[str, pa.Table]]:
    """One stage's stored rows in slices (a streaming stage's units each need only their own row)."""
    (name, table), = tables.items()
    for start in range(0, table.num_rows, RESUME_CHUNK_ROWS):
        yield {name: table.slice(start, RESUME_CHUNK_ROWS)}


class ShardSender:
    """Sends one stage's units in shards, with at most `inflight_shards` shards in flight."""

    def __init__(self, runner: JobRunner, stage: Stage, spec: ModelSpec, judge: str, finished: int,
                 total: Callable[[], int]):
        self.runner, self.stage, self.spec, self.judge = runner, stage, spec, judge
        self.size = shard_units(spec, runner.config.shard_size)
        bound = inflight_shards(spec, self.size)
        self.slots = asyncio.Semaphore(bound) if bound is not None else None
        self.finished = finished
        self.total = total
        self.shard: list[Pending] = []
        self.running: set[asyncio.Future] = set()
        self.error: BaseException | None = None

    async def send(self, pending: Iterable[Pending]) -> None:
        for p in pending:
            await self.add(p)

    async def add(self, pending: Pending) -> None:
        if self.spec.samples_per_request > 1:
            # a unit's samples go to one shard (one request asks several: engine/calls/samples.py)
            if len(self.shard) >= self.size and _unit_of(pending) != _unit_of(self.shard[-1]):
                await self.flush()
            self.shard.append(pending)
            return
        self.shard.append(pending)
        if len(self.shard) >= self.size:
            await self.flush()

    async def flush(self) -> None:
        if not self.shard:
            return
        shard, self.shard = self.shard, []
        if self.error is not None:
            raise self.error
        if self.runner.flow is not None:
            await self.runner.flow.room(self.stage.name)
        if self.slots is not None:
            await self.slots.acquire()
        task = asyncio.ensure_future(self._run(shard))
        self.running.add(task)
        task.add_done_callback(self.running.discard)

    async def _run(self, shard: list[Pending]) -> None:
        try:
            await self.runner.run_shard(self.stage, self.spec, self.judge, shard)
        except asyncio.CancelledError:
            raise
        except Exception as exc:   # kept, and raised by the next flush or by drain: a run interrupted
            self.error = self.error or exc   # before those would leave it unretrieved (a stray traceback)
            return
        except BaseException as exc:
            self.error = self.error or exc
            raise
        finally:
            if self.slots is not None:
                self.slots.release()
        self.finished += len(shard)
        self.report()

    def report(self) -> None:
        self.runner._report(self.stage.name, self.finished, self.total())

    async def drain(self) -> None:
        """Send the last partial shard and wait for every shard (the first error is raised)."""
        await self.flush()
        while self.running:
            await asyncio.gather(*list(self.running))
        if self.error is not None:
            raise self.error


def _unit_of(pending: Pending) -> tuple[str, str]:
    """The unit a pending sample belongs to (its samples differ only in `sample`)."""
    return pending.unit.instance_id, pending.unit.item


def try_parse(stage: Stage, result: CallResult, parsed: list[Any], index: int) -> bool:
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
