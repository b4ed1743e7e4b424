"""Small shards rolled into large files: every row read exactly once, whatever moment a crash hits."""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from prefray.engine.results.request_store import RequestStore, read_requests
from prefray.engine.rundir import RunDir
from prefray.engine.rundir.journal import clean_leftovers
from prefray.engine.rundir.ownership import RunDirLock
from prefray.engine.rundir.paid import PAID_SCHEMA, PaidLog, compact_paid, read_paid
from prefray.engine.rundir.shards import (
    ROW_GROUP_ROWS,
    SHARD_SCHEMA,
    absorbed_by,
    compact_folder,
    read_rows,
    shard_files,
    write_shard,
)
from prefray.engine.types import ChatRequest
from tests.conftest import ROOT


def unit_rows(start: int, count: int, stage: str = "generate") -> list[dict]:
    return [{"unit_id": f"u{i:05d}", "attempt": 1, "stage": stage, "status": "ok", "text": f"answer {i}",
             "input_tokens": i} for i in range(start, start + count)]


def write_small_shards(folder: Path, shards: int, size: int) -> set[str]:
    for n in range(shards):
        write_shard(folder, "generate", unit_rows(n * size, size))
    return {f"u{i:05d}" for i in range(shards * size)}


def parquet_names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.parquet"))


def test_compaction_keeps_every_row_once_in_one_zstd_file(tmp_path):
    folder = RunDir(tmp_path).job("b", "m", "c")
    expected = write_small_shards(folder, 40, 16)
    before = read_rows(RunDir(tmp_path)).sort_by("unit_id")
    done = compact_folder(folder)
    assert (done.absorbed, done.written, done.rows) == (40, 1, 640)
    (large,) = parquet_names(folder)
    assert large.startswith("compact-")
    metadata = pq.read_metadata(folder / large)
    assert metadata.row_group(0).column(0).compression == "ZSTD"
    assert len(absorbed_by(folder / large)) == 40
    after = read_rows(RunDir(tmp_path)).sort_by("unit_id")
    assert set(after["unit_id"].to_pylist()) == expected
    assert after.equals(before)
    assert compact_folder(folder).written == 0  # nothing left to roll


def test_a_shard_written_before_a_column_existed_is_compacted_with_that_column_null(tmp_path):
    folder = RunDir(tmp_path).job("b", "m", "c")
    write_small_shards(folder, 2, 3)
    older = pa.Table.from_pylist(unit_rows(6, 3)).select(["unit_id", "attempt", "stage", "status", "text"])
    pq.write_table(older.cast(pa.schema([SHARD_SCHEMA.field(n) for n in older.column_names])), folder / "older.parquet")
    compact_folder(folder)
    (large,) = parquet_names(folder)
    table = pq.read_table(folder / large).sort_by("unit_id")
    assert table.schema.remove_metadata().equals(SHARD_SCHEMA)
    assert table["text"].to_pylist() == [f"answer {i}" for i in range(9)]
    assert table["input_tokens"].to_pylist() == [0, 1, 2, 3, 4, 5, None, None, None]


def test_rows_are_read_once_when_a_crash_left_the_absorbed_shards(tmp_path):
    folder = RunDir(tmp_path).job("b", "m", "c")
    expected = write_small_shards(folder, 12, 16)
    kept = tmp_path / "kept"
    shutil.copytree(folder, kept)
    compact_folder(folder)
    for path in kept.glob("*.parquet"):  # the crash: the large file renamed in, its inputs not yet deleted
        shutil.copy2(path, folder / path.name)
    assert len(parquet_names(folder)) == 13
    naive = ds.dataset(folder, format="parquet").count_rows()
    assert naive == 2 * len(expected)  # a plain scan would count every row twice
    counts = Counter(read_rows(RunDir(tmp_path))["unit_id"].to_pylist())
    assert set(counts) == expected and set(counts.values()) == {1}
    assert len(shard_files(RunDir(tmp_path))) == 1

    assert clean_leftovers(RunDir(tmp_path)) == 12  # the run dir's next owner deletes the leftovers
    assert len(parquet_names(folder)) == 1
    assert ds.dataset(folder, format="parquet").count_rows() == len(expected)


def test_a_merge_of_large_files_interrupted_before_its_deletions_counts_once(tmp_path):
    folder = RunDir(tmp_path).job("b", "m", "c")
    write_small_shards(folder, 6, 10)
    compact_folder(folder, small_only=True)
    (first,) = parquet_names(folder)
    small = write_shard(folder, "judge", unit_rows(1000, 10, stage="judge"))
    saved = (folder / first).read_bytes()
    compact_folder(folder)  # merges the first large file and the new small shard
    (second,) = parquet_names(folder)
    assert sorted(absorbed_by(folder / second)) == sorted([first, small.name])
    (folder / first).write_bytes(saved)  # a crash left the absorbed large file behind
    counts = Counter(read_rows(RunDir(tmp_path))["unit_id"].to_pylist())
    assert len(counts) == 70 and set(counts.values()) == {1}


def test_rolling_only_small_shards_leaves_large_files_and_fills_row_groups(tmp_path):
    folder = RunDir(tmp_path).job("b", "m", "c")
    write_small_shards(folder, 3, 5)
    compact_folder(folder, small_only=True)
    for n in range(3, 6):
        write_shard(folder, "generate", unit_rows(n * 5, 5))
    compact_folder(folder, small_only=True)
    assert [n[:8] for n in parquet_names(folder)] == ["compact-", "compact-"]
    compact_folder(folder)
    (large,) = parquet_names(folder)
    metadata = pq.read_metadata(folder / large)
    assert (metadata.num_rows, metadata.num_row_groups) == (30, 1)
    assert ROW_GROUP_ROWS == 65_536


def test_a_row_group_closes_at_its_byte_bound_so_long_answers_do_not_grow_memory(tmp_path, monkeypatch):
    from prefray.engine.rundir import shards as store

    folder = RunDir(tmp_path).job("b", "m", "c")
    expected = write_small_shards(folder, 3, 5)
    one_shard = pq.read_table(next(folder.glob("*.parquet"))).to_batches()[0].nbytes
    monkeypatch.setattr(store, "ROW_GROUP_BYTES", one_shard)     # each shard's batch fills a row group
    compact_folder(folder)
    (large,) = parquet_names(folder)
    metadata = pq.read_metadata(folder / large)
    assert [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)] == [5, 5, 5]
    assert set(Counter(read_rows(RunDir(tmp_path))["unit_id"].to_pylist())) == expected


def test_reads_during_a_compaction_in_another_thread_see_every_row_once(tmp_path):
    folder = RunDir(tmp_path).job("b", "m", "c")
    expected = write_small_shards(folder, 300, 4)
    worker = threading.Thread(target=compact_folder, args=(folder,))
    worker.start()
    reads = []
    while worker.is_alive() or not reads:
        reads.append(Counter(read_rows(RunDir(tmp_path))["unit_id"].to_pylist()))
    worker.join()
    reads.append(Counter(read_rows(RunDir(tmp_path))["unit_id"].to_pylist()))
    assert len(parquet_names(folder)) == 1
    for counts in reads:
        assert set(counts) == expected and set(counts.values()) == {1}


def compact_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "prefray.compact", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.e2e
def test_compact_command_refuses_a_bad_run_dir_and_a_live_owner_and_stops_on_an_unreadable_shard(tmp_path):
    """`python -m prefray.compact` as processes (run at once): a run dir that is not there, one with
    no shards/, one another run owns (exit 2, one line, nothing changed), and one with an unreadable
    shard (exit 1, one line, the folders before it compacted, its own untouched)."""
    from tests.conftest import run_together

    (tmp_path / "empty").mkdir()
    owned = RunDir(tmp_path / "owned").job("b", "m", "c")
    write_small_shards(owned, 4, 3)
    damaged = tmp_path / "damaged"
    good, bad = RunDir(damaged).job("b", "a", "c"), RunDir(damaged).job("b", "z", "c")
    write_small_shards(good, 3, 2)
    write_small_shards(bad, 3, 2)
    (bad / "generate-0000000000000bad.parquet").write_bytes(b"PAR1 not a parquet file")
    compact = [sys.executable, "-m", "prefray.compact"]
    with RunDirLock(RunDir(tmp_path / "owned")):
        missing, not_a_run, busy, done = run_together(
            [*compact, str(tmp_path / "nope")], [*compact, str(tmp_path / "empty")],
            [*compact, str(tmp_path / "owned")], [*compact, str(damaged)])

    assert missing.returncode == 2 and missing.stderr.strip().count("\n") == 0
    assert "not a directory" in missing.stderr
    assert not_a_run.returncode == 2 and "no shards/" in not_a_run.stderr
    assert busy.returncode == 2 and "in use by another prefray run" in busy.stderr
    assert len(parquet_names(owned)) == 4  # nothing changed

    assert done.returncode == 1 and done.stderr.strip().count("\n") == 0, done.stderr
    assert "compaction of" in done.stderr and "stopped" in done.stderr
    assert [n[:8] for n in parquet_names(good)] == ["compact-"]  # compacted before the bad folder
    assert len(parquet_names(bad)) == 4 and not list(bad.glob(".*.tmp"))  # unchanged, nothing half-written


@pytest.mark.e2e
def test_compact_command_rolls_an_older_run(tmp_path):
    expected = set()
    for model in ("m1", "m2"):
        expected |= {f"{model}/{u}" for u in write_small_shards(RunDir(tmp_path).job("b", model, "c"), 9, 4)}
    questions = [ChatRequest(messages=({"role": "user", "content": f"q{n}"},)) for n in range(6)]
    RequestStore(RunDir(tmp_path)).add("m", questions[:3])
    RequestStore(RunDir(tmp_path)).add("m", questions[3:])
    done = compact_cli(str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "18 → 2 Parquet file(s) in 2 job folder(s); 72 row(s)" in done.stdout
    assert "2 request file(s) rolled into 1" in done.stdout
    stored = read_requests(RunDir(tmp_path))["request_hash"].to_pylist()
    assert sorted(stored) == sorted(q.prompt_hash("m") for q in questions)
    table = ds.dataset(tmp_path / "shards", format="parquet").to_table()
    found = [f"{path.split('model=')[1].split('/')[0]}/{u}"
             for path in shard_files(RunDir(tmp_path)) for u in pq.read_table(path)["unit_id"].to_pylist()]
    assert table.num_rows == 72 and set(found) == expected and len(found) == len(set(found))


def metrics_rows(run_dir: Path) -> list[str]:
    return sorted((run_dir / "metrics.csv").read_text().splitlines())


@pytest.mark.e2e
def test_a_sweep_ends_with_one_file_per_job_folder_and_the_same_metrics(run_cli, fake_server, tmp_path):
    args = ["benchmark=benchpres", "model=fake", "judge=fake", *fake_server.model_overrides(), "limit=2",
            "run.cache=false", "run.shard_size=1"]
    plain, rolled = tmp_path / "plain", tmp_path / "rolled"
    run_cli(*args, f"run.dir={plain}", "run.compact=false")
    run_cli(*args, f"run.dir={rolled}", "run.compact_every=2")

    plain_files, rolled_files = shard_files(RunDir(plain)), shard_files(RunDir(rolled))
    (folder,) = {Path(f).parent for f in rolled_files}
    assert len(rolled_files) == 1 and len(list(folder.iterdir())) == 1
    assert len(plain_files) == read_rows(RunDir(plain)).num_rows > 4  # one file per unit without compaction
    # the job's end merged the large files rolled while it ran (every two shards)
    assert any(name.startswith("compact-") for name in absorbed_by(Path(rolled_files[0])))
    assert metrics_rows(rolled) == metrics_rows(plain)
    # counts and tokens alike; dollars (the *_usd columns) up to the order of a float sum
    costs = [list(csv.DictReader((run / "costs.csv").open())) for run in (rolled, plain)]
    assert len(costs[0]) == len(costs[1]) > 0
    for row, other in zip(*costs):
        assert row.keys() == other.keys()
        assert {k: v for k, v in row.items() if not k.endswith("_usd")} == \
            {k: v for k, v in other.items() if not k.endswith("_usd")}
        assert [float(row[k]) for k in row if k.endswith("_usd")] == \
            pytest.approx([float(other[k]) for k in other if k.endswith("_usd")])
    # the paid record is rolled into one Parquet file at the run's end; without compaction it stays JSON lines
    assert [p.name[:5] + p.suffix for p in (rolled / "ledger").iterdir()] == ["paid-.parquet"]
    assert {p.suffix for p in (plain / "ledger").iterdir()} == {".jsonl"}   # one file per gateway
    columns = ["unit_id", "attempt", "stage", "status", "text", "parsed_json"]
    stored = [read_rows(RunDir(run)).select(columns).sort_by("unit_id") for run in (rolled, plain)]
    assert stored[0].equals(stored[1])
    # the request store too: one file per shard that sent something new, rolled into one at the end
    requests = [read_requests(RunDir(run)).sort_by("request_hash") for run in (rolled, plain)]
    assert requests[0].equals(requests[1]) and requests[0].num_rows > 4
    assert [p.name[:8] for p in (rolled / "requests").iterdir()] == ["compact-"]
    assert len(list((plain / "requests").iterdir())) > 1


def write_paid_log(run_dir: Path, tries: range) -> Path:
    log = PaidLog(RunDir(run_dir), "gateway-test")
    for n in tries:
        log.record("openai", "m", f"h{n}", "sent", 0, 0, 0.0)
        log.record("openai", "m", f"h{n}", "ok", n, 2 * n, n / 1000)
    log.close()
    return log.path


def test_the_paid_record_is_rolled_into_parquet_and_read_once_whatever_a_crash_left(tmp_path):
    first = write_paid_log(tmp_path, range(0, 5))
    second = write_paid_log(tmp_path, range(5, 9))
    with open(second, "a", encoding="utf-8") as handle:
        handle.write('{"provider": "openai", "model_id": "m", "requ')   # a line cut short by a kill
    before = read_paid(RunDir(tmp_path)).sort_by("request_hash")
    assert before.num_rows == 18 and before.schema == PAID_SCHEMA
    kept = {path: path.read_bytes() for path in (first, second)}

    assert compact_paid(RunDir(tmp_path)) == 2
    (rolled,) = (tmp_path / "ledger").iterdir()
    assert rolled.name.startswith("paid-") and rolled.suffix == ".parquet"
    assert read_paid(RunDir(tmp_path)).sort_by("request_hash").equals(before)
    narrow = read_paid(RunDir(tmp_path), columns=["request_hash", "cost_usd"])
    assert narrow.column_names == ["request_hash", "cost_usd"]

    for path, content in kept.items():   # a kill after the rename, before the deletes
        path.write_bytes(content)
    assert read_paid(RunDir(tmp_path)).num_rows == 18
    later = write_paid_log(tmp_path, range(9, 10))   # a later launch's gateway: a file of its own
    assert later.name not in {path.name for path in kept}
    assert read_paid(RunDir(tmp_path)).num_rows == 20
    assert compact_paid(RunDir(tmp_path)) == 1   # the leftovers are deleted, the new file rolled
    assert sorted(p.suffix for p in (tmp_path / "ledger").iterdir()) == [".parquet", ".parquet"]
    assert read_paid(RunDir(tmp_path)).sort_by("request_hash").equals(
        pa.concat_tables([before, read_paid(RunDir(tmp_path)).filter(pc.equal(pc.field("request_hash"), "h9"))]
                         ).sort_by("request_hash"))


def test_the_paid_record_is_rolled_a_piece_at_a_time_with_a_cut_line_in_the_last(tmp_path, monkeypatch):
    from prefray.engine.rundir import paid

    log = write_paid_log(tmp_path, range(40))
    with open(log, "a", encoding="utf-8") as handle:
        handle.write('{"provider": "openai", "model_id": "m", "requ')   # a line cut short by a kill
    monkeypatch.setattr(paid, "PIECE_BYTES", 1000)                    # several pieces in one file
    assert compact_paid(RunDir(tmp_path)) == 1
    (rolled,) = (tmp_path / "ledger").iterdir()
    assert pq.read_metadata(rolled).num_row_groups > 1
    table = read_paid(RunDir(tmp_path))
    assert table.num_rows == 80 and table.schema == PAID_SCHEMA
    assert pc.sum(table["input_tokens"]).as_py() == sum(range(40))
    assert sorted(table.filter(pc.equal(table["outcome"], "ok"))["request_hash"].to_pylist()) == sorted(
        f"h{n}" for n in range(40))


def test_jobs_compact_their_folders_one_at_a_time_and_a_roll_does_not_hold_the_shard(tmp_path, monkeypatch):
    """Jobs that end together take turns (Outlets.compacting): one compaction's buffers in the driver
    at a time; a roll under way runs beside the job's writes, which go on meanwhile."""
    import asyncio

    import prefray.engine.flow.runner as runner_module
    from prefray.engine.benchmark import Job
    from prefray.engine.config.schema import BenchmarkSettings, ConditionSettings, ModelSpec, RunConfig
    from prefray.engine.flow.runner import JobRunner, Outlets
    from prefray.engine.sweep import PreparedJob, Sweep

    running, overlaps = [], []
    real = runner_module.compact_folder

    def watched(folder, small_only=False):
        running.append(folder)
        overlaps.append(len(running))
        try:
            threading.Event().wait(0.05)   # long enough for the other jobs' turns to come due
            return real(folder, small_only)
        finally:
            running.remove(folder)

    monkeypatch.setattr(runner_module, "compact_folder", watched)
    jobs = [PreparedJob(Job("b", "c", ModelSpec(name=f"m{i}", provider="openai", model_id="m"), {},
                            BenchmarkSettings("b"), ConditionSettings("c")), None, []) for i in range(4)]
    sweep = Sweep(tuple(jobs), RunConfig.from_config({"compact_every": 2}), RunDir(tmp_path))
    outlets = Outlets(None)
    runners = [JobRunner(job, sweep, outlets, None) for job in sweep.jobs]
    for runner in runners:
        write_small_shards(runner.folder, 6, 3)

    async def end_together():
        for runner in runners:   # each one's roll comes due and starts without being waited for
            runner._roll_when_due()
            runner._roll_when_due()
            assert runner._roll is not None and not runner._roll.done()
        await asyncio.gather(*(r._compact(small_only=False) for r in runners))
        await asyncio.gather(*(r._roll for r in runners))
    asyncio.run(end_together())

    assert len(overlaps) == 8 and max(overlaps) == 1
    for runner in runners:
        assert len(parquet_names(runner.folder)) == 1 and read_rows(runner.folder).num_rows == 18
