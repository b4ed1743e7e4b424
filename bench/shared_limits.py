"""Limits shared by launches: two sweeps started at once on one Ray cluster against one account.

A fake server enforces RPM on the evaluated model (429 + retry-after beyond it; the judge is
unlimited). Two launches run at once against a Ray head started here, each with the same model
config; their gateways take from the same detached limiter, so together they must stay under
the RPM: 429s must be 0, and span ÷ (all generation calls ÷ rpm) shows how close to the shared
bound they ran (span: first generation request to last generation answer over both runs).

Usage: python bench/shared_limits.py [--rpm 300] [--limit 10]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, fake_server, free_port, rows, stats


def start_head(temp: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    ray_cli = str(Path(sys.executable).with_name("ray"))
    head = subprocess.Popen([ray_cli, "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
                             "--include-dashboard=false", f"--temp-dir={temp}", "--disable-usage-stats",
                             f"--ray-client-server-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}"],
                            env={**os.environ, "RAY_AUTH_MODE": "disabled"}, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(8)
    return head, f"127.0.0.1:{port}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rpm", type=float, default=300)
    parser.add_argument("--limit", type=int, default=10)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pfrb", dir="/tmp"))
    runs = [work / "a", work / "b"]
    head, address = start_head(str(work / "ray"))
    env = {**os.environ, "RAY_ADDRESS": address, "RAY_AUTH_MODE": "disabled"}
    try:
        with fake_server("--rpm", str(args.rpm), "--limit-models", "fake-model") as port:
            url = f"http://127.0.0.1:{port}/v1"
            procs = [subprocess.Popen([sys.executable, "-m", "prefray.launch", "benchmark=benchpres", "model=fake",
                                       "judge=fake", f"model.base_url={url}", f"judge.base_url={url}",
                                       f"model.rpm={args.rpm}", f"limit={args.limit}", f"run.dir={run}",
                                       f"run.seed={i}", "run.cache=false", "run.progress=false"],
                                      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                     for i, run in enumerate(runs)]
            for proc in procs:
                out = proc.communicate()[0]
                if proc.returncode != 0:
                    raise SystemExit(f"launch failed:\n{out}")
            server = stats(port)
        generation = [r for run in runs for r in rows(run) if r["stage"] == "generate"]
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        head.wait()
        shutil.rmtree(work, ignore_errors=True)
    span = max(r["finished_at"] for r in generation) - min(r["started_at"] for r in generation)
    bound = len(generation) / (args.rpm / 60)
    print(f"two launches at once, {len(generation)} generation calls at a shared {args.rpm:.0f} rpm "
          f"-> lower bound {bound:.2f} s")
    print(f"429s seen by the server: {server['rate_limited']}   (must be 0)")
    print(f"ratio generation span / shared bound: {span / bound:.3f}")


if __name__ == "__main__":
    main()
