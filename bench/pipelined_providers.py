"""Two providers pipelined: generation on provider A, judging on provider B, each with its own RPM.

Two fake servers, each enforcing `--rpm` as a strict sliding 60 s window on its model (A serves the
evaluated model, B the judge), both answering after `--latency` seconds. One BenchPreS job sends its
generation calls to A and its judge and completeness calls to B; judge units are built per stored
answer, so B's lane should stay busy while A's still generates. The servers record when they
admitted each model's first and last request.

  span   = B's last admitted judge request − A's first admitted generation request
  bound  = max((generations − 1) ÷ (rpm_A/60), (judge calls − 1) ÷ (rpm_B/60)) + latency
           (both lanes at their RPM the whole time, B one answer behind A)
  ratio  = span ÷ bound                                              (target ≤ 1.10)

Printed: the median of `--repeats` runs, with the 429s both servers sent (target 0).
Usage: python bench/pipelined_providers.py [--rpm 300] [--latency 2] [--limit 37] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from _common import fake_server, launch, stats

MODEL, JUDGE = "fake-model", "fake-judge"


def one_run(rpm: int, latency: float, limit: int) -> dict:
    run_dir = Path(tempfile.mkdtemp()) / "run"
    window = ("--rpm", str(rpm), "--strict-window", "60", "--latency", str(latency))
    with (fake_server(*window, "--limit-models", MODEL) as port_a,
          fake_server(*window, "--limit-models", JUDGE) as port_b):
        launch("benchmark=benchpres", "condition=default", "model=fake", "judge=fake", f"limit={limit}",
               f"model.base_url=http://127.0.0.1:{port_a}/v1", f"judge.base_url=http://127.0.0.1:{port_b}/v1",
               f"model.rpm={rpm}", f"judge.rpm={rpm}", f"run.dir={run_dir}", "run.cache=false", "run.progress=false")
        a, b = stats(port_a), stats(port_b)
    generations = a["by_model"][MODEL] - a["rate_limited"]
    judged = b["by_model"][JUDGE] - b["rate_limited"]
    span = b["last_admitted_at"][JUDGE] - a["first_admitted_at"][MODEL]
    bound = max((generations - 1) / (rpm / 60), (judged - 1) / (rpm / 60)) + latency
    return {"generations": generations, "judged": judged, "span": span, "bound": bound, "ratio": span / bound,
            "429s": a["rate_limited"] + b["rate_limited"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rpm", type=int, default=300, help="each provider's requests per minute")
    parser.add_argument("--latency", type=float, default=2.0, help="seconds before each answer, both providers")
    parser.add_argument("--limit", type=int, default=37, help="BenchPreS instances (3 samples each)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runs = []
    for _ in range(args.repeats):
        runs.append(one_run(args.rpm, args.latency, args.limit))
        r = runs[-1]
        print(f"{r['generations']} generations on A, {r['judged']} judge calls on B: span {r['span']:.1f} s, "
              f"bound {r['bound']:.1f} s, ratio {r['ratio']:.3f}, 429s {r['429s']}", flush=True)
    print(f"median ratio {statistics.median(r['ratio'] for r in runs):.3f} (target <= 1.10), "
          f"429s {max(r['429s'] for r in runs)} (target 0)")


if __name__ == "__main__":
    main()
