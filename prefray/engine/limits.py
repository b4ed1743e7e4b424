"""Client-side rate limits for one model lane: requests/min, input tokens/min, in-flight calls.

- **Requests** are paced, not burst: one request every 60/rpm seconds (aiolimiter with a bucket of
  one request), so no 60-second window — sliding or fixed — ever sees more than `rpm` sends, from
  the first second on.
- **Input tokens** use a short-window aiolimiter bucket, charged an estimate before the call and
  reconciled after it.
- **In-flight calls** follow from the limit (Little's law): with a request limit, the lane keeps
  rate × measured latency (plus a margin) calls in flight, up to `max_concurrency` (the ceiling);
  a 429 or a 5xx halves the window, which then grows back as answers arrive (AIMD).
- **Provider headers** (OpenAI `x-ratelimit-*`, Anthropic `anthropic-ratelimit-*`) teach the lane:
  the real request limit when the config leaves `rpm` unset, and a pause until the reset time when
  the remaining requests run out, before a 429 happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from typing import AsyncIterator, Mapping

from aiolimiter import AsyncLimiter

from prefray.engine.rate_headers import RateHeaders, read_rate_headers

# Window for the input-token bucket: large enough to admit one long prompt at once.
TOKEN_WINDOW_S = 6.0
# Pace a little under the limit: clocks and network jitter must not push a window over it.
PACE_MARGIN = 0.99
# In-flight calls kept above rate × latency, so a slow answer does not idle the lane.
LITTLE_MARGIN = 1.25
LATENCY_SMOOTHING = 0.2


def request_pacer(rpm: float) -> AsyncLimiter:
    """One request every 60/rpm seconds, never a burst (a bucket that holds one request)."""
    return AsyncLimiter(1, 60.0 / (rpm * PACE_MARGIN))


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


class ModelLimits:
    """The limits one gateway enforces for one model id."""

    def __init__(self, rpm: float | None, tpm: float | None, max_concurrency: int):
        self.rpm = rpm
        self.requests = request_pacer(rpm) if rpm else None
        self.tokens = AsyncLimiter(tpm * TOKEN_WINDOW_S / 60.0, TOKEN_WINDOW_S) if tpm else None
        ceiling = max(1, int(max_concurrency))
        # The pacer sets the rate; the window starts at the ceiling so it never holds the first calls
        # back, shrinks on pushback and grows back to Little's law as answers arrive.
        self.window = InFlightWindow(ceiling, ceiling)
        self.latency_s: float | None = None
        self.paused_until = 0.0
        self.learned = False

    async def _take_tokens(self, amount: int) -> None:
        if self.tokens is None or amount <= 0:
            return
        # aiolimiter refuses amounts above its capacity; a longer prompt takes the whole bucket.
        await self.tokens.acquire(min(float(amount), self.tokens.max_rate))

    @contextlib.asynccontextmanager
    async def slot(self, estimated_tokens: int) -> AsyncIterator[None]:
        """Hold an in-flight slot after the request and token budgets admit one call."""
        await self.window.acquire()
        try:
            pause = self.paused_until - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
            if self.requests is not None:
                await self.requests.acquire()
            await self._take_tokens(estimated_tokens)
            yield
        finally:
            await self.window.release()

    async def reconcile(self, estimated_tokens: int, actual_tokens: int) -> None:
        """Charge the tokens the estimate missed (aiolimiter has no refunds for over-estimates)."""
        await self._take_tokens(actual_tokens - estimated_tokens)

    def little_target(self) -> int | None:
        """In-flight calls that keep the request limit full at the measured latency."""
        if not self.rpm or self.latency_s is None:
            return None
        return math.ceil(self.rpm / 60.0 * self.latency_s * LITTLE_MARGIN - 1e-9) + 1

    async def answered(self, latency_s: float, headers: Mapping[str, str] | None = None) -> None:
        """After a successful call: learn latency and limits, grow the window toward its target."""
        smoothed = self.latency_s
        self.latency_s = latency_s if smoothed is None else (1 - LATENCY_SMOOTHING) * smoothed + LATENCY_SMOOTHING * latency_s
        if headers:
            self._learn(read_rate_headers(headers))
        target = self.little_target()
        if target is not None and target > self.window.size:
            await self.window.resize(target)
        elif target is None and self.window.size < self.window.ceiling:
            await self.window.resize(self.window.size + 1)   # no rate to aim at: grow back additively

    async def pushed_back(self, headers: Mapping[str, str] | None = None) -> None:
        """After a 429 or a 5xx: halve the in-flight window (it grows back as answers arrive)."""
        await self.window.resize(self.window.size // 2)
        if headers:
            self._learn(read_rate_headers(headers))

    def _learn(self, seen: RateHeaders) -> None:
        if seen.limit_requests and not self.rpm:
            # The config left rpm unset: pace at the provider's own limit from now on.
            self.rpm = float(seen.limit_requests)
            self.requests = request_pacer(self.rpm)
            self.learned = True
        if seen.remaining_requests is not None and seen.reset_requests_s is not None:
            reserve = max(1, self.window.active)
            if seen.remaining_requests < reserve:
                self.paused_until = max(self.paused_until, time.monotonic() + seen.reset_requests_s)
