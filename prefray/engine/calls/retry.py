"""The one place that decides whether and how long to wait before trying a call again.

The SDKs' own retries are switched off (max_retries=0) because prefray needs three things they
do not give together: a cap on any single wait (Anthropic's SDK sleeps for any retry-after),
a fresh pass through the rate limiter on every try, and the number of tries on the result row.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from prefray.engine.calls.providers.base import ProviderError
from prefray.engine.types import ModelSpec


@dataclass(frozen=True)
class RetryPolicy:
    """Tries and waits of one model's calls (defaults: the model config's, engine/config/schema.py)."""

    max_attempts: int = ModelSpec.max_attempts
    base_delay_s: float = 0.5
    max_wait_s: float = ModelSpec.max_wait_s

    def wait_before_next(self, error: ProviderError, tries_so_far: int) -> float | None:
        """Seconds to wait before the next try, or None to give up."""
        if not error.retryable or tries_so_far >= self.max_attempts:
            return None
        if error.retry_after is not None:
            return min(error.retry_after, self.max_wait_s)
        backoff = self.base_delay_s * (2 ** (tries_so_far - 1))
        return min(self.max_wait_s, backoff * (1 + random.random() * 0.25))
