"""Gateways that die are restarted by Ray; every unit still ends stored."""

from __future__ import annotations

import os
import signal

import pyarrow.dataset as ds
import pytest
import ray

from tests.test_reliability_runs import start_launch, wait_for

pytestmark = pytest.mark.e2e


def gateway_pids() -> list[int]:
    pids = []
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["namespace"] == "prefray" and entry["name"].startswith("gateway-"):
            try:
                handle = ray.get_actor(entry["name"], namespace="prefray")
                pids.append(ray.get(handle.__ray_call__.remote(lambda self: os.getpid()), timeout=20))
            except Exception:  # noqa: BLE001 - a gateway between death and restart: try again later
                continue
    return pids


def test_gateway_killed_three_times_every_unit_stored(ray_address, make_fake_server, tmp_path):
    server = make_fake_server("--latency", "0.2")
    run_dir = tmp_path / "run"
    process = start_launch("model=fake", "judge=fake", *server.model_overrides(), f"run.dir={run_dir}", "limit=3",
                           "benchmark.samples=2", "run.cache=false", "run.shard_size=2",
                           "model.max_concurrency=2", "judge.max_concurrency=2")
    ray.init(address=ray_address, namespace="prefray-test-faults", log_to_driver=False)
    killed: list[int] = []
    try:
        for kill in range(3):
            target = 4 + 8 * kill
            wait_for(lambda target=target: server.stats()["requests"] >= target or process.poll() is not None)
            assert process.poll() is None, "the run ended before the gateway was killed 3 times"
            pids = []
            wait_for(lambda pids=pids: bool(pids.extend(p for p in gateway_pids() if p not in killed) or pids))
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids[0])
        out, err = process.communicate(timeout=300)
    finally:
        ray.shutdown()
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert len(killed) == 3
    assert process.returncode == 0, err
    rows = ds.dataset(run_dir / "shards", format="parquet").to_table().to_pylist()
    units = {r["unit_id"]: r for r in rows}
    generations = [r for r in units.values() if r["stage"] == "generate"]
    judged = [r for r in units.values() if r["stage"] != "generate"]
    assert len(generations) == 3 * 2 and len(judged) == 3 * 2 * 5     # 4 verdicts + 1 completeness each
    assert all(r["status"] == "ok" for r in units.values())
