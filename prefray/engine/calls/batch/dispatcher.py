"""The batch tier as a dispatcher: models whose tier is batch answer through provider batch APIs.

`BatchTier` offers what the job runner expects of a dispatcher (`run_batch`, `close`) and hands
every interactive model to the dispatcher it wraps. For a batch model, the pending requests of all
shards and jobs are collected per model into one provider batch, submitted once it holds
`max_requests` requests or its oldest request waited `max_age_s`. Before submitting, the batch's
maximum cost at the batch price is reserved in the run budget in one piece: a refused reservation
skips all its units with cause budget and the batch is never sent. The batch id is written to
RUN_DIR/batches/ as soon as the provider accepts it; the batch is polled with backoff; its answers
are stored in that record, then returned as rows exactly like interactive answers.

On a relaunch or rerun, a request whose identity is in a stored batch is not sent again: a batch
still running is followed to its end, an ended batch's answer is used unless a stored row already
holds it. Failed, expired or canceled requests are never reused (nothing was paid): a rerun sends
them in a new batch.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prefray.engine.calls.batch.clients import BatchClient, batch_client
from prefray.engine.calls.batch.records import BatchRecord, BatchStore, delivered_after, key_of
from prefray.engine.calls.batch.results import failed, missing
from prefray.engine.calls.batch.tier import BatchSettings, batch_priced
from prefray.engine.calls.pricing import max_call_cost, skipped_for_budget
from prefray.engine.calls.providers import ProviderError
from prefray.engine.rundir.layout import RunDir
from prefray.engine.types import CallResult, ChatRequest, ModelSpec

SUBMIT_ATTEMPTS = 4
BACKOFF = 1.5

log = logging.getLogger(__name__)


@dataclass
class Item:
    request: ChatRequest
    key: str
    future: asyncio.Future
    queued_at: float = field(default_factory=time.time)


def _print_progress(counts: Counter) -> None:
    earlier = f" (+{counts['collected']} from an earlier launch)" if counts["collected"] else ""
    log.info(f"prefray: batches {counts['submitted']} submitted{earlier}, {counts['in_progress']} in progress, "
             f"{counts['done']} done")


class Lane:
    """The requests of one model waiting to be put into a batch."""

    def __init__(self, tier: BatchTier, spec: ModelSpec):
        self.tier = tier
        self.spec = spec
        self.queue: list[Item] = []
        self.timer: asyncio.Task | None = None

    def enqueue(self, request: ChatRequest, key: str) -> asyncio.Future:
        item = Item(request, key, asyncio.get_running_loop().create_future())
        self.queue.append(item)
        if len(self.queue) >= self.tier.settings.max_requests:
            self.flush()
        elif self.timer is None:
            self.timer = asyncio.ensure_future(self._flush_later())
        return item.future

    async def _flush_later(self) -> None:
        await asyncio.sleep(self.tier.settings.max_age_s)
        self.timer = None
        self.flush()

    def flush(self) -> None:
        if self.timer is not None and not self.timer.done() and self.timer is not asyncio.current_task():
            self.timer.cancel()
        self.timer = None
        size = self.tier.settings.max_requests
        while self.queue:
            chunk, self.queue = self.queue[:size], self.queue[size:]
            self.tier.spawn(self.tier.submit(self.spec, chunk))


class BatchTier:
    def __init__(self, inner: Any, run_dir: RunDir, settings: BatchSettings | None = None,
                 report: Callable[[Counter], None] | None = _print_progress):
        self.inner = inner
        self.budget = getattr(inner, "budget", None)
        self.settings = settings or BatchSettings()
        self.store = BatchStore(run_dir)
        self.run_dir = run_dir
        self.report = report
        self.lanes: dict[tuple[str, str, str], Lane] = {}
        self.clients: dict[tuple[str, str, str], BatchClient] = {}
        self.watchers: dict[str, asyncio.Task] = {}
        self.tasks: set[asyncio.Task] = set()
        self.counts: Counter = Counter()
        self.loaded = False
        self.stored: dict[str, list[tuple[BatchRecord, str]]] = defaultdict(list)
        self.delivered: dict[str, float] = {}
        self.claimed: set[tuple[str, str]] = set()

    # -- the dispatcher interface ----------------------------------------------------------------
    async def run_batch(self, spec: ModelSpec, requests: list[ChatRequest]) -> list[CallResult]:
        if spec.tier != "batch":
            return await self.inner.run_batch(spec, requests)
        self._load()
        return list(await asyncio.gather(*(self._answer(spec, r) for r in requests)))

    async def close(self) -> None:
        for lane in self.lanes.values():
            if lane.timer is not None:
                lane.timer.cancel()
        for task in [*self.tasks, *self.watchers.values()]:
            task.cancel()
        for client in self.clients.values():
            try:
                await client.close()
            except Exception:  # noqa: BLE001 - a client that cannot close cleanly holds nothing we need
                pass
        await self.inner.close()

    # -- stored batches --------------------------------------------------------------------------
    def _load(self) -> None:
        """Once per launch: the run's stored batches, and what its rows already hold."""
        if self.loaded:
            return
        self.loaded = True
        records = sorted(self.store.load().values(), key=lambda r: r.created_at)
        for record in records:
            for cid, key in record.entries.items():
                self.stored[key].append((record, cid))
        if records:
            self.delivered = delivered_after(self.run_dir)

    def _reusable(self, key: str) -> tuple[BatchRecord, str] | None:
        for record, cid in self.stored.get(key, ()):
            if (record.batch_id, cid) in self.claimed:
                continue
            if record.ended:
                result = record.result(cid)
                if result is None or result.status != "ok" or self.delivered.get(key, -1.0) >= result.finished_at:
                    continue  # not paid, or already in a stored row
            self.claimed.add((record.batch_id, cid))
            return record, cid
        return None

    async def _answer(self, spec: ModelSpec, request: ChatRequest) -> CallResult:
        key = key_of(spec, request)
        found = self._reusable(key)
        if found is None:
            return await self._lane(spec).enqueue(request, key)
        record, cid = found
        if not record.ended:
            self.counts["collected"] += record.batch_id not in self.watchers
            record = await self._follow(spec, record)
        result = record.result(cid) or missing(record.created_at, time.time())
        if self.budget is not None and result.cost_usd:
            await self.budget.settle.remote(0.0, result.cost_usd)  # paid when the batch ran: count it here
        return result

    # -- submitting and following ----------------------------------------------------------------
    def _lane(self, spec: ModelSpec) -> Lane:
        ident = (spec.endpoint_key, spec.model_id, spec.name)
        if ident not in self.lanes:
            self.lanes[ident] = Lane(self, spec)
        return self.lanes[ident]

    def _client(self, spec: ModelSpec) -> BatchClient:
        ident = (spec.endpoint_key, spec.model_id, spec.name)
        if ident not in self.clients:
            api_key = os.environ.get(spec.api_key_env, "") if spec.api_key_env else "prefray-local"
            self.clients[ident] = batch_client(spec, api_key)
        return self.clients[ident]

    def spawn(self, coroutine: Any) -> None:
        task = asyncio.ensure_future(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _changed(self) -> None:
        if self.report is not None:
            self.report(self.counts)

    async def submit(self, spec: ModelSpec, items: list[Item]) -> None:
        """Reserve, submit, record, follow, answer: every item's future is resolved, whatever happens."""
        try:
            results = await self._submit(spec, items)
            for item, result in zip(items, results):
                if not item.future.done():
                    item.future.set_result(result)
        except BaseException as exc:  # noqa: BLE001 - the waiting shards must learn of it
            for item in items:
                if not item.future.done():
                    item.future.set_exception(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
            if not isinstance(exc, Exception):
                raise

    async def _submit(self, spec: ModelSpec, items: list[Item]) -> list[CallResult]:
        started = min(item.queued_at for item in items)
        reserved = sum(max_call_cost(batch_priced(spec), item.request) for item in items)
        if self.budget is not None and not await self.budget.reserve.remote(reserved):
            return [skipped_for_budget(started) for _ in items]
        custom_ids = _custom_ids([item.key for item in items])
        try:
            submitted = await self._send(spec, list(zip(custom_ids, (item.request for item in items))))
        except ProviderError as exc:
            if self.budget is not None:
                await self.budget.settle.remote(reserved, 0.0)
            now = time.time()
            return [failed(exc.cause, f"batch not accepted: {exc}", started, now) for _ in items]
        record = BatchRecord(batch_id=submitted.batch_id, provider=spec.provider, endpoint_key=spec.endpoint_key,
                             model_id=spec.model_id, created_at=time.time(), input_file_id=submitted.input_file_id,
                             entries={cid: item.key for cid, item in zip(custom_ids, items)})
        self.store.save(record)  # before anything waits: a relaunch finds it
        self.claimed.update((record.batch_id, cid) for cid in custom_ids)
        self.counts["submitted"] += 1
        record = await self._follow(spec, record)
        results = [record.result(cid) or missing(started, time.time()) for cid in custom_ids]
        if self.budget is not None:
            await self.budget.settle.remote(reserved, sum(r.cost_usd for r in results))
        return results

    async def _send(self, spec: ModelSpec, lines: list[tuple[str, ChatRequest]]) -> Any:
        if spec.serve and hasattr(self.inner, "for_model"):
            await self.inner.for_model(spec)  # starts the locally served endpoint if it is not up
        client = self._client(spec)
        for attempt in range(1, SUBMIT_ATTEMPTS + 1):
            try:
                return await client.submit(lines)
            except ProviderError as exc:
                if not exc.retryable or attempt == SUBMIT_ATTEMPTS:
                    raise
                await asyncio.sleep(min(spec.max_wait_s, exc.retry_after or BACKOFF ** attempt))
        raise AssertionError("unreachable")

    async def _follow(self, spec: ModelSpec, record: BatchRecord) -> BatchRecord:
        """Wait for the batch to end (one poller per batch, however many wait on it)."""
        if record.batch_id not in self.watchers:
            self.watchers[record.batch_id] = asyncio.ensure_future(self._poll(spec, record))
        return await asyncio.shield(self.watchers[record.batch_id])

    async def _poll(self, spec: ModelSpec, record: BatchRecord) -> BatchRecord:
        client = self._client(spec)
        wait = self.settings.poll_s
        self.counts["in_progress"] += 1
        self._changed()
        custom_ids = list(record.entries)
        while True:
            try:
                progress = await client.progress(record.batch_id)
                if progress.ended:
                    results = await client.results(record.batch_id, custom_ids, record.created_at)
                    status = progress.status
                    break
            except ProviderError as exc:
                if not exc.retryable:
                    now = time.time()
                    results = {cid: failed(exc.cause, f"batch {record.batch_id} unreadable: {exc}",
                                           record.created_at, now) for cid in custom_ids}
                    status = "unreadable"
                    break
            await asyncio.sleep(wait)
            wait = min(self.settings.poll_max_s, wait * BACKOFF)
        self.store.finish(record, results, status, time.time())
        self.counts["in_progress"] -= 1
        self.counts["done"] += 1
        self._changed()
        return record


def _custom_ids(keys: list[str]) -> list[str]:
    """Ids unique within a batch, of the characters both providers accept: key prefix + occurrence."""
    seen: Counter = Counter()
    out = []
    for key in keys:
        out.append(f"{key[:40]}-{seen[key]}")
        seen[key] += 1
    return out
