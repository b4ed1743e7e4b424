"""The engine under load and faults, through the real CLI, a real Ray cluster and real HTTP."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.conftest import ROOT, launch_here, start_fake_server

pytestmark = pytest.mark.e2e

FAKE_TWO_SDKS = ["-m", "model=fake,fake-anthropic", "benchmark=benchpres", "condition=default", "judge=fake",
                 "run.cache=false"]


def rows(run_dir: Path) -> list[dict]:
    return ds.dataset(run_dir / "shards", format="parquet").to_table().to_pylist()


def metrics_values(run_dir: Path) -> list[tuple]:
    with open(run_dir / "metrics.csv") as handle:
        return sorted((r["model"], r["condition"], r["metric"], r["value"], r["n"]) for r in csv.DictReader(handle))


LATENCY = "0.2"
KILLED_SWEEP = [*FAKE_TWO_SDKS, "limit=4", "run.shard_size=2", "model.max_concurrency=2", "judge.max_concurrency=2"]


@pytest.fixture(scope="module")
def straight(ray_address, tmp_path_factory):
    """The two-SDK sweep run straight through (its run dir, the requests it sent): the reference of
    the kill-and-resume test, and the multirun whose jobs must overlap."""
    server = start_fake_server("--latency", LATENCY)
    try:
        run_dir = tmp_path_factory.mktemp("straight") / "run"
        done = launch_here(*KILLED_SWEEP, *server.model_overrides(), "run.plots=false", f"run.dir={run_dir}")
        assert done.returncode == 0, done.stderr
        yield run_dir, server.stats()["requests"]
    finally:
        server.process.kill()
        server.process.wait()


def test_jobs_of_a_multirun_overlap_in_time(straight):
    run_dir, _ = straight
    spans = {}
    for row in rows(run_dir):
        start, end = spans.get(row["model"], (float("inf"), 0.0))
        spans[row["model"]] = (min(start, row["started_at"]), max(end, row["finished_at"]))
    (a_start, a_end), (b_start, b_end) = spans["fake"], spans["fake-anthropic"]
    overlap = min(a_end, b_end) - max(a_start, b_start)
    # one after the other would give overlap <= 0; concurrent jobs share a good part of their span
    # (not all of it: the second SDK's gateway can take a few seconds to start on a loaded machine)
    assert overlap > 0.3 * min(a_end - a_start, b_end - b_start)


def test_kill_and_resume_ends_with_the_same_metrics(run_cli, make_fake_server, tmp_path, straight):
    server = make_fake_server("--latency", LATENCY)
    args = [*KILLED_SWEEP, *server.model_overrides(), "run.plots=false"]
    killed = tmp_path / "killed"
    process = subprocess.Popen([sys.executable, "-m", "prefray.launch", *args, f"run.dir={killed}"],
                               cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and len(list(killed.glob("shards/**/judge-*.parquet"))) < 2:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    partial = len(list(killed.glob("shards/**/*.parquet")))
    assert partial >= 2 and not (killed / "metrics.csv").exists()
    sent_before_resume = server.stats()["requests"]

    run_cli(*args, f"run.dir={killed}")
    resumed_requests = server.stats()["requests"] - sent_before_resume
    straight_dir, straight_requests = straight

    assert metrics_values(killed) == metrics_values(straight_dir)
    assert resumed_requests < straight_requests  # stored shards were not asked again
    unit_ids = [r["unit_id"] for r in rows(killed)]
    assert len(unit_ids) == len(set(unit_ids))  # every unit stored exactly once


def test_shared_limiter_gives_zero_429s(run_cli, make_fake_server, tmp_path):
    server = make_fake_server("--rpm", "240")
    run_cli("-m", "benchmark=benchpres", "condition=all", "model=fake", "judge=fake", *server.model_overrides(),
            f"run.dir={tmp_path / 'run'}", "limit=1", "benchmark.samples=2", "model.rpm=240", "judge.rpm=240",
            "run.shard_size=4")
    stats = server.stats()
    assert stats["rate_limited"] == 0
    assert stats["requests"] > 4 + 1  # more than the server's burst: the limiter had to pace
    assert all(r["status"] == "ok" and r["tries"] == 1 for r in rows(tmp_path / "run"))


def test_faults_end_ok_after_retry_or_failed_with_cause(run_cli, make_fake_server, tmp_path):
    server = make_fake_server("--fault-rate", "0.4", "--sticky-fault-rate", "0.15", "--faults", "429,500,malformed")
    run_cli("benchmark=benchpres", "model=fake", "judge=fake", *server.model_overrides(),
            f"run.dir={tmp_path / 'run'}", "limit=4", "model.max_attempts=3", "judge.max_attempts=3",
            "model.max_wait_s=0.5", "judge.max_wait_s=0.5", expect_code=3)
    stored = rows(tmp_path / "run")
    generations = [r for r in stored if r["stage"] == "generate"]
    assert len(generations) == 4 * 3  # none lost
    ok_generations = [r for r in generations if r["status"] == "ok"]
    judged = [r for r in stored if r["stage"] == "judge"]
    assert len(judged) == 4 * len(ok_generations)  # 4 judged preferences per response (nickname by match)
    assert any(r["status"] == "ok" and r["tries"] > 1 for r in stored)
    failed = [r for r in stored if r["status"] == "failed"]
    assert failed, "sticky faults must leave failed rows"
    assert {r["cause"] for r in failed} <= {"rate_limit", "server_error", "bad_response"}
    assert all(r["tries"] == 3 and r["error"] for r in failed)
    assert server.stats()["faults"] >= len(failed) * 3


def test_timeout_is_a_cause(run_cli, make_fake_server, tmp_path):
    server = make_fake_server("--sticky-fault-rate", "1.0", "--faults", "timeout", "--timeout-fault-seconds", "5")
    run_cli("benchmark=benchpres", "model=fake", "judge=fake", *server.model_overrides(),
            f"run.dir={tmp_path / 'run'}", "limit=1", "benchmark.samples=1", "model.timeout_s=0.5",
            "model.max_attempts=2", "model.max_wait_s=0.1", expect_code=3)
    (row,) = rows(tmp_path / "run")
    assert (row["status"], row["cause"], row["tries"]) == ("failed", "timeout", 2)


def test_api_key_never_reaches_outputs(run_cli, fake_server, tmp_path):
    secret = "sk-prefray-test-6b1f0c9e"
    run_dir = tmp_path / "run"
    run_cli("benchmark=benchpres", "model=fake", "judge=fake", *fake_server.model_overrides(),
            "model.api_key_env=PREFRAY_TEST_KEY", f"run.dir={run_dir}", "limit=1", "benchmark.samples=1",
            env={"PREFRAY_TEST_KEY": secret})
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert any(p.suffix == ".parquet" for p in files) and (run_dir / "manifest.json").exists()
    assert "PREFRAY_TEST_KEY" in (run_dir / "manifest.json").read_text()  # the variable's name only
    for path in files:
        assert secret.encode() not in path.read_bytes(), path
