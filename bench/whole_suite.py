"""The whole suite end to end on this machine: `python -m prefray.launch -m model=all condition=all`
(every evaluated model of model=all, every benchmark and condition, each benchmark's paper judge and
roles) with every endpoint pointed at a fake provider.

- One fake server per real endpoint (provider, base_url, API key variable) of the models the sweep
  calls, enforcing each model's configured rpm and tpm × `--rate-factor` (its own limits, per model id,
  as providers apply them); the configs the launch reads (a copy of conf/ under PREFRAY_CONF) carry the
  same scaled limits and the fake's address.
- Answer latency drawn lognormal per request: median `--latency` (1 s), sigma `--sigma` (0.5).
- `--scale S` (0 < S ≤ 1): a proportional smaller run, every benchmark cut to ⌈S × the largest
  benchmark's instances⌉ instances (`limit`); `--models K` keeps the first K models of model=all.

It checks that every job's cell has metrics, that the run is complete (exit 0, no unit without an
answer) and that no fake answered a 429, and prints: calls, wall time, the driver's peak RSS (during
the calls and in all, and what it holds when the aggregation begins; its memory every minute is in
`--json`), the aggregation time, the slowest lane's bound (max over lanes of its calls ÷
rpm and input tokens ÷ tpm), the harness ceiling's time for as many calls (calls ÷ `--ceiling-rps`,
bench/harness_ceiling.py's plain asyncio loop: ~770 req/s here) and

  ratio = wall ÷ max(slowest lane's bound, harness ceiling's time)       (target ≤ 1.3)

The wall time is the launch's, start to exit (its fixed overhead included).
Usage: python bench/whole_suite.py [--scale 1] [--models K] [--rate-factor F] [--latency 1] [--sigma 0.5]
                                   [--ceiling-rps 770] [--figures headline] [--keep DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import yaml
from _common import ROOT, fake_server, stats
from _processes import TreeWatch

sys.path.insert(0, str(ROOT))
from prefray.app.sweep import all_options  # noqa: E402

FAKE_KEY = "prefray-bench-key"


def model_files(conf: Path) -> dict[str, dict]:
    """Every model option with its own endpoint (files that only reuse another option are left out)."""
    found = {}
    for path in sorted((conf / "model").glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        if isinstance(data, dict) and "provider" in data and not data.get("serve"):
            found[path.stem] = data
    return found


def endpoint_of(config: dict) -> tuple[str, str, str]:
    return config["provider"], config.get("base_url") or "default", config.get("api_key_env") or ""


def scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def point_at_fakes(conf: Path, factor: float, latency: float, sigma: float, stack: ExitStack) -> dict:
    """Start one fake per endpoint of conf/model and rewrite every model file to reach its endpoint's
    fake with its rpm/tpm × factor; return {endpoint: {"port", "limits": {model_id: (rpm, tpm)}}}."""
    models = model_files(conf)
    endpoints: dict[tuple, dict] = {}
    for config in models.values():
        limits = endpoints.setdefault(endpoint_of(config), {"limits": {}})["limits"]
        limits.setdefault(config["model_id"], (scaled(config.get("rpm"), factor), scaled(config.get("tpm"), factor)))
    for entry in endpoints.values():
        spec = ",".join(f"{m}={'' if r is None else r}:{'' if t is None else t}"
                        for m, (r, t) in entry["limits"].items())
        entry["port"] = stack.enter_context(fake_server("--latency", str(latency), "--latency-sigma", str(sigma),
                                                        "--model-limits", spec))
    for name, config in models.items():
        entry = endpoints[endpoint_of(config)]
        suffix = "/v1" if config["provider"] == "openai" else ""
        config.update(base_url=f"http://127.0.0.1:{entry['port']}{suffix}",
                      rpm=scaled(config.get("rpm"), factor), tpm=scaled(config.get("tpm"), factor))
        (conf / "model" / f"{name}.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return endpoints


def largest_benchmark(conf: Path) -> int:
    """Instances of the largest benchmark's data as the sweep reads it (its sample)."""
    from prefray.app.compose import compose_sweep
    from prefray.app.preflight import preflight

    os.environ["PREFRAY_CONF"] = str(conf)
    _, jobs, benchmarks = compose_sweep(["model=fake", "judge=fake", "condition=all"], True)
    instances, _ = preflight(jobs, benchmarks)
    return max(len(found) for found in instances.values())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--models", type=int, default=None, help="only the first K models of model=all")
    parser.add_argument("--rate-factor", type=float, default=30.0, help="every rpm and tpm × this")
    parser.add_argument("--latency", type=float, default=1.0, help="median answer latency, seconds")
    parser.add_argument("--sigma", type=float, default=0.5, help="sigma of the latency's logarithm")
    parser.add_argument("--ceiling-rps", type=float, default=770.0,
                        help="the harness ceiling: requests a second of a plain asyncio loop here")
    parser.add_argument("--figures", default=None, choices=("none", "headline", "all"),
                        help="run.figures (default: the run's own default)")
    parser.add_argument("--keep", default=None, help="folder for the run (kept); default a temporary one")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = parser.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="whole-suite-"))
    conf = work / "conf"
    shutil.rmtree(conf, ignore_errors=True)
    shutil.copytree(ROOT / "conf", conf)
    run_dir = work / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    models = all_options(conf, "model")[:args.models] if args.models else None
    overrides = ["-m", f"model={','.join(models)}" if models else "model=all", "condition=all",
                 f"run.dir={run_dir}", "run.cache=false", "run.progress=false"]
    if args.figures:
        overrides.append(f"run.figures={args.figures}")
    if args.scale < 1:
        overrides.append(f"limit={max(1, math.ceil(args.scale * largest_benchmark(conf)))}")
    with ExitStack() as stack:
        endpoints = point_at_fakes(conf, args.rate_factor, args.latency, args.sigma, stack)
        keys = {env: FAKE_KEY for env in {e[2] for e in endpoints} if env}
        env = {**os.environ, **keys, "PREFRAY_CONF": str(conf), "BENCH_MEMORY_EVERY": "60"}
        began = time.time()
        watch = TreeWatch(os.getpid()).start()   # the fakes and the launch's tree (Ray's processes in it)
        launch = subprocess.Popen([sys.executable, str(ROOT / "bench" / "_timed_launch.py"), *overrides], cwd=ROOT,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        watch.driver = launch.pid
        stdout, stderr = launch.communicate()
        wall = time.time() - began
        processes = watch.finish()
        done = subprocess.CompletedProcess(launch.args, launch.returncode, stdout, stderr)
        served = {endpoint: stats(entry["port"]) for endpoint, entry in endpoints.items()}
    timings = next((json.loads(line.removeprefix("TIMINGS ")) for line in done.stderr.splitlines()
                    if line.startswith("TIMINGS ")), None)
    problems = [] if done.returncode == 0 else [f"launch exited {done.returncode}: {done.stderr[-2000:]}"]
    lanes = {}
    for endpoint, entry in endpoints.items():
        seen = served[endpoint]
        for model_id, (rpm, tpm) in entry["limits"].items():
            calls = seen["by_model"].get(model_id, 0)
            if not calls:
                continue
            tokens = seen["input_tokens_by_model"].get(model_id, 0)
            bound = max(calls / rpm * 60 if rpm else 0.0, tokens / tpm * 60 if tpm else 0.0)
            lanes[f"{endpoint[0]} {endpoint[1]} {model_id}"] = {"calls": calls, "bound_s": bound}
    rate_limited = sum(seen["rate_limited"] for seen in served.values())
    calls = sum(lane["calls"] for lane in lanes.values())
    problems += [f"{rate_limited} requests answered 429"] if rate_limited else []
    problems += missing_cells(run_dir)
    slowest = max(lanes.items(), key=lambda item: item[1]["bound_s"]) if lanes else ("", {"bound_s": 0.0})
    ceiling_s = calls / args.ceiling_rps
    result = {
        "scale": args.scale, "models": len(models) if models else len(all_options(conf, "model")),
        "rate_factor": args.rate_factor, "calls": calls, "wall_s": wall, "429s": rate_limited,
        "slowest_lane": slowest[0], "slowest_lane_bound_s": slowest[1]["bound_s"], "ceiling_s": ceiling_s,
        "ratio": wall / max(slowest[1]["bound_s"], ceiling_s, 1e-9),
        "aggregation_s": (timings or {}).get("spans", {}).get("aggregation (tables + figures)"),
        "driver_peak_mb": (timings or {}).get("peak_mb"),
        "driver_calls_peak_mb": (timings or {}).get("marks", {}).get("calls peak MB"),
        "steps": (timings or {}).get("spans"), "marks": (timings or {}).get("marks"),
        "load_average": os.getloadavg()[0], "problems": problems,
        "processes": processes,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    print(f"{result['models']} models, scale {args.scale}, rates × {args.rate_factor}: {calls} calls in "
          f"{wall:.1f} s; slowest lane {slowest[0]} bound {slowest[1]['bound_s']:.1f} s, harness ceiling "
          f"{ceiling_s:.1f} s; ratio {result['ratio']:.3f} (target <= 1.3); 429s {rate_limited}; aggregation "
          f"{result['aggregation_s'] or 0:.1f} s; driver peak RSS {result['driver_peak_mb'] or 0:.0f} MB "
          f"({result['driver_calls_peak_mb'] or 0:.0f} MB during the calls); load average "
          f"{result['load_average']:.1f}")
    at_aggregation = (result["marks"] or {}).get("memory at aggregation")
    if at_aggregation:   # what the driver holds when its metrics begin (the json has it every minute)
        print(f"  driver when the aggregation began: RSS {at_aggregation['VmRSS']} MB (anonymous "
              f"{at_aggregation['RssAnon']} MB), Arrow {at_aggregation.get('arrow MB', 0)} MB, "
              f"{at_aggregation['python blocks']} Python blocks")
    for kind, entry in sorted(processes.items(), key=lambda item: -item[1]["cpu_s"]):
        print(f"  {kind}: {entry['processes']} process(es), CPU {entry['cpu_s']:.0f} s "
              f"({entry['cpu_s'] / max(wall, 1e-9):.2f} cores over the wall), largest peak RSS "
              f"{entry['peak_mb_max']:.0f} MB")
    for problem in problems:
        print(f"PROBLEM: {problem}")
    if problems:
        raise SystemExit(1)


def missing_cells(run_dir: Path) -> list[str]:
    """Every job of the manifest has metric rows, complete; no unit is left without an answer."""
    metrics = run_dir / "metrics.csv"
    if not metrics.exists():
        return ["no metrics.csv"]
    with open(metrics, newline="") as handle:
        rows = list(csv.DictReader(handle))
    cells = {(r["benchmark"], r["model"], r["condition"]) for r in rows}
    incomplete = {(r["benchmark"], r["model"], r["condition"]) for r in rows if r.get("complete") == "false"}
    manifest = run_dir / "manifest.json"
    runs = json.loads(manifest.read_text())["runs"] if manifest.exists() else []
    jobs = {(j["benchmark"], j["model"], j["condition"]) for j in (runs[-1]["jobs"] if runs else [])}
    # a job whose rows its benchmark splits by condition (PRISK's factorial) has its cells under those
    own = {(b, c) for b, _, c in jobs}
    problems = [f"no metrics for {job}" for job in sorted(jobs - cells)
                if not any(b == job[0] and m == job[1] and (b, c) not in own for b, m, c in cells)]
    problems += [f"incomplete cell {cell}" for cell in sorted(incomplete)]
    if (run_dir / "incomplete.csv").exists():
        problems.append("incomplete.csv written: units without an answer")
    if not jobs:
        problems.append("no jobs found in the manifest")
    return problems


if __name__ == "__main__":
    main()
