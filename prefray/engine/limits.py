"""Client-side rate limits for one model lane: requests/min, input tokens/min, concurrency.

Built on aiolimiter. `AsyncLimiter(rpm, 60)` would let a whole minute's worth through at once,
so each limiter uses a short window: the bucket holds at most a few seconds of budget.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator

from aiolimiter import AsyncLimiter

# Window for the input-token bucket: large enough to admit one long prompt at once.
TOKEN_WINDOW_S = 6.0


def request_limiter(rpm: float) -> AsyncLimiter:
    """At most `rpm` requests a minute, with a burst of at most one second's share (and ≥ 1)."""
    per_second = rpm / 60.0
    if per_second >= 1:
        return AsyncLimiter(per_second, 1.0)
    return AsyncLimiter(1, 1.0 / per_second)


class ModelLimits:
    """The limits one gateway enforces for one model id."""

    def __init__(self, rpm: float | None, tpm: float | None, max_concurrency: int):
        self.requests = request_limiter(rpm) if rpm else None
        self.tokens = AsyncLimiter(tpm * TOKEN_WINDOW_S / 60.0, TOKEN_WINDOW_S) if tpm else None
        self.slots = asyncio.Semaphore(max(1, int(max_concurrency)))

    async def _take_tokens(self, amount: int) -> None:
        if self.tokens is None or amount <= 0:
            return
        # aiolimiter refuses amounts above its capacity; a longer prompt takes the whole bucket.
        await self.tokens.acquire(min(float(amount), self.tokens.max_rate))

    @contextlib.asynccontextmanager
    async def slot(self, estimated_tokens: int) -> AsyncIterator[None]:
        """Hold a concurrency slot after the request and token budgets admit one call."""
        async with self.slots:
            if self.requests is not None:
                await self.requests.acquire()
            await self._take_tokens(estimated_tokens)
            yield

    async def reconcile(self, estimated_tokens: int, actual_tokens: int) -> None:
        """Charge the tokens the estimate missed (aiolimiter has no refunds for over-estimates)."""
        await self._take_tokens(actual_tokens - estimated_tokens)
