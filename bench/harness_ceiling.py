"""Harness ceiling: prefray's requests/s ÷ a plain asyncio loop's over the same SDK and transport
(target ≥ 0.9, stable), both against one zero-latency fake server, same machine, run back to back.

prefray runs a whole BenchPreS sweep (generation, then judge and completeness calls streamed beside
it: about 6.5 requests per generated answer); its rate is every stored row ÷ the span from the
first call's start to the last call's end (Ray start-up and aggregation excluded). The plain loop
then sends the very requests the sweep sent (read back from its request store: messages, system
prompt, params, JSON schema, seed, model id) through AsyncOpenAI with the aiohttp transport, at the
concurrency prefray's two lanes have together (the model's and the judge's max_concurrency).
Median of `--repeats` pairs; the default 29 samples make 20,358 requests a run.

The plain loop calls the SDK's typed `create` (what a user's script would); prefray sends the JSON
body it builds through the client's `post` (half the CPU a call: bench/provider_cpu.py).

The judge's lane sends ~5/6 of the requests, ~700 a second here: more than one process's core,
so it runs on `judge.gateway_processes` = 2, as a lane of a real provider above 6,000 rpm does on
its own (engine/calls/gateway.py: lane_processes).

Usage: python bench/harness_ceiling.py [--samples 29] [--concurrency 64] [--judge-processes 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import openai
import pyarrow.compute as pc
from _common import ROOT, fake_server, launch, rows

sys.path.insert(0, str(ROOT))
from prefray.engine.results.request_store import read_requests  # noqa: E402
from prefray.engine.rundir import RunDir
from prefray.engine.rundir.shards import read_rows  # noqa: E402


async def plain_loop(url: str, bodies: list[dict], concurrency: int) -> float:
    client = openai.AsyncOpenAI(api_key="x", base_url=url, max_retries=0, http_client=openai.DefaultAioHttpClient())
    gate = asyncio.Semaphore(concurrency)

    async def one(body: dict) -> None:
        async with gate:
            await client.chat.completions.create(**body)

    start = time.perf_counter()
    await asyncio.gather(*(one(body) for body in bodies))
    elapsed = time.perf_counter() - start
    await client.close()
    return len(bodies) / elapsed


def sent_bodies(run_dir: Path) -> list[dict]:
    """The chat-completions body of every request the sweep stored an answer for."""
    stored = read_rows(RunDir(run_dir), columns=["request_hash", "model_id", "seed", "status"])
    stored = stored.filter(pc.equal(stored["status"], "ok")).to_pylist()
    requests = {r["request_hash"]: r for r in read_requests(RunDir(run_dir)).to_pylist()}
    bodies = []
    for row in stored:
        request = requests[row["request_hash"]]
        system = [{"role": "system", "content": request["system"]}] if request["system"] else []
        body = {"model": row["model_id"], "messages": system + json.loads(request["messages_json"]),
                **json.loads(request["params_json"] or "{}")}
        if row["seed"] is not None:
            body["seed"] = row["seed"]
        if request["json_schema_json"]:
            body["response_format"] = {"type": "json_schema", "json_schema": {
                "name": "answer", "schema": json.loads(request["json_schema_json"]), "strict": True}}
        bodies.append(body)
    return bodies


def prefray_rate(url: str, samples: int, concurrency: int, judge_processes: int = 1) -> tuple[float, Path]:
    """(requests/s over the sweep's calls, its run dir) of one BenchPreS sweep."""
    run_dir = Path(tempfile.mkdtemp()) / "run"
    launch("benchmark=benchpres", "model=fake", "judge=fake", f"model.base_url={url}", f"judge.base_url={url}",
           f"benchmark.samples={samples}", f"model.max_concurrency={concurrency}",
           f"judge.max_concurrency={concurrency}", f"judge.gateway_processes={judge_processes}",
           f"run.dir={run_dir}", "run.cache=false", "run.progress=false")
    stored = [r for r in rows(run_dir) if r["status"] == "ok"]
    span = max(r["finished_at"] for r in stored) - min(r["started_at"] for r in stored)
    return len(stored) / span, run_dir


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=29)
    parser.add_argument("--concurrency", type=int, default=64, help="max_concurrency of the model and of the judge")
    parser.add_argument("--judge-processes", type=int, default=2, help="gateway processes of the judge's lane")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    ratios = []
    with fake_server() as port:
        url = f"http://127.0.0.1:{port}/v1"
        for run in range(args.repeats):
            harness, run_dir = prefray_rate(url, args.samples, args.concurrency, args.judge_processes)
            bodies = sent_bodies(run_dir)
            requests = len(bodies)
            baseline = asyncio.run(plain_loop(url, bodies, 2 * args.concurrency))
            ratios.append(harness / baseline)
            print(f"run {run + 1}: prefray {harness:.0f} req/s over {requests} requests, plain asyncio loop "
                  f"{baseline:.0f} req/s: ratio {ratios[-1]:.3f}", flush=True)
    print(f"median ratio prefray / plain loop: {statistics.median(ratios):.3f} (runs: "
          f"{', '.join(f'{r:.3f}' for r in ratios)}; target >= 0.9, stable)")


if __name__ == "__main__":
    main()
