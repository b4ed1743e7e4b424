"""A peer side by side: the same BenchPreS-shaped job through inspect-ai and through prefray, back to
back, against the same OpenAI-compatible fake server (prefray/fakellm) at the same rate limits and
latency. Needs the `bench` extra (`pip install -e .[bench]`: inspect-ai).

The job: BenchPreS, condition default, the bundled instances (`--limit`), `--samples` answers each;
per answer one judge call per preference that is not a nickname and one completeness call (the
default 117 instances × 2 samples: 234 generation and 1,170 judge calls). inspect-ai runs it as a
task of bench/_inspect_benchpres.py: a solver generating each sample's answer with prefray's seed
and parameters, and a model-graded scorer sending the judge calls (the same prompts, schemas and
seed) at once. Both generate through `fake-model` and judge through `fake-judge`.

The server: each model its own requests-per-minute limit (`--model-rpm`, `--judge-rpm`) enforced as
a strict sliding window of `--window` seconds (a 429 beyond it), answers after a lognormal latency
(median `--latency`, sigma `--sigma`). prefray is given the same rpm (`model.rpm`, `judge.rpm`);
inspect-ai has no rate setting, only connections: its docs say the right `max_connections` is what
your rate limit sustains, so each model gets the in-flight count its rate needs at the mean latency
(Little's law: rpm/60 × mean latency, × 1.2 headroom, rounded up; `--inspect-connections M,J` to set
them), and `max_samples` their sum (each sample holds one generation, then its judge calls).

Printed for each: wall time of the command (process start to exit) ÷ the bound (the slower lane's
requests at its rpm, plus one median latency: the first answer before judging can start), the
429s, peak RSS (the process, and the sum over its process tree: prefray's Ray processes count), and
resume after a kill: a second run is killed (SIGKILL, the whole process tree) once `--kill-at` of
its calls are answered, then resumed (prefray: the same launch command on the same run.dir;
inspect-ai: `eval_retry` of its log); `re-sent` counts the resumed run's requests the server had
already answered (same model, messages, seed and schema; the fake's `answered_again`), and how many
of those the server had answered at least SETTLED_S (1 s) before the kill: an answer written just
before it may still have sat unread in the killed process's socket, which no harness can keep.

Usage: python bench/peer_inspect.py [--limit N] [--samples 2] [--model-rpm 300] [--judge-rpm 1200]
                                    [--latency 1] [--sigma 0.5] [--window 10] [--kill-at 0.5]
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from _common import ROOT, fake_server, stats
from _processes import descendants, rss_mb

HERE = Path(__file__).resolve().parent


@dataclass
class Outcome:
    wall: float = 0.0
    code: int = 0
    requests: dict = field(default_factory=dict)
    rate_limited: int = 0
    peak_mb: float = 0.0
    tree_mb: float = 0.0
    answered_before_kill: int = 0
    resumed_answered: int = 0
    re_sent: int = 0
    re_sent_settled: int = 0   # of them, answered at least SETTLED_S before the kill
    resumed_ok: bool = False


# An answer the server wrote less than this long before the kill may still have been in the killed
# process's socket or event loop, unread (on a loaded machine a process waits that long for a core).
SETTLED_S = 1.0


def watched(command: list[str], env: dict, stop_when=None) -> tuple[float, int, float, float]:
    """Run `command`; sample its own and its process tree's RSS; with `stop_when()` true, SIGKILL the
    whole tree. Return (wall seconds, exit code, peak MB of the process, peak MB summed over the tree)."""
    began = time.time()
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    peak = tree = 0.0
    while process.poll() is None:
        pids = descendants(process.pid)
        peak, tree = max(peak, rss_mb(process.pid)), max(tree, sum(rss_mb(p) for p in pids))
        if stop_when is not None and stop_when():
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            break
        time.sleep(0.25)
    _, err = process.communicate()
    if stop_when is None and process.returncode != 0:
        print(err[-3000:], file=sys.stderr)
    return time.time() - began, process.returncode, peak, tree


def server_args(args: argparse.Namespace) -> list[str]:
    return ["--model-limits", f"fake-model={args.model_rpm}:,fake-judge={args.judge_rpm}:",
            "--strict-window", str(args.window), "--latency", str(args.latency), "--latency-sigma", str(args.sigma)]


def job_overrides(args: argparse.Namespace) -> str:
    return " ".join([f"benchmark.samples={args.samples}", *([f"limit={args.limit}"] if args.limit else [])])


def prefray_command(args: argparse.Namespace, url: str, run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "prefray.launch", "benchmark=benchpres", "model=fake", "judge=fake",
            "condition=default", *job_overrides(args).split(), f"model.base_url={url}", f"judge.base_url={url}",
            f"model.rpm={args.model_rpm}", f"judge.rpm={args.judge_rpm}", f"run.dir={run_dir}", "run.cache=false",
            "run.progress=false"]


def connections(args: argparse.Namespace) -> tuple[int, int]:
    if args.inspect_connections:
        model, judge = (int(x) for x in args.inspect_connections.split(","))
        return model, judge
    mean_latency = args.latency * math.exp(args.sigma ** 2 / 2)
    return tuple(math.ceil(rpm / 60 * mean_latency * 1.2) for rpm in (args.model_rpm, args.judge_rpm))


def inspect_command(args: argparse.Namespace, url: str, log_dir: Path, retry: Path | None = None) -> list[str]:
    model, judge = connections(args)
    return [sys.executable, str(HERE / "peer_inspect.py"), "--inspect-child", "retry" if retry else "eval",
            "--child-url", url, "--child-log-dir", str(log_dir), "--child-log", str(retry or ""),
            "--child-overrides", job_overrides(args), "--child-connections", f"{model},{judge}"]


def inspect_child(args: argparse.Namespace) -> int:
    """In the child process: run (or retry) the inspect-ai task."""
    os.environ.setdefault("OPENAI_API_KEY", "bench")
    from inspect_ai import eval as inspect_eval
    from inspect_ai import eval_retry

    sys.path.insert(0, str(HERE))
    from _inspect_benchpres import benchpres_job

    model, judge = (int(x) for x in args.child_connections.split(","))
    common = dict(log_dir=args.child_log_dir, max_connections=model, max_samples=model + judge, display="none")
    if args.inspect_child == "retry":
        logs = eval_retry(args.child_log, **common)
    else:
        logs = inspect_eval(benchpres_job(overrides=args.child_overrides, judge_url=args.child_url,
                                          judge_connections=judge),
                            model="openai/fake-model", model_base_url=args.child_url,
                            model_args={"responses_api": False}, **common)
    return 0 if all(log.status == "success" for log in logs) else 1


def answered(port: int) -> int:
    return stats(port)["answered"]


def one_harness(name: str, args: argparse.Namespace, total: int) -> Outcome:
    out = Outcome()
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    scratch = Path(tempfile.mkdtemp(prefix=f"peer-{name}-"))
    with fake_server(*server_args(args)) as port:
        url = f"http://127.0.0.1:{port}/v1"
        command = (prefray_command(args, url, scratch / "run") if name == "prefray"
                   else inspect_command(args, url, scratch / "logs"))
        out.wall, out.code, out.peak_mb, out.tree_mb = watched(command, env)
        server = stats(port)
        out.requests, out.rate_limited = server["by_model"], server["rate_limited"]
    with fake_server(*server_args(args)) as port:   # the kill and the resume, on a fresh server
        url = f"http://127.0.0.1:{port}/v1"
        command = (prefray_command(args, url, scratch / "killed") if name == "prefray"
                   else inspect_command(args, url, scratch / "killed-logs"))
        watched(command, env, stop_when=lambda: answered(port) >= args.kill_at * total)
        killed_at = time.time()
        out.answered_before_kill = answered(port)
        if name == "prefray":
            resume = command
        else:
            killed_log = max((scratch / "killed-logs").glob("*.eval"), key=lambda p: p.stat().st_mtime)
            resume = inspect_command(args, url, scratch / "killed-logs", retry=killed_log)
        _, code, _, _ = watched(resume, env)
        server = stats(port)
        out.resumed_ok = code == 0
        out.resumed_answered = server["answered"] - out.answered_before_kill
        out.re_sent = server["answered_again"]
        out.re_sent_settled = sum(t < killed_at - SETTLED_S for t in server["answered_again_first_at"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=None, help="instances (default: every bundled one)")
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--model-rpm", type=float, default=300)
    parser.add_argument("--judge-rpm", type=float, default=1200)
    parser.add_argument("--latency", type=float, default=1.0, help="median answer latency, seconds")
    parser.add_argument("--sigma", type=float, default=0.5, help="sigma of the latency's logarithm")
    parser.add_argument("--window", type=float, default=10.0, help="the server's sliding window, seconds")
    parser.add_argument("--kill-at", type=float, default=0.5, help="share of the calls answered before the kill")
    parser.add_argument("--inspect-connections", default="", help="MODEL,JUDGE max_connections for inspect-ai")
    parser.add_argument("--inspect-child", choices=["eval", "retry"], help=argparse.SUPPRESS)
    for name in ("url", "log-dir", "log", "overrides", "connections"):
        parser.add_argument(f"--child-{name}", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inspect_child:
        sys.exit(inspect_child(args))
    print(f"load average at the start {open('/proc/loadavg').read().split()[:3]}", flush=True)
    calls = job_calls(args)
    results = {}
    for name in ("inspect-ai", "prefray"):
        results[name] = one_harness(name, args, sum(calls))
        print(f"{name} done; load average {open('/proc/loadavg').read().split()[:3]}", flush=True)
    report(args, calls, results)


def job_calls(args: argparse.Namespace) -> tuple[int, int]:
    """(generation calls, judge calls) of the job, from prefray's BenchPreS loader."""
    from _inspect_benchpres import prefray_job

    _, instances = prefray_job(job_overrides(args))
    judged = sum(1 + sum(p.category != "nickname" for p in inst.preferences) for inst in instances)
    return args.samples * len(instances), args.samples * judged


def report(args: argparse.Namespace, calls: tuple[int, int], results: dict[str, Outcome]) -> None:
    model, judge = connections(args)
    bound = max((calls[0] - 1) / (args.model_rpm / 60), (calls[1] - 1) / (args.judge_rpm / 60)) + args.latency
    print(f"job: BenchPreS default, {job_overrides(args)}; server: fake-model {args.model_rpm:g} rpm, fake-judge "
          f"{args.judge_rpm:g} rpm (strict {args.window:g} s window), latency lognormal median {args.latency:g} s "
          f"sigma {args.sigma:g}; {calls[0]} generation + {calls[1]} judge calls, bound {bound:.1f} s; "
          f"inspect-ai max_connections {model} / {judge}, max_samples {model + judge}")
    walls = {}
    for name, r in results.items():
        walls[name] = r.wall
        print(f"{name:<10} exit {r.code}; requests {r.requests} (429s {r.rate_limited}); wall {r.wall:.1f} s, bound "
              f"{bound:.1f} s, wall / bound {r.wall / bound:.3f}; peak RSS {r.peak_mb:.0f} MB (process tree "
              f"{r.tree_mb:.0f} MB); killed after {r.answered_before_kill} answers, resumed "
              f"{'complete' if r.resumed_ok else 'NOT complete'} with {r.resumed_answered} more answers, "
              f"{r.re_sent} re-sent that were answered before the kill ({r.re_sent_settled} of them answered "
              f"{SETTLED_S:g} s or more before it)")
    print(f"prefray wall / inspect-ai wall: {walls['prefray'] / walls['inspect-ai']:.3f} (goal <= 0.9); "
          f"load average at the end {open('/proc/loadavg').read().split()[:3]}")


if __name__ == "__main__":
    main()
