"""The whole suite's cost on paper, with and without the prompt cache, by benchmark.

Usage: python bench/plan_cache_cost.py [--suite OVERRIDES] [--no-long-memory]

Counts the plan of `-m model=all condition=all` (the paper lineup's defaults) in this process, as
`python -m prefray.plan` does (engine/flow/counting.py: nothing sent), and prints per benchmark the
USD without caching (`uncached_cost_usd`), with the expected prompt caching (`cost_usd`: each job's
requests grouped by the prefix they declare, priced per model by calls/pricing.py: expected_cache),
the saving and the share of input expected read from the cache; then the same per answering model,
and the total. Only models with cached prices expect a saving.

The suite's bundled BenchPreS sample has memories shorter than the providers' 1,024-token minimum;
unless `--no-long-memory`, BenchPreS is planned once more on one synthetic profile with a
CIMemories-length memory (bench/cache_savings.py's: ~150 statements, 39 contexts × 3 samples), every
model and condition, for what a paper-length memory would expect.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def plan(overrides: list[str], run_dir: Path) -> list[dict[str, Any]]:
    """The counting plan's sent rows (estimate_rows.PLAN_SCHEMA) for a multirun with `overrides`."""
    from prefray.app.compose import compose_sweep
    from prefray.app.preflight import load_datasets
    from prefray.engine.flow.counting import count
    from prefray.engine.rundir import RunDir
    from prefray.engine.sweep import Sweep

    _, jobs, benchmarks = compose_sweep([*overrides, f"run.dir={run_dir}"], multirun=True)
    instances, errors = load_datasets(jobs, benchmarks)
    if errors:
        raise SystemExit("cannot plan:\n  " + "\n  ".join(errors))
    rows = count(Sweep.assemble(jobs, benchmarks, instances, RunDir(run_dir))).to_pylist()
    return [r for r in rows if not r["cached"]]


def table(rows: list[dict[str, Any]], by: str, label: str) -> list[str]:
    """Markdown lines: per value of `by`, USD without and with the cache, saving, input read from it."""
    sums: dict[str, list[float]] = {}
    for row in rows:
        total = sums.setdefault(row[by], [0.0, 0.0, 0, 0])
        total[0] += row["uncached_cost_usd"]
        total[1] += row["cost_usd"]
        total[2] += row["cache_read_tokens"]
        total[3] += row["input_tokens"]
    everything = [sum(t[i] for t in sums.values()) for i in range(4)]
    lines = [f"| {label} | USD without caching | USD with expected caching | saved | input read from cache |",
             "|---|---|---|---|---|"]
    for name, (before, after, read, tokens) in [*sorted(sums.items()), ("all", everything)]:
        saved = 1 - after / before if before else 0.0
        lines.append(f"| {name} | {before:.2f} | {after:.2f} | {saved:.1%} | {read / max(tokens, 1):.1%} |")
    return lines


def long_memory_rows(folder: Path) -> list[dict[str, Any]]:
    sys.path.insert(0, str(ROOT / "bench"))
    from cache_savings import cimemories_profile

    profile = cimemories_profile(folder)
    return plan(["benchmark=benchpres", "model=all", "condition=all", "benchmark.data.source=hub",
                 f"benchmark.data.path={profile}", "benchmark.samples=3"], folder / "never-long")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="model=all condition=all")
    parser.add_argument("--no-long-memory", action="store_true", help="skip the CIMemories-length BenchPreS plan")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        started = time.process_time()
        rows = plan(opts.suite.split(), Path(scratch) / "never")
        seconds = time.process_time() - started
        print(f"plan -m {opts.suite}: {sum(r['calls'] for r in rows)} calls sent, counted in {seconds:.1f} s CPU\n")
        print("\n".join(table(rows, "benchmark", "benchmark")) + "\n")
        print("\n".join(table(rows, "model_id", "answering model id")) + "\n")
        if not opts.no_long_memory:
            long = long_memory_rows(Path(scratch))
            print("BenchPreS on one CIMemories-length profile (39 contexts × 3 samples), model=all condition=all:\n")
            print("\n".join(table(long, "stage", "stage")) + "\n")
            print("\n".join(table([r for r in long if r["stage"] == "generate"], "model_id", "generate, by model id")))


if __name__ == "__main__":
    main()
