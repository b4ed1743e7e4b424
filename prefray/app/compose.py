"""A sweep from Hydra overrides: compose `conf/config.yaml` per job, check it, build the jobs.

Used by `launch` and `plan` (overrides from the command line) and by `rerun` and `rejudge` (the
configs a run recorded in its manifest). Every refusal is a `SweepError` whose text is the line shown.
"""

from __future__ import annotations

import copy
import functools
import os
import re
import time
from pathlib import Path
from typing import Any

from prefray.app import catalog
from prefray.app.sweep import JobChoice, SweepError, default_options, expand
from prefray.engine.benchmark import Benchmark, Job
from prefray.engine.config.schema import RunConfig, file_defaults
from prefray.engine.rundir.layout import RunDir
from prefray.engine.sweep import SendPolicy, Sweep
from prefray.engine.types import ModelSpec


class ConfigProblems(SweepError):
    """Values the schema refuses (or preflight finds): one line each, naming key, value and what is allowed."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def conf_dir() -> Path:
    """The config tree: $PREFRAY_CONF, else the repository's `conf/`."""
    return Path(os.environ.get("PREFRAY_CONF") or Path(__file__).resolve().parents[2] / "conf")


def compose_sweep(overrides: list[str], multirun: bool) -> tuple[list[dict[str, Any]], list[Job], dict[str, Benchmark]]:
    """The resolved config, the job and the loaded benchmark of every job of the sweep, checked."""
    from prefray.app.panel import panel_overrides, split_repeats, with_repeats

    conf = conf_dir()
    overrides, multirun = panel_overrides(overrides, multirun)
    overrides, repeats = split_repeats(overrides)
    configs = with_repeats(compose_configs(expand(overrides, conf, multirun), conf), repeats)
    jobs = checked_jobs(configs, conf)
    return configs, jobs, load_benchmarks(configs)


def sweep_of(configs: list[dict[str, Any]], jobs: list[Job], benchmarks: dict[str, Benchmark],
             instances: dict[int, Any], run_dir: RunDir, location: Path | str | None = None,
             policy: SendPolicy | None = None) -> Sweep:
    """The typed sweep the engine runs: every prepared job, the run config (every job of a sweep shares
    run.*), the local run dir (`location`: run.dir as given, a URI when `run_dir` is its staging mirror)
    and the command's send policy."""
    return Sweep.assemble(jobs, benchmarks, instances, run_dir, RunConfig.from_config(configs[0]["run"]),
                          configs, policy=policy or SendPolicy(), location=str(location or run_dir.root))


def checked_jobs(configs: list[dict[str, Any]], conf: Path) -> list[Job]:
    """The jobs of composed (or recorded) configs, after the schema and the distinct-jobs checks."""
    validate(configs, conf)
    jobs = [build_job(cfg, conf) for cfg in configs]
    check_distinct(jobs)
    return jobs


def compose_configs(choices: list[JobChoice], conf: Path) -> list[dict[str, Any]]:
    """One resolved config per job. Hydra composes a job once per distinct (benchmark, condition,
    judge, other overrides) and once per distinct (model, other overrides); every other job is the
    first of its kind with its own model's node, which is what composing it would give when no config
    interpolates the model's keys (else every job is composed)."""
    if _interpolates_model(str(conf)):
        return compose_overrides([choice.as_overrides() for choice in choices], conf)
    rests = [(c.benchmark, c.condition, c.judge, c.overrides) for c in choices]
    models = [(c.model, c.overrides) for c in choices]
    seen_rests, seen_models, composed = set(), set(), []
    for i, (rest, model) in enumerate(zip(rests, models)):
        if rest not in seen_rests or model not in seen_models:
            composed.append(i)
            seen_rests.add(rest)
            seen_models.add(model)
    full = dict(zip(composed, compose_overrides([choices[i].as_overrides() for i in composed], conf)))
    base, node = {}, {}
    for i, cfg in full.items():
        base.setdefault(rests[i], cfg)
        node.setdefault(models[i], cfg["model"])
    return [full[i] if i in full else {**copy.deepcopy(base[rests[i]]), "model": copy.deepcopy(node[models[i]])}
            for i in range(len(choices))]


@functools.cache
def _interpolates_model(conf: str) -> bool:
    """Whether any config file interpolates a key of the model group (`${model...}`)."""
    return any(re.search(r"\$\{\s*model\b", path.read_text(encoding="utf-8"))
               for path in Path(conf).rglob("*.yaml"))


def compose_overrides(override_lists: list[list[str]], conf: Path) -> list[dict[str, Any]]:
    """Compose `conf/config.yaml` once per override list, resolved to plain dicts; the model and
    judge keys their option file leaves out take the schema's defaults (`model_defaults`)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    configs = []
    catalog.register(benchmarks_named(override_lists, conf))  # they and their conditions become Hydra options
    with initialize_config_dir(str(conf), version_base="1.3"):
        for overrides in override_lists:
            try:
                cfg = compose(config_name="config", overrides=[settable(o) for o in overrides])
                model_defaults(cfg)
                configs.append(OmegaConf.to_container(cfg, resolve=True))
            except (HydraException, OmegaConfBaseException) as exc:
                raise SweepError(f"{' '.join(overrides)}: {exc}".replace("\n", " ")) from None
    return configs


def benchmarks_named(override_lists: list[list[str]], conf: Path) -> set[str] | None:
    """The benchmarks these override lists compose: each list's `benchmark=NAME`, else config.yaml's
    default; None (every installed one) when a list chooses it another way (`+benchmark=`, a sweep)."""
    names: set[str] = set()
    default = functools.cache(lambda: default_options(conf).get("benchmark"))
    for overrides in override_lists:
        chosen = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") == "benchmark"]
        plain = [o.removeprefix("benchmark=") for o in chosen if re.fullmatch(r"benchmark=[\w.-]+", o)]
        if len(plain) != len(chosen) or not (plain or default()):
            return None
        names.update(plain or [default()])
    return names


MODEL_GROUPS = ("model", "judge")
MODEL_KEY = re.compile(r"(?P<group>model|judge)\.(?P<key>\w+)(?=[.=])")


def settable(override: str) -> str:
    """`model.KEY=VALUE` (or `judge.`) as `++model.KEY=VALUE` when KEY is a schema key: it sets the
    key whether or not the option's file states it (a file lists only what differs from the defaults)."""
    found = MODEL_KEY.match(override)
    return f"++{override}" if found and found["key"] in file_defaults(ModelSpec) else override


def model_defaults(cfg: Any) -> None:
    """Fill the model and judge keys a composed config's option files leave out with the schema's
    defaults, in place (before interpolations resolve, so `${model.rpm}` finds its default too)."""
    from omegaconf import open_dict

    with open_dict(cfg):
        for group in MODEL_GROUPS:
            node = cfg.get(group)
            if node is not None:
                for name, default in file_defaults(ModelSpec).items():
                    if name not in node:
                        node[name] = default


def compose_judge(overrides: list[str], conf: Path) -> dict[str, Any]:
    """The resolved judge config for `judge=NAME` plus `judge.KEY=VALUE` overrides."""
    judge = compose_overrides([overrides], conf)[0]["judge"]
    model_spec(judge, " ".join(overrides))
    return judge


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
    """The job of a checked config: its benchmark and condition sections built into the types the
    benchmark declares (`settings_type`, `condition_type`)."""
    benchmark = catalog.load(cfg["benchmark"]["name"])
    return with_run_tier(cfg, Job(
        benchmark=cfg["benchmark"]["name"], condition=cfg["condition"]["name"],
        model=model_spec(cfg["model"], f"model={cfg['model'].get('name')}"),
        roles=role_models(cfg, conf), settings=benchmark.settings_of(cfg["benchmark"]),
        condition_settings=benchmark.condition_of(cfg["condition"]),
        limit=cfg.get("limit"), seed=RunConfig.from_config(cfg["run"]).seed,
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
    from prefray.engine.rundir.remote import is_uri

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


def validate(configs: list[dict[str, Any]], conf: Path) -> None:
    """Refuse the sweep if any value breaks the schema (checked before anything starts)."""
    from prefray.app.validate import sweep_problems

    problems = sweep_problems(configs, conf)
    if problems:
        raise ConfigProblems(problems)


def load_benchmarks(configs: list[dict[str, Any]]) -> dict[str, Benchmark]:
    benchmarks: dict[str, Benchmark] = {}
    for cfg in configs:
        name = cfg["benchmark"]["name"]
        if name not in benchmarks:
            try:
                benchmarks[name] = catalog.load(name)
            except catalog.UnknownBenchmark as exc:
                raise SweepError(str(exc)) from None
            except (ImportError, AttributeError) as exc:
                raise SweepError(f"benchmark={name}: cannot load '{catalog.find(name).impl}': {exc}") from None
    return benchmarks
