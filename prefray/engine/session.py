"""One sweep from start to end: Ray, manifest, concurrent jobs, metrics files, summary."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from prefray.engine.aggregate import compute_metrics, summarize_calls, write_outputs
from prefray.engine.benchmark import Benchmark, Job
from prefray.engine.gateway import NAMESPACE
from prefray.engine.manifest import append_manifest
from prefray.engine.progress import LiveProgress
from prefray.engine.report import print_summary, render_markdown
from prefray.engine.runner import Gateways, JobRunner, RunSettings, run_jobs


def node_ip(address: str | None) -> str | None:
    """The driver's node address: loopback for a local cluster, Ray's own choice otherwise."""
    if os.environ.get("PREFRAY_NODE_IP"):
        return os.environ["PREFRAY_NODE_IP"]
    if not address or address.split(":")[0] in ("127.0.0.1", "localhost"):
        return "127.0.0.1"
    return None


def start_ray() -> None:
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS") or None
        ray.init(address=address, namespace=NAMESPACE, _node_ip_address=node_ip(address),
                 log_to_driver=False, include_dashboard=False, configure_logging=False)


def secret_envs(jobs: Sequence[Job]) -> set[str]:
    return {s.api_key_env for j in jobs for s in (j.model, *j.roles.values()) if s.api_key_env}


def manifest_entries(configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"benchmark": c["benchmark"]["name"], "model": c["model"]["name"],
             "condition": c["condition"]["name"], "judge": c["judge"]["name"], "config": c} for c in configs]


async def _run(jobs: Sequence[Job], benchmarks: dict[str, Benchmark], instances: dict[int, Sequence[Any]],
               settings: RunSettings) -> list[tuple[Job, BaseException]]:
    gateways = Gateways()
    runners = [JobRunner(job, benchmarks[job.benchmark], instances[i], settings, gateways)
               for i, job in enumerate(jobs)]
    try:
        return await run_jobs(runners)
    finally:
        await gateways.close()


def aggregate(run_dir: Path, benchmarks: dict[str, Benchmark], settings: dict[str, dict[str, Any]]) -> None:
    metrics = compute_metrics(run_dir, benchmarks, settings)
    calls = summarize_calls(run_dir)
    write_outputs(run_dir, metrics, calls, render_markdown(metrics, calls))
    print_summary(metrics, calls)
    print(f"metrics: {run_dir / 'metrics.csv'}  {run_dir / 'metrics.md'}")


def run_sweep(run_dir: Path, configs: list[dict[str, Any]], jobs: Sequence[Job],
              benchmarks: dict[str, Benchmark], instances: dict[int, Sequence[Any]]) -> int:
    run_dir.mkdir(parents=True, exist_ok=True)
    append_manifest(run_dir, manifest_entries(configs), secret_envs(jobs))
    start_ray()
    show = bool(configs[0]["run"].get("progress", True)) and sys.stderr.isatty()
    with LiveProgress(enabled=show) as progress:
        settings = RunSettings(run_dir=run_dir, shard_size=int(configs[0]["run"].get("shard_size") or 16),
                               progress=progress.update)
        crashed = asyncio.run(_run(jobs, benchmarks, instances, settings))
    for job, error in crashed:
        print(f"prefray: job {job.benchmark}/{job.model.name}/{job.condition} stopped: "
              f"{type(error).__name__}: {error}", file=sys.stderr)
    aggregate(run_dir, benchmarks, {j.benchmark: j.settings for j in jobs})
    return 1 if crashed else 0
