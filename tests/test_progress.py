"""Progress counts per call: done/total, failures, tokens, dollars, requests/s and ETA."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from prefray.engine.flow.progress import LiveProgress, ProgressState, describe


@dataclass
class Result:
    status: str = "ok"
    input_tokens: int = 100
    output_tokens: int = 20
    cost_usd: float = 0.01
    cached: bool = False


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_counts_advance_per_call_and_shard_snapshots_never_go_back():
    clock = Clock()
    state = ProgressState(clock)
    state.update("b/m/c", "generate", 4, 10)  # 4 units stored by an earlier launch
    for second in range(1, 4):
        clock.now = float(second)
        state.record("b/m/c", "generate", Result(status="failed" if second == 2 else "ok"))
    state.update("b/m/c", "generate", 6, 10)  # a shard of 2 ended: fewer than the calls recorded
    job = state.job("b/m/c")
    assert (job.done, job.total, job.failed, job.tokens) == (7, 10, 1, 360)
    assert job.cost_usd == pytest.approx(0.03)
    clock.now = 4.0
    # 3 calls answered between t=1 and t=4 → 1 req/s; 3 left → 3 s
    assert job.rate(clock.now) == pytest.approx(1.0) and job.eta_s(clock.now) == pytest.approx(3.0)
    assert describe(job, clock.now) == {"failed": "1 failed", "tokens": "360 tok", "dollars": "$0.0300",
                                        "rate": "1.0 req/s", "eta": "ETA 0:03"}


def test_total_adds_jobs_and_stages_cached_answers_cost_nothing():
    clock = Clock()
    state = ProgressState(clock)
    state.update("a", "generate", 0, 2)
    state.update("b", "generate", 0, 3)
    clock.now = 1.0
    state.record("a", "generate", Result(cached=True))
    state.record("b", "generate", Result())
    state.update("b", "judge", 0, 5)
    total = state.total()
    assert (total.done, total.total, total.cost_usd) == (2, 10, pytest.approx(0.01))
    assert state.current_stage("b") == "judge" and state.jobs() == ["a", "b"]


def test_shard_snapshots_alone_still_give_a_rate():
    clock = Clock()
    state = ProgressState(clock)
    state.update("j", "s", 0, 8)
    clock.now = 2.0
    state.update("j", "s", 4, 8)
    clock.now = 4.0
    state.update("j", "s", 8, 8)
    job = state.job("j")
    assert job.rate(clock.now) == pytest.approx(4.0) and job.eta_s(clock.now) == 0


def test_display_accepts_both_callbacks_without_a_terminal():
    class Model:
        name = "m"

    class Job:
        benchmark, condition, model = "b", "c", Model()

    with LiveProgress(enabled=True) as progress:
        progress.update(Job(), "generate", 0, 2)
        progress.record(Job(), "generate", Result())
        progress.update(Job(), "generate", 2, 2)
    task = progress.progress.tasks[progress.tasks["b/m/c"]]
    assert (task.completed, task.total) == (2, 2)


WATCH_SCRIPT = """
import asyncio, json, sys
import ray
from prefray.engine.calls.dispatch import Gateways
from prefray.engine.calls.dispatch import CALL_TAG
from prefray.engine.flow.progress import watch_gateways
from prefray.engine.types import ChatRequest, ModelSpec

if not ray.is_initialized():
    ray.init(address="auto", namespace="prefray")
spec = ModelSpec(name="fake", provider="openai", model_id="fake-model", base_url=sys.argv[1], max_concurrency=1)
seen = []

async def main():
    gateways = Gateways()
    watcher = asyncio.ensure_future(watch_gateways(gateways, lambda *a: seen.append(a), every_s=0.1))
    CALL_TAG.set("benchpres/fake/default\\x1fgenerate")
    requests = [ChatRequest(messages=({"role": "user", "content": f"q{i}"},), params={"max_tokens": 8})
                for i in range(6)]
    results = await gateways.run_batch(spec, requests)
    await asyncio.sleep(0.5)
    watcher.cancel()
    await gateways.close()
    print(json.dumps({"ok": sum(r.status == "ok" for r in results), "seen": seen}))

asyncio.run(main())
"""


@pytest.mark.e2e
def test_gateways_report_each_finished_call_while_a_batch_runs(run_cli, make_fake_server):
    """One batch of six calls, one at a time at 0.3 s each: the feed sees them arrive in several steps."""
    import json

    from tests.conftest import script_here

    server = make_fake_server("--latency", "0.3")
    done = script_here(WATCH_SCRIPT, server.openai_url)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    steps = [s for s in out["seen"] if s[1] > 0]
    assert out["ok"] == 6 and sum(s[1] for s in steps) == 6
    assert len(steps) >= 3                      # the count advanced while the batch was still running
    assert {s[0] for s in steps} == {"benchpres/fake/default\x1fgenerate"}
    assert all(s[3] > 0 for s in steps)         # tokens come with the calls
