"""Rate limits: pacing without bursts, in-flight calls from Little's law, limits learned from headers."""

from __future__ import annotations

import asyncio
import math
import time
from datetime import UTC, datetime, timedelta

import pyarrow.dataset as ds
import pytest

from prefray.engine.calls.limits import ModelLimits
from prefray.engine.calls.rate_headers import duration_seconds, read_rate_headers, seconds_until


def most_in_any_window(stamps: list[float], width: float) -> int:
    stamps = sorted(stamps)
    best, start = 0, 0
    for end, stamp in enumerate(stamps):
        while stamp - stamps[start] >= width:
            start += 1
        best = max(best, end - start + 1)
    return best


async def send(limits: ModelLimits, calls: int, latency: float) -> list[float]:
    stamps: list[float] = []

    async def one() -> None:
        async with limits.slot(10):
            stamps.append(time.monotonic())
            await asyncio.sleep(latency)
            await limits.answered(latency)

    await asyncio.gather(*(one() for _ in range(calls)))
    return stamps


def test_requests_are_paced_from_the_first_second_with_no_burst():
    rpm = 1200  # 20 a second
    stamps = asyncio.run(send(ModelLimits(rpm, None, 64), 45, 0.05))
    for width in (0.5, 1.0, 2.0):
        # no window of `width` seconds holds more than its share of the minute's requests, and the
        # one late send the pacer allows (limits.Pacer: a send late by less than an interval keeps
        # the schedule, so it may share a window with the on-time ones), and one more for the
        # stamp taken on this event loop a moment after its send on a busy machine
        assert most_in_any_window(stamps, width) <= rpm / 60 * width + 2, width


def test_a_late_send_keeps_the_schedule_and_an_idle_pacer_starts_a_new_one():
    from prefray.engine.calls.limits import Pacer

    class Clock:   # sleeping moves it exactly; a busy event loop is a jump
        now = 100.0

        def __call__(self) -> float:
            return self.now

        async def sleep(self, seconds: float) -> None:
            self.now += seconds

    async def scenario() -> list[float]:
        clock = Clock()
        pacer = Pacer(1.0, clock=clock, sleep=clock.sleep)
        sent = []
        for k in range(6):
            await pacer.acquire()
            sent.append(clock.now - 100.0)
            if k == 1:
                clock.now += 1.6      # the next waiter wakes 0.6 s after its slot (t = 2)
        clock.now += 5.0              # idle for longer than an interval
        for _ in range(3):
            await pacer.acquire()
            sent.append(clock.now - 100.0)
        return sent

    sent = asyncio.run(scenario())
    # slots 0..5: the late one goes at 2.6 and the next keeps its slot at 3 (a leaky bucket of one
    # request would have sent it at 3.6, and every later one 0.6 s late)
    assert sent[:6] == pytest.approx([0, 1, 2.6, 3, 4, 5])
    # after the pause: a new schedule from the first request, no catch-up burst
    assert sent[6:] == pytest.approx([10, 11, 12])
    for _, t in enumerate(sent):   # never more than one interval's sends + 1 in any interval
        assert sum(1 for u in sent if t <= u < t + 1.0) <= 2


def test_in_flight_calls_follow_littles_law_and_halve_on_pushback():
    limits = ModelLimits(1200, None, 100)
    assert limits.window.size == 100        # pacing sets the rate: the window starts open
    asyncio.run(limits.pushed_back())
    asyncio.run(limits.pushed_back())
    assert limits.window.size == 25         # each 429 or 5xx halves it
    asyncio.run(limits.pushed_back())
    asyncio.run(limits.pushed_back())
    assert limits.window.size == 6
    asyncio.run(send(limits, 30, 0.4))
    # grows back to 20 requests a second × 0.4 s in flight × 1.25 margin + 1
    assert limits.window.size == 11
    capped = ModelLimits(1200, None, 6)
    asyncio.run(send(capped, 20, 0.4))
    assert capped.window.size == 6   # never above the configured ceiling


def test_without_a_configured_rpm_the_lane_learns_it_from_the_headers():
    limits = ModelLimits(None, None, 32)
    assert limits.buckets.requests is None and limits.window.size == 32
    asyncio.run(limits.answered(0.2, {"x-ratelimit-limit-requests": "120", "x-ratelimit-remaining-requests": "80",
                                      "x-ratelimit-reset-requests": "30s"}))
    assert limits.rpm == 120 and limits.buckets.requests is not None and limits.learned
    before = time.monotonic()
    asyncio.run(limits.answered(0.2, {"x-ratelimit-limit-requests": "120", "x-ratelimit-remaining-requests": "0",
                                      "x-ratelimit-reset-requests": "6m0s"}))
    assert 359 <= limits.paused_until - before <= 361   # waits for the reset instead of meeting a 429


def test_rate_headers_of_both_providers_are_read():
    assert duration_seconds("6m0s") == 360 and duration_seconds("250ms") == 0.25 and duration_seconds("1.5s") == 1.5
    assert duration_seconds("soon") is None
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert seconds_until((now + timedelta(seconds=42)).isoformat().replace("+00:00", "Z"), now) == 42
    seen = read_rate_headers({"anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": "7",
                              "anthropic-ratelimit-requests-reset": "2999-01-01T00:00:00Z"})
    assert (seen.limit_requests, seen.remaining_requests) == (50, 7) and seen.reset_requests_s > 0
    openai = read_rate_headers({"X-RateLimit-Limit-Requests": "500", "x-ratelimit-remaining-requests": "499",
                                "x-ratelimit-reset-requests": "120ms", "x-ratelimit-limit-tokens": "30000"})
    assert (openai.limit_requests, openai.remaining_requests, openai.reset_requests_s, openai.limit_tokens) == \
        (500, 499, 0.12, 30000)


@pytest.mark.e2e
def test_a_strict_sliding_window_provider_sees_no_429(run_cli, make_fake_server, tmp_path):
    """The server allows 50 requests in any five-second window (600 rpm); a one-second burst allowance
    at the start (10 at once, then 10 a second: 60 in the first five seconds) breaks it."""
    # The server allows 5% above the lane's rpm: a grant of the shared limiter (a Ray actor) reaches
    # the server one actor reply later, and on a loaded machine that reply's delay varies by more
    # than one grant's interval (0.1 s here), so two grants can land closer than they were given.
    # Two processes each pacing at the full rpm would still send at twice the server's limit.
    server = make_fake_server("--rpm", "630", "--strict-window", "5", "--latency", "0.05")
    run = tmp_path / "run"
    run_cli("model=fake", "judge=fake", "benchmark=benchpres", "condition=default", "limit=4", "run.cache=false",
            *server.model_overrides(), "model.rpm=600", "judge.rpm=600", f"run.dir={run}")
    stats = server.stats()
    assert stats["rate_limited"] == 0, stats
    stamps = [r["started_at"] for r in ds.dataset(run / "shards", format="parquet").to_table().to_pylist()]
    assert len(stamps) >= 20


@pytest.mark.e2e
def test_a_lane_on_two_processes_sends_from_both_within_one_shared_rpm(run_cli, make_fake_server, tmp_path):
    """The judge's lane on two gateway processes: both send (one paid-record file each holds judge
    calls), and together they stay within the one strict window (each pacing at the full rpm on its
    own would send twice as fast and meet 429s)."""
    import json

    # The server allows 5% above the lane's rpm: a grant of the shared limiter (a Ray actor) reaches
    # the server one actor reply later, and on a loaded machine that reply's delay varies by more
    # than one grant's interval (0.1 s here), so two grants can land closer than they were given.
    # Two processes each pacing at the full rpm would still send at twice the server's limit.
    server = make_fake_server("--rpm", "630", "--strict-window", "5", "--latency", "0.05")
    run = tmp_path / "run"
    run_cli("model=fake", "judge=fake", "benchmark=benchpres", "condition=default", "limit=4", "run.cache=false",
            *server.model_overrides(), "model.rpm=600", "judge.rpm=600", "judge.gateway_processes=2",
            "run.compact=false", f"run.dir={run}")
    stats = server.stats()
    assert stats["rate_limited"] == 0, stats
    judge_senders = {path.name for path in (run / "ledger").glob("*.jsonl")
                     if any(json.loads(line)["model_id"] == "fake-judge" for line in path.open())}
    assert len(judge_senders) == 2, judge_senders
    rows = ds.dataset(run / "shards", format="parquet").to_table().to_pylist()
    assert len(rows) >= 60 and all(r["status"] == "ok" for r in rows)


def test_processes_per_lane_and_units_per_shard_follow_the_rate():
    from prefray.engine.calls.gateway import lane_processes
    from prefray.engine.flow.runner import shard_units
    from prefray.engine.types import ModelSpec

    def spec(**fields) -> ModelSpec:
        return ModelSpec(name="m", provider="openai", model_id="m", **{"max_concurrency": 64, **fields})

    assert lane_processes(spec()) == 1 and lane_processes(spec(rpm=6000)) == 1
    assert lane_processes(spec(rpm=6001)) == 2 and lane_processes(spec(rpm=30000)) == 5   # 100 calls/s each
    assert lane_processes(spec(gateway_processes=3, rpm=500)) == 3                       # configured wins
    assert lane_processes(spec(gateway_processes=8, max_concurrency=4)) == 4              # a call slot each
    # a shard holds about one second of a rate-limited lane's sends, at most run.shard_size units
    assert shard_units(spec(), 16) == 16 and shard_units(spec(rpm=300), 16) == 5
    assert shard_units(spec(rpm=500), 16) == 8 and shard_units(spec(rpm=30), 16) == 1
    assert shard_units(spec(rpm=30000), 16) == 16 and shard_units(spec(rpm=300, tier="batch"), 16) == 16
    # run.shard_size unset: a lane without a rate takes its max_concurrency (16 to 64) per shard, so
    # every unit of a shard is answered in about one latency; a rate-limited one about a second of sends
    assert [shard_units(spec(max_concurrency=c), None) for c in (1, 4, 16, 32, 64, 256)] == [16, 16, 16, 32, 64, 64]
    assert shard_units(spec(rpm=500), None) == 8 and shard_units(spec(rpm=30000), None) == 64
    assert shard_units(spec(rpm=30000, max_concurrency=4), None) == 16
    assert shard_units(spec(tier="batch"), None) == 16


# -- lanes shared by jobs take turns ------------------------------------------------------------
async def send_tagged(limits: ModelLimits, tags: list[str], latency: float) -> list[str]:
    """Queue one call per tag, in this order; return the tags in the order the lane sent them."""
    sent: list[str] = []

    async def one(tag: str) -> None:
        async with limits.slot(10, tag):
            sent.append(tag)
            await asyncio.sleep(latency)

    calls = []
    for tag in tags:
        calls.append(asyncio.ensure_future(one(tag)))
        await asyncio.sleep(0)            # each call reaches the lane before the next is made
    await asyncio.gather(*calls)
    return sent


def test_a_lane_takes_turns_across_tags_not_arrival_order():
    # each call lasts 50 ms, far longer than the queueing of all 18 (a few microseconds each), so every
    # call is in line before the first one is done, however loaded the machine
    sent = asyncio.run(send_tagged(ModelLimits(None, None, 1), ["a"] * 12 + ["b"] * 4 + ["c"] * 2, 0.05))
    # "a" 1 is sent on arrival, "a" 2 holds the turn waiting for the one slot, "a" 3 has the next
    # turn (its tag was first in line); then the three tags alternate while each has calls waiting
    assert sent == ["a", "a", "a", "b", "c", "a", "b", "c", "a", "b", "a", "b"] + ["a"] * 6
    paced = asyncio.run(send_tagged(ModelLimits(6000, None, 4), ["a"] * 20 + ["b"] * 5, 0.01))
    assert max(i for i, tag in enumerate(paced) if tag == "b") < 12   # b is done long before a


@pytest.mark.e2e
def test_two_jobs_judge_units_interleave_on_a_shared_lane(run_cli, make_fake_server, tmp_path):
    """Job "fake" answers at once, so all its judge units wait on the judge lane (one call at a time,
    0.2 s each) before job "fake-anthropic" has its first answer (its gateway starts, then answers
    after 0.5 s); the lane serves the second job's units in turns with the first's, not after them."""
    server = make_fake_server("--model-latency", "fake-claude=0.5,fake-judge=0.2")
    run = tmp_path / "run"
    # 4 instances × 3 samples: 12 answers, 48 verdicts and 12 scores per job, in shards of 16 (all of
    # a stage's shards are in flight at once: the driver holds none back)
    run_cli("-m", "model=fake,fake-anthropic", "judge=fake", "benchmark=benchpres", "condition=default", "limit=4",
            "run.cache=false", "run.shard_size=16", "judge.max_concurrency=1", *server.model_overrides(),
            f"run.dir={run}")
    lane = [r for r in ds.dataset(run / "shards", format="parquet").to_table().to_pylist() if r["role"] == "judge"]
    first = [r for r in lane if r["model"] == "fake"]
    second = [r for r in lane if r["model"] == "fake-anthropic"]
    assert len(first) == len(second) == 60
    arrived = min(r["started_at"] for r in second)
    # every judge unit of the first job had reached the lane before the second job's first one did,
    # and many of them were still waiting then
    assert max(r["started_at"] for r in first) < arrived
    assert sum(r["finished_at"] > arrived for r in first) >= 10
    # one call at a time, so answers come in the order of sends: before the second job's first unit
    # went out, the first job finished only the call in flight, the one holding the turn, and one of
    # each of its tags ahead in line (verdicts, scores): 4; arrival order would send all its waiting
    # units (10 or more, above) first. Two more are allowed: `started_at` is stamped when a call enters
    # its gateway, and on a loaded machine the lane may take one or two of the first job's units
    # before the second job's first unit reaches its queue.
    first_served = min(r["finished_at"] for r in second)
    assert sum(arrived < r["finished_at"] < first_served for r in first) <= 6
    first_done = sorted(r["finished_at"] for r in first)
    assert first_served < first_done[int(0.9 * len(first_done))]


def test_a_paced_lane_probes_with_what_its_pacer_sends_in_the_latency_prior():
    from prefray.engine.calls.lanegate import LATENCY_PRIOR_S, PROBE_CALLS, probe_calls_for

    assert probe_calls_for(None) == PROBE_CALLS                        # no rate: two probes, then wait
    assert probe_calls_for(500) == math.ceil(500 / 60 * LATENCY_PRIOR_S) == 17
    assert probe_calls_for(12000, processes=2) == 200                  # each process its share of the rate
    assert probe_calls_for(30) == PROBE_CALLS                          # never fewer than two
    assert probe_calls_for(500, window_s=60) == 500                    # a declared window: all of it at once

    async def paced() -> int:
        # 600 rpm, no answer for 0.5 s: the gate lets the pacer's sends through meanwhile (two probes
        # and a wait for the first answer was the old way)
        from prefray.engine.calls.lanegate import LaneGate

        gate, limits = LaneGate(probe_calls_for(600)), ModelLimits(600, None, 64)
        in_flight, most = 0, 0

        async def one() -> None:
            nonlocal in_flight, most
            probe = await gate.enter()
            async with limits.slot(10):
                in_flight += 1
                most = max(most, in_flight)
                await asyncio.sleep(0.5)
                in_flight -= 1
            await gate.leave(probe, "")

        await asyncio.wait_for(asyncio.gather(*(one() for _ in range(8))), 10)
        return most

    assert asyncio.run(paced()) > PROBE_CALLS


def test_a_lease_is_as_large_as_the_callers_waiting_and_old_slots_are_not_sent_late():
    """The lane's side of a lease (the limiter's answer stood in by recording what was asked; the
    real actor is the next test's): a caller with three behind it leases four slots and their
    tokens, the next three take from the lease, and slots left from before a pause are dropped."""
    from prefray.engine.calls.limits import LEASE_S, MAX_LEASE, SharedBuckets

    class Recorded(SharedBuckets):
        async def _remote(self, requests: int, tokens: int) -> list[float]:
            self.asked.append((requests, tokens))
            return [0.0] * requests   # every slot free at once (a declared window with room)

    lane = Recorded("limiter-unit", "ns", 30.0, ("m", 6000.0, 600000.0), 6000.0, 600000.0)
    lane.asked = []

    async def calls() -> None:
        for left in (3, 2, 1, 0):
            await lane.take(1, 100, waiting=left)
        await lane.take(1, 100, waiting=0)
        await lane.take(1, 100, waiting=9)          # leases 10
        await asyncio.sleep(LEASE_S + 0.2)          # nine leased slots (the last 0.09 s ahead) grow old
        await lane.take(1, 250, waiting=0)

    asyncio.run(calls())
    # the last lease needs no tokens: the nine unsent calls' 900 stay as credit
    assert lane.asked == [(4, 400), (1, 100), (10, 1000), (1, 0)]
    assert not lane.slots and lane.credit == 900 - 250
    assert lane.lease_size(100) == MAX_LEASE and lane.lease_size(0) == 1


@pytest.mark.e2e
def test_lanes_lease_slots_of_the_shared_schedule_in_few_actor_calls(ray_address):
    """Two lanes (two processes' views) share one model's 12,000 rpm through the real limiter actor:
    together they send on its one schedule (300 sends take at least 299 slot intervals), and they
    reach the actor about once per lease, not once per call; tokens are leased ahead and an
    over-estimate's reconciliation is charged to the next lease."""
    import ray

    from prefray.engine.calls.limits import PACE_MARGIN, SharedBuckets

    ray.init(address=ray_address, namespace="prefray-test-lease", log_to_driver=False, ignore_reinit_error=True)

    class Counted(SharedBuckets):
        leases: list[tuple[int, int]]

        async def _remote(self, requests: int, tokens: int) -> list[float]:
            self.leases = [*getattr(self, "leases", []), (requests, tokens)]
            return await super()._remote(requests, tokens)

    rpm, tpm, calls = 12000.0, 6_000_000.0, 150
    key = ("lease-model", rpm, tpm)
    lanes = [Counted("limiter-lease-test", "prefray-test-lease", 30.0, key, rpm, tpm) for _ in range(2)]
    sends: list[float] = []

    async def lane_calls(lane: SharedBuckets) -> None:
        for left in range(calls - 1, -1, -1):
            await lane.take(1, 100, waiting=left)
            sends.append(time.monotonic())

    async def both() -> None:
        await asyncio.gather(*(lane_calls(lane) for lane in lanes))
        await lanes[0].take(0, 50)   # a call that used 50 tokens more than its estimate

    try:
        asyncio.run(both())
    finally:
        ray.shutdown()
    interval = 60.0 / (rpm * PACE_MARGIN)
    sends.sort()
    assert sends[-1] - sends[0] >= (2 * calls - 1) * interval * 0.9          # one schedule, not two
    for lane in lanes:
        assert len(lane.leases) <= math.ceil(calls / 32) + 2                  # leases of up to 32 slots
        assert sum(slots for slots, _ in lane.leases) == calls                 # none left over: `waiting`
        assert all(tokens == 100 * slots for slots, tokens in lane.leases)     # each slot's estimate
    assert lanes[0].credit == -50 and lanes[1].credit == 0                     # the 50 owed, for the next lease
