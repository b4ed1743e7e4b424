"""Fixed overhead of a tiny run: `python -m prefray.launch model=fake judge=fake limit=1` against a
zero-latency fake server, its wall time split by step (goal: ≤ 5 s beyond its calls).

The launch runs in a child process whose steps are timed (bench/_timed_launch.py): Python and
prefray's imports, composing the sweep, the preflight, Ray's start, the jobs (gateways' start, the
calls, closing the gateways), the compaction of the request and paid records, the metrics tables
and figures, and the process's exit (a local cluster ends with the process: engine/flow/exits.py).
The calls' own time is the fake server's span from the first request admitted to the last.

`--before DIR` runs the same launch from another checkout of prefray (e.g. `git archive COMMIT |
tar -x -C DIR`), alternately with this one, so both see the same load; each run prints the
machine's load average when it starts, and "port" when another Ray node held the dashboard agent's
port 52365 then (code before engine/flow/local_node.py's minimal agent then waited ~3.3 s for its
agent; a launch's own node now binds no fixed port).

With `--before`, it ends with each pair's ratio (this / before, the two run back to back) of the
time beyond the calls and of the machine's CPU over the launch (/proc/stat, every process: the
launch, Ray's, the fake server's), their median and its 95% bootstrap interval: an interval that
holds 1 is a change these runs cannot tell from the machine's noise (the same code measured 5.4-7.4 s
beyond its calls within one set of eight here).

`--cached-bytecode` runs each launch as a default Python does after its first run, with prefray's
compiled modules cached (__pycache__, compiled first for each tree). Without it the launches run in
this environment as it is; where it sets PYTHONDONTWRITEBYTECODE (this machine's does), prefray,
installed editable, is compiled from source by every process of every launch (~0.15 s of CPU in the
driver and in each gateway), which the bench then says.

`--timeline` also samples every 50 ms the CPU of each process of the launch (the driver, the
gateways, Ray's own by name, the fake server) and the machine's busy cores in each quarter second.

Usage: python bench/fixed_overhead.py [--repeats 3] [--before DIR] [--cached-bytecode] [--timeline]
       [extra launch overrides...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import ROOT, fake_server, stats

AGENT_PORT = 52365   # Ray's fixed dashboard agent port (ray_constants.DEFAULT_DASHBOARD_AGENT_LISTEN_PORT)


def agent_port_taken() -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", AGENT_PORT)) == 0


def launch_env(tree: Path, cached_bytecode: bool) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    if cached_bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def compile_tree(tree: Path) -> None:
    """Cache the compiled modules of `tree`'s prefray, as its first launch would."""
    import compileall

    compileall.compile_dir(str(tree / "prefray"), quiet=1)


def busy_cpu_s() -> float:
    """CPU seconds the whole machine has spent busy so far (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as handle:
        ticks = [int(x) for x in handle.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


class CoresBusy:
    """The machine's busy cores in each TIMELINE_S of a launch, from /proc/stat read every SAMPLE_S."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            self.samples.append((time.time(), busy_cpu_s()))
            time.sleep(SAMPLE_S)

    def buckets(self, began: float) -> list[float]:
        found = []
        for lo in range(int((self.samples[-1][0] - began) / TIMELINE_S) + 1):
            inside = [x for x in self.samples if lo * TIMELINE_S <= x[0] - began < (lo + 1) * TIMELINE_S]
            if len(inside) >= 2:
                found.append((inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0]))
        return found


TIMED_LAUNCH = ROOT / "bench" / "_timed_launch.py"   # this checkout's, for either tree (PYTHONPATH picks the code)
SAMPLE_S = 0.05
TIMELINE_S = 0.25


def one(tree: Path, extra: list[str], cached_bytecode: bool = False, timeline: bool = False) -> dict:
    from _processes import TreeWatch

    run_dir = Path(tempfile.mkdtemp()) / "run"
    load, taken = os.getloadavg()[0], agent_port_taken()
    with fake_server() as port:
        url = f"http://127.0.0.1:{port}/v1"
        began, busy = time.time(), busy_cpu_s()
        cores, watch = CoresBusy(), None
        if timeline:
            cores.thread.start()
        launched = subprocess.Popen([sys.executable, str(TIMED_LAUNCH), "model=fake",
                                     "judge=fake", "limit=1", f"model.base_url={url}", f"judge.base_url={url}",
                                     f"run.dir={run_dir}", "run.cache=false", "run.progress=false", *extra],
                                    cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env=launch_env(tree, cached_bytecode))
        if timeline:   # every process of the launch, every SAMPLE_S (its own CPU perturbs the launch a little)
            watch = TreeWatch(os.getpid(), every_s=SAMPLE_S, driver=launched.pid).start()
        stdout, stderr = launched.communicate()
        ended, busy = time.time(), busy_cpu_s() - busy
        cores.stop.set()
        by_kind = watch.finish() if watch else {}
        server = stats(port)
    if launched.returncode != 0:
        raise SystemExit(f"launch failed:\n{stdout}\n{stderr}")
    line = next(x for x in stderr.splitlines() if x.startswith("TIMINGS "))
    timings = json.loads(line.removeprefix("TIMINGS "))
    marks, spans = timings["marks"], timings["spans"]
    firsts, lasts = server.get("first_admitted_at", {}), server.get("last_admitted_at", {})
    calls = (max(lasts.values()) - min(firsts.values())) if firsts else 0.0
    wall = ended - began
    steps = {"python + imports": marks["imported"] - began, **spans,
             "exit": ended - marks["main done"]}
    return {"wall": wall, "calls": calls, "requests": sum(server.get("by_model", {}).values()),
            "beyond": wall - calls, "cpu": busy, "steps": steps,
            "figures": len(list((run_dir / "plots").glob("*.png"))), "load": load, "port": taken,
            "cores busy": cores.buckets(began) if timeline else [], "cpu by kind": by_kind}


def show(name: str, runs: list[dict]) -> None:
    ranked = sorted(runs, key=lambda r: r["beyond"])
    r = ranked[len(ranked) // 2]
    beyond = ", ".join(f"{x['beyond']:.2f} (load {x['load']:.1f}{', port' if x['port'] else ''})" for x in runs)
    print(f"{name}: median of {len(runs)} by time beyond the calls (runs in order: {beyond} s)")
    print(f"  wall {r['wall']:.2f} s, calls {r['calls']:.2f} s ({r['requests']} requests), "
          f"beyond the calls {r['beyond']:.2f} s (goal <= 5), {r['figures']} figure(s), load {r['load']:.1f}")
    listed = ", ".join(f"{x['cpu']:.2f}" for x in runs)
    print(f"  the machine's CPU over the launch: median {statistics.median(x['cpu'] for x in runs):.2f} s "
          f"(runs: {listed})")
    for step, seconds in r["steps"].items():
        print(f"    {step:<32} {seconds:6.2f} s")
    for kind, used in sorted(r["cpu by kind"].items(), key=lambda item: -item[1]["cpu_s"]):
        print(f"    CPU of {kind:<25} {used['cpu_s']:6.2f} s over {used['processes']} process(es)")
    if r["cores busy"]:
        print(f"  cores busy in each {TIMELINE_S} s of that run: " + " ".join(f"{x:.1f}" for x in r["cores busy"]))
    print(f"  (steps overlap: the jobs include closing the gateways, aggregation includes the figures; "
          f"median wall over runs: {statistics.median(x['wall'] for x in runs):.2f} s)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--before", type=Path, help="another checkout of prefray, run alternately with this one")
    parser.add_argument("--timeline", action="store_true",
                        help="sample the launch's processes and the machine's busy cores every 50 ms")
    parser.add_argument("--cached-bytecode", action="store_true",
                        help="run with prefray's compiled modules cached, as a default Python after a first run")
    args, extra = parser.parse_known_args()
    trees = {"before": args.before.resolve(), "this": ROOT} if args.before else {"this": ROOT}
    if args.cached_bytecode:
        for tree in trees.values():
            compile_tree(tree)
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    for _ in range(args.repeats):
        for name, tree in trees.items():
            runs[name].append(one(tree, extra, args.cached_bytecode, args.timeline))
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    if args.cached_bytecode:
        print("bytecode: prefray's compiled modules cached (--cached-bytecode), as a default Python after a first run")
    elif os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print("bytecode: PYTHONDONTWRITEBYTECODE is set here, so every process compiles prefray's modules "
              "from source (a default Python caches them: --cached-bytecode)")
    for name, measured in runs.items():
        show(f"{name} ({trees[name]})", measured)
    if args.before:
        compare(runs["before"], runs["this"])


def compare(before: list[dict], this: list[dict]) -> None:
    """Each pair's ratio this / before (the two run back to back, so a slow spell of the machine
    touches both), their median and its 95% bootstrap interval: an interval that holds 1 is a
    change these runs cannot tell from the machine's noise."""
    from scipy.stats import bootstrap

    for key, what in (("beyond", "beyond the calls"), ("cpu", "the machine's CPU")):
        ratios = [after[key] / earlier[key] for earlier, after in zip(before, this)]
        pairs = ", ".join(f"{r:.2f}" for r in ratios)
        if len(ratios) < 3:   # too few pairs for an interval
            print(f"this / before, {what}: pairs {pairs} (an interval needs --repeats 3 or more)")
            continue
        low, high = bootstrap((ratios,), statistics.median, n_resamples=2000, method="percentile",
                              random_state=0).confidence_interval
        print(f"this / before, {what}: median of {len(ratios)} pairs {statistics.median(ratios):.3f}, "
              f"95% interval {low:.3f}-{high:.3f} (pairs: {pairs})")


if __name__ == "__main__":
    main()
