"""Viewer page time: one page of a cell of a synthetic 200k-row run vs a 2k-row run (target < 1 s).

Writes two synthetic runs (shard rows as the engine stores them: a generation row and judge rows
with verdicts, rationales, meta and answers of a few hundred characters), serves each with
`python -m prefray.view`, and times HTTP requests of a cell's units page: the first page (served by
a direct scan while the job's unit index, prefray/view/index.py, is built in the background), the
time until the index serves pages, then a later page and a page filtered by stage, verdict,
category and a text search in the answers.

Usage: python bench/view_page.py [--rows 200000] [--small 2000] [--rows-per-file 256]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from _common import ROOT, free_port

sys.path.insert(0, str(ROOT))
from prefray.engine.rundir import RunDir
from prefray.engine.rundir.shards import SHARD_SCHEMA  # noqa: E402

CATEGORIES = ["tone", "style", "role", "markers", "nickname"]
CELL = {"benchmark": "bench", "model": "m", "condition": "default", "judge": "fj"}


def synthetic_rows(start: int, count: int) -> pa.Table:
    rows = []
    for i in range(start, start + count):
        instance, judged = divmod(i, 5)
        category = CATEGORIES[judged]
        base = {name: None for name in SHARD_SCHEMA.names}
        base.update({"unit_id": f"u{i:08d}", "attempt": 1, "benchmark": "bench", "model": "m", "condition": "default",
                     "instance_id": f"p{instance // 40}-{instance}", "sample": instance % 3, "status": "ok",
                     "tries": 1, "input_tokens": 900, "output_tokens": 120, "cost_usd": 0.0004, "latency_s": 1.2,
                     "truncated": False, "finish_reason": "stop", "cached": False, "request_hash": f"r{i:08d}",
                     "meta_json": json.dumps({"category": category, "domain": f"d{instance % 7}"}, sort_keys=True)})
        if judged == 0:
            base.update({"stage": "generate", "role": "subject", "judge": "", "item": "",
                         "text": f"Dear recipient, message {i}. " + "Some ordinary sentence of an answer. " * 8})
        else:
            verdict = {"rationale": f"The response {'does' if i % 3 else 'does not'} follow the preference {i}.",
                       "applied": i % 3 != 0}
            base.update({"stage": "judge", "role": "judge", "judge": "fj", "item": str(judged),
                         "text": json.dumps(verdict), "parsed_json": json.dumps(verdict)})
        rows.append(base)
    return pa.Table.from_pylist(rows, schema=SHARD_SCHEMA)


def write_run(run_dir: Path, total: int, per_file: int) -> int:
    folder = RunDir(run_dir).job("bench", "m", "default")
    folder.mkdir(parents=True)
    files = 0
    for start in range(0, total, per_file):
        pq.write_table(synthetic_rows(start, min(per_file, total - start)), folder / f"shard-{files:06d}.parquet")
        files += 1
    return files


def get(url: str) -> tuple[float, bytes]:
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as response:
        body = response.read()
    elapsed = time.perf_counter() - start
    if b'id="count"' not in body:
        raise SystemExit(f"unexpected page from {url}")
    return elapsed, body


def until_indexed(url: str) -> float:
    """Seconds until the page is served from the job's index (no longer 'being built')."""
    start = time.perf_counter()
    while b"being built" in get(url)[1]:
        time.sleep(0.05)
    return time.perf_counter() - start


def measure(run_dir: Path) -> dict[str, float]:
    port = free_port()
    viewer = subprocess.Popen([sys.executable, "-m", "prefray.view", str(run_dir), "--port", str(port)], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}/cell?"
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).read()
                break
            except OSError:
                time.sleep(0.1)
        first = base + urllib.parse.urlencode(CELL)
        filtered = {**CELL, "stage": "judge", "verdict": "applied=false", "meta": 'category="tone"',
                    "q": "preference 1"}
        return {
            "first page": get(first)[0],
            "index ready after": until_indexed(first),
            "page 3": get(base + urllib.parse.urlencode({**CELL, "page": 3}))[0],
            "filtered + search": get(base + urllib.parse.urlencode(filtered))[0],
        }
    finally:
        viewer.kill()
        viewer.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--small", type=int, default=2_000)
    parser.add_argument("--rows-per-file", type=int, default=256, help="rows per shard file (run.shard_size)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp())
    results = {}
    for label, total in (("small", args.small), ("large", args.rows)):
        files = write_run(root / label, total, args.rows_per_file)
        results[label] = measure(root / label)
        times = "  ".join(f"{k}: {v * 1000:.0f} ms" for k, v in results[label].items())
        print(f"{total:>8} rows in {files:>5} files   {times}")
    for key in ("first page", "page 3", "filtered + search"):
        print(f"ratio large/small ({key}): {results['large'][key] / results['small'][key]:.2f}")


if __name__ == "__main__":
    main()
