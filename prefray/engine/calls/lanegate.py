"""Fail fast on a hopeless lane: a model whose first answers all say the key or the model is wrong.

Until a lane has had one answer that is not an auth (401/403) or model-not-found (404) refusal, at
most PROBE_CALLS of its calls are in flight; the rest wait. After HOPELESS_AFTER such refusals in a
row the lane stops sending: every later call is stored as skipped with that cause, so a wrong key
costs a handful of requests instead of the whole sweep. Any other answer lets the lane run at full
concurrency and resets the count.

Waiting for a first answer costs one answer latency per lane (8 s of a slow model's lane). A provider
refuses a wrong key or model id before it generates, within a fraction of a second; so when the run
has no budget, a probe still unanswered after `patience` seconds has been accepted and opens the lane
(refusals in a row still stop it). With a budget the lane waits for the answer: its reported usage
calibrates the budget's reservations before many calls are sent (engine/money/budget.py).

A lane with a declared request rate sends no faster than its limiter whatever the gate does, so its
probes are what the limiter lets out in LATENCY_PRIOR_S (`probe_calls_for`: the pacer's sends, or
a declared window's requests, which may go at once): the gate never holds such a lane back while
its first answers come (no probe tax), and a wrong key still costs only the calls sent before
HOPELESS_AFTER refusals arrive (a refusal comes back within a fraction of a second).
"""

from __future__ import annotations

import asyncio
import math

from prefray.engine.calls.providers import ProviderError

PROBE_CALLS = 2
HOPELESS_AFTER = 3
PROBE_PATIENCE_S = 1.0
# Seconds of a paced lane's sends that go out as probes (the latency a first answer is expected within).
LATENCY_PRIOR_S = 2.0
HOPELESS_CAUSES = frozenset({"auth", "model_not_found"})


def refined_cause(error: ProviderError) -> str:
    """The cause to store: a 404 answer names a model the endpoint does not serve."""
    if error.cause == "client_error" and str(error).startswith("HTTP 404"):
        return "model_not_found"
    return error.cause


def probe_calls_for(rpm: float | None, processes: int = 1, window_s: float | None = None) -> int:
    """Probe calls of a lane: PROBE_CALLS, or what one process's limiter lets out in LATENCY_PRIOR_S
    (its pacer's sends; with a declared window, the window's requests, which may go at once)."""
    if not rpm:
        return PROBE_CALLS
    span = max(LATENCY_PRIOR_S, window_s or 0.0)
    return max(PROBE_CALLS, math.ceil(rpm / max(1, processes) / 60.0 * span - 1e-9))


class LaneGate:
    def __init__(self, probe_calls: int = PROBE_CALLS, hopeless_after: int = HOPELESS_AFTER):
        self.probe_calls = probe_calls
        self.hopeless_after = hopeless_after
        self.open = False            # one answer that was not a hopeless refusal has arrived
        self.probing = 0
        self.refusals = 0            # hopeless refusals in a row
        self.refused = 0             # hopeless refusals in all
        self.stopped_cause = ""      # set once the lane stops sending
        self.changed = asyncio.Condition()
        self.opening: asyncio.Future | None = None

    async def enter(self, patience: float | None = None) -> bool:
        """Wait until this call may go; return True if it goes as a probe (call `leave` after). A
        probe still unanswered after `patience` seconds opens the lane (None: only an answer does)."""
        async with self.changed:
            await self.changed.wait_for(lambda: self.open or self.stopped_cause or self.probing < self.probe_calls)
            if self.open or self.stopped_cause:
                return False
            self.probing += 1
            if patience is not None:
                asyncio.get_running_loop().call_later(patience, self._patience_over, self.refused)
            return True

    def _patience_over(self, refused_before: int) -> None:
        """A probe sent `patience` ago: no refusal since means it is still running or was answered."""
        if self.refused == refused_before and not self.open and not self.stopped_cause:
            self.opening = asyncio.ensure_future(self._open(refused_before))

    async def _open(self, refused_before: int) -> None:
        async with self.changed:
            if self.refused == refused_before and not self.stopped_cause:
                self.open = True
                self.changed.notify_all()

    async def leave(self, probe: bool, cause: str, counted: bool = True) -> None:
        """Record how a call ended (cause "" = answered; `counted` False: it never finished)."""
        async with self.changed:
            if probe:
                self.probing -= 1
            if not counted:
                pass
            elif cause in HOPELESS_CAUSES:
                self.refusals += 1
                self.refused += 1
                if self.refusals >= self.hopeless_after:
                    self.stopped_cause = cause
            else:
                self.refusals = 0
                self.open = True
            self.changed.notify_all()

    @property
    def stopped(self) -> str:
        return self.stopped_cause
