"""One owner per run dir, exit codes, Ctrl-C: through the real CLI, Ray and the fake server."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from multiprocessing import get_context
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from prefray.engine.results.manifest import append_manifest
from prefray.engine.rundir import RunDir
from prefray.engine.rundir.layout import LOCK as LOCK_NAME
from prefray.engine.rundir.ownership import RunDirBusy, RunDirLock
from tests.conftest import ROOT


def stored(run_dir: Path) -> list[dict]:
    if not (run_dir / "shards").exists():
        return []
    return ds.dataset(run_dir / "shards", format="parquet").to_table().to_pylist()


# A shell starts background jobs with SIGINT ignored, and a child inherits that: the launch of the
# Ctrl-C test takes SIGINT back as a terminal's foreground command has it, wherever the suite runs.
AS_FOREGROUND = ("import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
                 "runpy.run_module('prefray.launch', run_name='__main__', alter_sys=True)")


def start_launch(*args: str, foreground: bool = False) -> subprocess.Popen:
    command = ["-c", AS_FOREGROUND] if foreground else ["-m", "prefray.launch"]
    return subprocess.Popen([sys.executable, *command, *args], cwd=ROOT, env=dict(os.environ),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_for(condition, timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while not condition():
        if time.time() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.1)


def owned(run_dir: Path) -> bool:
    lock = run_dir / LOCK_NAME
    return lock.exists() and lock.read_text().strip() != ""


# -- the lock and the manifest, in-process ------------------------------------------------------

def test_lock_refuses_a_live_owner_and_takes_over_a_dead_one(tmp_path):
    first = RunDirLock(RunDir(tmp_path)).acquire()
    with pytest.raises(RunDirBusy, match=f"pid {os.getpid()}"):
        RunDirLock(RunDir(tmp_path)).acquire()
    first.release()
    # an owner killed without cleaning up: its record stays, its flock is gone
    (tmp_path / LOCK_NAME).write_text(json.dumps({"host": socket.gethostname(), "pid": 999999999}))
    taken = RunDirLock(RunDir(tmp_path)).acquire()
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    taken.release()
    assert (tmp_path / LOCK_NAME).read_text() == ""


def test_lock_of_another_host_is_not_taken_over(tmp_path):
    (tmp_path / LOCK_NAME).write_text(json.dumps({"host": "elsewhere.example", "pid": 1}))
    with pytest.raises(RunDirBusy, match="another machine"):
        RunDirLock(RunDir(tmp_path)).acquire()


def _append_many(run_dir: str, tag: str) -> None:
    for i in range(15):
        append_manifest(RunDir(run_dir), [{"tag": tag, "i": i}], set())


def test_concurrent_manifest_appends_lose_nothing(tmp_path):
    context = get_context("spawn")
    workers = [context.Process(target=_append_many, args=(str(tmp_path), tag)) for tag in "abc"]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    runs = json.loads((tmp_path / "manifest.json").read_text())["runs"]
    assert sorted((r["jobs"][0]["tag"], r["jobs"][0]["i"]) for r in runs) == sorted(
        (tag, i) for tag in "abc" for i in range(15))
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


# -- through the CLI ------------------------------------------------------------------------------

@pytest.mark.e2e
def test_busy_run_dir_refuses_a_second_launch_then_ctrl_c_exits_130_with_one_line_and_resume_completes(
        run_cli, make_fake_server, tmp_path):
    """A launch owns its run dir: a second launch into it refuses at once (before Ray, one line
    naming the owner). Ctrl-C then ends the first with 130 and one line, releasing the run dir; the
    same command again completes, asking only what was not stored."""
    from tests.conftest import refused_here

    # 18 calls one at a time at 0.6 s: the run is still sending when the first rows are stored
    server = make_fake_server("--latency", "0.6")
    run_dir = tmp_path / "run"
    args = ["model=fake", "judge=fake", *server.model_overrides(), f"run.dir={run_dir}", "limit=3",
            "benchmark.samples=2", "run.cache=false", "model.max_concurrency=1", "judge.max_concurrency=1",
            "run.shard_size=1", "run.plots=false"]
    process = start_launch(*args, foreground=True)
    try:
        wait_for(lambda: owned(run_dir) or process.poll() is not None)
        second = refused_here(*args)
        wait_for(lambda: len(stored(run_dir)) >= 1 or process.poll() is not None)
        assert process.poll() is None, "the run ended before it could be interrupted"
        os.killpg(process.pid, signal.SIGINT)                   # what Ctrl-C sends: the whole group
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert second.returncode == 2, second.stderr
    lines = [line for line in second.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "in use by another prefray run" in lines[0] and f"pid {process.pid}" in lines[0]

    assert process.returncode == 130, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "interrupted" in lines[0] and str(run_dir) in lines[0] and "resume" in lines[0]
    assert "Traceback" not in err + out
    assert (run_dir / LOCK_NAME).read_text() == ""
    kept = len(stored(run_dir))
    before = server.stats()["requests"]
    run_cli(*args)
    assert len(stored(run_dir)) == server.stats()["requests"] - before + kept
    assert len({r["unit_id"] for r in stored(run_dir)}) == len(stored(run_dir)) == 3 * 2 * (1 + 5)
    # the interrupted launch and the resume; the refused one left no trace
    assert len(json.loads((run_dir / "manifest.json").read_text())["runs"]) == 2
    assert (run_dir / LOCK_NAME).read_text() == ""             # released at the end


@pytest.mark.e2e
def test_exit_code_3_when_units_fail_and_the_line_says_how_to_rerun(run_cli, make_fake_server, tmp_path):
    server = make_fake_server("--sticky-fault-rate", "1.0", "--faults", "500")
    run_dir = tmp_path / "run"
    done = run_cli("model=fake", "judge=fake", *server.model_overrides(), f"run.dir={run_dir}", "limit=1",
                   "benchmark.samples=1", "model.max_attempts=1", expect_code=3)
    assert f"prefray rerun {run_dir}" in done.stderr and "server_error 1" in done.stderr
