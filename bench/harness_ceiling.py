"""Harness ceiling: prefray's requests/s ÷ a plain asyncio loop's over the same SDK and transport
(target ≥ 0.9, stable), both against one zero-latency fake server, same machine, run back to back.

prefray runs a whole BenchPreS sweep (generation, then judge and completeness calls streamed beside
it: about 6.5 requests per generated answer); its rate is every stored row ÷ the span from the
first call's start to the last call's end (Ray start-up and aggregation excluded). The plain loop
then sends as many requests, the same BenchPreS prompts cycled, through AsyncOpenAI with the aiohttp
transport at the concurrency prefray's two lanes have together (the model's and the judge's
max_concurrency). Median of `--repeats` pairs; the default 28 samples make ~20k requests a run.

Usage: python bench/harness_ceiling.py [--samples 28] [--concurrency 64] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import tempfile
import time
from pathlib import Path

import openai

from _common import ROOT, fake_server, launch, rows

SAMPLE = ROOT / "prefray/benchmarks/benchpres/sample/benchpres_sample.jsonl"


async def plain_loop(url: str, prompts: list[str], requests: int, concurrency: int) -> float:
    client = openai.AsyncOpenAI(api_key="x", base_url=url, max_retries=0, http_client=openai.DefaultAioHttpClient())
    gate = asyncio.Semaphore(concurrency)

    async def one(prompt: str, seed: int) -> None:
        async with gate:
            await client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": prompt}],
                                                 max_tokens=256, temperature=1.0, seed=seed)

    start = time.perf_counter()
    await asyncio.gather(*(one(p, s) for s, p in zip(range(requests), itertools.cycle(prompts))))
    elapsed = time.perf_counter() - start
    await client.close()
    return requests / elapsed


def prefray_rate(url: str, samples: int, concurrency: int) -> tuple[float, int]:
    """(requests/s over the sweep's calls, requests) of one BenchPreS sweep."""
    run_dir = Path(tempfile.mkdtemp()) / "run"
    launch("benchmark=benchpres", "model=fake", "judge=fake", f"model.base_url={url}", f"judge.base_url={url}",
           f"benchmark.samples={samples}", f"model.max_concurrency={concurrency}",
           f"judge.max_concurrency={concurrency}", f"run.dir={run_dir}", "run.cache=false", "run.progress=false")
    stored = [r for r in rows(run_dir) if r["status"] == "ok"]
    span = max(r["finished_at"] for r in stored) - min(r["started_at"] for r in stored)
    return len(stored) / span, len(stored)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=28)
    parser.add_argument("--concurrency", type=int, default=64, help="max_concurrency of the model and of the judge")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    prompts = [json.loads(line)["prompt"] for line in SAMPLE.read_text().splitlines()]
    ratios = []
    with fake_server() as port:
        url = f"http://127.0.0.1:{port}/v1"
        for run in range(args.repeats):
            harness, requests = prefray_rate(url, args.samples, args.concurrency)
            baseline = asyncio.run(plain_loop(url, prompts, requests, 2 * args.concurrency))
            ratios.append(harness / baseline)
            print(f"run {run + 1}: prefray {harness:.0f} req/s over {requests} requests, plain asyncio loop "
                  f"{baseline:.0f} req/s: ratio {ratios[-1]:.3f}", flush=True)
    print(f"median ratio prefray / plain loop: {statistics.median(ratios):.3f} (runs: "
          f"{', '.join(f'{r:.3f}' for r in ratios)}; target >= 0.9, stable)")


if __name__ == "__main__":
    main()
