"""Rate-limit efficiency from the first call, against a strict sliding-window provider.

The provider is bench/strict_window_server.py, written apart from prefray (no code shared with
prefray.fakellm, nothing known of prefray's limiter): it admits at most `rpm` requests of the
evaluated model in any trailing 60 s (exact, by arrival time), refuses the rest with 429 and
Retry-After, and answers an admitted request after a fixed latency. prefray runs BenchPreS
generation with gpt-4o's shipped config (max_concurrency 256) at `--rpm` and no token limit (the
request limit alone is measured), the judge answering at once; 100 instances × 6 samples = 600
generation calls. The config declares the provider's window (`model.rpm_window_s=60`, `--window`);
`--window null` runs the default, a lane that paces its requests evenly over the minute.

  wall   = the model's last answer − its first request's arrival   (on the server's clock)
  bound  = 60 × floor((N − 1) ÷ rpm) + latency
  ratio  = wall ÷ bound                                            (target ≤ 1.05)

The bound is the fastest any client can finish N calls under a strict 60 s window of rpm: the
first rpm requests may all go at once, the next rpm a window later, and so on; the last answer
comes one latency after the last request. Also printed, `paced`: wall ÷ ((N − 1) × 60 ÷ rpm +
latency), the bound of a client that spreads its requests evenly over the minute.

Printed per latency (default 0.5, 2 and 8 s): the median of `--repeats` runs, the most 429s any run
got (target 0), the most requests the server admitted in any 60 s, and the load average at the
start and end of the runs.
Usage: python bench/rate_limit_efficiency.py [--rpm 200] [--latencies 8,2,0.5] [--limit 100]
                                             [--samples 6] [--repeats 3] [--window 60]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from _common import free_port, launch

MODEL = "gpt-4o"
MODEL_ID = "gpt-4o-2024-08-06"
SERVER = Path(__file__).resolve().parent / "strict_window_server.py"


@contextmanager
def strict_server(rpm: int, latency: float) -> Iterator[int]:
    port = free_port()
    process = subprocess.Popen([sys.executable, str(SERVER), "--port", str(port), "--rpm", str(rpm),
                                "--limit", MODEL_ID, "--latency", str(latency)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield port
    finally:
        process.kill()
        process.wait()


def most_in_window(stamps: list[float], width: float = 60.0) -> int:
    best, start = 0, 0
    for end, stamp in enumerate(stamps):
        while stamp - stamps[start] >= width:
            start += 1
        best = max(best, end - start + 1)
    return best


def one_run(rpm: int, latency: float, limit: int, samples: int, window: str) -> dict:
    run_dir = Path(tempfile.mkdtemp()) / "run"
    with strict_server(rpm, latency) as port:
        url = f"http://127.0.0.1:{port}/v1"
        launch(f"model={MODEL}", "judge=fake", "benchmark=benchpres", "condition=default", f"model.rpm={rpm}",
               "model.tpm=null", f"model.rpm_window_s={window}", f"model.base_url={url}", f"judge.base_url={url}",
               f"limit={limit}", f"benchmark.samples={samples}", f"run.dir={run_dir}", "run.cache=false",
               "run.progress=false",
               env={"OPENAI_API_KEY": "bench-key"})
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats") as response:
            seen = json.loads(response.read())["limited"][MODEL_ID]
    admitted, answered = sorted(seen["admitted"]), seen["answered"]
    calls = len(admitted)
    wall = max(answered) - admitted[0]   # a refused request's arrival is never the first (nothing earlier)
    bound = 60.0 * ((calls - 1) // rpm) + latency
    paced = (calls - 1) * 60.0 / rpm + latency
    return {"calls": calls, "wall": wall, "bound": bound, "ratio": wall / bound, "paced": wall / paced,
            "429s": seen["refused"], "most": most_in_window(admitted)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rpm", type=int, default=200)
    parser.add_argument("--latencies", default="8,2,0.5")
    parser.add_argument("--limit", type=int, default=100, help="BenchPreS instances")
    parser.add_argument("--samples", type=int, default=6, help="generations per instance")
    parser.add_argument("--repeats", type=int, default=3, help="runs per latency; the median ratio is printed")
    parser.add_argument("--window", default="60", help="model.rpm_window_s: the window the config declares "
                                                       "(null: none, the lane paces its requests)")
    args = parser.parse_args()
    print(f"{MODEL} at {args.rpm} rpm (model.rpm_window_s={args.window}) against a strict 60 s window; "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    for latency in (float(x) for x in args.latencies.split(",")):
        runs = sorted((one_run(args.rpm, latency, args.limit, args.samples, args.window) for _ in range(args.repeats)),
                      key=lambda r: r["ratio"])
        r = runs[len(runs) // 2]
        ratios = ", ".join(f"{x['ratio']:.3f}" for x in runs)
        print(f"latency {latency:>4.1f} s: {r['calls']} calls, wall {r['wall']:.1f} s, bound {r['bound']:.1f} s, "
              f"median ratio {r['ratio']:.3f} (runs: {ratios}; target <= 1.05), ÷ the paced bound {r['paced']:.3f}, "
              f"429s {max(x['429s'] for x in runs)} (target 0), most admitted in 60 s "
              f"{max(x['most'] for x in runs)}, load average {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
