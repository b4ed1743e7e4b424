"""Client-side rate limits for one model lane: requests/min, input tokens/min, in-flight calls.

- **Requests** keep the provider's window. Where the config declares how the provider counts its
  rpm (`rpm_window_s`: a sliding window of W seconds), the lane sends up to rpm × W / 60 requests
  at once from its first call and then each as one of a window ago leaves the window
  (`SlidingWindow`): the fastest a strict window allows, never more. Otherwise, and from the first
  429 on (a provider counting over shorter spans than declared), requests are paced, one every
  60/rpm seconds on a fixed schedule (a late wake-up does not push the later slots back: `Pacer`),
  and still never more than rpm in any minute.
- **Input tokens** use a short-window aiolimiter bucket, charged an estimate before the call and
  reconciled after it.
- **Turns are fair across jobs**: calls waiting on a lane are admitted one at a time, taking turns
  across their tags (job and stage) round-robin; within a tag, in arrival order. A job that queued
  a thousand calls first does not hold a second job's calls back until its own are all sent.
- **In-flight calls** follow from the limit (Little's law): with a request limit, the lane keeps
  rate × measured latency (plus a margin) calls in flight, up to `max_concurrency` (the ceiling);
  a 429 or a 5xx halves the window, which then grows back as answers arrive (AIMD).
- **Provider headers** (OpenAI `x-ratelimit-*`, Anthropic `anthropic-ratelimit-*`) teach the lane:
  the real request limit when the config leaves `rpm` unset, and a pause until the reset time when
  the remaining requests run out, before a 429 happens.

Request and token budgets belong to the account, so on a cluster they live in one named, detached
SharedLimiter actor per provider endpoint and key: every launch's gateway takes from the same
buckets, so sweeps started at once together stay under the declared RPM/TPM. The limiter outlives
the drivers that used it and ends itself once idle. The in-flight window stays with each lane.
A lane takes from the limiter in leases, not one call at a time: one actor call reserves the next
few request slots (as many as its callers ready to send, those within LEASE_S) and their tokens;
the limiter answers with each slot's time and the lane sends on them itself. A slot leased and not
used within LEASE_S is lost, never sent late or twice: leases can only leave the account under its
limits.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import os
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlparse

import ray
from aiolimiter import AsyncLimiter

from prefray.engine.calls.rate_headers import RateHeaders, read_rate_headers
from prefray.engine.types import ModelSpec

# Window for the input-token bucket: large enough to admit one long prompt at once.
TOKEN_WINDOW_S = 6.0
# The providers' request window, and how much longer the lane waits before a send takes the place
# of one a window ago: the time between a slot's grant and its request's arrival (a lease's slots
# used within LEASE_S, the SDK building a burst of requests one after another, a busy event loop)
# varies from one window to the next; the request must never reach the provider inside the window.
REQUEST_WINDOW_S = 60.0
WINDOW_MARGIN_S, WINDOW_MARGIN_SHARE = 1.0, 0.02   # of a window: at most 1 s, at most 2%
# Pace a little under the limit once paced: clocks and jitter must not push a window over it.
PACE_MARGIN = 0.98
# In-flight calls kept above rate × latency, so a slow answer does not idle the lane.
LITTLE_MARGIN = 1.25
LATENCY_SMOOTHING = 0.2
HANDLE_ATTEMPTS = 3
# A lease of the shared limiter covers at most this many seconds of the lane's request slots (and
# MAX_LEASE slots): one actor call per lease, not per call (each costs ~1 ms of CPU on both sides).
LEASE_S = 0.25
MAX_LEASE = 32
# With a declared window a lease's slots are all free at once: fewer per lease, so a busy event loop
# hands them all out before they grow old (measured at load average 16: with 32, 10-26 of the first
# window's 200 slots went stale and 600 calls took a fourth window), and a slot may be sent up to
# half the window's margin late (the other half still lies between it and its place a window on).
WINDOW_LEASE = 8


class SlidingWindow:
    """At most `limit` sends in any `width` seconds: a send takes the place of the one `limit`
    sends before it, `width` seconds after that one (plus WINDOW_MARGIN_S). It starts empty, so a
    lane sends its first window's requests at once, as a strict window allows, and never more.
    Slots are booked in time order (`book`); a slot's time is when its request may go."""

    def __init__(self, limit: int, width: float, clock=time.monotonic):
        self.limit, self.width = max(1, limit), width + min(WINDOW_MARGIN_S, WINDOW_MARGIN_SHARE * width)
        self.clock = clock
        self.sent: deque[float] = deque()

    def free_at(self) -> float:
        """When the next slot is free (after the last one booked, and a window after the one
        `limit` sends back)."""
        if not self.sent:
            return -math.inf
        back = self.sent[-self.limit] + self.width if len(self.sent) >= self.limit else -math.inf
        return max(back, self.sent[-1])

    def book(self, at: float) -> float:
        """Book the first free slot at or after `at`; return its time."""
        at = max(at, self.free_at())
        if len(self.sent) >= self.limit:
            self.sent.popleft()
        self.sent.append(at)
        return at


def request_window(rpm: float, window_s: float = REQUEST_WINDOW_S, clock=time.monotonic) -> SlidingWindow:
    """The provider's rule as a strict window: rpm × window_s / 60 requests in any `window_s`
    seconds (fewer than one: one request in 60/rpm seconds)."""
    limit = max(1, math.floor(rpm * window_s / 60.0 + 1e-9))
    return SlidingWindow(limit, 60.0 * limit / rpm, clock)


class Pacer:
    """Requests on a fixed schedule, one every `interval` seconds.

    A bucket that holds one request (aiolimiter's leaky bucket at capacity 1) restarts its interval
    from the moment a waiter actually wakes, so each late wake-up (a busy event loop, an actor call)
    is lost for good: measured, ~8% of a 300 rpm lane on a loaded machine. Here a request that went
    out late by less than one interval does not move the schedule: the next one keeps its slot. Any
    60 s window still holds at most 60/interval + 2 sends (one late send can share a window with
    the on-time ones), under `rpm` with PACE_MARGIN. A pacer idle for an interval or more starts a
    new schedule from now: no burst after a pause."""

    def __init__(self, interval: float, clock=time.monotonic, sleep=asyncio.sleep):
        self.interval = interval
        self.clock, self.sleep = clock, sleep
        self.next_at = -math.inf
        self.turn = asyncio.Lock()

    async def acquire(self, requests: int = 1) -> list[float]:
        """Wait for the first of `requests` slots; return each slot's time from now."""
        async with self.turn:   # waiters go in arrival order, one slot each
            now = self.clock()
            if now - self.next_at >= self.interval:
                self.next_at = now
            if self.next_at > now:
                await self.sleep(self.next_at - now)
            self.next_at += self.interval * requests
            return [k * self.interval for k in range(requests)]


class RequestSlots:
    """A lane's request limit. Where the config declares the provider's window (`rpm_window_s`),
    that window (SlidingWindow): its first window's requests may go at once. Else, or once the
    provider has refused a request the window allowed (it enforces the limit over shorter spans, as
    OpenAI and Anthropic say they may: "60 RPM may be enforced as 1 request per second"), a pacer
    as well: no burst, and still never more than a minute's window holds."""

    def __init__(self, rpm: float, window_s: float | None = None, clock=time.monotonic, sleep=asyncio.sleep):
        self.rpm = rpm
        self.window = request_window(rpm, window_s or REQUEST_WINDOW_S, clock)
        self.clock, self.sleep = clock, sleep
        self.pacer: Pacer | None = None
        self.turn = asyncio.Lock()
        if window_s is None:
            self.pace()

    def pace(self) -> None:
        if self.pacer is None:
            self.pacer = Pacer(60.0 / (self.rpm * PACE_MARGIN), self.clock, self.sleep)

    async def acquire(self, requests: int = 1, ahead: float = 0.0) -> list[float]:
        """Wait for the first of up to `requests` slots; return the slots' times from now, the later
        ones at most `ahead` seconds from now (at least one slot)."""
        async with self.turn:   # waiters go in arrival order
            first = self.window.free_at()
            if first > self.clock():
                await self.sleep(first - self.clock())
            if self.pacer is not None:   # only the slots within `ahead`: the pacer's schedule moves on by each
                paced = await self.pacer.acquire(max(1, min(requests, 1 + int(ahead / self.pacer.interval))))
            else:
                paced = [0.0] * max(1, requests)
            now = self.clock()
            slots = [self.window.book(now) - now]
            for at in paced[1:]:
                if max(now + at, self.window.free_at()) - now > ahead:
                    break
                slots.append(self.window.book(now + at) - now)
            return slots


def idle_seconds() -> float:
    """How long a shared limiter with nobody waiting lives on (read where the launch runs)."""
    return float(os.environ.get("PREFRAY_LIMITER_IDLE_S") or 60)


def limiter_name(endpoint_key: str, api_key: str) -> str:
    """One name per endpoint and key (a digest: the key cannot be read back from it)."""
    key_digest = hashlib.sha256(api_key.encode()).hexdigest()
    return f"limiter-{hashlib.sha1(f'{endpoint_key}|{key_digest}'.encode()).hexdigest()[:16]}"


class Buckets:
    """The request and input-token buckets of one model id under its declared limits."""

    def __init__(self, rpm: float | None, tpm: float | None, window_s: float | None = None):
        self.requests = RequestSlots(rpm, window_s) if rpm else None
        self.tokens = AsyncLimiter(tpm * TOKEN_WINDOW_S / 60.0, TOKEN_WINDOW_S) if tpm else None

    async def take(self, requests: int, tokens: int, waiting: int = 0, ahead: float = 0.0) -> list[float]:
        """Take the tokens, then wait for the first of `requests` request slots; return the slots'
        times from now (fewer than asked when the rest lie more than `ahead` seconds ahead)."""
        if self.tokens is not None and tokens > 0:
            # aiolimiter refuses amounts above its capacity; a longer prompt takes the whole bucket.
            await self.tokens.acquire(min(float(tokens), self.tokens.max_rate))
        if self.requests is not None and requests:
            return await self.requests.acquire(requests, ahead)
        return [0.0] * requests

    async def pace(self) -> None:
        """The provider refused a request its window allowed: pace the requests from now on."""
        if self.requests is not None:
            self.requests.pace()


@ray.remote(num_cpus=0, max_concurrency=10000)
class SharedLimiter:
    """One per provider endpoint and key in the cluster; buckets per model id and declared limits."""

    def __init__(self, idle_s: float):
        self.idle_s = idle_s
        self.buckets: dict[tuple, Buckets] = {}
        self.waiting = 0
        self.last_used = time.monotonic()
        self.reaper: asyncio.Task | None = None
        self._start_reaper()

    def _start_reaper(self) -> None:
        """The idle clock: started when the actor is built (Ray runs an async actor's constructor in
        its event loop), so a limiter a lane connected to early and nobody ever takes from still
        ends once idle; else by the first take."""
        if self.reaper is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            self.reaper = loop.create_task(self._end_when_idle())

    async def take(self, key: tuple, rpm: float | None, tpm: float | None, requests: int,
                   tokens: int, window_s: float | None = None) -> list[float]:
        """Lease up to `requests` request slots (at least one if any) and `tokens`: the slots'
        times from now, at most LEASE_S ahead."""
        self._start_reaper()
        buckets = self.buckets.setdefault(key, Buckets(rpm, tpm, window_s))
        self.waiting += 1
        try:
            return await buckets.take(requests, tokens, ahead=LEASE_S)
        finally:
            self.waiting -= 1
            self.last_used = time.monotonic()

    async def pace(self, key: tuple, rpm: float | None, tpm: float | None, window_s: float | None = None) -> None:
        await self.buckets.setdefault(key, Buckets(rpm, tpm, window_s)).pace()

    async def _end_when_idle(self) -> None:
        while self.waiting or time.monotonic() - self.last_used < self.idle_s:
            await asyncio.sleep(min(self.idle_s, 5.0))
        ray.kill(ray.get_runtime_context().current_actor, no_restart=True)  # users fetch a new one


class SharedBuckets:
    """A lane's view of the cluster-wide buckets (fetched again if the limiter ended while idle).

    Requests and tokens are leased: `take` asks the limiter for up to `lease_size` request slots
    and their estimated tokens at once, and the limiter answers with each slot's time from now (the
    first at once, the rest within LEASE_S: the window's free places, or the pacer's schedule once
    paced); the lane sends on those times itself. Tokens left over stay as credit for the next
    calls; a reconciliation beyond the estimate is charged to the credit and taken with the next
    lease."""

    def __init__(self, name: str, namespace: str, idle_s: float, key: tuple, rpm: float | None, tpm: float | None,
                 window_s: float | None = None):
        self.name, self.namespace, self.idle_s = name, namespace, idle_s
        self.key, self.rpm, self.tpm, self.window_s = key, rpm, tpm, window_s
        self.handle: Any = None
        self.slots: deque[float] = deque()   # monotonic times of leased request slots, earliest first
        self.credit = 0.0                    # input tokens leased and not yet spent (negative: owed)
        self.leasing = asyncio.Lock()

    def lease_size(self, waiting: int) -> int:
        """Calls to lease for a caller with `waiting` more ready to go behind it (at most MAX_LEASE,
        WINDOW_LEASE with a declared window)."""
        return max(1, min(WINDOW_LEASE if self.window_s else MAX_LEASE, 1 + waiting))

    def _tokens_to_lease(self, tokens: int, calls: int) -> int:
        """Tokens for `calls` calls like this one, beyond the credit; within the bucket's capacity
        unless this one call needs more (a long prompt takes the whole bucket, as Buckets does)."""
        capacity = self.tpm * TOKEN_WINDOW_S / 60.0
        need, wanted = tokens - self.credit, tokens * calls - self.credit
        return max(0, math.ceil(max(need, min(wanted, capacity))))

    async def take(self, requests: int, tokens: int, waiting: int = 0) -> None:
        if not requests:
            self.credit -= tokens   # settled with the next lease: a reconciliation waits for nothing
            return
        async with self.leasing:
            self._drop_stale_slots()
            calls = self.lease_size(waiting)
            slots = calls if self.rpm and not self.slots else 0
            if slots or (self.tpm and tokens > self.credit):
                leased = self._tokens_to_lease(tokens, calls) if self.tpm else 0
                times = await self._remote(slots, leased)
                granted = time.monotonic()
                self.slots.extend(granted + at for at in times or [])
                self.credit += leased
            wait = self.slots.popleft() - time.monotonic() if self.rpm else 0.0
            self.credit -= tokens
        if wait > 0:
            await asyncio.sleep(wait)

    def _drop_stale_slots(self) -> None:
        """Slots more than LEASE_S in the past (half a declared window's margin) are lost, not sent
        late: a request must reach the provider close to the time its slot was booked for (the
        window counts it there)."""
        late = LEASE_S if not self.window_s else min(WINDOW_MARGIN_S, WINDOW_MARGIN_SHARE * self.window_s) / 2
        oldest = time.monotonic() - late
        while self.slots and self.slots[0] < oldest:
            self.slots.popleft()

    async def pace(self) -> None:
        """The provider refused a request the window allowed: every lane of the model paces."""
        await self._call("pace", self.key, self.rpm, self.tpm, self.window_s)

    def connect(self) -> None:
        """Get (or create) the endpoint's limiter actor; its process starts in the background."""
        if self.handle is None:
            self.handle = SharedLimiter.options(name=self.name, namespace=self.namespace, get_if_exists=True,
                                                lifetime="detached").remote(self.idle_s)

    async def _remote(self, requests: int, tokens: int) -> list[float]:
        return await self._call("take", self.key, self.rpm, self.tpm, requests, tokens, self.window_s)

    async def _call(self, method: str, *args: Any) -> Any:
        from ray.exceptions import RayActorError

        for attempt in range(HANDLE_ATTEMPTS):
            self.connect()
            try:
                return await getattr(self.handle, method).remote(*args)
            except RayActorError:
                if attempt == HANDLE_ATTEMPTS - 1:
                    raise
                self.handle = None
                await asyncio.sleep(0.5 * (attempt + 1))


class InFlightWindow:
    """A semaphore whose size can change while calls wait on it."""

    def __init__(self, size: int, ceiling: int):
        self.ceiling = max(1, ceiling)
        self.size = max(1, min(size, self.ceiling))
        self.active = 0
        self._changed = asyncio.Condition()

    async def acquire(self) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: self.active < self.size)
            self.active += 1

    async def release(self) -> None:
        async with self._changed:
            self.active -= 1
            self._changed.notify_all()

    async def resize(self, size: int) -> None:
        size = max(1, min(int(size), self.ceiling))
        if size != self.size:
            async with self._changed:
                self.size = size
                self._changed.notify_all()


class FairTurns:
    """Admits one caller at a time: the waiting callers of the highest rank first, and among those
    turns across tags, round-robin.

    A rank is the caller's stage's place on the sweep's critical path (flow/critical.py: the slowest
    lane its rows lead to, then how many stages of its job wait on them): a lane serves first the
    calls that the slowest lanes, and the longest chains, wait for. `ranks` holds, per rank with
    callers waiting, per tag their futures in arrival order; the tag served last moves to the back
    of its rank, so with k tags of the top rank waiting each gets every k-th turn.
    """

    def __init__(self) -> None:
        self.busy = False
        self.ranks: dict[int, OrderedDict[str, deque[asyncio.Future]]] = {}

    def waiting(self) -> int:
        return sum(len(queue) for tags in self.ranks.values() for queue in tags.values())

    async def enter(self, tag: str, rank: int = 0) -> None:
        if not self.busy and not self.ranks:
            self.busy = True
            return
        turn = asyncio.get_running_loop().create_future()
        self.ranks.setdefault(rank, OrderedDict()).setdefault(tag, deque()).append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self.leave()          # the turn was given to this caller: pass it on
            else:
                self._forget(rank, tag, turn)
            raise

    def leave(self) -> None:
        """End the current turn: the next tag in line of the highest rank waiting gets the next one."""
        while self.ranks:
            rank = max(self.ranks)
            tags = self.ranks[rank]
            tag, queue = next(iter(tags.items()))
            turn = queue.popleft()
            if queue:
                tags.move_to_end(tag)
            else:
                del tags[tag]
                if not tags:
                    del self.ranks[rank]
            if not turn.done():
                turn.set_result(None)
                return
        self.busy = False

    def _forget(self, rank: int, tag: str, turn: asyncio.Future) -> None:
        tags = self.ranks.get(rank, {})
        queue = tags.get(tag)
        if queue is not None and turn in queue:
            queue.remove(turn)
            if not queue:
                del tags[tag]
                if not tags:
                    del self.ranks[rank]


class ModelLimits:
    """The limits one gateway enforces for one model id."""

    def __init__(self, rpm: float | None, tpm: float | None, max_concurrency: int,
                 shared: SharedBuckets | None = None, processes: int = 1, window_s: float | None = None):
        self.rpm, self.tpm, self.window_s = rpm, tpm, window_s
        self.processes = processes   # gateway processes sharing the lane's rate (each sends its share)
        self.shared = shared
        self.buckets: Buckets | SharedBuckets = (shared if shared is not None and (rpm or tpm)
                                                 else Buckets(rpm, tpm, window_s))
        ceiling = max(1, int(max_concurrency))
        # The request window sets the rate; the in-flight window starts at the ceiling so it never
        # holds the first calls back, shrinks on pushback and grows back to Little's law as answers arrive.
        self.window = InFlightWindow(ceiling, ceiling)
        self.turns = FairTurns()
        self.latency_s: float | None = None
        self.paused_until = 0.0
        self.learned = False
        self.paced = False   # the provider refused a request the window allowed: requests are paced

    @contextlib.asynccontextmanager
    async def slot(self, estimated_tokens: int, tag: str = "", rank: int = 0) -> AsyncIterator[None]:
        """Hold an in-flight slot after the request and token budgets admit one call.

        Callers are admitted one at a time, the highest `rank` first and in fair turns across tags
        (FairTurns): the turn lasts until the call has its in-flight slot and its request and
        tokens, so the send order is the turn order.
        """
        await self.turns.enter(tag, rank)
        try:
            await self.window.acquire()
            try:
                pause = self.paused_until - time.monotonic()
                if pause > 0:
                    await asyncio.sleep(pause)
                await self.buckets.take(1, estimated_tokens, self.ready_behind())
            except BaseException:
                await self.window.release()
                raise
        finally:
            self.turns.leave()
        try:
            yield
        finally:
            await self.window.release()

    def ready_behind(self) -> int:
        """Callers waiting for a turn that could send at once (an in-flight slot is free for them):
        what a lease may take slots for without leaving them unused."""
        return min(self.turns.waiting(), max(0, self.window.size - self.window.active))

    async def reconcile(self, estimated_tokens: int, actual_tokens: int) -> None:
        """Charge the tokens the estimate missed (aiolimiter has no refunds for over-estimates)."""
        if actual_tokens > estimated_tokens:
            await self.buckets.take(0, actual_tokens - estimated_tokens)

    def little_target(self) -> int | None:
        """In-flight calls that keep this process's share of the request limit full at the measured
        latency."""
        if not self.rpm or self.latency_s is None:
            return None
        return math.ceil(self.rpm / self.processes / 60.0 * self.latency_s * LITTLE_MARGIN - 1e-9) + 1

    async def answered(self, latency_s: float, headers: Mapping[str, str] | None = None) -> None:
        """After a successful call: learn latency and limits, grow the window toward its target."""
        smoothed = self.latency_s
        self.latency_s = (latency_s if smoothed is None
                          else (1 - LATENCY_SMOOTHING) * smoothed + LATENCY_SMOOTHING * latency_s)
        if headers:
            self._learn(read_rate_headers(headers))
        target = self.little_target()
        if target is not None and target > self.window.size:
            await self.window.resize(target)
        elif target is None and self.window.size < self.window.ceiling:
            await self.window.resize(self.window.size + 1)   # no rate to aim at: grow back additively

    async def pushed_back(self, headers: Mapping[str, str] | None = None, refused: bool = False) -> None:
        """After a 429 or a 5xx: halve the in-flight window (it grows back as answers arrive). A 429
        (`refused`) came although the lane kept the provider's window: it enforces the limit over
        shorter spans, so the lane's requests are paced from now on."""
        await self.window.resize(self.window.size // 2)
        if refused and self.rpm and not self.paced:
            self.paced = True
            await self.buckets.pace()
        if headers:
            self._learn(read_rate_headers(headers))

    def _learn(self, seen: RateHeaders) -> None:
        if seen.limit_requests and not self.rpm:
            # The config left rpm unset: pace at the provider's own limit from now on.
            self.rpm = float(seen.limit_requests)
            if self.shared is not None:
                self.shared.key, self.shared.rpm = (self.shared.key[0], self.rpm, *self.shared.key[2:]), self.rpm
                self.buckets = self.shared
            else:
                self.buckets = Buckets(self.rpm, self.tpm, self.window_s)
            self.learned = True
        if seen.remaining_requests is not None and seen.reset_requests_s is not None:
            reserve = max(1, self.window.active)
            if seen.remaining_requests < reserve:
                self.paused_until = max(self.paused_until, time.monotonic() + seen.reset_requests_s)


# -- a lane's time bound (what the plan shows: no schedule finishes sooner under the rate limits) --

def lane_name(spec: ModelSpec) -> str:
    """Provider endpoint and model id: what a gateway rate-limits as one lane (batch-tier calls
    go through the provider's batch API instead, a lane of their own)."""
    host = urlparse(spec.base_url).netloc if spec.base_url else f"{spec.provider} API"
    return f"{host} {spec.model_id}" + (" (batch tier)" if spec.tier == "batch" else "")


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
