"""A hopeless lane (wrong key, unknown model) stops after a few answers; the rest is stored skipped."""

from __future__ import annotations

import asyncio
from collections import Counter

import pyarrow.dataset as ds
import pytest

from prefray.engine.lanegate import HOPELESS_AFTER, PROBE_CALLS, LaneGate


def test_gate_stops_after_consecutive_refusals_and_opens_on_an_answer():
    async def scenario():
        gate = LaneGate(probe_calls=2, hopeless_after=3)
        assert await gate.enter() and await gate.enter()
        third = asyncio.ensure_future(gate.enter())      # a third probe waits for a free slot
        await asyncio.sleep(0.01)
        assert not third.done()
        await gate.leave(True, "auth")
        assert await third is True
        await gate.leave(True, "auth")
        await gate.leave(True, "auth")
        assert gate.stopped == "auth" and await gate.enter() is False

        other = LaneGate(probe_calls=1, hopeless_after=2)
        assert await other.enter()
        await other.leave(True, "auth")
        assert await other.enter()
        await other.leave(True, "server_error")           # not hopeless: the lane opens, count resets
        assert other.open and not other.stopped and await other.enter() is False

    asyncio.run(scenario())


@pytest.mark.parametrize("status,cause", [(401, "auth"), (404, "model_not_found")])
def test_hopeless_lane_stops_early(run_cli, make_fake_server, tmp_path, status, cause):
    server = make_fake_server("--reject", f"fake-model={status}")
    run_dir = tmp_path / "run"
    done = run_cli("model=fake", "judge=fake", *server.model_overrides(), f"run.dir={run_dir}", "limit=4",
                   "benchmark.samples=3", "run.cache=false", "run.shard_size=2", expect_code=3)
    sent = server.stats()["by_model"].get("fake-model", 0)
    assert HOPELESS_AFTER <= sent <= HOPELESS_AFTER + PROBE_CALLS - 1
    rows = ds.dataset(run_dir / "shards", format="parquet").to_table().to_pylist()
    generations = [r for r in rows if r["stage"] == "generate"]
    assert len(generations) == 4 * 3                                    # every unit stored
    assert Counter(r["status"] for r in generations) == {"failed": sent, "skipped": 12 - sent}
    assert {r["cause"] for r in generations} == {cause}
    assert f"{cause} 12" in done.stderr and "prefray.rerun" in done.stderr
