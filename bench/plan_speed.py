"""The plan's speed: the counting plan of the whole suite vs the simulated dry run of one benchmark.

Usage: python bench/plan_speed.py [--suite OVERRIDES] [--simulated OVERRIDES]

Runs, each in a fresh process, `python -m prefray.plan -m model=all condition=all` (the counting
plan, the default) and `python -m prefray.plan -m benchmark=benchpres model=gpt-4o condition=all
--simulate` (the runner against simulated answers, one model), and prints for each its wall time, CPU time,
peak RSS and calls, then the ratios: calls planned per second of each, and time ÷ time. The load
average is printed too: on a shared machine wall time follows it, CPU time much less.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The child: the plan's CLI in this process, its own CPU time and peak RSS written at exit.
CHILD = """
import atexit, json, resource, sys, time
from prefray import app
start = time.perf_counter()
def report():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    with open(sys.argv[1], "w") as handle:
        json.dump({"wall_s": time.perf_counter() - start, "cpu_s": usage.ru_utime + usage.ru_stime,
                   "rss_mb": usage.ru_maxrss / 1024}, handle)
atexit.register(report)
sys.exit(app.run("plan", sys.argv[2:]))
"""


def measure(args: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "usage.json"
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", CHILD, str(out), *args, f"run.dir={scratch}/never"],
                              capture_output=True, text=True, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        if done.returncode != 0:
            raise SystemExit(f"plan {' '.join(args)} failed:\n{done.stderr}")
        usage = json.loads(out.read_text())
    usage["process_s"] = time.perf_counter() - started   # with the interpreter's start and imports
    calls = re.search(r"^total: (\d+) calls", done.stdout, re.M)
    usage["calls"] = int(calls.group(1)) if calls else 0
    return usage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="model=all condition=all")
    parser.add_argument("--simulated", default="benchmark=benchpres model=gpt-4o condition=all")
    opts = parser.parse_args()
    load = os.getloadavg()[0]
    counted = measure(["-m", *opts.suite.split()])
    simulated = measure(["-m", *opts.simulated.split(), "--simulate"])
    load = max(load, os.getloadavg()[0])
    runs = (("counting", opts.suite, counted), ("simulated", opts.simulated + " --simulate", simulated))
    for name, args, row in runs:
        print(f"{name:9s} plan -m {args}: {row['calls']} calls, wall {row['process_s']:.1f} s "
              f"(in the CLI {row['wall_s']:.1f} s), CPU {row['cpu_s']:.1f} s, peak RSS {row['rss_mb']:.0f} MB")
    per_second = [row["calls"] / row["cpu_s"] for row in (counted, simulated)]
    print(f"calls planned per CPU second: counting {per_second[0]:.0f}, simulated {per_second[1]:.0f} "
          f"(ratio {per_second[0] / per_second[1]:.1f}×)")
    print(f"whole suite counted ÷ one benchmark simulated: wall {counted['process_s'] / simulated['process_s']:.2f}, "
          f"CPU {counted['cpu_s'] / simulated['cpu_s']:.2f}, RSS {counted['rss_mb'] / simulated['rss_mb']:.2f}; "
          f"load average up to {load:.1f}")


if __name__ == "__main__":
    main()
