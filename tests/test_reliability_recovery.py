"""Round 3 reliability: a gateway's death, the quickstart's exit code, corrupt shards, a full disk."""

from __future__ import annotations

import json
import os
import random
import signal
import urllib.request
from collections import Counter

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from prefray.engine.rundir import RunDir
from prefray.engine.rundir.journal import AnswerJournal, load_replay, unfinished_batches
from prefray.engine.types import CallResult, ChatRequest
from tests.test_reliability_runs import start_launch, wait_for

# -- 1. a gateway's death re-sends only what was not answered ------------------------------------


def test_unfinished_batches_are_those_never_returned(tmp_path):
    """The journal of a gateway's earlier life gives the answers of the batches it did not return,
    and only its own (another actor's, or a later life's files are not its earlier lives')."""
    request = ChatRequest(messages=({"role": "user", "content": "hi"},))
    other = ChatRequest(messages=({"role": "user", "content": "ho"},))
    life = AnswerJournal(RunDir(tmp_path), "gateway-a-b-01000000")
    life.record("m", request, CallResult(status="ok", text="kept"), "batch-1")
    life.record("m", other, CallResult(status="ok", text="returned"), "batch-2")
    life.batch_done("batch-2")
    life.close()
    stranger = AnswerJournal(RunDir(tmp_path), "gateway-a-b-01000000-p1")
    stranger.record("m", request, CallResult(status="ok", text="not mine"), "batch-1")
    stranger.close()
    found = unfinished_batches(RunDir(tmp_path), "gateway-a-b-01000000")
    assert list(found) == ["batch-1"]
    assert [r.text for r in found["batch-1"][request.content_hash("m")]] == ["kept"]
    assert len(load_replay(RunDir(tmp_path))) == 3          # the driver's replay skips the batch-done marks


def gateway_pids() -> list[int]:
    import ray

    pids = []
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["namespace"] == "prefray" and entry["name"].startswith("gateway-"):
            try:
                handle = ray.get_actor(entry["name"], namespace="prefray")
                pids.append(ray.get(handle.__ray_call__.remote(lambda self: os.getpid()), timeout=20))
            except Exception:  # noqa: BLE001 - a gateway between death and restart: try again later
                continue
    return pids


def request_keys(server) -> Counter:
    """How many times each distinct request (the whole body, seed included) reached the provider."""
    with urllib.request.urlopen(f"{server.anthropic_url}/requests", timeout=5) as response:
        bodies = json.loads(response.read())
    return Counter(json.dumps(b, sort_keys=True) for b in bodies)


KILLS = 3


@pytest.mark.e2e
def test_gateway_killed_three_times_is_restarted_and_resends_only_the_calls_in_flight(run_cli, make_fake_server,
                                                                                     tmp_path):
    """Gateways that die are restarted by Ray: every unit still ends stored, answered, once; each
    kill re-sends at most the calls its gateway had in flight; the metrics are a clean run's."""
    import ray

    server = make_fake_server("--latency", "0.25")
    concurrency = 2
    args = ["model=fake", "judge=fake", *server.model_overrides(), "limit=3", "benchmark.samples=2",
            "run.cache=false", "run.shard_size=30", f"model.max_concurrency={concurrency}",
            f"judge.max_concurrency={concurrency}", "run.plots=false"]
    run_dir = tmp_path / "run"
    process = start_launch(*args, f"run.dir={run_dir}")
    ray.shutdown()           # this process's driver of an earlier in-process launch, if any
    ray.init(address=os.environ["RAY_ADDRESS"], namespace="prefray-test-round3", log_to_driver=False)
    chance = random.Random(20261204)
    killed: list[int] = []
    try:
        for _ in range(KILLS):
            target = server.stats()["requests"] + chance.randint(3, 7)
            wait_for(lambda target=target: server.stats()["requests"] >= target or process.poll() is not None)
            if process.poll() is not None:
                pytest.fail(f"the run ended before the gateway was killed {KILLS} times:\n{process.communicate()[1]}")
            pids: list[int] = []
            wait_for(lambda pids=pids: bool(pids.extend(p for p in gateway_pids() if p not in killed) or pids))
            victim = chance.choice(pids)
            os.kill(victim, signal.SIGKILL)
            killed.append(victim)
        out, err = process.communicate(timeout=300)
    finally:
        ray.shutdown()
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 0, err
    rows = ds.dataset(run_dir / "shards", format="parquet").to_table().to_pylist()
    units = {r["unit_id"] for r in rows}
    assert len(killed) == KILLS
    assert len(units) == len(rows) == 3 * 2 * (1 + 5)           # 1 generation, 4 verdicts, 1 completeness
    assert all(r["status"] == "ok" for r in rows)
    sent = request_keys(server)
    twice = sum(n - 1 for n in sent.values())
    assert sum(sent.values()) == server.stats()["requests"]    # every body is in the provider's log
    # a kill re-sends at most the calls its gateway had in flight (a batch of 30 before)
    print(f"re-sent {twice} of {sum(sent.values())} requests for {len(units)} units")
    assert twice <= KILLS * concurrency, (twice, server.stats()["requests"], len(units))

    server.reset()
    clean = tmp_path / "clean"
    run_cli(*args, f"run.dir={clean}")                       # the reference, in this process
    assert (run_dir / "metrics.csv").read_text() == (clean / "metrics.csv").read_text()


# -- 2. the exit code says what the failure policy says ------------------------------------------

ONE_UNIT = ["benchmark=benchpres", "condition=default", "limit=1", "benchmark.samples=1", "run.cache=false"]


@pytest.mark.e2e
def test_judge_parse_failures_finish_complete_with_exit_0(run_cli, fake_server, tmp_path):
    """Judges that cannot answer (2 output tokens): the failure policy excludes and counts them, the
    cells are complete, the launch exits 0 and its last line counts them in the policy's words."""
    import csv

    run = tmp_path / "run"
    done = run_cli("model=fake", "judge=fake", *ONE_UNIT, *fake_server.model_overrides(),
                   "judge.max_output_tokens=2", f"run.dir={run}")
    rows = ds.dataset(run / "shards", format="parquet").to_table().to_pylist()
    judged = [r for r in rows if r["role"] != "subject"]
    assert judged and {r["cause"] for r in judged} == {"parse_error"}
    metrics = list(csv.DictReader(open(run / "metrics.csv", encoding="utf-8")))
    assert {m["complete"] for m in metrics} == {"true"}
    last = done.stderr.strip().splitlines()[-1]
    assert last == (f"prefray: finished, complete by the failure policy: 0 unit(s) without an answer, "
                    f"{len(judged)} judge failure(s) (excluded), 0 model failure(s) (scored)"), done.stderr
    assert not (run / "incomplete.csv").exists()


# -- 3. a corrupt shard is quarantined and its units asked again ---------------------------------

def truncate_shard(run_dir, stage: str) -> tuple[str, int]:
    """Cut one shard of `stage` to 100 bytes; its path under the run dir and its row count."""
    path = sorted((run_dir / "shards").rglob(f"{stage}-*.parquet"))[0]
    rows = pq.read_metadata(path).num_rows
    with open(path, "r+b") as handle:
        handle.truncate(100)
    return str(path.relative_to(run_dir)), rows


@pytest.mark.e2e
def test_a_truncated_shard_is_quarantined_and_only_its_units_asked_again(run_cli, fake_server, tmp_path):
    import shutil

    from tests.conftest import command_here

    args = ["model=fake", "judge=fake", *ONE_UNIT, *fake_server.model_overrides(), "run.compact=false"]
    run = tmp_path / "run"
    run_cli(*args, f"run.dir={run}")
    expected = (run / "metrics.csv").read_text()
    cut, lost = truncate_shard(run, "judge")
    assert lost > 0
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)

    fake_server.reset()
    done = run_cli(*args, f"run.dir={run}")
    line = (f"prefray: shard {cut} is unreadable (Parquet magic bytes not found in footer); moved to "
            f"{run}/quarantine/{cut.removeprefix('shards/')}, a launch or rerun asks its units again")
    assert line in done.stderr.splitlines(), done.stderr
    assert "Traceback" not in done.stderr
    assert (run / "quarantine" / cut.removeprefix("shards/")).stat().st_size == 100
    for path in (run / "shards").rglob("*.parquet"):
        pq.read_metadata(path)                                # the same units, stored again, readable
    assert fake_server.stats()["requests"] == lost          # only the lost rows, nothing stored elsewhere
    assert (run / "metrics.csv").read_text() == expected

    fake_server.reset()
    again = command_here("rerun", str(copy))
    assert again.returncode == 0, again.stderr
    assert any(f"prefray: shard {cut} is unreadable" in line for line in again.stderr.splitlines()), again.stderr
    assert fake_server.stats()["requests"] == lost
    assert (copy / "metrics.csv").read_text() == expected


def test_view_says_when_metrics_may_not_match_the_shards(tmp_path):
    """An unreadable shard, or shards changed after metrics.csv: `view` says so in one line."""
    from prefray.engine.rundir.quarantine import stale_note
    from prefray.engine.rundir.shards import SHARD_SCHEMA, write_shard
    from tests.conftest import command_here

    run = tmp_path / "run"
    folder = run / "shards" / "benchmark=b" / "model=m" / "condition=c"
    row = {name: None for name in SHARD_SCHEMA.names} | {"unit_id": "u", "attempt": 1}
    shard = write_shard(folder, "generate", [row])
    (run / "metrics.csv").write_text("benchmark,model,condition,judge,metric,value,n\n")
    (run / "manifest.json").write_text("[]")
    assert stale_note(RunDir(run)) is None
    later = (run / "metrics.csv").stat().st_mtime + 60
    os.utime(shard, (later, later))
    assert stale_note(RunDir(run)).startswith("the metrics are older than the shards (metrics.csv written ")
    with open(shard, "r+b") as handle:
        handle.truncate(50)
    note = stale_note(RunDir(run))
    assert note == (f"1 shard(s) unreadable ({shard.relative_to(run)}): the metrics may count rows that are no "
                    f"longer readable; prefray rerun {run} quarantines them, asks their units again "
                    "and writes the metrics anew")
    done = command_here("view", str(run), "--export", str(tmp_path / "out.html"))
    assert f"prefray view: {note}" in done.stderr.splitlines(), done.stderr


# -- 4. a full disk: one line naming the file, nothing half-written ------------------------------

@pytest.fixture
def small_disk(tmp_path):
    """A 3 MB tmpfs (needs root), unmounted afterwards."""
    import subprocess

    folder = tmp_path / "disk"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip() or mounted.returncode}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.mark.e2e
def test_a_full_disk_stops_with_one_line_and_resumes(run_cli, fake_server, small_disk, tmp_path):
    concurrency = 4
    args = ["model=fake", "judge=fake", *fake_server.model_overrides(), "benchmark=benchpres", "condition=default",
            "limit=10", "benchmark.samples=2", "run.cache=false", f"model.max_concurrency={concurrency}",
            f"judge.max_concurrency={concurrency}"]
    filler = small_disk / "filler"
    with open(filler, "wb") as handle:                       # leave 40 KB free
        handle.write(b"\0" * (3 * 2**20 - 40 * 2**10))
    run = small_disk / "run"
    done = run_cli(*args, f"run.dir={run}", expect_code=1)
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"prefray: the disk is full: could not write {run}/"), done.stderr
    assert last.endswith("; stopped (the rows stored before are kept, nothing was half-written); free space on "
                         "that disk and run the same command again to resume"), done.stderr
    assert "Traceback" not in done.stderr and "RayTaskError" not in done.stderr
    assert not [p for p in run.rglob("*") if p.name.endswith(".tmp")]      # no temp file left behind
    for path in (run / "shards").rglob("*.parquet"):
        pq.read_metadata(path)                                # every shard whole
    sent_before = fake_server.stats()["requests"]
    assert sent_before > 0
    print(f"full disk: {last.split('could not write ')[1].split(';')[0]} after {sent_before} requests")

    filler.unlink()
    run_cli(*args, f"run.dir={run}")
    rows = ds.dataset(run / "shards", format="parquet").to_table().to_pylist()
    units = {r["unit_id"] for r in rows}
    assert len(units) == len(rows) == 10 * 2 * (1 + 5)
    resent = fake_server.stats()["requests"] - len(units)
    print(f"full disk: {resent} request(s) sent again on resuming")
    assert resent <= 2 * concurrency, (resent, sent_before)  # at most the calls in flight when it filled

    clean = tmp_path / "clean"
    run_cli(*args, f"run.dir={clean}")
    assert (run / "metrics.csv").read_text() == (clean / "metrics.csv").read_text()


# -- 5. limits a plan cannot finish under are refused before Ray: tests/test_impossible_limits.py ----


# -- 6. a driver's death stops its gateways' sends within a second -------------------------------

@pytest.mark.e2e
@pytest.mark.parametrize("own_ray", [False, True], ids=["session-cluster", "ray-of-its-own"])
def test_after_kill_9_of_the_driver_its_gateways_send_nothing_after_a_second(ray_address, make_fake_server, tmp_path,
                                                                               own_ray):
    import subprocess
    import sys
    import time

    # answers take 0.2 s: with 8 calls in flight per lane, each lane sends at most 8 more in the 0.2 s
    # after the kill, so two lanes' windows (16) bound what gateways that stop within 0.2 s send (two
    # 0.1 s watches; at 0.05 s latency a lane could send 16 within one watch on a busy machine)
    server = make_fake_server("--latency", "0.2")

    args = ["model=fake", "judge=fake", *server.model_overrides(), f"run.dir={tmp_path / 'run'}", "limit=20",
            "benchmark.samples=3", "run.cache=false", "model.max_concurrency=8", "judge.max_concurrency=8",
            "run.plots=false"]
    env = {k: v for k, v in os.environ.items() if not (own_ray and k == "RAY_ADDRESS")}
    process = subprocess.Popen([sys.executable, "-m", "prefray.launch", *args], env=env, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: server.stats()["requests"] >= 6 or process.poll() is not None)
        assert process.poll() is None, "the run ended before the driver was killed"
        os.kill(process.pid, signal.SIGKILL)                 # the driver only, not its Ray
        killed_at = time.time()
        at_kill = server.stats()["requests"]
        process.wait(10)
        time.sleep(max(0.0, killed_at + 1.0 - time.time()))
        after_a_second = server.stats()["requests"]
        print(f"driver killed: {at_kill} requests at the kill, {after_a_second} a second later")
        # without the watch Ray ends a dead driver's actors ~2 s after its death: each lane would send
        # 8 more every 0.2 s (measured at 0.05 s latency: 18 at the kill, 60 a second later)
        assert after_a_second - at_kill <= 2 * 8, (at_kill, after_a_second)   # one window of the two lanes
        time.sleep(3.0)
        assert server.stats()["requests"] == after_a_second
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)           # with a Ray of its own: its raylet and workers
        except ProcessLookupError:
            pass
