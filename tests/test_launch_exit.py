"""A launch's process that started its own Ray cluster ends as soon as its run is written, and the
cluster's processes with it (engine/flow/exits.py's end_process)."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import launch


def _marked(mark: str) -> list[int]:
    """The processes alive now whose environment carries `mark` (Ray's processes inherit the launch's)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if mark.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:   # gone meanwhile, or not ours to read
            continue
    return found


@pytest.mark.e2e
def test_a_launch_with_its_own_cluster_exits_with_its_run_written_and_the_cluster_ended(fake_server, tmp_path):
    """Without RAY_ADDRESS the launch starts a local cluster. When the process exits: its code is the
    run's, its last line (the found line, through a pipe) was said, every figure and table is written,
    and no process of its cluster outlives it. The cluster was not stopped in Ray's orderly way (that
    sends the raylet SIGTERM and waits for each process in turn): it ended with the process. Its
    head node started neither the autoscaler monitor, the log monitor nor the API server (dashboard),
    and its two agents were prefray's stand-ins (engine/flow/node_agents.py: no metrics agent, no HTTP
    server, no runtime environments)."""
    mark = f"prefray-test-{uuid.uuid4().hex}"
    ray_temp = tempfile.mkdtemp(prefix="r")    # short: Ray's socket paths live under it
    env = {"RAY_ADDRESS": "", "PREFRAY_TEST_MARK": mark, "RAY_TMPDIR": ray_temp}   # no address: a cluster of its own
    run_dir = tmp_path / "run"
    try:
        done = launch("model=fake", "judge=fake", "limit=1", *fake_server.model_overrides(), f"run.dir={run_dir}",
                      "run.cache=false", "run.progress=false", env=env)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().splitlines()[-1].startswith("prefray: found: benchpres/fake/default")
        assert (run_dir / "metrics.csv").stat().st_size > 0
        drawn = json.loads((run_dir / "plots" / ".drawn.json").read_text())
        assert drawn and all((run_dir / "plots" / f"{stem}.{fmt}").stat().st_size > 0
                             for stem in drawn for fmt in ("png", "svg"))
        alive = _marked(mark)
        deadline = time.time() + 60   # a worker notices its raylet's end a moment later
        while alive and time.time() < deadline:
            time.sleep(0.2)
            alive = _marked(mark)
        assert alive == [], [Path(f"/proc/{pid}/cmdline").read_bytes()[:200] for pid in alive]
        raylet_logs = list(Path(ray_temp).glob("ray/session_*/logs/raylet.out"))
        assert raylet_logs, "the launch started no cluster of its own"
        assert all("received SIGTERM" not in log.read_text(errors="replace") for log in raylet_logs)
        # its head node ran without the autoscaler monitor, the log monitor and the API server
        # (flow/local_node.py; the API server's logs are dashboard.*, its agent's dashboard_agent.*)
        started = {log.name.split(".")[0] for log in raylet_logs[0].parent.iterdir()}
        assert {"gcs_server", "raylet", "dashboard_agent"} <= started, sorted(started)
        assert not started & {"monitor", "log_monitor", "dashboard"}, sorted(started)
        for agent, log in (("dashboard", "dashboard_agent.err"), ("runtime-env", "runtime_env_agent.err")):
            assert f"stand-in for Ray's {agent} agent" in (raylet_logs[0].parent / log).read_text()
        session = raylet_logs[0].parent.parent   # the agent writes -1 for a port it does not serve
        served = {port.name.rsplit("_", 1)[0]: port.read_text().strip() for port in session.glob("*_port_*")}
        assert served["metrics_agent_port"] == served["dashboard_agent_listen_port"] == "-1", served
    finally:
        shutil.rmtree(ray_temp, ignore_errors=True)
