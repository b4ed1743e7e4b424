"""A declared provider window (`rpm_window_s`): the lane sends its first window's requests at once,
never more than the window holds, and falls back to pacing once the provider refuses one."""

from __future__ import annotations

import asyncio

import pytest

from prefray.engine.calls.lanegate import LaneGate, probe_calls_for
from prefray.engine.calls.limits import WINDOW_MARGIN_S, ModelLimits, RequestSlots


class Clock:
    """Sleeping moves it exactly: a schedule is checked without waiting for it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)


def most_in_any_window(stamps: list[float], width: float) -> int:
    """Sends in the fullest span of `width` seconds, counted from the send times alone (a send at
    t and one at t + width are in different spans, as the strict server counts)."""
    stamps = sorted(stamps)
    return max(sum(1 for u in stamps if t <= u < t + width) for t in stamps)


def schedule(slots: RequestSlots, clock: Clock, calls: int, lease: int = 1) -> list[float]:
    """Send times of `calls` requests taken `lease` slots at a time (as the shared limiter leases
    them), each sent at its slot's time."""

    async def run() -> list[float]:
        sent: list[float] = []
        while len(sent) < calls:
            times = await slots.acquire(min(lease, calls - len(sent)), ahead=0.25)
            sent.extend(clock.now + at - 1000.0 for at in times)
        return sent

    return asyncio.run(run())


@pytest.mark.parametrize("lease", [1, 7, 32])
def test_a_declared_minute_window_sends_a_window_at_once_and_never_more(lease):
    clock = Clock()
    sent = schedule(RequestSlots(10, 60.0, clock=clock, sleep=clock.sleep), clock, 35, lease)
    # the first window's ten at once (no probe, no pacing), then ten as each leaves the window
    assert sent[:10] == [0.0] * 10
    assert sent[10:20] == pytest.approx([60.0 + WINDOW_MARGIN_S] * 10)
    assert sent[30:] == pytest.approx([3 * (60.0 + WINDOW_MARGIN_S)] * 5)
    # counted independently of the limiter: no 60 s span holds more than the rpm
    assert most_in_any_window(sent, 60.0) == 10
    assert sent == sorted(sent)


def test_a_window_under_a_minute_and_a_rate_under_one_a_minute():
    clock = Clock()
    sent = schedule(RequestSlots(600, 5.0, clock=clock, sleep=clock.sleep), clock, 120, lease=32)
    assert most_in_any_window(sent, 5.0) == 50          # 600 rpm counted over 5 s: 50 at once
    assert sent[:50] == [0.0] * 50 and sent[50] > 5.0
    clock = Clock()
    slow = schedule(RequestSlots(0.5, 60.0, clock=clock, sleep=clock.sleep), clock, 3)
    assert slow[1] - slow[0] >= 120.0 and slow[2] - slow[1] >= 120.0   # one request in 120 s


def test_without_a_declared_window_requests_are_paced_and_a_refusal_paces_a_windowed_lane():
    clock = Clock()
    paced = schedule(RequestSlots(60, None, clock=clock, sleep=clock.sleep), clock, 5, lease=4)
    assert all(b - a >= 1.0 for a, b in zip(paced, paced[1:]))     # one a second (60 rpm), no burst
    clock = Clock()
    slots = RequestSlots(60, 60.0, clock=clock, sleep=clock.sleep)
    first = schedule(slots, clock, 3, lease=3)
    slots.pace()                                                      # the provider refused one
    later = schedule(slots, clock, 4, lease=4)
    assert first == [0.0, 0.0, 0.0]
    assert all(b - a >= 1.0 for a, b in zip(later, later[1:]))
    assert most_in_any_window(first + later, 60.0) <= 60


def test_a_windowed_lane_sends_its_window_before_any_first_answer_and_never_more():
    """Through the lane's gate and limits as a gateway uses them: the first call is not held for a
    probe's answer; every call of the first window goes before any answer comes back; and the
    send times, counted apart from the limiter, never put more than the window's share in any span."""
    rpm, window, calls = 600.0, 3.0, 70   # 30 requests in any 3 s
    gate = LaneGate(probe_calls_for(rpm, 1, window))
    limits = ModelLimits(rpm, None, 64, window_s=window)
    events: list[tuple[str, float]] = []

    async def one() -> None:
        import time

        probe = await gate.enter()   # as with a budget: only an answer opens the gate
        async with limits.slot(10):
            events.append(("sent", time.monotonic()))
            await asyncio.sleep(1.0)
            events.append(("answered", time.monotonic()))
        await gate.leave(probe, "")

    async def run() -> None:
        await asyncio.wait_for(asyncio.gather(*(one() for _ in range(calls))), 60)

    asyncio.run(run())
    kinds = [kind for kind, _ in events]
    assert kinds[:30] == ["sent"] * 30                  # the window's 30 before the first answer
    sends = [at for kind, at in events if kind == "sent"]
    assert len(sends) == calls and most_in_any_window(sends, window) == 30


@pytest.mark.e2e
def test_two_lanes_share_one_declared_window_through_the_limiter_actor(ray_address):
    """Two lanes (two gateway processes' views) take leases of one model's window from the real
    limiter actor: the send times of both, counted apart from the limiter, never put more than the
    window's share in any span (the schedule's shape is the fake-clock tests' above)."""
    import time

    import ray

    from prefray.engine.calls.limits import SharedBuckets

    ray.init(address=ray_address, namespace="prefray-test-window", log_to_driver=False, ignore_reinit_error=True)
    rpm, window, calls = 600.0, 2.0, 30          # 20 requests in any 2 s, 60 calls in all
    key = ("window-model", rpm, None, window)
    lanes = [SharedBuckets("limiter-window-test", "prefray-test-window", 30.0, key, rpm, None, window)
             for _ in range(2)]
    sends: list[float] = []

    async def lane_calls(lane: SharedBuckets) -> None:
        for left in range(calls - 1, -1, -1):
            await lane.take(1, 0, waiting=min(left, 7))
            sends.append(time.monotonic())

    async def both() -> None:
        await asyncio.gather(*(lane_calls(lane) for lane in lanes))

    try:
        asyncio.run(both())
    finally:
        ray.shutdown()
    sends.sort()
    assert len(sends) == 2 * calls
    assert most_in_any_window(sends, window) <= 20


def test_a_429_paces_a_windowed_lane_and_a_5xx_does_not():
    limits = ModelLimits(600.0, None, 64, window_s=60.0)
    assert limits.buckets.requests.pacer is None                  # the declared window alone
    asyncio.run(limits.pushed_back())                             # a 5xx: the in-flight window halves
    assert limits.buckets.requests.pacer is None and limits.window.size == 32
    asyncio.run(limits.pushed_back(refused=True))                 # a 429 the window allowed
    assert limits.buckets.requests.pacer is not None and limits.paced
    assert ModelLimits(600.0, None, 64).buckets.requests.pacer is not None   # no window declared: paced
