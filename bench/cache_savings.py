"""What prompt caching saves, by benchmark: each benchmark run on the fake provider (which caches as
OpenAI and Anthropic do: bench/../prefray/fakellm/prompt_cache.py) at a real model's prices, the
cost read from costs.csv with caching (`cost_usd`) and without it (`cost_usd + cache_saved_usd`:
the same tokens at the input price).

Routes: `openai` = the evaluated model and the judge priced as gpt-4o (input 2.50, cached input 1.25,
output 10.00 USD/Mtok; automatic caching from 1,024 tokens); `anthropic` = the evaluated model priced
as Claude Sonnet 4.5 (3.00 / reads 0.30 / writes 3.75 / 15.00; a breakpoint after each request's
declared prefix), the judge as gpt-4o. BenchPreS is run twice: on its bundled sample (short
memories, below the cache's 1,024-token minimum) and on one synthetic profile with a CIMemories-
length memory (~150 statements) and the paper's 39 contexts × 3 samples.

Usage: python bench/cache_savings.py [--limit 2] [--latency 0.05]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import tempfile
from pathlib import Path

from _common import fake_server, launch
from shared_limits import start_head

GPT4O = ("price_input_per_mtok=2.5", "price_output_per_mtok=10.0", "price_cache_read_per_mtok=1.25",
         "price_cache_write_per_mtok=null")
SONNET = ("price_input_per_mtok=3.0", "price_output_per_mtok=15.0", "price_cache_read_per_mtok=0.3",
          "price_cache_write_per_mtok=3.75")
ROUTES = {"openai": ("fake", GPT4O), "anthropic": ("fake-anthropic", SONNET)}
BENCHMARKS = ("benchpres", "cupid", "prisk_irp", "prisk_sycophancy", "prisk_narrowing")
PREFS = ["Act as my personal coach.", "I like bullet points.", "Use a warm tone.", "Add emojis to everything.",
         "Call me 'Jo'."]


def cimemories_profile(folder: Path) -> Path:
    """One profile, a ~150-statement memory, 39 contexts (BenchPreS hub format)."""
    memory = "".join(f"- Statement {i}: the user once mentioned detail number {i} of their life.\n" for i in range(150))
    rows = [{"prompt": f"<memory>\n{memory}" + "".join(f"- {p}\n" for p in PREFS)
                       + f"</memory>\nRecipient: Recipient {c}\nTask: Task number {c}\nWrite it.",
             "preference_attribute": PREFS, "preference_label": [c % 2 == 0, True, False, c % 3 == 0, False],
             "name": "Ann", "task": f"Task number {c}", "recipient": f"Recipient {c}", "domain": "finance"}
            for c in range(39)]
    path = folder / "cimemories_profile.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def costs(run_dir: Path) -> tuple[float, float, int, int]:
    """(USD with caching, USD without, input tokens read from the cache, input tokens)."""
    with open(run_dir / "costs.csv") as handle:
        lines = list(csv.DictReader(handle))
    paid = sum(float(r["cost_usd"]) for r in lines)
    saved = sum(float(r["cache_saved_usd"]) for r in lines)
    read = sum(int(r["cache_read_tokens"]) for r in lines)
    return paid, paid + saved, read, sum(int(r["input_tokens"]) for r in lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=2, help="instances per benchmark (bundled samples)")
    parser.add_argument("--latency", type=float, default=0.05, help="the fake's seconds per answer")
    parser.add_argument("--only", default="", help="comma-separated runs: benchpres, benchpres-long, cupid, ... "
                                                   "(default: all)")
    args = parser.parse_args()
    temp = Path(tempfile.mkdtemp(prefix="prefray-cache-bench-"))
    head, address = start_head(str(temp / "ray"))   # one Ray cluster for every launch
    try:
        run_all(args, temp, {"RAY_ADDRESS": address, "RAY_AUTH_MODE": "disabled"})
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        head.wait()


def run_all(args: argparse.Namespace, temp: Path, env: dict[str, str]) -> None:
    profile = cimemories_profile(temp)
    runs = [(b, b, b, (f"limit={args.limit}",)) for b in BENCHMARKS]
    runs.insert(1, ("benchpres-long", "benchpres (CIMemories-length)", "benchpres",
                    ("benchmark.data.source=hub", f"benchmark.data.path={profile}", "benchmark.samples=3",
                     "condition=default")))
    print("| benchmark | route | without caching USD | with caching USD | saved | input read from cache |")
    print("|---|---|---|---|---|---|")
    totals: dict[str, list[float]] = {}
    for route, (option, prices) in ROUTES.items():
        for name, label, benchmark, extra in runs:
            if args.only and name not in args.only.split(","):
                continue
            with fake_server("--latency", str(args.latency)) as port:
                run_dir = temp / f"{route}-{name}"
                overrides = [f"model.base_url=http://127.0.0.1:{port}/v1", f"judge.base_url=http://127.0.0.1:{port}/v1",
                             *(f"model.{p}" for p in prices), *(f"judge.{p}" for p in GPT4O)]
                condition = [] if any(e.startswith("condition=") for e in extra) else ["condition=all"]
                launch("-m", f"benchmark={benchmark}", *condition, f"model={option}", "judge=fake", *extra,
                       *overrides, f"run.dir={run_dir}", "run.cache=false", "run.plots=false", "run.progress=false",
                       env=env)
                after, before, read, total = costs(run_dir)
            totals.setdefault(route, [0.0, 0.0])
            totals[route][0] += before
            totals[route][1] += after
            print(f"| {label} | {route} | {before:.4f} | {after:.4f} | {1 - after / before:.1%} | "
                  f"{read / max(total, 1):.1%} |", flush=True)
    for route, (before, after) in totals.items():
        print(f"| all | {route} | {before:.4f} | {after:.4f} | {1 - after / before:.1%} | |")


if __name__ == "__main__":
    main()
