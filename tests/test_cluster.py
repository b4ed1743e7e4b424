"""Beyond one launch on one machine: locally served models own their port, concurrent launches."""

from __future__ import annotations

import asyncio
import csv
import socket
import subprocess
import sys
from pathlib import Path

from prefray.engine.local_servers import host_port, start_local_server, with_port
from tests.conftest import ROOT

TINY = ["benchmark=benchpres", "limit=1", "run.progress=false"]


def metric_rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def answers(url: str) -> bool:
    host, port = host_port(url)
    with socket.socket() as sock:
        return sock.connect_ex((host, port)) == 0


def test_port_zero_binds_a_free_port_per_server():
    async def two_servers():
        first, first_url = await start_local_server("fakellm", "http://127.0.0.1:0/v1")
        second, second_url = await start_local_server("fakellm", "http://127.0.0.1:0/v1")
        try:
            return first_url, second_url, answers(first_url), answers(second_url)
        finally:
            await first.stop()
            await second.stop()

    first_url, second_url, first_up, second_up = asyncio.run(two_servers())
    assert first_url != second_url and first_up and second_up
    assert host_port(first_url)[1] > 0 and first_url.endswith("/v1")
    assert with_port("http://127.0.0.1:0", 4321) == "http://127.0.0.1:4321"


def test_two_launches_at_once_each_serve_their_own_model(ray_address, tmp_path):
    """Both launches start the fake provider themselves (model=fake, judge=fake: base_url port 0).
    On a shared fixed port, the first to finish would take the other's server down with it."""
    runs = [tmp_path / "a", tmp_path / "b"]
    procs = [subprocess.Popen([sys.executable, "-m", "prefray.launch", "model=fake", "judge=fake", *TINY,
                               f"run.dir={run}", f"run.seed={i}"], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
             for i, run in enumerate(runs)]
    outputs = [p.communicate(timeout=400)[0] for p in procs]
    for proc, out in zip(procs, outputs):
        assert proc.returncode == 0, out
    for run in runs:
        rows = metric_rows(run)
        assert rows, f"no metrics in {run}"
        excluded = [r for r in rows if r.get("metric") == "excluded"]
        assert all(float(r["value"]) == 0 for r in excluded), excluded
