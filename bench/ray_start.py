"""Ray's start alone, as a launch makes it for a cluster of its own (`session.start_ray` with the
gateway's preload), then two actors answering (the first gateways' place), in a fresh process each;
`--before DIR` runs another checkout alternately with this one, so both see the same load.

It prints, per checkout, the median of `--repeats` runs: the start, the two actors, and from the
node's own logs when its raylet registered and when its two agents (the dashboard agent, the runtime
env agent) had started, in seconds after the start began.

Usage: python bench/ray_start.py [--repeats 5] [--before DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import ROOT

CHILD = r"""
import json, os, re, time
from datetime import datetime
from pathlib import Path
import ray
from prefray.engine.flow.session import start_ray
imported = time.time()
start_ray(["prefray.engine.calls.gateway"])
started = time.time()

@ray.remote
class Probe:
    def pid(self):
        return os.getpid()

ray.get([probe.pid.remote() for probe in [Probe.remote(), Probe.remote()]])
answered = time.time()
logs = Path(ray._private.worker.global_worker.node.get_session_dir_path()) / "logs"

def first(name, text):
    for line in (logs / name).read_text(errors="replace").splitlines():
        stamp = re.search(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})", line[:40])
        if stamp and text in line:
            return datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() - imported
    return None

print("RAYSTART " + json.dumps({"start": started - imported, "two actors": answered - started,
      "raylet registered": first("raylet.out", "Raylet of id"),
      "dashboard agent started": first("dashboard_agent.log", ""),
      "runtime env agent started": first("runtime_env_agent.log", "Starting runtime env agent")}))
"""


def one(tree: Path) -> dict:
    temp = tempfile.mkdtemp(prefix="r")   # short: Ray's socket paths live under it
    env = {**os.environ, "PYTHONPATH": str(tree), "RAY_ADDRESS": "", "RAY_TMPDIR": temp}
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=tree, capture_output=True, text=True, env=env)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RAYSTART ")), None)
    if line is None:
        raise SystemExit(f"Ray's start failed:\n{done.stdout}\n{done.stderr[-3000:]}")
    shutil.rmtree(temp, ignore_errors=True)
    return json.loads(line.removeprefix("RAYSTART "))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--before", type=Path, help="another checkout of prefray, run alternately with this one")
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "this": ROOT} if args.before else {"this": ROOT}
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    for _ in range(args.repeats):
        for name, tree in trees.items():
            runs[name].append(one(tree))
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    for name, measured in runs.items():
        print(f"{name} ({trees[name]}): median of {len(measured)}, seconds after the start began")
        for key in measured[0]:
            values = [m[key] for m in measured if m[key] is not None]
            if values:
                listed = ", ".join(f"{v:.2f}" for v in values)
                print(f"    {key:<28} {statistics.median(values):5.2f}   (runs: {listed})")


if __name__ == "__main__":
    main()
