"""run.dir on object storage: a real moto S3 server over HTTP, the real CLI, Ray and the fake provider."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest
from pyarrow import fs

from prefray.engine.rundir import RunDir
from prefray.engine.rundir.ownership import LEASE_NAME, RemoteLease, RunDirBusy
from tests.conftest import ROOT, _port_open, free_port, refused_here

BUCKET = "results"


class S3:
    def __init__(self, port: int):
        self.endpoint = f"http://127.0.0.1:{port}"
        self.env = {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                    "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
        self.fs = fs.S3FileSystem(access_key="test", secret_key="test", region="us-east-1",
                                  endpoint_override=self.endpoint, scheme="http", allow_bucket_creation=True)

    def files(self, prefix: str) -> dict[str, int]:
        infos = self.fs.get_file_info(fs.FileSelector(f"{BUCKET}/{prefix}", recursive=True, allow_not_found=True))
        return {i.path.removeprefix(f"{BUCKET}/{prefix}/"): i.size for i in infos if i.type == fs.FileType.File}

    def table(self, path: str):
        with self.fs.open_input_file(f"{BUCKET}/{path}") as handle:
            return pq.read_table(handle)


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server on a free port with one bucket, stopped (only it) at the end."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-p", str(port)], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while not _port_open(port):
        if time.time() > deadline or server.poll() is not None:
            server.kill()
            raise RuntimeError("moto server did not start")
        time.sleep(0.1)
    store = S3(port)
    store.fs.create_dir(BUCKET)
    yield store
    server.kill()
    server.wait()


def sweep(server, run_dir: str, *extra: str) -> list[str]:
    return ["model=fake", "judge=fake", *server.model_overrides(), f"run.dir={run_dir}", "limit=2",
            "benchmark.samples=2", "run.cache=false", "run.progress=false", *extra]


def rows(table) -> list[dict]:
    """Rows with NaN as None (a metric without data is NaN in both runs, and NaN != NaN)."""
    return [{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}
            for row in table.to_pylist()]


def ok(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert done.returncode == 0, f"exit {done.returncode}\nSTDOUT:\n{done.stdout}\nSTDERR:\n{done.stderr}"
    return done


@pytest.mark.e2e
def test_sweep_on_s3_matches_local_and_resumes_from_an_empty_staging_dir(run_cli, fake_server, s3, tmp_path,
                                                                         monkeypatch):
    monkeypatch.setattr(RemoteLease, "CONFIRM_SECONDS", 0.0)    # no other owner races these launches
    local = tmp_path / "local"
    ok(run_cli(*sweep(fake_server, str(local))))
    uri = f"s3://{BUCKET}/runs/first"
    ok(run_cli(*sweep(fake_server, uri, f"run.staging_dir={tmp_path / 'stage-a'}"), env=s3.env))
    stored = s3.files("runs/first")
    assert {"metrics.parquet", "manifest.json", "metrics.csv"} <= set(stored)
    shards = sorted(p for p in stored if p.startswith("shards/") and p.endswith(".parquet"))
    assert shards and sorted(str(p.relative_to(local)) for p in local.glob("shards/**/*.parquet")) == shards
    assert any(p.startswith("requests/") for p in stored) and any(p.startswith("ledger/") for p in stored)
    assert not any(p.startswith("journal/") for p in stored)     # folded away by a finished run
    assert LEASE_NAME not in stored                              # released at the end
    expected = rows(pq.read_table(local / "metrics.parquet"))
    assert len(expected) > 10 and rows(s3.table("runs/first/metrics.parquet")) == expected
    sent = fake_server.stats()["requests"]

    again = ok(run_cli(*sweep(fake_server, uri, f"run.staging_dir={tmp_path / 'stage-b'}"), env=s3.env))
    assert fake_server.stats()["requests"] == sent               # every unit came from the bucket
    assert "pulled" in again.stderr
    assert rows(pq.read_table(tmp_path / "stage-b" / "metrics.parquet")) == expected
    assert rows(s3.table("runs/first/metrics.parquet")) == expected


@pytest.mark.e2e
def test_missing_bucket_refuses_with_one_line_and_writes_nothing(s3, tmp_path):
    staging = tmp_path / "stage"
    done = refused_here("model=fake", "judge=fake", "run.dir=s3://no-such-bucket/runs/x",
                        f"run.staging_dir={staging}", "limit=1", env=s3.env)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and "run.dir=s3://no-such-bucket/runs/x" in lines[0] and "does not exist" in lines[0]
    assert not staging.exists()
    assert s3.fs.get_file_info("no-such-bucket").type == fs.FileType.NotFound


@pytest.mark.e2e
def test_lease_refuses_a_fresh_owner_and_takes_over_a_stale_one(s3, monkeypatch):
    monkeypatch.setattr(RemoteLease, "CONFIRM_SECONDS", 0.0)
    root = f"{BUCKET}/lease-test"
    first = RemoteLease(s3.fs, root).acquire()
    with pytest.raises(RunDirBusy, match=f"pid {os.getpid()}"):
        RemoteLease(s3.fs, root).acquire()
    record = first.read()
    record["heartbeat"] = time.time() - RemoteLease.STALE_SECONDS - 1    # its owner stopped refreshing
    with s3.fs.open_output_stream(f"{root}/{LEASE_NAME}") as sink:
        sink.write(__import__("json").dumps(record).encode())
    second = RemoteLease(s3.fs, root).acquire()
    assert second.read()["token"] == second.token
    first.release()                                              # not its lease any more: left alone
    assert s3.fs.get_file_info(f"{root}/{LEASE_NAME}").type == fs.FileType.File
    second.release()
    assert s3.fs.get_file_info(f"{root}/{LEASE_NAME}").type == fs.FileType.NotFound


def test_a_closed_gateways_logs_reach_the_drivers_run_dir(tmp_path, monkeypatch):
    """Logs a gateway on another node hands over are copied piece by piece where missing or
    shorter, never cut."""
    import asyncio

    from prefray.engine.calls import dispatch

    there = tmp_path / "there"                      # the gateway's node: its files, read by offset
    (there / "ledger").mkdir(parents=True)
    (there / "journal").mkdir()
    (there / "ledger" / "here-1.jsonl").write_bytes(b'{"a": 1}\n')
    (there / "ledger" / "there-2.jsonl").write_bytes(b'{"b": 1}\n' * 10)
    (there / "journal" / "there-2.jsonl").write_bytes(b'{"c": 1}\n')
    reads = []

    async def read(run_dir, relative, offset, length):
        reads.append((relative, offset, length))
        with open(there / relative, "rb") as handle:
            handle.seek(offset)
            return handle.read(length)

    run = tmp_path / "run"
    (run / "ledger").mkdir(parents=True)
    (run / "ledger" / "here-1.jsonl").write_bytes(b'{"a": 1}\n{"a": 2}\n')     # this node's, longer
    monkeypatch.setattr(dispatch, "LOG_PIECE_BYTES", 16)
    logs = [(RunDir(run), p.relative_to(there).as_posix(), p.stat().st_size) for p in sorted(there.rglob("*.jsonl"))]
    asyncio.run(dispatch.keep_logs(logs, read))
    assert (run / "ledger" / "here-1.jsonl").read_bytes() == b'{"a": 1}\n{"a": 2}\n'
    assert (run / "ledger" / "there-2.jsonl").read_bytes() == b'{"b": 1}\n' * 10
    assert (run / "journal" / "there-2.jsonl").read_bytes() == b'{"c": 1}\n'
    assert [offset for relative, offset, _ in reads if relative == "ledger/there-2.jsonl"] == [0, 16, 32, 48, 64, 80]
    assert not any(relative == "ledger/here-1.jsonl" for relative, _, _ in reads)
    assert sorted(p.name for p in run.rglob("*") if p.name.startswith(".")) == []


READ_LOG_SCRIPT = """
import asyncio, json, sys
from pathlib import Path
import ray
from prefray.engine.calls.dispatch import Gateways
from prefray.engine.rundir import RunDir
from prefray.engine.types import ChatRequest, ModelSpec

if not ray.is_initialized():
    ray.init(address="auto", namespace="prefray")
spec = ModelSpec(name="fake", provider="openai", model_id="fake-model", base_url=sys.argv[1], max_concurrency=2)

async def main():
    gateways = Gateways(run_dir=RunDir(sys.argv[2]))
    requests = [ChatRequest(messages=({"role": "user", "content": f"q{i}"},), params={"max_tokens": 8})
                for i in range(3)]
    await gateways.run_batch(spec, requests)
    (handle,) = gateways.handles.values()
    logs = await handle.close.remote()
    pieces = {}
    for run_dir, relative, size in logs:
        got = b""
        while len(got) < size:
            got += await handle.read_log.remote(run_dir, relative, len(got), 50)
        pieces[relative] = [size, got.decode()]
    try:
        await handle.read_log.remote(RunDir(sys.argv[2]), "../outside.txt", 0, 10)
        refused = False
    except Exception as exc:
        refused = "not a log of this gateway" in str(exc)
    await gateways.close()
    print(json.dumps({"pieces": pieces, "refused": refused}))

asyncio.run(main())
"""


@pytest.mark.e2e
def test_a_gateway_hands_its_closed_logs_over_by_offset_and_nothing_else(run_cli, fake_server, tmp_path):
    """What a driver on another node fetches: each closed log, read in pieces, is the file the gateway
    wrote; a path that is not one of its logs is refused."""
    import json

    from tests.conftest import script_here

    run = tmp_path / "run"
    run.mkdir()
    (tmp_path / "outside.txt").write_text("not for the driver")
    done = script_here(READ_LOG_SCRIPT, fake_server.openai_url, str(run))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["refused"]
    assert sorted(relative.split("/")[0] for relative in out["pieces"]) == ["journal", "ledger"]
    for relative, (size, text) in out["pieces"].items():
        assert (run / relative).read_text() == text and len(text.encode()) == size
    ledger = next(text for relative, (_, text) in out["pieces"].items() if relative.startswith("ledger/"))
    assert [json.loads(line)["outcome"] for line in ledger.splitlines()].count("ok") == 3


@pytest.mark.e2e
def test_upload_copies_a_run_dir_to_s3(s3, tmp_path):
    run = tmp_path / "run"
    (run / "shards" / "job").mkdir(parents=True)
    (run / "shards" / "job" / "part-0.parquet").write_bytes(b"\x00PAR1")
    (run / "metrics.csv").write_text("benchmark,metric,value\n")
    done = subprocess.run([sys.executable, "-m", "prefray.upload", str(run), f"s3://{BUCKET}/sweep1"], cwd=ROOT,
                          env={**os.environ, **s3.env}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    stored = s3.files("sweep1")
    assert sorted(stored) == ["metrics.csv", "shards/job/part-0.parquet"]
    with s3.fs.open_input_file(f"{BUCKET}/sweep1/shards/job/part-0.parquet") as handle:
        assert handle.read() == b"\x00PAR1"
    from tests.conftest import command_here

    missing = command_here("upload", str(tmp_path / "nope"), f"s3://{BUCKET}/x", env=s3.env)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
