"""A hopeless lane (wrong key, unknown model) stops after a few answers; the rest is stored skipped."""

from __future__ import annotations

import asyncio
from collections import Counter

import pyarrow.dataset as ds
import pytest

from prefray.engine.calls.lanegate import HOPELESS_AFTER, PROBE_CALLS, LaneGate


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


def test_a_probe_still_running_after_the_patience_opens_the_lane_unless_a_refusal_came():
    async def scenario():
        gate = LaneGate(probe_calls=2, hopeless_after=3)
        assert await gate.enter(patience=0.05) and await gate.enter(patience=0.05)
        waiting = asyncio.ensure_future(gate.enter(patience=0.05))
        await asyncio.sleep(0.01)
        assert not waiting.done()                         # both probes in flight, no answer yet
        await asyncio.sleep(0.1)
        assert gate.open and await waiting is False       # accepted: the lane runs at full concurrency

        refused = LaneGate(probe_calls=2, hopeless_after=3)
        assert await refused.enter(patience=0.05) and await refused.enter(patience=0.05)
        await refused.leave(True, "auth")                 # a refusal before the patience is over
        await asyncio.sleep(0.1)
        assert not refused.open                           # the other probe's answer decides, as without patience
        await refused.leave(True, "auth")
        assert await refused.enter(patience=0.05)
        await refused.leave(True, "auth")
        assert refused.stopped == "auth"

        patient = LaneGate(probe_calls=1, hopeless_after=3)
        assert await patient.enter()                      # no patience (a run with a budget): only an answer opens
        await asyncio.sleep(0.1)
        assert not patient.open

    asyncio.run(scenario())


@pytest.mark.e2e
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
    assert f"{cause} 12" in done.stderr and "prefray rerun" in done.stderr
    # the 5 judge units of each unanswered generation were never built: counted, not forgotten
    assert "60 later-stage unit(s) that could not be built" in done.stderr
    assert (run_dir / "incomplete.csv").read_text().splitlines()[1] == "benchpres,fake,default,12,60,72"


@pytest.mark.e2e
def test_rerun_points_a_model_at_another_endpoint(run_cli, make_fake_server, tmp_path):
    from tests.conftest import command_here

    wrong = make_fake_server("--reject", "fake-model=401")
    right = make_fake_server()
    run_dir = tmp_path / "run"
    run_cli("model=fake", "judge=fake", *wrong.model_overrides(), f"run.dir={run_dir}", "limit=2",
            "benchmark.samples=1", "run.cache=false", expect_code=3)
    done = command_here("rerun", str(run_dir), f"model.base_url={right.openai_url}",
                        f"judge.base_url={right.openai_url}",
                        "model.rpm=6000", "model.max_concurrency=4", "model.timeout_s=20", "run.cache=false")
    assert done.returncode == 0, done.stderr
    assert right.stats()["by_model"]["fake-model"] == 2
    rows = ds.dataset(run_dir / "shards", format="parquet").to_table().to_pylist()
    best = {}
    for row in sorted(rows, key=lambda r: r["attempt"]):
        best[row["unit_id"]] = row
    assert all(r["status"] == "ok" for r in best.values()) and len(best) == 2 + 2 * 5


def test_rerun_refuses_overrides_that_change_results(tmp_path):
    from prefray.engine.results.manifest import apply_run_overrides

    configs = [{"run": {}, "model": {"params": {}}, "judge": {}}]
    apply_run_overrides(configs, ["model.base_url=http://127.0.0.1:9/v1", "judge.rpm=5", "run.shard_size=3"], tmp_path)
    assert configs[0]["model"]["base_url"] == "http://127.0.0.1:9/v1" and configs[0]["judge"]["rpm"] == 5
    for bad in ("model.model_id=other", "model.params.max_tokens=5", "run.dir=/tmp/x", "benchmark.samples=2"):
        with pytest.raises(ValueError, match="can change on a rerun"):
            apply_run_overrides(configs, [bad], tmp_path)
