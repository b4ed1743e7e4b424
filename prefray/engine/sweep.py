"""A sweep as the engine receives it: built once at the command's edge (prefray/app/), then passed whole.

`Sweep` holds every prepared job (its `Job`, loaded benchmark, instances and composed config), the
typed `run.*` config, the run directory (the local one: a URI run dir's staging mirror) and the
`SendPolicy` of the command (launch sends what is not stored; rerun resends failures of some causes;
rejudge never sends the evaluated model's stages). The runner, the plan (counted or simulated), the
aggregation and the incomplete-run report all read it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from prefray.engine.benchmark import Benchmark, Job
from prefray.engine.config.schema import RunConfig
from prefray.engine.rundir.cache import ResponseCache
from prefray.engine.rundir.layout import CACHE_FILE, RunDir


@dataclass(frozen=True)
class SendPolicy:
    """Which stored units a command sends again, and whether the evaluated model is asked at all."""

    # Stored units that ended failed/skipped with one of these causes are sent again (rerun).
    resend_causes: frozenset[str] = frozenset()
    # Stages answered by the evaluated model are never sent: only its stored answers are used (rejudge).
    subject_stored_only: bool = False


@dataclass(frozen=True)
class PreparedJob:
    """One job of a sweep with what it runs on: its benchmark, its loaded instances, its composed config."""

    job: Job
    benchmark: Benchmark
    instances: Sequence[Any]
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Sweep:
    """Every job of one command, its run config, its run dir and its send policy."""

    jobs: tuple[PreparedJob, ...]
    run: RunConfig
    run_dir: RunDir
    policy: SendPolicy = SendPolicy()
    location: str | None = None   # run.dir as the user gave it (a URI when run_dir is its staging mirror)
    # Each counting-plan cell's calls and tokens per instance on the horizon's sample: the limit check
    # fills it and the run's lane estimate reads it (engine/flow/horizon.py); a sweep under another
    # send policy (`with_policy`) starts empty.
    sampled_rates: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def assemble(cls, jobs: Sequence[Job], benchmarks: dict[str, Benchmark], instances: dict[int, Sequence[Any]],
                 run_dir: RunDir, run: RunConfig | None = None,
                 configs: Sequence[dict[str, Any]] | None = None, **rest: Any) -> Sweep:
        """A sweep from its jobs, their benchmarks by name and their instances by position."""
        prepared = tuple(PreparedJob(job, benchmarks[job.benchmark], instances[i], configs[i] if configs else {})
                         for i, job in enumerate(jobs))
        return cls(prepared, run if run is not None else RunConfig(), run_dir, **rest)

    @property
    def where(self) -> str:
        """The run dir as the user knows it (the URI of a staged run)."""
        return self.location or str(self.run_dir.root)

    @property
    def job_list(self) -> list[Job]:
        return [p.job for p in self.jobs]

    @property
    def configs(self) -> list[dict[str, Any]]:
        return [p.config for p in self.jobs]

    @property
    def benchmarks(self) -> dict[str, Benchmark]:
        return {p.job.benchmark: p.benchmark for p in self.jobs}

    @property
    def instances(self) -> dict[int, Sequence[Any]]:
        """Each job's instances, by its position in the sweep."""
        return {i: p.instances for i, p in enumerate(self.jobs)}

    def panels(self) -> dict[str, list[str]]:
        """Each benchmark's panel under run.panel: the judges of its jobs, in the order the sweep names them."""
        found: dict[str, list[str]] = {}
        for p in self.jobs:
            members = found.setdefault(p.job.benchmark, [])
            if p.job.roles["judge"].name not in members:
                members.append(p.job.roles["judge"].name)
        return found

    def with_policy(self, policy: SendPolicy) -> Sweep:
        return replace(self, policy=policy)

    @property
    def cache_file(self) -> Path:
        """The response cache's file: under run.cache_dir if set, else beside the run dir."""
        if self.run.cache_dir:
            return Path(self.run.cache_dir) / CACHE_FILE
        return self.run_dir.default_cache

    def open_cache(self, only_if_present: bool = False) -> ResponseCache | None:
        """The response cache, or None when bypassed (or, for read-only users, not there yet)."""
        if not self.run.cache or (only_if_present and not self.cache_file.exists()):
            return None
        return ResponseCache(self.cache_file)
