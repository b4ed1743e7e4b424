"""One sweep from start to end: Ray, manifest, budget, cache, concurrent jobs, metrics, summary."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from prefray.engine.benchmark import Job
from prefray.engine.calls.batch import with_batch_tier
from prefray.engine.calls.dispatch import Dispatcher, Gateways
from prefray.engine.calls.gateway import NAMESPACE
from prefray.engine.flow.critical import LaneEstimate, estimated_minutes
from prefray.engine.flow.exits import (
    EXIT_CONFIG,
    EXIT_ERROR,
    EXIT_INCOMPLETE,
    EXIT_OK,
    cluster_ends_with_process,
    set_current_run,
)
from prefray.engine.flow.local_node import lean_local_node
from prefray.engine.flow.progress import LiveProgress, watch_gateways
from prefray.engine.flow.runner import JobRunner, Outlets, run_jobs
from prefray.engine.logs import STDOUT
from prefray.engine.results.aggregate import aggregate_sweep
from prefray.engine.results.manifest import append_manifest
from prefray.engine.results.request_store import compact_requests
from prefray.engine.rundir.paid import compact_paid
from prefray.engine.sweep import Sweep
from prefray.engine.types import ModelSpec

log = logging.getLogger(__name__)


def node_ip(address: str | None) -> str | None:
    """The driver's node address: loopback for a local cluster, Ray's own choice otherwise."""
    if os.environ.get("PREFRAY_NODE_IP"):
        return os.environ["PREFRAY_NODE_IP"]
    if not address or address.split(":")[0] in ("127.0.0.1", "localhost"):
        return "127.0.0.1"
    return None


def use_system_allocator() -> None:
    """Give the driver's Arrow memory to the C library's allocator. Arrow's default (mimalloc) keeps
    the pages it frees, so every compaction and every read of stored rows left the driver larger
    (bench/driver_rss.py: 1.33× from 10k to 50k calls, 1.16× with this); the C library's heap is
    trimmed when compaction hands its pages back (`MemoryPool.release_unused`)."""
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())


def start_ray(preload: Sequence[str] = ()) -> bool:
    """Connect to RAY_ADDRESS's cluster or start a local one; True if this call started a local
    cluster (it ends with this launch), False if it joined one or the process was connected already.
    A local cluster's workers import the modules `preload` names as they start, before taking work:
    the workers Ray starts with the driver become the first gateways, so those imports (the gateway's
    and its SDK's, ~1 s of CPU) are done while the driver is still getting ready to create them."""
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # Ray starts its workers at niceness 15, below the driver. A gateway is a worker, and it does the
    # HTTP work every call waits on; at the driver's priority it is not starved when the node is busy.
    # (A cluster started with `ray start` takes the variable from that command's environment.)
    os.environ.setdefault("RAY_worker_niceness", "0")
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS") or None
        local = address is None
        # "local": a cluster of this launch's own, never the last one `ray start` began on this machine
        # (what ray.init joins when given no address): it ends with the launch (exits.end_process)
        with lean_local_node(local):
            ray.init(address=address or "local", namespace=NAMESPACE, _node_ip_address=node_ip(address),
                     log_to_driver=False, include_dashboard=False, configure_logging=False,
                     _system_config={"preload_python_modules": list(preload)} if local and preload else None)
        return local
    return False


def worker_modules(specs: Sequence[ModelSpec]) -> list[str]:
    """What every worker of a launch's own cluster imports as it starts: the gateway's module, and
    the models' adapter when they all have the same one (with two, each gateway would import an SDK
    it never calls, ~2.5 s of CPU for Anthropic's; the other workers, a lane's limiter and the
    budget, import them too)."""
    from prefray.engine.calls import gateway
    from prefray.engine.calls.providers import provider_modules

    adapters = provider_modules(specs)
    return [gateway.__name__, *(adapters if len(adapters) == 1 else [])]


def stop_ray_meanwhile(started: bool) -> threading.Thread | None:
    """Once the calls are over, nothing needs Ray: a local cluster this launch started (`started`)
    is stopped (~1-2 s of its processes ending) on a thread while the metrics and figures are
    written, instead of after them at exit; join the thread before returning. In a process that
    ends as soon as the command returns, the cluster is left to end with it (exits.end_process).
    A joined cluster's connection stays (it ends with the process, as before)."""
    if not started or cluster_ends_with_process(started):
        return None
    import ray

    stopping = threading.Thread(target=ray.shutdown, name="prefray-ray-shutdown", daemon=True)
    stopping.start()
    return stopping


def lanes_estimated_meanwhile(sweep: Sweep) -> Callable[[], LaneEstimate]:
    """Start estimating each rate-limited lane's minutes on a thread (flow/critical.py: which lanes have
    time to spare, which stages lead to the slowest ones); return what waits for the answer (an
    estimate that fails leaves every gateway at niceness 0 and ranks stages by their chains alone)."""
    found: list[LaneEstimate] = []

    def estimate() -> None:
        try:
            found.append(estimated_minutes(sweep))
        except Exception as exc:  # noqa: BLE001 - a scheduling hint: the run goes on without it
            log.debug(f"prefray: no lane estimate ({type(exc).__name__}: {exc})")

    thread = threading.Thread(target=estimate, name="prefray-lane-estimate", daemon=True)
    thread.start()

    def answer() -> LaneEstimate:
        thread.join()
        return found[0] if found else LaneEstimate()
    return answer


def secret_envs(jobs: Sequence[Job]) -> set[str]:
    return {s.api_key_env for j in jobs for s in (j.model, *j.roles.values()) if s.api_key_env}


def manifest_entries(configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"benchmark": c["benchmark"]["name"], "model": c["model"]["name"],
             "condition": c["condition"]["name"], "judge": c["judge"]["name"], "config": c} for c in configs]


async def drive(sweep: Sweep, outlets: Outlets, dispatcher: Dispatcher,
                feed: Callable[[str, int, int, int, float], None] | None = None,
                asked: dict[tuple[str, str, str], dict[tuple[str, str], set[str]]] | None = None,
                lanes: LaneEstimate | None = None) -> list[tuple[Job, BaseException]]:
    """Run every job; with `feed`, live progress learns of each finished call from the gateways.
    `asked` gets, per resumed job folder (benchmark, model, condition), the units this launch built
    by stage and judge. `lanes`: the lanes' estimate the stages are ranked by (flow/critical.py)."""
    runners = [JobRunner(prepared, sweep, outlets, dispatcher, lanes) for prepared in sweep.jobs]
    watcher = asyncio.ensure_future(watch_gateways(getattr(dispatcher, "inner", dispatcher), feed)) if feed else None
    try:
        return await run_jobs(runners)
    finally:
        for runner in runners:
            if asked is not None and runner.asked is not None:
                job = runner.job
                folder = asked.setdefault((job.benchmark, job.model.name, job.condition), {})
                for stage, units in runner.asked.items():
                    folder.setdefault(stage, set()).update(units)
        if watcher is not None:
            watcher.cancel()
        await dispatcher.close()


def budget_actor(limit_usd: float | None) -> Any:
    if limit_usd is None:
        return None
    from prefray.engine.money.budget import Budget

    return Budget.remote(limit_usd)


def run_sweep(sweep: Sweep) -> int:
    """Own the run dir, run (or rerun) every job against real providers, write the metrics files;
    return the exit code (see engine/flow/exits.py)."""
    from prefray.engine.rundir.ownership import RunDirBusy, RunDirLock

    lock = RunDirLock(sweep.run_dir)
    try:
        lock.acquire()
    except RunDirBusy as exc:
        log.error(f"prefray: nothing was run: {exc}")
        return EXIT_CONFIG
    set_current_run(sweep.run_dir, sweep.location)
    try:
        return _run_owned(sweep)
    finally:
        lock.release()


def _run_owned(sweep: Sweep) -> int:
    from prefray.engine.rundir.journal import clean_leftovers, fold_away, load_replay
    from prefray.engine.rundir.quarantine import quarantine_corrupt

    run, jobs = sweep.run_dir, sweep.job_list
    use_system_allocator()
    quarantine_corrupt(run, sweep.location)   # before anything reads the shards
    clean_leftovers(run)
    replay = load_replay(run)
    append_manifest(run, manifest_entries(sweep.configs), secret_envs(jobs))
    estimate = lanes_estimated_meanwhile(sweep)   # while Ray starts
    specs = [spec for job in jobs for spec in (job.model, *job.roles.values())]   # with repeats
    started = start_ray(worker_modules(specs))
    if sweep.run.plots and sweep.run.figures != "none":
        from prefray.engine.results.plots import import_pyplot_meanwhile

        import_pyplot_meanwhile()   # while the gateways start and the calls run
    cache = sweep.open_cache()
    show = sweep.run.progress and sys.stderr.isatty()
    try:
        with LiveProgress(enabled=show) as progress:
            outlets = Outlets.of(run, progress=progress.update, cache=cache)
            budget = budget_actor(sweep.run.budget_usd)
            gateways = Gateways(budget=budget, run_dir=run, replay=replay, niceness=estimate().niceness())
            gateways.start(specs)
            gateways = with_batch_tier(gateways, run, sweep.run)  # models in tier batch
            feed = progress.add_calls if show else None
            asked: dict[tuple[str, str, str], dict[tuple[str, str], set[str]]] = {}
            crashed = asyncio.run(drive(sweep, outlets, gateways, feed, asked, estimate()))
            for job, _ in crashed:   # a job stopped part way built only some of its units: its metrics take all rows
                asked.pop((job.benchmark, job.model.name, job.condition), None)
    finally:
        if cache is not None:
            cache.close()
    from prefray.engine.rundir.diskfull import disk_full_in

    full = next((found for _, error in crashed if (found := disk_full_in(error)) is not None), None)
    if full is not None:
        raise full     # one line (flow/exits.py); nothing more is written, the journal keeps its answers
    for job, error in crashed:
        log.error(f"prefray: job {job.benchmark}/{job.model.name}/{job.condition} stopped: "
                  f"{type(error).__name__}: {error}")
    warning = budget_warning_of(budget)
    stopping = stop_ray_meanwhile(started)
    try:
        if sweep.run.compact:
            compact_paid(run)   # every gateway has handed its paid record over
            compact_requests(run)
        metrics = aggregate_sweep(sweep, asked)
    finally:
        if stopping is not None:
            stopping.join()
    if warning:
        log.warning(warning)
    if crashed:
        return EXIT_ERROR
    fold_away(run)
    from prefray.engine.results.report import found_line

    return report_incomplete(sweep, found_line(metrics, sweep.where))


def budget_warning_of(budget: Any) -> str:
    """The budget's warning line ("" if none or no budget), read while Ray is up."""
    if budget is None:
        return ""
    import ray

    from prefray.engine.money.budget import budget_warning

    return budget_warning(ray.get(budget.state.remote())) or ""


def _say(line: str) -> None:
    if line:
        log.info(line, extra=STDOUT)


def report_incomplete(sweep: Sweep, found: str = "") -> int:
    """EXIT_OK if the run is complete by the failure policy (every unit has an answer; judge failures
    are excluded and model failures scored, and are said in one line); else write incomplete.csv,
    print one line (counts by cause, later-stage units never built, the rerun command) and return
    EXIT_INCOMPLETE."""
    from prefray.engine.flow.outcome import (
        failure_counts,
        missing_units,
        policy_summary,
        unbuilt_units,
        write_incomplete,
    )

    run, jobs = sweep.run_dir, sweep.job_list
    missing = missing_units(run, jobs)
    counts = failure_counts(run, jobs)
    if not missing:
        if counts["judge_failure"] or counts["model_failure"]:
            log.info(f"prefray: finished, complete by the failure policy: {policy_summary(counts)}")
        _say(found)   # a complete run's last line: what it found
        return EXIT_OK
    _say(found)       # an incomplete run's last line is the one below: what is missing, and the rerun
    unbuilt = unbuilt_units(sweep)
    write_incomplete(run, missing_units(run, jobs, by_cell=True), unbuilt)
    causes = ", ".join(f"{cause} {n}" for cause, n in sorted(missing.items()))
    later = f" and {sum(unbuilt.values())} later-stage unit(s) that could not be built" if unbuilt else ""
    others = (f" (also {counts['judge_failure']} judge failure(s), excluded, and {counts['model_failure']} "
              "model failure(s), scored)") if counts["judge_failure"] or counts["model_failure"] else ""
    log.warning(f"prefray: finished with {sum(missing.values())} unit(s) without an answer ({causes}){later}"
                f"{others}; prefray rerun {sweep.where} runs them again (see incomplete.csv)")
    return EXIT_INCOMPLETE
