"""Harness ceiling: prefray's requests/s ÷ a plain asyncio loop over the same SDK and transport
(target ≥ 0.8), both against one zero-latency fake server, same machine, same run.

The plain loop sends the same BenchPreS generation prompts through AsyncOpenAI with the aiohttp
transport, at the same concurrency as the fake model's config. prefray's rate is measured from row
timestamps of its generation stage (Ray start-up excluded).

Usage: python bench/harness_ceiling.py [--samples 10] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import openai

from _common import ROOT, fake_server, launch, rows

SAMPLE = ROOT / "prefray/benchmarks/benchpres/sample/benchpres_sample.jsonl"


async def plain_loop(url: str, prompts: list[str], samples: int, concurrency: int) -> float:
    client = openai.AsyncOpenAI(api_key="x", base_url=url, max_retries=0, http_client=openai.DefaultAioHttpClient())
    gate = asyncio.Semaphore(concurrency)

    async def one(prompt: str, seed: int) -> None:
        async with gate:
            await client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": prompt}],
                                                 max_tokens=256, temperature=1.0, seed=seed)

    start = time.perf_counter()
    await asyncio.gather(*(one(p, s) for p in prompts for s in range(samples)))
    elapsed = time.perf_counter() - start
    await client.close()
    return len(prompts) * samples / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    prompts = [json.loads(line)["prompt"] for line in SAMPLE.read_text().splitlines()]
    run_dir = Path(tempfile.mkdtemp()) / "run"
    with fake_server() as port:
        url = f"http://127.0.0.1:{port}/v1"
        baseline = asyncio.run(plain_loop(url, prompts, args.samples, args.concurrency))
        launch("benchmark=benchpres", "model=fake", "judge=fake", f"model.base_url={url}", f"judge.base_url={url}",
               f"benchmark.samples={args.samples}", f"model.max_concurrency={args.concurrency}",
               f"run.dir={run_dir}", "run.cache=false", "run.shard_size=64")
    generation = [r for r in rows(run_dir) if r["stage"] == "generate"]
    span = max(r["finished_at"] for r in generation) - min(r["started_at"] for r in generation)
    prefray_rate = len(generation) / span
    print(f"plain asyncio loop: {baseline:.0f} req/s   prefray generation stage: {prefray_rate:.0f} req/s "
          f"({len(generation)} requests)")
    print(f"ratio prefray / plain loop: {prefray_rate / baseline:.3f}   (target >= 0.8)")


if __name__ == "__main__":
    main()
