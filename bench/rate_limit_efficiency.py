"""Rate-limit efficiency: sweep time ÷ the lower bound set by the provider's RPM (target ≤ 1.05).

A fake server enforces RPM on the evaluated model only (429 + retry-after beyond it; the judge
is unlimited, so the evaluated model's lane sets the bound). prefray runs
three concurrent BenchPreS jobs against it (one per condition); their generation calls share one
limiter. Lower bound = generation calls ÷ (RPM / 60) seconds; the sweep's time is measured from
the first request to the last answer (row timestamps), so Ray start-up is excluded (printed apart).

Usage: python bench/rate_limit_efficiency.py [--rpm 600] [--limit 20]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _common import fake_server, launch, rows, stats


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rpm", type=float, default=600)
    parser.add_argument("--limit", type=int, default=20)
    args = parser.parse_args()
    run_dir = Path(tempfile.mkdtemp()) / "run"
    with fake_server("--rpm", str(args.rpm), "--limit-models", "fake-model") as port:
        url = f"http://127.0.0.1:{port}/v1"
        command_s = launch("-m", "benchmark=benchpres", "condition=all", "model=fake", "judge=fake",
                           f"model.base_url={url}", f"judge.base_url={url}", f"model.rpm={args.rpm}",
                           f"limit={args.limit}", f"run.dir={run_dir}", "run.cache=false")
        server = stats(port)
    stored = rows(run_dir)
    generation = [r for r in stored if r["stage"] == "generate"]
    span = max(r["finished_at"] for r in stored) - min(r["started_at"] for r in stored)
    gen_span = max(r["finished_at"] for r in generation) - min(r["started_at"] for r in generation)
    bound = len(generation) / (args.rpm / 60)
    print(f"generation calls: {len(generation)} at {args.rpm:.0f} rpm -> lower bound {bound:.2f} s")
    print(f"generation span: {gen_span:.2f} s   whole sweep span (incl. judging): {span:.2f} s   "
          f"command wall (incl. Ray start): {command_s:.2f} s")
    print(f"429s seen by the server: {server['rate_limited']}")
    print(f"ratio generation span / bound: {gen_span / bound:.3f}")
    print(f"ratio sweep span / bound: {span / bound:.3f}   (target <= 1.05)")


if __name__ == "__main__":
    main()
