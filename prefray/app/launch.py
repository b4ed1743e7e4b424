"""`prefray launch [-m] [overrides...]` — plan, check, run and aggregate a sweep.

Every job of a multirun is planned and checked first; then all of them run concurrently in one
Ray cluster (a local one, or the one RAY_ADDRESS points at), sharing one gateway per model and endpoint.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from prefray.app.cli_help import HelpWithOptions
from prefray.app.commands import OneLineErrors, refuse, refused
from prefray.app.compose import compose_sweep, conf_dir, run_dir_of, sweep_of
from prefray.app.preflight import impossible_limits
from prefray.app.sweep import SweepError
from prefray.engine.flow.exits import EXIT_OK
from prefray.engine.rundir.layout import RunDir


class SweepParser(OneLineErrors, HelpWithOptions):
    """Overrides and flags of a sweep; --help ends with the config groups, settings and other commands."""


def parser(prog: str) -> argparse.ArgumentParser:
    parser = SweepParser(conf_dir(), prog=prog, description=__doc__)
    parser.add_argument("-m", "--multirun", action="store_true", help="run every combination of the sweep")
    parser.add_argument("--cfg", action="store_true", help="print the composed config of each job and exit")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. model=all condition=all limit=2")
    return parser


def run(args: argparse.Namespace) -> int:
    try:
        configs, jobs, benchmarks = compose_sweep(args.overrides, args.multirun)
        run_dir = run_dir_of(configs)
    except SweepError as exc:
        return refused(exc)
    if args.cfg:
        from omegaconf import OmegaConf

        for cfg in configs:
            print(OmegaConf.to_yaml(cfg))
        return EXIT_OK
    from prefray.app.preflight import preflight
    from prefray.engine.rundir.ownership import RunDirBusy
    from prefray.engine.rundir.remote import is_uri, staged_run

    instances, errors = preflight(jobs, benchmarks)
    if errors and is_uri(run_dir):
        return refuse(errors)   # before the run dir is leased and pulled
    try:
        with staged_run(run_dir, configs[0]["run"]) as local:
            return check_then_run(run_dir, local, configs, jobs, benchmarks, instances, errors)
    except RunDirBusy as exc:
        return refuse([str(exc)])


def check_then_run(run_dir: Path | str, local: RunDir, configs: list[dict[str, Any]], jobs: list,
                   benchmarks: dict, instances: dict[int, Any], errors: list[str]) -> int:
    """Refuse if the run dir holds answers made with other settings (or preflight failed); else run."""
    from prefray.engine.flow.session import run_sweep
    from prefray.engine.results.manifest import conflicting_jobs

    conflicts = conflicting_jobs(local, configs)
    if conflicts:
        errors.append(f"{run_dir} holds answers made with other settings (use a new run.dir, or the same "
                      "settings to resume): " + "; ".join(conflicts))
    if errors:
        return refuse(errors)
    sweep = sweep_of(configs, jobs, benchmarks, instances, local, location=run_dir)
    limits = impossible_limits(sweep)
    if limits:
        return refuse(limits)
    return run_sweep(sweep)

