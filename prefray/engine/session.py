"""One sweep from start to end: Ray, manifest, budget, cache, concurrent jobs, metrics, summary."""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from prefray.engine.aggregate import aggregate_run
from prefray.engine.batch import with_batch_tier
from prefray.engine.benchmark import Benchmark, Job
from prefray.engine.cache import ResponseCache, default_cache_path
from prefray.engine.dispatch import Dispatcher, Gateways
from prefray.engine.gateway import NAMESPACE
from prefray.engine.manifest import append_manifest
from prefray.engine.progress import LiveProgress
from prefray.engine.runner import JobRunner, RunSettings, run_jobs


@dataclass(frozen=True)
class SweepOptions:
    """Run settings shared by every job of a sweep (the `run.*` config group)."""

    run_dir: Path
    shard_size: int = 16
    progress: bool = True
    budget_usd: float | None = None
    cache: bool = True
    cache_path: Path | None = None

    @classmethod
    def from_config(cls, run_dir: Path, run: dict[str, Any]) -> "SweepOptions":
        cache_dir = run.get("cache_dir")
        budget = run.get("budget_usd")
        return cls(run_dir=run_dir, shard_size=int(run.get("shard_size") or 16),
                   progress=bool(run.get("progress", True)),
                   budget_usd=None if budget is None else float(budget), cache=bool(run.get("cache", True)),
                   cache_path=Path(cache_dir) / "responses.sqlite" if cache_dir else None)

    @property
    def cache_file(self) -> Path:
        return self.cache_path or default_cache_path(self.run_dir)

    def open_cache(self, only_if_present: bool = False) -> ResponseCache | None:
        """The response cache, or None when bypassed (or, for read-only users, not there yet)."""
        if not self.cache or (only_if_present and not self.cache_file.exists()):
            return None
        return ResponseCache(self.cache_file)


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


async def drive(jobs: Sequence[Job], benchmarks: dict[str, Benchmark], instances: dict[int, Sequence[Any]],
                settings: RunSettings, dispatcher: Dispatcher) -> list[tuple[Job, BaseException]]:
    runners = [JobRunner(job, benchmarks[job.benchmark], instances[i], settings, dispatcher)
               for i, job in enumerate(jobs)]
    try:
        return await run_jobs(runners)
    finally:
        await dispatcher.close()


def budget_actor(limit_usd: float | None) -> Any:
    if limit_usd is None:
        return None
    from prefray.engine.budget import Budget

    return Budget.remote(limit_usd)


def run_sweep(options: SweepOptions, configs: list[dict[str, Any]], jobs: Sequence[Job],
              benchmarks: dict[str, Benchmark], instances: dict[int, Sequence[Any]],
              run_settings: dict[str, Any] | None = None) -> int:
    """Run (or rerun) every job against real providers, then write the metrics files."""
    options.run_dir.mkdir(parents=True, exist_ok=True)
    append_manifest(options.run_dir, manifest_entries(configs), secret_envs(jobs))
    start_ray()
    cache = options.open_cache()
    show = options.progress and sys.stderr.isatty()
    with LiveProgress(enabled=show) as progress:
        settings = RunSettings(run_dir=options.run_dir, shard_size=options.shard_size, progress=progress.update,
                               cache=cache, **(run_settings or {}))
        gateways = Gateways(budget=budget_actor(options.budget_usd))
        gateways = with_batch_tier(gateways, options.run_dir, configs[0]["run"])  # models in tier batch
        crashed = asyncio.run(drive(jobs, benchmarks, instances, settings, gateways))
    if cache is not None:
        cache.close()
    for job, error in crashed:
        print(f"prefray: job {job.benchmark}/{job.model.name}/{job.condition} stopped: "
              f"{type(error).__name__}: {error}", file=sys.stderr)
    aggregate_run(options.run_dir, benchmarks, {j.benchmark: j.settings for j in jobs}, options.budget_usd)
    return 1 if crashed else 0
