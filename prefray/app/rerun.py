"""`prefray rerun RUN_DIR [causes=rate_limit,timeout,...] [run.KEY=VALUE] [model.KEY=VALUE]`

Runs again only the units of RUN_DIR that ended failed or skipped (optionally only those with the
given causes), prints the estimate first, respects the budget, keeps earlier attempts (each row
carries its attempt number) and recomputes the metrics over the best attempt of every unit.
`model.KEY=VALUE` / `judge.KEY=VALUE` change only where and how fast calls go (base_url,
api_key_env, rpm, tpm, max_concurrency, timeout_s, max_wait_s, max_attempts), never results.
The causes (and which are run again by default) are listed at the end of --help.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefray.app.commands import Parser, refuse, refused
from prefray.app.compose import ConfigProblems, checked_jobs, conf_dir, load_benchmarks, sweep_of
from prefray.app.sweep import SweepError
from prefray.engine.failures import NO_ANSWER_CAUSES
from prefray.engine.rundir.layout import RunDir
from prefray.engine.sweep import SendPolicy, Sweep
from prefray.engine.types import CAUSE_MEANINGS, Cause

# A rerun finishes units with no answer by default. The evaluated model's own failures
# (parse_error, context_overflow) are scored as they are: asking again until an answer parses would
# pick the model's lucky samples; `causes=parse_error` asks again explicitly (e.g. for judges).
RERUN_CAUSES = frozenset(Cause)
DEFAULT_RERUN_CAUSES = NO_ANSWER_CAUSES


def run_location(value: str) -> Path | str:
    """A local run dir, or a URI (s3://bucket/prefix, ...) kept as given."""
    from prefray.engine.rundir.remote import is_uri

    return value if is_uri(value) else Path(value)


def staging_setting(overrides: list[str]) -> dict[str, Any]:
    """The run settings that decide where a URI run dir is staged (from run.KEY=VALUE overrides)."""
    import yaml

    run: dict[str, Any] = {}
    for override in overrides:
        key, _, value = override.partition("=")
        if key in ("run.staging_dir", "run.cache", "run.cache_dir"):
            run[key.removeprefix("run.")] = yaml.safe_load(value)
    return run


def causes_help() -> str:
    """The causes a row can carry, from the one list (engine/types.py Cause), * = run again by default."""
    lines = ["causes (causes=a,b; * = run again when causes= is not given):"]
    lines += [f"  {cause}{'*' if cause in DEFAULT_RERUN_CAUSES else ''}: {CAUSE_MEANINGS[cause]}" for cause in Cause]
    return "\n".join(lines)


def parser(prog: str) -> argparse.ArgumentParser:
    parser = Parser(prog, __doc__, epilog=causes_help())
    parser.add_argument("run_dir", type=run_location)
    parser.add_argument("settings", nargs="*", help="causes=a,b, run.KEY=VALUE and model.KEY=VALUE settings")
    return parser


def split_causes(settings: list[str]) -> tuple[frozenset[str], list[str]]:
    """The causes to run again (`causes=a,b`, else the default) and the other settings."""
    causes, rest = DEFAULT_RERUN_CAUSES, []
    for setting in settings:
        if setting.startswith("causes="):
            causes = frozenset(c for c in setting.removeprefix("causes=").split(",") if c)
            unknown = sorted(causes - RERUN_CAUSES)
            if unknown:
                raise SweepError(f"unknown cause(s) {unknown}; choose among {sorted(map(str, RERUN_CAUSES))}")
        else:
            rest.append(setting)
    return causes, rest


def run(args: argparse.Namespace) -> int:
    try:
        causes, overrides = split_causes(args.settings)
    except SweepError as exc:
        return refused(exc)
    return on_run_dir(args.run_dir, overrides, lambda run_dir: rerun(run_dir, args.run_dir, causes, overrides))


def rerun(run_dir: RunDir, location: Path | str, causes: frozenset[str], overrides: list[str]) -> int:
    try:
        sweep = prepare(run_dir, overrides, SendPolicy(resend_causes=causes), location=location)
    except SweepError as exc:
        return refused(exc)
    return estimate_then_run(sweep)


def on_run_dir(location: Path | str, overrides: list[str], work: Callable[[RunDir], int]) -> int:
    """`work(local run dir)` on the run dir itself, or on the staging mirror of a URI run dir (pulled
    first, leased while it runs, pushed back at the end): the one RunDir the command passes down."""
    from prefray.engine.rundir.ownership import RunDirBusy
    from prefray.engine.rundir.remote import is_uri, reach_problem, staged_run

    problem = reach_problem("run dir", str(location)) if is_uri(location) else None
    if problem:
        return refuse([problem])
    try:
        with staged_run(location, staging_setting(overrides)) as run_dir:
            return work(run_dir)
    except RunDirBusy as exc:
        return refuse([str(exc)])


def prepare(run_dir: RunDir, overrides: list[str], policy: SendPolicy,
            replace_judge: dict[str, Any] | list[dict[str, Any]] | None = None,
            location: Path | str | None = None) -> Sweep:
    """The sweep of a finished run, rebuilt from its manifest with new run settings (and judge, or
    judges: one job per judge) and the command's send policy; `run_dir` is where the run's files are
    (the staging mirror of `location` when that is a URI)."""
    from prefray.app.preflight import preflight
    from prefray.engine.results.manifest import apply_run_overrides, recorded_configs

    try:
        configs = recorded_configs(run_dir)
        apply_run_overrides(configs, overrides, location or run_dir.root)
    except (FileNotFoundError, ValueError) as exc:
        raise SweepError(str(exc)) from None
    if replace_judge is not None:
        judges = replace_judge if isinstance(replace_judge, list) else [replace_judge]
        configs = [{**cfg, "judge": judge} for cfg in configs for judge in judges]
    jobs = checked_jobs(configs, conf_dir())
    benchmarks = load_benchmarks(configs)
    instances, errors = preflight(jobs, benchmarks)
    if errors:
        raise ConfigProblems(errors)
    return sweep_of(configs, jobs, benchmarks, instances, run_dir, location=location, policy=policy)


def estimate_then_run(sweep: Sweep) -> int:
    """Refuse the limits the sweep cannot run under (app/preflight.impossible_limits: what its send
    policy would send, counted), else print what it would send and cost (simulated under its send
    policy), then run it."""
    from prefray.app.preflight import impossible_limits
    from prefray.engine.flow.dryrun import simulate
    from prefray.engine.flow.session import run_sweep
    from prefray.engine.money.estimate import plan_rows, print_estimate, summarize

    limits = impossible_limits(sweep)
    if limits:
        return refuse(limits)
    cache = sweep.open_cache()
    rows = simulate(sweep, cache)
    if cache is not None:
        cache.close()
    jobs = sweep.job_list
    print_estimate(summarize(plan_rows(rows, jobs), jobs))
    return run_sweep(sweep)
