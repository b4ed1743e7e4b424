"""Driver memory against the number of calls: the launch process's peak RSS at 10k, 50k and 200k
calls (target: at most 1.3× from the smallest to the largest), against a zero-latency fake server.

One BenchPreS job (117 sample prompts; each answer gets 4 verdicts and a completeness score: 6 calls
per answer), with `benchmark.samples` chosen for each call count. The peak is of the launch process only (Ray's
workers are other processes), read by bench/_peak_rss.py: up to the metrics step (planning and
every call) and for the whole launch (with the metrics step).

Usage: python bench/driver_rss.py [--calls 10000,50000,200000] [--shard-size N (default: the run's own, 64 units here)]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.dataset as ds
from _common import ROOT, fake_server

PROMPTS = 117
CALLS_PER_ANSWER = 6   # generate, 4 verdicts (one per non-nickname preference), completeness


def measure(port: int, calls: int, shard_size: int | None, run_dir: Path) -> dict:
    url = f"http://127.0.0.1:{port}/v1"
    samples = max(1, round(calls / (PROMPTS * CALLS_PER_ANSWER)))
    out = run_dir.with_suffix(".json")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(ROOT / "bench/_peak_rss.py"), str(out),
                           "benchmark=benchpres", "model=fake", "judge=fake", f"model.base_url={url}",
                           f"judge.base_url={url}", f"benchmark.samples={samples}", "run.cache=false",
                           "run.progress=false", f"run.dir={run_dir}",
                           *([f"run.shard_size={shard_size}"] if shard_size else [])],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, "RAY_ADDRESS": ""})
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"launch failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    peaks = json.loads(out.read_text())
    stored = ds.dataset(run_dir / "shards", format="parquet").count_rows()
    return {"calls": stored, "wall_s": wall, **peaks}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", default="10000,50000,200000")
    parser.add_argument("--shard-size", type=int, default=None, help="run.shard_size (default: unset)")
    args = parser.parse_args()
    results = []
    with fake_server() as port, tempfile.TemporaryDirectory() as tmp:
        for i, calls in enumerate(int(c) for c in args.calls.split(",")):
            result = measure(port, calls, args.shard_size, Path(tmp) / f"run{i}")
            results.append(result)
            print(f"{result['calls']:>7} calls: driver peak {result['calls_mb']:7.0f} MB during the calls, "
                  f"{result['total_mb']:7.0f} MB with the metrics step; {result['wall_s']:.0f} s", flush=True)
    base = results[0]
    for result in results[1:]:
        growth_kb = (result["calls_mb"] - base["calls_mb"]) * 1024 / (result["calls"] - base["calls"])
        print(f"ratio {base['calls']} -> {result['calls']} calls: {result['calls_mb'] / base['calls_mb']:.2f} "
              f"during the calls ({growth_kb:.2f} KB per added call; target <= 1.3), "
              f"{result['total_mb'] / base['total_mb']:.2f} with the metrics step")


if __name__ == "__main__":
    main()
