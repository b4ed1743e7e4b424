"""Check the whole sweep before any call: configs, API keys, datasets. Collect every problem."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from prefray.engine.benchmark import Benchmark, DataError, Job
from prefray.engine.sweep import Sweep


def missing_keys(jobs: Sequence[Job]) -> list[str]:
    """Every API key environment variable the sweep needs and the environment lacks."""
    needed = set()
    for job in jobs:
        for spec in (job.model, *job.roles.values()):
            if spec.api_key_env:
                needed.add((spec.api_key_env, spec.name))
    missing: dict[str, list[str]] = {}
    for env, model in sorted(needed):
        if not os.environ.get(env):
            missing.setdefault(env, []).append(model)
    return [f"{env} (for {', '.join(models)})" for env, models in missing.items()]


def load_datasets(jobs: Sequence[Job], benchmarks: dict[str, Benchmark]) -> tuple[dict[int, Sequence[Any]], list[str]]:
    """Load every job's instances once per distinct dataset; return them and the errors."""
    loaded: dict[str, Sequence[Any] | DataError] = {}
    instances: dict[int, Sequence[Any]] = {}
    errors: list[str] = []
    for index, job in enumerate(jobs):
        key = job.dataset_key()
        if key not in loaded:
            try:
                loaded[key] = benchmarks[job.benchmark].load(job)
                if len(loaded[key]) == 0:
                    raise DataError("the dataset has no instances (check benchmark.data and condition); "
                                    "allowed is a dataset with at least one instance")
            except (DataError, OSError, ValueError) as exc:
                loaded[key] = DataError(f"{job.benchmark}: {exc}")
                if str(loaded[key]) not in errors:  # one dataset read by several conditions: said once
                    errors.append(str(loaded[key]))
        value = loaded[key]
        if not isinstance(value, DataError):
            instances[index] = value
    return instances, errors


def preflight(jobs: Sequence[Job], benchmarks: dict[str, Benchmark]) -> tuple[dict[int, Sequence[Any]], list[str]]:
    errors = []
    keys = missing_keys(jobs)
    if keys:
        errors.append("missing API key environment variable(s): " + "; ".join(keys))
    instances, data_errors = load_datasets(jobs, benchmarks)
    return instances, errors + data_errors


def impossible_limits(sweep: Sweep) -> list[str]:
    """The rate, budget and context limits the plan cannot run under (engine/flow/horizon.py)."""
    from prefray.engine.flow.horizon import limit_problems

    cache = sweep.open_cache(only_if_present=True)   # read only: a refusal leaves no cache file
    try:
        return limit_problems(sweep, cache)
    finally:
        if cache is not None:
            cache.close()
