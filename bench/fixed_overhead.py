"""Fixed overhead of a tiny run: `python -m prefray.launch model=fake judge=fake limit=1` against a
zero-latency fake server, its wall time split by step (goal: ≤ 5 s beyond its calls).

The launch runs in a child process whose steps are timed (bench/_timed_launch.py): Python and
prefray's imports, composing the sweep, the preflight, Ray's start, the jobs (gateways' start, the
calls, closing the gateways), the compaction of the request and paid records, the metrics tables
and figures, Ray's shutdown (on a thread during them) and the process's exit. The calls' own time
is the fake server's span from the first request admitted to the last.

Usage: python bench/fixed_overhead.py [--repeats 3] [--figures headline] [extra launch overrides...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, fake_server, stats


def one(extra: list[str]) -> dict:
    run_dir = Path(tempfile.mkdtemp()) / "run"
    with fake_server() as port:
        url = f"http://127.0.0.1:{port}/v1"
        began = time.time()
        done = subprocess.run([sys.executable, str(ROOT / "bench" / "_timed_launch.py"), "model=fake", "judge=fake",
                               "limit=1", f"model.base_url={url}", f"judge.base_url={url}", f"run.dir={run_dir}",
                               "run.cache=false", "run.progress=false", *extra],
                              cwd=ROOT, capture_output=True, text=True, env=os.environ.copy())
        ended = time.time()
        server = stats(port)
    if done.returncode != 0:
        raise SystemExit(f"launch failed:\n{done.stdout}\n{done.stderr}")
    line = next(x for x in done.stderr.splitlines() if x.startswith("TIMINGS "))
    timings = json.loads(line.removeprefix("TIMINGS "))
    marks, spans = timings["marks"], timings["spans"]
    firsts, lasts = server.get("first_admitted_at", {}), server.get("last_admitted_at", {})
    calls = (max(lasts.values()) - min(firsts.values())) if firsts else 0.0
    wall = ended - began
    steps = {"python + imports": marks["imported"] - began, **spans,
             "exit": ended - marks["main done"]}
    return {"wall": wall, "calls": calls, "requests": sum(server.get("by_model", {}).values()),
            "beyond": wall - calls, "steps": steps, "figures": len(list((run_dir / "plots").glob("*.png")))}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args, extra = parser.parse_known_args()
    runs = sorted((one(extra) for _ in range(args.repeats)), key=lambda r: r["beyond"])
    r = runs[len(runs) // 2]
    beyond = ", ".join(f"{x['beyond']:.2f}" for x in runs)
    print(f"load average {os.getloadavg()[0]:.1f}; median of {args.repeats} by time beyond the calls "
          f"(runs: {beyond} s)")
    print(f"wall {r['wall']:.2f} s, calls {r['calls']:.2f} s ({r['requests']} requests), "
          f"beyond the calls {r['beyond']:.2f} s (goal <= 5), {r['figures']} figure(s)")
    for name, seconds in r["steps"].items():
        print(f"  {name:<32} {seconds:6.2f} s")
    print(f"  (steps overlap: the jobs include closing the gateways; aggregation includes the figures, and "
          f"Ray's shutdown runs beside it; median wall over runs: {statistics.median(x['wall'] for x in runs):.2f} s)")


if __name__ == "__main__":
    main()
