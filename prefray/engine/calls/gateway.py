"""Gateways: Ray actors sending one model id's calls on a provider endpoint and API key, shared by
every job of a sweep: one process per model id, or several for a lane faster than one core
(`lane_processes`; the driver sends each batch to the least busy, engine/calls/dispatch.py).

A gateway owns the concurrency cap and the retries of its model's lane, and paces it by the
endpoint's rate limits (a limiter actor per endpoint and key, shared by its models' gateways). It takes a
whole shard per call (an actor call costs ~0.5 ms, an HTTP call far more) and answers every
request with a CallResult: a failed call is a row with a cause, never an exception. Each batch
carries its job and stage tag; a lane serves the tags' waiting calls in turns (limits.FairTurns).
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
import time
from typing import Any

import ray

from prefray.engine.calls.cache_order import WarmPrefixes, prefix_first
from prefray.engine.calls.lanegate import PROBE_PATIENCE_S, LaneGate, probe_calls_for, refined_cause
from prefray.engine.calls.limits import ModelLimits, SharedBuckets, idle_seconds, limiter_name
from prefray.engine.calls.pricing import Calibration, cache_saving, call_cost, max_call_cost, skipped_for_budget
from prefray.engine.calls.providers import ProviderError, build_provider
from prefray.engine.calls.providers.base import TRUNCATION_REASONS
from prefray.engine.calls.retry import RetryPolicy
from prefray.engine.calls.samples import sample_groups, split_choices, with_n
from prefray.engine.rundir.journal import AnswerJournal, unfinished_batches
from prefray.engine.rundir.layout import RunDir
from prefray.engine.rundir.paid import SENT, PaidLog
from prefray.engine.types import CallResult, ChatRequest, ModelSpec

NAMESPACE = "prefray"
# Answers that mean "slow down": the lane halves its in-flight window.
PUSHBACK_CAUSES = frozenset({"rate_limit", "server_error"})
# Requests per minute one gateway process is given at most. Measured, a process spends 2.5-3.6 ms of
# CPU per call (bench/harness_ceiling.py, bench/whole_suite.py: Ray, the HTTP exchange, the ledger;
# the provider's part ~1 ms, bench/provider_cpu.py): 100 calls/s is a quarter to a third of a core,
# leaving room for long prompts and answers.
PROCESS_RPM = 6000


def lane_processes(spec: ModelSpec) -> int:
    """Gateway processes sending one model's calls: its `gateway_processes`, or more when its rpm
    asks for more than PROCESS_RPM each; never more than its in-flight ceiling."""
    by_rate = math.ceil(spec.rpm / PROCESS_RPM) if spec.rpm else 1
    return max(1, min(spec.max_concurrency, max(spec.gateway_processes, by_rate)))


class _Lane:
    """Everything the gateway keeps for one model id: its client, limits and retry policy."""

    def __init__(self, spec: ModelSpec, api_key: str, shared: SharedBuckets | None = None):
        self.spec = spec
        self.api_key = api_key
        self.provider = build_provider(spec, api_key)
        processes = lane_processes(spec)   # the lane's ceiling is split among its processes
        self.limits = ModelLimits(spec.rpm, spec.tpm, math.ceil(spec.max_concurrency / processes), shared, processes,
                                  spec.rpm_window_s)
        self.policy = RetryPolicy(max_attempts=spec.max_attempts, max_wait_s=spec.max_wait_s)
        self.gate = LaneGate(probe_calls_for(spec.rpm, processes, spec.rpm_window_s))
        self.calibration = Calibration()
        self.paid: PaidLog | None = None   # the run's ledger of tries sent (set by the gateway)
        self.journal: AnswerJournal | None = None   # the run's journal of answers (set by the gateway)
        self.driver = DriverWatch()   # the gateway's: once its driver is gone, nothing more is sent
        self.warm = WarmPrefixes(spec)   # prefixes sent within the prompt cache's lifetime (cache_order.py)

    def _redact(self, text: str) -> str:
        """Error texts are stored on rows: never with the API key in them."""
        return text.replace(self.api_key, "***") if len(self.api_key) >= 4 else text

    async def call(self, request: ChatRequest, budget: Any = None, tag: str = "", batch: str = "",
                   rank: int = 0) -> CallResult:
        """One unit through the lane's gate (fail fast on a hopeless lane); `tag` (job and stage)
        is the queue it waits in for its fair turn on the lane, `rank` its stage's place on the
        critical path (limits.FairTurns); `batch` the actor call it belongs to."""
        started = time.time()
        probe = await self.gate.enter(patience=PROBE_PATIENCE_S if budget is None else None)
        if self.gate.stopped:
            return _lane_stopped(self.gate, started)
        result = None
        try:
            result = await self._paid_call(request, budget, started, calibrating=probe, tag=tag, rank=rank)
            if self.journal is not None and result.status == "ok":
                self.journal.record(self.spec.model_id, request, result, batch)
            return result
        finally:
            await self.gate.leave(probe, result.cause if result is not None and result.status == "failed" else "",
                                  counted=result is not None)

    async def call_samples(self, requests: list[ChatRequest], budget: Any = None, tag: str = "",
                           batch: str = "", rank: int = 0) -> list[CallResult]:
        """The samples of one unit (same prompt, consecutive seeds) in one request asking n of them
        (engine/calls/samples.py), through the lane's gate like one call."""
        if len(requests) == 1:
            return [await self.call(requests[0], budget, tag, batch, rank)]
        started = time.time()
        probe = await self.gate.enter(patience=PROBE_PATIENCE_S if budget is None else None)
        if self.gate.stopped:
            return [_lane_stopped(self.gate, started) for _ in requests]
        result = None
        try:
            result = await self._paid_call(with_n(requests[0], len(requests)), budget, started, calibrating=probe,
                                           tag=tag, rank=rank)
            results = split_choices(self.spec, result, len(requests))
            if self.journal is not None:
                for request, one in zip(requests, results):
                    if one.status == "ok":
                        self.journal.record(self.spec.model_id, request, one, batch)
            return results
        finally:
            await self.gate.leave(probe, result.cause if result is not None and result.status == "failed" else "",
                                  counted=result is not None)

    async def _paid_call(self, request: ChatRequest, budget: Any, started: float, calibrating: bool,
                         tag: str = "", rank: int = 0) -> CallResult:
        """Reserve the call's maximum cost (if a budget is set, scaled by the model's learned input
        ratio), call with retries, learn from the reported usage, settle."""
        reserved = max_call_cost(self.spec, request, self.calibration.ratio) if budget is not None else 0.0
        if budget is not None and not await budget.reserve.remote(reserved):
            return skipped_for_budget(started)
        result = await self._call_with_retries(request, started, tag, rank)
        self.calibration.add(request.estimated_input_tokens(), result.input_tokens)
        result.cost_usd = call_cost(self.spec, result.input_tokens, result.output_tokens,
                                    result.cache_read_tokens, result.cache_write_tokens)
        result.cache_saved_usd = cache_saving(self.spec, result.cache_read_tokens, result.cache_write_tokens)
        if budget is not None:
            await budget.settle.remote(reserved, result.cost_usd, calibrating)
        return result

    def _record_try(self, request: ChatRequest, outcome: str, input_tokens: int, output_tokens: int,
                    cache_read: int = 0, cache_write: int = 0) -> None:
        """Append a try to the run's paid ledger: SENT before it goes, then how it ended (with usage)."""
        if self.paid is not None:
            self.paid.record(self.spec.provider, self.spec.model_id, request.prompt_hash(self.spec.model_id),
                             outcome, input_tokens, output_tokens,
                             call_cost(self.spec, input_tokens, output_tokens, cache_read, cache_write),
                             cache_read, cache_write, cache_saving(self.spec, cache_read, cache_write))

    async def _call_with_retries(self, request: ChatRequest, started: float, tag: str = "",
                                 rank: int = 0) -> CallResult:
        estimate = request.estimated_input_tokens()
        tries = 0
        while True:
            tries += 1
            async with self.limits.slot(estimate, tag, rank):
                if self.driver.gone:
                    raise DriverGone("the run's driver is gone: not sent")
                self._record_try(request, SENT, 0, 0)
                sent = time.time()
                try:
                    async with asyncio.timeout(self.spec.timeout_s + 5):   # no task per call, unlike wait_for
                        reply = await self.provider.complete(request)
                except ProviderError as exc:
                    error = exc
                except TimeoutError:
                    error = ProviderError("timeout", f"no answer within {self.spec.timeout_s:.0f}s", retryable=True)
                else:
                    self._record_try(request, "ok", reply.input_tokens, reply.output_tokens,
                                     reply.cache_read_tokens, reply.cache_write_tokens)
                    done = time.time()
                    result = CallResult(
                        status="ok", text=reply.text, model_version=reply.model_version,
                        input_tokens=reply.input_tokens, output_tokens=reply.output_tokens, tries=tries,
                        cache_read_tokens=reply.cache_read_tokens, cache_write_tokens=reply.cache_write_tokens,
                        latency_s=done - sent, started_at=started, finished_at=done,
                        finish_reason=reply.finish_reason, truncated=reply.finish_reason in TRUNCATION_REASONS,
                        more=reply.more,
                    )
                    await self.limits.reconcile(estimate, reply.input_tokens)
                    await self.limits.answered(result.latency_s, reply.rate_headers)
                    return result
            self._record_try(request, refined_cause(error), 0, 0)
            if error.cause in PUSHBACK_CAUSES:
                await self.limits.pushed_back(error.rate_headers, refused=error.cause == "rate_limit")
            wait = self.policy.wait_before_next(error, tries)
            if wait is None:
                done = time.time()
                return CallResult(status="failed", cause=refined_cause(error), error=self._redact(str(error)),
                                  tries=tries, latency_s=done - sent, started_at=started, finished_at=done)
            await asyncio.sleep(wait)


def _lane_stopped(gate: LaneGate, started: float) -> CallResult:
    return CallResult(status="skipped", cause=gate.stopped, started_at=started, finished_at=started,
                      error=f"not sent: this model's lane stopped after {gate.hopeless_after} {gate.stopped} "
                            "answers in a row (check the API key, base_url and model_id, then rerun)")


class DriverGone(RuntimeError):
    """The driver that owns this gateway died: nobody would store an answer."""


class DriverWatch:
    """Whether the gateway's driver still lives. Ray ends a dead driver's actors about two seconds
    after its death (measured: 8 more requests went out after a kill -9); a gateway on the driver's
    node looks at the driver's process every WATCH_S and, once it is gone (or a zombie), sends
    nothing more. A gateway on another node leaves it to Ray."""

    WATCH_S = 0.1

    def __init__(self, driver: tuple[str, int] | None = None):
        self.driver = driver
        self.gone = False
        self.task: asyncio.Task | None = None

    def start(self) -> None:
        if self.task is None and self.driver is not None and self.driver[0] == ray.get_runtime_context().get_node_id():
            self.task = asyncio.ensure_future(self._watch(self.driver[1]))

    async def _watch(self, pid: int) -> None:
        while not self.gone:
            self.gone = not _alive(pid)
            await asyncio.sleep(self.WATCH_S)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"    # a zombie is dead
    except (OSError, IndexError):
        return True


@ray.remote(num_cpus=0, max_concurrency=1000)
class Gateway:
    def __init__(self, endpoint_key: str, api_key: str, limiter_idle_s: float = 60.0,
                 driver: tuple[str, int] | None = None, niceness: int = 0):
        lower_priority(niceness)
        self.endpoint_key = endpoint_key
        self.driver = DriverWatch(driver)
        self.api_key = api_key
        self.limiter_idle_s = limiter_idle_s
        self.lanes: dict[str, _Lane] = {}
        self.paid: dict[RunDir, PaidLog] = {}
        self.journals: dict[RunDir, AnswerJournal] = {}
        self.counts: dict[str, tuple[int, int, int, float]] = {}   # per job and stage tag (live progress)
        # after a restart: the answers an earlier life of this actor journaled for batches it never
        # returned, by run dir, batch token and content hash (rundir/journal.py)
        self.earlier: dict[RunDir, dict[str, dict[str, Any]]] = {}

    def _shared(self, spec: ModelSpec) -> SharedBuckets:
        """This model's RPM/TPM budget in the cluster-wide limiter of this endpoint and key."""
        return SharedBuckets(limiter_name(self.endpoint_key, self.api_key), NAMESPACE, self.limiter_idle_s,
                             (spec.model_id, spec.rpm, spec.tpm, spec.rpm_window_s), spec.rpm, spec.tpm,
                             spec.rpm_window_s)

    def _lane_of(self, spec: ModelSpec) -> _Lane:
        lane = self.lanes.get(spec.model_id)
        if lane is None:
            lane = self.lanes[spec.model_id] = _Lane(spec, self.api_key, self._shared(spec))
            lane.driver = self.driver
        return lane

    async def prepare(self, spec: ModelSpec) -> list[str]:
        """Build this model's lane now: its SDK client, and its endpoint's limiter actor if it has
        rate limits, so its first batch waits for neither (the driver asks this when it creates the
        gateway, then goes on). Return the model ids with a lane."""
        try:
            lane = self._lane_of(spec)
            if isinstance(lane.limits.buckets, SharedBuckets):
                lane.limits.buckets.connect()
        except Exception:  # noqa: BLE001 - nobody waits for this answer: the first batch builds the lane and says why not
            pass
        return sorted(self.lanes)

    async def run_batch(self, spec: ModelSpec, requests: list[ChatRequest], budget: Any = None,
                        run_dir: RunDir | None = None, tag: str | None = None, batch: str = "",
                        rank: int = 0) -> list[CallResult]:
        """Answer a batch of one job's stage (`tag`) of critical-path `rank` (limits.FairTurns).
        `batch` is its token: if this actor was restarted after a death, Ray sends it the batches it
        was answering again, and answers its earlier life journaled for one are returned as they
        are, not asked again (they were paid and settled then)."""
        lane = self._lane_of(spec)
        self.driver.start()
        if run_dir is not None and run_dir not in self.paid:
            name = f"gateway-{hashlib.sha1(self.endpoint_key.encode()).hexdigest()[:8]}"
            self.paid[run_dir] = PaidLog(run_dir, name)
            # named after the actor, so its next life finds what this one answered
            self.journals[run_dir] = AnswerJournal(run_dir, ray.get_runtime_context().get_actor_name() or name)
        lane.paid = self.paid.get(run_dir) if run_dir is not None else None
        lane.journal = self.journals.get(run_dir) if run_dir is not None else None
        earlier = self._answered_before(run_dir, batch)
        if spec.samples_per_request > 1:
            results = await self._samples_batch(lane, requests, budget, tag, batch, earlier, rank)
        else:
            results = await prefix_first(requests, [lane.warm.key(r) for r in requests], lane.warm,
                                         lambda r: self._counted(lane, r, budget, tag, batch, earlier, rank))
        if batch and lane.journal is not None:
            lane.journal.batch_done(batch)
        return results

    def _answered_before(self, run_dir: RunDir | None, batch: str) -> dict[str, Any]:
        """In a restarted actor: what its earlier lives journaled for `batch` (read once per run dir)."""
        context = ray.get_runtime_context()
        if not batch or run_dir is None or not context.was_current_actor_reconstructed:
            return {}
        if run_dir not in self.earlier:
            self.earlier[run_dir] = unfinished_batches(run_dir, context.get_actor_name() or "")
        return self.earlier[run_dir].pop(batch, {})

    async def _counted(self, lane: _Lane, request: ChatRequest, budget: Any, tag: str | None, batch: str = "",
                       earlier: dict[str, Any] | None = None, rank: int = 0) -> CallResult:
        """One call (or its answer from an earlier life of this actor); its end is counted under
        the batch's tag (job and stage) for live progress."""
        queue = earlier.get(request.content_hash(lane.spec.model_id)) if earlier else None
        result = queue.popleft() if queue else await lane.call(request, budget, tag or "", batch, rank)
        self._tally(tag, result)
        return result

    async def _samples_batch(self, lane: _Lane, requests: list[ChatRequest], budget: Any, tag: str | None,
                             batch: str, earlier: dict[str, Any], rank: int = 0) -> list[CallResult]:
        """A batch whose units' samples go several to a request (engine/calls/samples.py)."""
        results: list[CallResult | None] = [None] * len(requests)
        for i, request in enumerate(requests):   # answered by an earlier life of this actor
            queue = earlier.get(request.content_hash(lane.spec.model_id)) if earlier else None
            if queue:
                results[i] = queue.popleft()
        todo = [i for i, r in enumerate(results) if r is None]
        groups = [[todo[j] for j in g] for g in sample_groups(lane.spec, [requests[i] for i in todo])]
        answers = await prefix_first(groups, [lane.warm.key(requests[g[0]]) for g in groups], lane.warm,
                                     lambda g: lane.call_samples([requests[i] for i in g], budget, tag or "", batch,
                                                                 rank))
        for group, answered in zip(groups, answers):
            for i, result in zip(group, answered):
                results[i] = result
        for result in results:
            self._tally(tag, result)
        return results  # type: ignore[return-value]

    def _tally(self, tag: str | None, result: CallResult) -> None:
        """Count a finished call under its batch's tag (job and stage) for live progress."""
        if tag is not None:
            done, failed, tokens, cost = self.counts.get(tag, (0, 0, 0, 0.0))
            self.counts[tag] = (done + 1, failed + (result.status != "ok"),
                                tokens + result.input_tokens + result.output_tokens, cost + result.cost_usd)

    async def tallies(self) -> dict[str, tuple[int, int, int, float]]:
        """Calls finished so far per tag: (done, failed, tokens, dollars), cumulative."""
        return dict(self.counts)

    async def close(self) -> list[tuple[RunDir, str, int]]:
        """Close the clients and logs; return every log as (run dir, path inside it, size in bytes),
        so a driver on another node (no shared file system) can fetch the ledger and journal
        piece by piece with `read_log`."""
        for lane in self.lanes.values():
            await lane.provider.close()
        logs = []
        for run_dir, log in [*self.paid.items(), *self.journals.items()]:
            log.close()
            logs.append((run_dir, log.path.relative_to(run_dir.root).as_posix(), log.path.stat().st_size))
        return logs

    async def read_log(self, run_dir: RunDir, relative: str, offset: int, length: int) -> bytes:
        """Up to `length` bytes of one of this process's closed logs, from `offset`."""
        path = run_dir / relative
        if path not in {log.path for log in [*self.paid.values(), *self.journals.values()]}:
            raise KeyError(f"{path} is not a log of this gateway")
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read(length)


def lower_priority(niceness: int) -> None:
    """Raise this process's niceness to `niceness` (never lower it: that needs privileges), on every
    thread (Linux keeps a niceness per thread; threads started later inherit their starter's). A
    lane with time to spare gives the cores to the lanes that bound the run (flow/critical.py)."""
    if niceness <= 0 or not hasattr(os, "setpriority"):
        return
    try:
        threads = [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:
        threads = [0]
    for tid in threads:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, max(niceness, os.getpriority(os.PRIO_PROCESS, tid)))
        except OSError:   # a thread that ended meanwhile
            pass


def gateway_name(spec: ModelSpec, process: int = 0) -> str:
    """Readable, unique to this driver: a killed run's dying actor is never picked up again."""
    job = ray.get_runtime_context().get_job_id()
    endpoint, model = (hashlib.sha1(key.encode()).hexdigest() for key in (spec.endpoint_key, spec.model_id))
    return f"gateway-{endpoint[:12]}-{model[:8]}-{job}" + (f"-p{process}" if process else "")


def on_this_node() -> dict[str, Any]:
    """Scheduling options that keep an actor on the driver's node (for 127.0.0.1 servers)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node = ray.get_runtime_context().get_node_id()
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node, soft=False)}


# Ray's own fault tolerance: a gateway that dies is restarted (any number of times) and the batches
# it was answering are sent to the new one; one batch is given up after TASK_RETRIES deaths.
TASK_RETRIES = 10


def get_gateway(spec: ModelSpec, api_key: str, process: int = 0, niceness: int = 0) -> Any:
    """Gateway `process` (of `lane_processes(spec)`) of this model on its endpoint and key, created
    on first use, at `niceness` (`lower_priority`). Processes of their own per model id: models that
    share an endpoint (several served by one provider, or the evaluated model and its judge) are
    called from as many cores; their RPM/TPM stay shared through the endpoint's limiter actor, and
    so do a lane's processes'."""
    placement = on_this_node() if spec.serve else {}
    return Gateway.options(name=gateway_name(spec, process), namespace=NAMESPACE, get_if_exists=True,
                           max_restarts=-1, max_task_retries=TASK_RETRIES,
                           **placement).remote(spec.endpoint_key, api_key, idle_seconds(),
                                               (ray.get_runtime_context().get_node_id(), os.getpid()), niceness)
