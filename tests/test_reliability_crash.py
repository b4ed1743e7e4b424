"""kill -9 at random moments: answered calls survive, the resume re-sends at most what was in flight."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from prefray.engine.rundir import RunDir
from prefray.engine.rundir.journal import ReplayPool, load_replay
from prefray.engine.types import CallResult, ChatRequest, ModelSpec
from tests.test_reliability_runs import start_launch, wait_for

KILLS = 3
IN_FLIGHT = 2 * 2          # two lanes (model, judge) × max_concurrency 2


def test_replay_pool_hands_each_journaled_answer_out_once():
    spec = ModelSpec(name="m", provider="openai", model_id="m-1")
    request = ChatRequest(messages=({"role": "user", "content": "hi"},))
    key = (spec.model_id, request.content_hash(spec.model_id))
    from collections import deque

    pool = ReplayPool({key: deque([CallResult(status="ok", text="a"), CallResult(status="ok", text="b")])})
    assert [pool.take(spec, request).text, pool.take(spec, request).text, pool.take(spec, request)] == ["a", "b", None]


def settle(server, quiet: float = 0.75) -> int:
    """The provider's request count once it has not moved for `quiet` seconds (three call latencies)."""
    while True:
        before = server.stats()["requests"]
        time.sleep(quiet)
        if server.stats()["requests"] == before:
            return before


@pytest.mark.e2e
def test_kill_9_at_random_moments_resends_at_most_the_calls_in_flight(run_cli, make_fake_server, tmp_path):
    server = make_fake_server("--latency", "0.25")
    run_dir = tmp_path / "run"
    args = ["model=fake", "judge=fake", *server.model_overrides(), f"run.dir={run_dir}", "limit=3",
            "benchmark.samples=2", "run.cache=false", "run.shard_size=30", "model.max_concurrency=2",
            "judge.max_concurrency=2"]
    chance = random.Random(20261130)
    for _ in range(KILLS):
        sent = server.stats()["requests"]
        process = start_launch(*args)
        try:
            step = chance.randint(3, 20)
            wait_for(lambda sent=sent, step=step, process=process:
                     server.stats()["requests"] >= sent + step or process.poll() is not None)
            time.sleep(chance.uniform(0.0, 0.5))
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
        settle(server)                                       # its gateway went with it
    run_cli(*args)                                           # the resume, in this process
    rows = ds.dataset(run_dir / "shards", format="parquet").to_table().to_pylist()
    units = {r["unit_id"] for r in rows}
    assert len(units) == len(rows) == 3 * 2 * (1 + 5)       # every unit stored once
    resent = server.stats()["requests"] - len(units)
    assert resent <= KILLS * IN_FLIGHT, resent
    assert not list(run_dir.rglob("*.tmp"))                  # no temp file left behind
    assert not (run_dir / "journal").exists()                 # folded away once every answer is stored
    assert len(load_replay(RunDir(run_dir))) == 0

    clean = tmp_path / "clean"
    run_cli(*[a if not a.startswith("run.dir=") else f"run.dir={clean}" for a in args])
    assert (run_dir / "metrics.csv").read_text() == Path(clean / "metrics.csv").read_text()
