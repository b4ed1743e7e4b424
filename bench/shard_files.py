"""Reading a run's rows from many small shards vs from the few large files `prefray.compact` makes.

Writes a synthetic run whose job folders hold small shards as the runner writes them (one file per
`run.shard_size` = 16 units; rows of ~1 KB like real answers and verdicts), then measures
`store.read_rows(RUN_DIR)` in a fresh process (wall time and peak RSS above the process's RSS
before the read; median of --repeats), runs `python -m prefray.compact RUN_DIR`, and measures again.
The issue's case is 63k files at 1M rows; building that takes long here, so the default is 16k
files (256k rows): reading small files costs per file, so the ratio grows with the file count.

Usage: python bench/shard_files.py [--files 16000] [--rows-per-file 16] [--jobs 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from _common import ROOT

sys.path.insert(0, str(ROOT))
from prefray.engine.rundir import RunDir  # noqa: E402
from prefray.engine.rundir.shards import SHARD_SCHEMA, shard_files  # noqa: E402

ANSWER = "An ordinary sentence of a model's answer, long enough to look like one. " * 12

READ_SCRIPT = """
import json, resource, sys, time
from prefray.engine.rundir.shards import read_rows
from prefray.engine.rundir import RunDir
def rss_kb():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
before = rss_kb()
start = time.perf_counter()
table = read_rows(RunDir(sys.argv[1]))
elapsed = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"s": elapsed, "peak_mb": (peak - before) / 1024, "rows": table.num_rows,
                  "data_mb": table.nbytes / 2**20}))
"""


def synthetic_rows(start: int, count: int, job: tuple[str, str, str]) -> pa.Table:
    benchmark, model, condition = job
    columns = {name: [None] * count for name in SHARD_SCHEMA.names}
    ids = range(start, start + count)
    columns.update({
        "unit_id": [f"{model}-u{i:09d}" for i in ids], "attempt": [1] * count, "benchmark": [benchmark] * count,
        "model": [model] * count, "condition": [condition] * count, "stage": ["generate"] * count,
        "role": ["subject"] * count, "judge": [""] * count, "instance_id": [f"p{i // 8}" for i in ids],
        "item": [""] * count, "sample": [i % 3 for i in ids], "seed": [i % 3 for i in ids],
        "meta_json": [json.dumps({"category": f"c{i % 5}"}) for i in ids], "request_hash": [f"r{i:09d}" for i in ids],
        "provider": ["openai"] * count, "model_id": [model] * count, "status": ["ok"] * count,
        "text": [f"{i}: {ANSWER}" for i in ids], "finish_reason": ["stop"] * count, "truncated": [False] * count,
        "input_tokens": [900] * count, "output_tokens": [120] * count, "cost_usd": [0.0004] * count,
        "cached": [False] * count, "tries": [1] * count, "latency_s": [1.2] * count,
        "started_at": [1.7e9 + i for i in ids], "finished_at": [1.7e9 + i + 1.2 for i in ids],
    })
    return pa.Table.from_pydict(columns, schema=SHARD_SCHEMA)


def write_run(run_dir: Path, files: int, per_file: int, jobs: int) -> int:
    """`files` small shards of `per_file` rows spread over `jobs` job folders; returns the rows."""
    (run_dir / "shards").mkdir(parents=True)
    per_job = files // jobs
    for j in range(jobs):
        job = ("bench", f"m{j}", "default")
        folder = RunDir(run_dir).job(*job)
        folder.mkdir(parents=True)
        block = synthetic_rows(0, per_job * per_file, job)
        for n in range(per_job):
            pq.write_table(block.slice(n * per_file, per_file), folder / f"generate-{n:016x}.parquet")
    return jobs * per_job * per_file


def read_once(run_dir: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", READ_SCRIPT, str(run_dir)], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout)


def measure(run_dir: Path, repeats: int) -> dict:
    runs = [read_once(run_dir) for _ in range(repeats)]
    return {"s": statistics.median(r["s"] for r in runs), "peak_mb": statistics.median(r["peak_mb"] for r in runs),
            "rows": runs[0]["rows"], "data_mb": runs[0]["data_mb"], "files": len(shard_files(RunDir(run_dir)))}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=16_000)
    parser.add_argument("--rows-per-file", type=int, default=16, help="rows per small shard (run.shard_size)")
    parser.add_argument("--jobs", type=int, default=4, help="job folders the shards are spread over")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    run_dir = Path(tempfile.mkdtemp(prefix="prefray-bench-shards-"))
    try:
        measure_run(run_dir, args)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def measure_run(run_dir: Path, args: argparse.Namespace) -> None:
    start = time.perf_counter()
    rows = write_run(run_dir, args.files, args.rows_per_file, args.jobs)
    print(f"wrote {rows} rows in {args.files} small shards over {args.jobs} job folders "
          f"({time.perf_counter() - start:.1f} s)")
    small = measure(run_dir, args.repeats)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "prefray.compact", str(run_dir)], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    compact_s = time.perf_counter() - start
    large = measure(run_dir, args.repeats)
    if large["rows"] != small["rows"]:
        raise SystemExit(f"compaction changed the rows read: {small['rows']} → {large['rows']}")
    size_mb = sum(Path(f).stat().st_size for f in shard_files(RunDir(run_dir))) / 2**20
    for name, m in (("small shards", small), ("compacted", large)):
        print(f"{name:13} {m['files']:6d} files  read_rows {m['s']:6.2f} s  peak RSS +{m['peak_mb']:7.0f} MB  "
              f"({m['rows']} rows, {m['data_mb']:.0f} MB in Arrow)")
    print(f"compact: {compact_s:.1f} s; large files on disk {size_mb:.1f} MB")
    print(f"ratios small ÷ compacted: time {small['s'] / large['s']:.1f}x, peak RSS "
          f"{small['peak_mb'] / max(large['peak_mb'], 1.0):.1f}x")


if __name__ == "__main__":
    main()
