"""Rate-limit efficiency with a shipped model config: send span ÷ the span its limits allow.

A fake server plays the provider of a real model config (default gpt-4o: its rpm, tpm and
max_concurrency as shipped) with a fixed answer latency, enforcing the config's RPM as a strict
sliding 60 s window (a 429 for any request beyond it). prefray runs BenchPreS generation plus an
unlimited judge that answers at once; the server records when it admitted the model's first and last request.

  bound  = max((requests − 1) ÷ (rpm/60), input tokens ÷ (tpm/60))   seconds the limits allow
  ratio  = admitted span ÷ bound                                      (target ≤ 1.05)

A lane first sends two calls and waits for one to answer, or (without a budget, as here) for one to
run PROBE_PATIENCE_S (1 s) unrefused (fail fast on a wrong key or model id, engine/calls/lanegate.py),
so every run pays min(latency, 1 s) at its start; the second ratio leaves that wait out. It is a constant per
lane, not per call.

Printed per latency (default 0.5, 2 and 8 s): the median of `--repeats` runs, with the most 429s
any run got from the server (target 0). The default 117 instances × 9 samples (1,053 generation
calls, 126 s of gpt-4o's RPM) let the lane's first wait amortise as it does in a sweep;
`--limit 40 --samples 3` shows it on a short run.
Usage: python bench/rate_limit_efficiency.py [--model gpt-4o] [--latencies 0.5,2,8] [--limit 117]
                                             [--samples 9] [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import yaml
from _common import ROOT, fake_server, launch, stats

sys.path.insert(0, str(ROOT))
from prefray.engine.calls.lanegate import PROBE_PATIENCE_S  # noqa: E402


def model_config(name: str) -> dict:
    return yaml.safe_load((ROOT / "conf" / "model" / f"{name}.yaml").read_text())


def one_latency(config: dict, latency: float, limit: int, samples: int) -> dict:
    run_dir = Path(tempfile.mkdtemp()) / "run"
    rpm, model_id = config["rpm"], config["model_id"]
    # the latency is the evaluated model's; the judge answers at once (it is not what is measured)
    with fake_server("--rpm", str(rpm), "--strict-window", "60", "--limit-models", model_id,
                     "--model-latency", f"{model_id}={latency}") as port:
        url = f"http://127.0.0.1:{port}/v1"
        key_env = config.get("api_key_env") or "PREFRAY_BENCH_KEY"
        launch(f"model={config['name']}", "judge=fake", "benchmark=benchpres", "condition=default",
               f"model.base_url={url}", f"judge.base_url={url}", f"limit={limit}", f"benchmark.samples={samples}",
               f"run.dir={run_dir}",
               "run.cache=false", "run.progress=false", env={key_env: "bench-key"})
        server = stats(port)
    admitted = server["by_model"][model_id] - server["rate_limited"]
    span = server["last_admitted_at"][model_id] - server["first_admitted_at"][model_id]
    bound = max((admitted - 1) / (rpm / 60), server["input_tokens_by_model"][model_id] / (config["tpm"] / 60))
    return {"latency": latency, "requests": admitted, "span": span, "bound": bound, "ratio": span / bound,
            "after_probe": max(0.0, span - min(latency, PROBE_PATIENCE_S)) / bound, "429s": server["rate_limited"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="gpt-4o")
    parser.add_argument("--latencies", default="0.5,2,8")
    parser.add_argument("--limit", type=int, default=117, help="BenchPreS instances (the sample has 117)")
    parser.add_argument("--samples", type=int, default=9, help="generations per instance")
    parser.add_argument("--repeats", type=int, default=3, help="runs per latency; the median ratio is printed")
    args = parser.parse_args()
    config = model_config(args.model)
    print(f"{args.model}: rpm {config['rpm']}, tpm {config['tpm']}, max_concurrency {config['max_concurrency']}")
    for latency in (float(x) for x in args.latencies.split(",")):
        runs = sorted((one_latency(config, latency, args.limit, args.samples) for _ in range(args.repeats)),
                      key=lambda r: r["ratio"])
        r = runs[len(runs) // 2]
        ratios = ", ".join(f"{x['ratio']:.3f}" for x in runs)
        print(f"latency {r['latency']:>4.1f} s: {r['requests']} requests, span {r['span']:.1f} s, "
              f"bound {r['bound']:.1f} s, median ratio {r['ratio']:.3f} (runs: {ratios}), "
              f"without the lane's probe wait "
              f"{r['after_probe']:.3f} (target <= 1.05), 429s {max(x['429s'] for x in runs)} (target 0)", flush=True)


if __name__ == "__main__":
    main()
