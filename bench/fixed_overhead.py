"""Fixed overhead of a tiny run: `python -m prefray.launch model=fake judge=fake limit=1` against a
zero-latency fake server, its wall time split by step (goal: ≤ 5 s beyond its calls).

The launch runs in a child process whose steps are timed by wrapping the functions that do them
(nothing else changes): Python and prefray's imports, composing the sweep, the preflight, Ray's start,
the jobs (gateways' start, the calls, closing the gateways), the compaction of the request and paid
records, the metrics tables, the figures, and the process's exit (Ray's shutdown). The calls' own time is
the fake server's span from the first request admitted to the last.

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

CHILD = r"""
import json, sys, time, functools, runpy
marks = {"start": time.time()}
spans = {}

def timed(name, function):
    if getattr(function, "_timed", False):
        return function
    if __import__("inspect").iscoroutinefunction(function):
        async def wrapper(*args, **kwargs):
            began = time.time()
            try:
                return await function(*args, **kwargs)
            finally:
                spans[name] = spans.get(name, 0.0) + time.time() - began
    else:
        def wrapper(*args, **kwargs):
            began = time.time()
            try:
                return function(*args, **kwargs)
            finally:
                spans[name] = spans.get(name, 0.0) + time.time() - began
    wrapper._timed = True
    return functools.wraps(function)(wrapper)

import prefray.app.launch as launch
import prefray.engine.config.preflight as preflight
import prefray.engine.flow.session as session
import prefray.engine.results.plots as plots
import prefray.engine.results.aggregate as aggregate
import prefray.engine.calls.dispatch as dispatch
marks["imported"] = time.time()
launch.compose_sweep = timed("compose", launch.compose_sweep)
preflight.preflight = timed("preflight", preflight.preflight)
session.start_ray = timed("ray start", session.start_ray)
session.drive = timed("jobs (gateways, calls, close)", session.drive)
dispatch.Gateways.close = timed("closing the gateways", dispatch.Gateways.close)
session.compact_paid = timed("compaction", session.compact_paid)
session.compact_requests = timed("compaction", session.compact_requests)
session.aggregate_run = timed("aggregation (tables + figures)", session.aggregate_run)
plots.write_plots = timed("figures", plots.write_plots)
import atexit
def report():
    marks["exit"] = time.time()
    print("TIMINGS " + json.dumps({"marks": marks, "spans": spans}), file=sys.stderr, flush=True)
atexit.register(report)   # registered before Ray's own: runs after Ray's shutdown
sys.argv = ["prefray.launch", *sys.argv[1:]]
code = launch.run(launch.parser("prefray.launch").parse_args(sys.argv[1:]))
marks["main done"] = time.time()
import ray
ray.shutdown()
marks["ray down"] = time.time()
import threading
print("THREADS", [(t.name, t.daemon) for t in threading.enumerate()], file=sys.stderr, flush=True)
sys.exit(code)
"""


def one(extra: list[str]) -> dict:
    run_dir = Path(tempfile.mkdtemp()) / "run"
    with fake_server() as port:
        url = f"http://127.0.0.1:{port}/v1"
        began = time.time()
        done = subprocess.run([sys.executable, "-c", CHILD, "model=fake", "judge=fake", "limit=1",
                               f"model.base_url={url}", f"judge.base_url={url}", f"run.dir={run_dir}",
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
             "Ray's shutdown": marks["ray down"] - marks["main done"], "exit": ended - marks["ray down"]}
    return {"wall": wall, "calls": calls, "requests": sum(server.get("by_model", {}).values()),
            "beyond": wall - calls, "steps": steps, "figures": len(list((run_dir / "plots").glob("*.png")))}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args, extra = parser.parse_known_args()
    runs = sorted((one(extra) for _ in range(args.repeats)), key=lambda r: r["beyond"])
    r = runs[len(runs) // 2]
    beyond = ", ".join(f"{x['beyond']:.2f}" for x in runs)
    print(f"load average {os.getloadavg()[0]:.1f}; median of {args.repeats} by time beyond the calls (runs: {beyond} s)")
    print(f"wall {r['wall']:.2f} s, calls {r['calls']:.2f} s ({r['requests']} requests), "
          f"beyond the calls {r['beyond']:.2f} s (goal <= 5), {r['figures']} figure(s)")
    for name, seconds in r["steps"].items():
        print(f"  {name:<32} {seconds:6.2f} s")
    print(f"  (steps overlap: the jobs include closing the gateways; aggregation includes the figures; "
          f"median of the steps over runs: {statistics.median(x['wall'] for x in runs):.2f} s wall)")


if __name__ == "__main__":
    main()
