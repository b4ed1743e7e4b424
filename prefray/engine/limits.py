"""Client-side rate limits for one model lane: requests/min, input tokens/min, concurrency.

Built on aiolimiter. `AsyncLimiter(rpm, 60)` would let a whole minute's worth through at once,
so each limiter uses a short window: the bucket holds at most a few seconds of budget.

Request and token budgets belong to the account, so they live in one named, detached
SharedLimiter actor per provider endpoint and key in the cluster: every launch's gateway takes
from the same buckets, so sweeps started at once together stay under the declared RPM/TPM. The
limiter outlives the drivers that used it and ends itself once idle. The concurrency cap stays
with each gateway (it bounds one process's open connections).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import time
from typing import Any, AsyncIterator

import ray
from aiolimiter import AsyncLimiter

# Window for the input-token bucket: large enough to admit one long prompt at once.
TOKEN_WINDOW_S = 6.0
HANDLE_ATTEMPTS = 3


def request_limiter(rpm: float) -> AsyncLimiter:
    """At most `rpm` requests a minute, with a burst of at most one second's share (and ≥ 1)."""
    per_second = rpm / 60.0
    if per_second >= 1:
        return AsyncLimiter(per_second, 1.0)
    return AsyncLimiter(1, 1.0 / per_second)


def idle_seconds() -> float:
    """How long a shared limiter with nobody waiting lives on (read where the launch runs)."""
    return float(os.environ.get("PREFRAY_LIMITER_IDLE_S") or 60)


def limiter_name(endpoint_key: str, api_key: str) -> str:
    """One name per endpoint and key (a digest: the key cannot be read back from it)."""
    key_digest = hashlib.sha256(api_key.encode()).hexdigest()
    return f"limiter-{hashlib.sha1(f'{endpoint_key}|{key_digest}'.encode()).hexdigest()[:16]}"


class Buckets:
    """The request and input-token buckets of one model id under its declared limits."""

    def __init__(self, rpm: float | None, tpm: float | None):
        self.requests = request_limiter(rpm) if rpm else None
        self.tokens = AsyncLimiter(tpm * TOKEN_WINDOW_S / 60.0, TOKEN_WINDOW_S) if tpm else None

    async def take(self, requests: int, tokens: int) -> None:
        if self.requests is not None and requests:
            await self.requests.acquire(requests)
        if self.tokens is not None and tokens > 0:
            # aiolimiter refuses amounts above its capacity; a longer prompt takes the whole bucket.
            await self.tokens.acquire(min(float(tokens), self.tokens.max_rate))


@ray.remote(num_cpus=0, max_concurrency=10000)
class SharedLimiter:
    """One per provider endpoint and key in the cluster; buckets per model id and declared limits."""

    def __init__(self, idle_s: float):
        self.idle_s = idle_s
        self.buckets: dict[tuple, Buckets] = {}
        self.waiting = 0
        self.last_used = time.monotonic()
        self.reaper: asyncio.Task | None = None

    async def take(self, key: tuple, rpm: float | None, tpm: float | None, requests: int, tokens: int) -> None:
        if self.reaper is None:
            self.reaper = asyncio.get_running_loop().create_task(self._end_when_idle())
        buckets = self.buckets.setdefault(key, Buckets(rpm, tpm))
        self.waiting += 1
        try:
            await buckets.take(requests, tokens)
        finally:
            self.waiting -= 1
            self.last_used = time.monotonic()

    async def _end_when_idle(self) -> None:
        while self.waiting or time.monotonic() - self.last_used < self.idle_s:
            await asyncio.sleep(min(self.idle_s, 5.0))
        ray.kill(ray.get_runtime_context().current_actor, no_restart=True)  # users fetch a new one


class SharedBuckets:
    """A lane's view of the cluster-wide buckets (fetched again if the limiter ended while idle)."""

    def __init__(self, name: str, namespace: str, idle_s: float, key: tuple, rpm: float | None, tpm: float | None):
        self.name, self.namespace, self.idle_s = name, namespace, idle_s
        self.key, self.rpm, self.tpm = key, rpm, tpm
        self.handle: Any = None

    async def take(self, requests: int, tokens: int) -> None:
        from ray.exceptions import RayActorError

        for attempt in range(HANDLE_ATTEMPTS):
            if self.handle is None:
                self.handle = SharedLimiter.options(name=self.name, namespace=self.namespace, get_if_exists=True,
                                                    lifetime="detached").remote(self.idle_s)
            try:
                return await self.handle.take.remote(self.key, self.rpm, self.tpm, requests, tokens)
            except RayActorError:
                if attempt == HANDLE_ATTEMPTS - 1:
                    raise
                self.handle = None
                await asyncio.sleep(0.5 * (attempt + 1))


class ModelLimits:
    """The limits one gateway enforces for one model id (budgets shared cluster-wide if `shared`)."""

    def __init__(self, rpm: float | None, tpm: float | None, max_concurrency: int,
                 shared: SharedBuckets | None = None):
        self.buckets: Buckets | SharedBuckets = shared if shared is not None and (rpm or tpm) else Buckets(rpm, tpm)
        self.slots = asyncio.Semaphore(max(1, int(max_concurrency)))

    @contextlib.asynccontextmanager
    async def slot(self, estimated_tokens: int) -> AsyncIterator[None]:
        """Hold a concurrency slot after the request and token budgets admit one call."""
        async with self.slots:
            await self.buckets.take(1, estimated_tokens)
            yield

    async def reconcile(self, estimated_tokens: int, actual_tokens: int) -> None:
        """Charge the tokens the estimate missed (aiolimiter has no refunds for over-estimates)."""
        if actual_tokens > estimated_tokens:
            await self.buckets.take(0, actual_tokens - estimated_tokens)
