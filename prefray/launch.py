"""`python -m prefray.launch [-m] [overrides...]` — plan, check, run and aggregate a sweep.

Every job of a multirun is planned and checked first; then all of them run concurrently in one
Ray cluster (a local one, or the one RAY_ADDRESS points at), sharing one gateway per model and endpoint.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from prefray.engine.benchmark import Benchmark, Job, load_benchmark
from prefray.engine.config.cli_help import HelpWithOptions
from prefray.engine.config.sweep import JobChoice, SweepError, expand
from prefray.engine.types import ModelSpec

# Exit codes: 0 every cell complete; 2 refused before any call; 3 finished with failed or skipped
# units (rerun them with prefray.rerun); 130 interrupted (what was answered is stored; resume).
EXIT_CONFIG = 2


class ConfigProblems(SweepError):
    """Values the schema refuses: one line each, naming key, value and what is allowed."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def conf_dir() -> Path:
    return Path(os.environ.get("PREFRAY_CONF") or Path(__file__).resolve().parent.parent / "conf")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = HelpWithOptions(conf_dir(), prog="python -m prefray.launch", description=__doc__)
    parser.add_argument("-m", "--multirun", action="store_true", help="run every combination of the sweep")
    parser.add_argument("--cfg", action="store_true", help="print the composed config of each job and exit")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. model=all condition=all limit=2")
    return parser.parse_args(argv)


def compose_configs(choices: list[JobChoice], conf: Path) -> list[dict[str, Any]]:
    return compose_overrides([choice.as_overrides() for choice in choices], conf)


def compose_overrides(override_lists: list[list[str]], conf: Path) -> list[dict[str, Any]]:
    """Compose `conf/config.yaml` once per override list, resolved to plain dicts."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    configs = []
    with initialize_config_dir(str(conf), version_base="1.3"):
        for overrides in override_lists:
            try:
                cfg = compose(config_name="config", overrides=overrides)
                configs.append(OmegaConf.to_container(cfg, resolve=True))
            except (HydraException, OmegaConfBaseException) as exc:
                raise SweepError(f"{' '.join(overrides)}: {exc}".replace("\n", " ")) from None
    return configs


def model_spec(cfg: dict[str, Any], where: str) -> ModelSpec:
    try:
        spec = ModelSpec.from_config(cfg)
    except (TypeError, ValueError) as exc:
        raise SweepError(f"{where}: {exc}") from None
    if spec.provider not in ("openai", "anthropic"):
        raise SweepError(f"{where}: provider '{spec.provider}' is not openai or anthropic")
    return spec


def role_models(cfg: dict[str, Any], conf: Path) -> dict[str, ModelSpec]:
    from omegaconf import OmegaConf

    roles = {"judge": model_spec(cfg["judge"], f"judge={cfg['judge'].get('name')}")}
    for role, option in (cfg["benchmark"].get("roles") or {}).items():
        if option:
            # a model option, or a scorer option (conf/scorer/: a model that only ever scores)
            path = next((p for p in (conf / "model" / f"{option}.yaml", conf / "scorer" / f"{option}.yaml")
                         if p.exists()), None)
            if path is None:
                raise SweepError(f"benchmark.roles.{role}: unknown model or scorer option '{option}'")
            roles[role] = model_spec(OmegaConf.to_container(OmegaConf.load(path), resolve=True),
                                     f"benchmark.roles.{role}={option}")
    return roles


def build_job(cfg: dict[str, Any], conf: Path) -> Job:
    return with_run_tier(cfg, Job(
        benchmark=cfg["benchmark"]["name"], condition=cfg["condition"]["name"],
        model=model_spec(cfg["model"], f"model={cfg['model'].get('name')}"),
        roles=role_models(cfg, conf), settings=cfg["benchmark"], condition_settings=cfg["condition"],
        limit=cfg.get("limit"), seed=int(cfg["run"].get("seed") or 0),
    ))


def with_run_tier(cfg: dict[str, Any], job: Job) -> Job:
    """`run.tier` applied to every model of the job, each model's tier checked (engine/batch)."""
    from prefray.engine.calls.batch import TierError, apply_run_tier

    try:
        return apply_run_tier(job, cfg["run"])
    except TierError as exc:
        raise SweepError(str(exc)) from None


def run_dir_of(configs: list[dict[str, Any]]) -> Path | str:
    """The sweep's run dir: a local path, or a URI (s3://bucket/prefix, ...) kept as given."""
    from prefray.engine.results.remote import is_uri

    dirs = {c["run"].get("dir") for c in configs}
    if len(dirs) > 1:
        raise SweepError(f"run.dir must be the same for every job of a sweep, got {sorted(map(str, dirs))}")
    chosen = dirs.pop()
    if is_uri(chosen):
        return chosen
    return Path(chosen) if chosen else Path("outputs") / time.strftime("%Y-%m-%d_%H-%M-%S")


def check_distinct(jobs: list[Job]) -> None:
    """Two jobs with the same benchmark, model, condition and judge would share their shards."""
    seen: set[tuple[str, str, str, str]] = set()
    for job in jobs:
        key = (job.benchmark, job.model.name, job.condition, job.roles["judge"].name)
        if key in seen:
            raise SweepError(f"two jobs of the sweep are both {'/'.join(key)}; sweep other settings "
                             "into separate run.dir values instead")
        seen.add(key)


def plan(argv: list[str] | None) -> tuple[argparse.Namespace, list[dict[str, Any]], list[Job], dict[str, Benchmark]]:
    args = parse_args(argv)
    conf = conf_dir()
    choices = expand(args.overrides, conf, args.multirun)
    configs = compose_configs(choices, conf)
    validate(configs, conf)
    jobs = [build_job(cfg, conf) for cfg in configs]
    check_distinct(jobs)
    return args, configs, jobs, load_benchmarks(configs)


def validate(configs: list[dict[str, Any]], conf: Path) -> None:
    """Refuse the sweep if any value breaks the schema (checked before anything starts)."""
    from prefray.engine.config import sweep_problems

    problems = sweep_problems(configs, conf)
    if problems:
        raise ConfigProblems(problems)


def refuse(problems: list[str]) -> int:
    """Print one line per problem and return the 'refused before any call' exit code."""
    for problem in problems:
        print(f"prefray: nothing was run: {problem}", file=sys.stderr)
    return EXIT_CONFIG


def load_benchmarks(configs: list[dict[str, Any]]) -> dict[str, Benchmark]:
    benchmarks: dict[str, Benchmark] = {}
    for cfg in configs:
        name, impl = cfg["benchmark"]["name"], cfg["benchmark"].get("impl", "")
        if name not in benchmarks:
            try:
                benchmarks[name] = load_benchmark(impl)
            except (ImportError, AttributeError, ValueError) as exc:
                raise SweepError(f"benchmark={name}: cannot load impl '{impl}': {exc}") from None
    return benchmarks


def compose_judge(overrides: list[str], conf: Path) -> dict[str, Any]:
    """The resolved judge config for `judge=NAME` plus `judge.KEY=VALUE` overrides."""
    judge = compose_overrides([overrides], conf)[0]["judge"]
    model_spec(judge, " ".join(overrides))
    return judge


def main(argv: list[str] | None = None) -> int:
    try:
        args, configs, jobs, benchmarks = plan(argv)
        run_dir = run_dir_of(configs)
    except ConfigProblems as exc:
        return refuse(exc.problems)
    except SweepError as exc:
        print(f"prefray: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if args.cfg:
        from omegaconf import OmegaConf

        for cfg in configs:
            print(OmegaConf.to_yaml(cfg))
        return 0
    from prefray.engine.config.preflight import preflight
    from prefray.engine.flow.ownership import RunDirBusy
    from prefray.engine.results.remote import is_uri, staged_run

    instances, errors = preflight(jobs, benchmarks)
    if errors and is_uri(run_dir):
        return refuse(errors)   # before the run dir is leased and pulled
    try:
        with staged_run(run_dir, configs[0]["run"]) as local_dir:
            return check_then_run(run_dir, local_dir, configs, jobs, benchmarks, instances, errors)
    except RunDirBusy as exc:
        return refuse([str(exc)])


def check_then_run(run_dir: Path | str, local_dir: Path, configs: list[dict[str, Any]], jobs: list[Job],
                   benchmarks: dict[str, Benchmark], instances: dict[int, Any], errors: list[str]) -> int:
    """Refuse if the run dir holds answers made with other settings (or preflight failed); else run."""
    from prefray.engine.results.manifest import conflicting_jobs
    from prefray.engine.flow.session import SweepOptions, run_sweep

    conflicts = conflicting_jobs(local_dir, configs)
    if conflicts:
        errors.append(f"{run_dir} holds answers made with other settings (use a new run.dir, or the same "
                      "settings to resume): " + "; ".join(conflicts))
    if errors:
        return refuse(errors)
    options = SweepOptions.from_config(local_dir, configs[0]["run"], location=str(run_dir))
    return run_sweep(options, configs, jobs, benchmarks, instances)


if __name__ == "__main__":
    from prefray.engine.flow.exits import run_cli

    sys.exit(run_cli(main, "launch"))
