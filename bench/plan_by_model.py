"""What the whole suite costs and takes per model at the shipped (real providers') rate limits, from
one counting plan: `python -m prefray.plan -m model=all condition=all --csv FILE`, read back and
summed per evaluated model option. Prints a Markdown table (docs/performance.md keeps one).

Per model: the calls of its jobs (its own answers and the judges' and role models' calls on them),
their estimated and maximum cost, the calls it answers itself (as the evaluated model and, for a
paper judge, as the judge of every model), and the time bound of its lane (endpoint and model id:
calls / rpm or input tokens / tpm, whichever is larger, every call on the lane together). The
sweep's bound is the slowest lane's: no schedule finishes sooner under the shipped limits.

Usage: python bench/plan_by_model.py [extra plan overrides...]
"""

from __future__ import annotations

import csv
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from _common import ROOT


def plan_rows(extra: list[str]) -> tuple[list[dict], float]:
    out = Path(tempfile.mkdtemp()) / "plan.csv"
    began = time.time()
    subprocess.run([sys.executable, "-m", "prefray.plan", "-m", "model=all", "condition=all", *extra, "--csv",
                    str(out)], cwd=ROOT, check=True, capture_output=True, text=True)
    with open(out, newline="") as handle:
        return list(csv.DictReader(handle)), time.time() - began


def per_model(rows: list[dict]) -> dict[str, dict]:
    models: dict[str, dict] = defaultdict(lambda: defaultdict(float))
    lanes: dict[str, float] = {}
    for row in rows:
        lanes[row["lane"]] = float(row["min_minutes"] or 0)
        job = models[row["model"]]
        job["calls"] += int(row["calls"])
        job["cost"] += float(row["cost_usd"])
        job["max_cost"] += float(row["max_cost_usd"])
    for row in rows:   # what each option answers itself, and on which lane
        own = models[row["answered_by"]]
        own["own_calls"] += int(row["calls"])
        own["lane"] = row["lane"]
        own["lane_minutes"] = lanes[row["lane"]]
    return models


def main() -> None:
    rows, seconds = plan_rows(sys.argv[1:])
    models = per_model(rows)
    evaluated = sorted({r["model"] for r in rows}, key=lambda m: -models[m]["cost"])
    print(f"`python -m prefray.plan -m model=all condition=all --csv FILE` ({seconds:.0f} s), summed per model:\n")
    print("| model | calls of its jobs | est. cost of its jobs (USD) | max cost (USD) | calls it answers "
          "| its lane's bound (h) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in evaluated:
        m = models[name]
        print(f"| {name} | {int(m['calls']):,} | {m['cost']:,.2f} | {m['max_cost']:,.2f} | {int(m['own_calls']):,} "
              f"| {m['lane_minutes'] / 60:.2f} |")
    judges = sorted({r["answered_by"] for r in rows} - set(evaluated))
    for name in judges:   # a judge or role model that is not evaluated itself
        m = models[name]
        print(f"| {name} (judge only) | – | – | – | {int(m['own_calls']):,} | {m['lane_minutes'] / 60:.2f} |")
    total = sum(models[m]["cost"] for m in evaluated)
    total_max = sum(models[m]["max_cost"] for m in evaluated)
    slowest = max((r for r in rows), key=lambda r: float(r["min_minutes"] or 0))
    print(f"| **all** | {sum(int(r['calls']) for r in rows):,} | {total:,.2f} | {total_max:,.2f} | | "
          f"{float(slowest['min_minutes']) / 60:.2f} (slowest lane: {slowest['lane']}) |")


if __name__ == "__main__":
    main()
