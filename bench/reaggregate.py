"""Aggregate a finished run directory again, in a fresh process, as its launch did: the metrics
tables (and, with `--figures`, the figures), timed, with the process's peak RSS.

Usage: python bench/reaggregate.py RUN_DIR [--figures none|headline|all] [--repeats 3] [--before OLD]

The run's benchmarks and their settings are read from the configs its manifest recorded (as
`prefray report` reads them). With `--before OLD` (a checkout of earlier code, e.g.
`git archive REV | tar -x -C OLD`) both checkouts aggregate the same run directory alternately;
the script prints the medians' ratio (after ÷ before) and checks that both wrote the same
metrics.csv and deltas.csv, byte for byte. A run directory kept by `bench/whole_suite.py --keep
DIR` is DIR/run. The run directory's metrics files are rewritten (with the same content, when the
two checkouts agree).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import json, resource, sys, time
from prefray.app.compose import load_benchmarks
from prefray.engine.flow.session import use_system_allocator
from prefray.engine.results.aggregate import aggregate_run
from prefray.engine.results.manifest import recorded_configs
from prefray.engine.rundir import RunDir
use_system_allocator()   # as a launch does before its run
run = RunDir(sys.argv[1])
configs = recorded_configs(run)
benchmarks = load_benchmarks(configs)
settings = {c["benchmark"]["name"]: benchmarks[c["benchmark"]["name"]].settings_of(c["benchmark"]) for c in configs}
start = time.perf_counter()
aggregate_run(run, benchmarks, settings, quiet=True, figures=sys.argv[2])
print(json.dumps({"seconds": time.perf_counter() - start,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def once(tree: Path, run_dir: Path, figures: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, str(run_dir), figures], cwd=tree, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(tree)})
    if done.returncode != 0:
        raise SystemExit(f"aggregation failed in {tree}:\n{done.stderr}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["outputs"] = [(run_dir / name).read_bytes() for name in ("metrics.csv", "deltas.csv")]
    result["load"] = os.getloadavg()[0]
    return result


def show(name: str, runs: list[dict]) -> float:
    seconds = statistics.median(r["seconds"] for r in runs)
    each = ", ".join(f"{r['seconds']:.1f}" for r in runs)
    print(f"{name}: {seconds:.1f} s (runs {each}), peak RSS "
          f"{statistics.median(r['peak_mb'] for r in runs):.0f} MB, load average "
          f"{min(r['load'] for r in runs):.1f}-{max(r['load'] for r in runs):.1f}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--figures", default="none", choices=("none", "headline", "all"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--before", type=Path, default=None, help="a checkout of earlier code")
    args = parser.parse_args()
    trees = {"after": ROOT, **({"before": args.before.resolve()} if args.before else {})}
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    for _ in range(args.repeats):
        for name, tree in reversed(trees.items()):
            runs[name].append(once(tree, args.run_dir.resolve(), args.figures))
    medians = {name: show(name, found) for name, found in runs.items()}
    if args.before:
        same = runs["before"][-1]["outputs"] == runs["after"][-1]["outputs"]
        print(f"after ÷ before: {medians['after'] / medians['before']:.2f}; metrics.csv and deltas.csv "
              f"{'byte-identical' if same else 'DIFFER'}")
        if not same:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
