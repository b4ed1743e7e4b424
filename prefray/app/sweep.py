"""Command-line overrides → the list of jobs of a sweep, with Hydra's override grammar.

`group=all` expands to every option of the group that an evaluation means (there is no file named
all): for `model` and `judge`, options that prefray serves itself (`serve: fakellm` test doubles,
`serve: embedded` plumbing model) are left out of `all` and stay selectable by name.
`group=a,b` and `group=glob(...)` work as in Hydra (a glob matches every option).
`model=paper` stands, per benchmark, for the models its paper evaluated with the paper's settings
(`paper_models` in the benchmark's config); it may be mixed with named models (`model=paper,fake`).

Benchmarks are the installed ones (`catalog.py`: the `prefray.benchmarks` entry point group);
`benchmark=all` is prefray's own suite, `benchmark='glob(*)'` every installed benchmark.
Conditions belong to benchmarks (each defines its own, in its package): `condition=all` means every
condition each selected benchmark defines, and with no `benchmark=` it selects every benchmark that
defines one of the chosen conditions (so `condition=all` alone is the suite × each of its
conditions). An explicit condition that no selected benchmark defines is an error; one that only
some define applies to those. The Hydra option of condition C of benchmark B is `B/C`.

Without `judge=`, a job is judged by its benchmark's `paper_judge`, except that a model prefray
serves itself is judged by the judge option of the same name (offline runs stay offline).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Glob, Override, ValueType
from hydra.errors import HydraException
from omegaconf import OmegaConf

from prefray.app import catalog

GROUPS = ("benchmark", "model", "condition", "judge")
# Groups whose `all` leaves out the options prefray serves itself.
EVALUATED_GROUPS = ("model", "judge")
PAPER = "paper"  # model=paper: each benchmark's own lineup


class SweepError(Exception):
    """An override that cannot be turned into jobs; the message says which and why."""


@dataclass(frozen=True)
class JobChoice:
    benchmark: str
    model: str
    condition: str
    judge: str
    overrides: tuple[str, ...]  # every other override of this job, in Hydra syntax

    def as_overrides(self) -> list[str]:
        groups = [f"benchmark={self.benchmark}", f"model={self.model}",
                  f"condition={self.benchmark}/{self.condition}", f"judge={self.judge}"]
        return groups + list(self.overrides)


def group_options(conf_dir: Path, group: str) -> list[str]:
    """Every option of a config group (the files of `conf/<group>/`; the installed benchmarks and
    every condition any of them defines)."""
    if group == "benchmark":
        return catalog.names()
    if group == "condition":
        return sorted({c for b in catalog.names() for c in catalog.conditions(b)[0]})
    return sorted(p.stem for p in (conf_dir / group).glob("*.yaml") if p.stem != "all")


def _load(path: Path) -> dict:
    return OmegaConf.to_container(OmegaConf.load(path), resolve=False)  # type: ignore[return-value]


def served_by_prefray(conf_dir: Path, group: str, option: str) -> str | None:
    """`fakellm` or `embedded` when prefray serves this model or judge option itself, else None."""
    return _served(str(conf_dir), group, option)


@cache
def _served(conf_dir: str, group: str, option: str) -> str | None:
    data = _load(Path(conf_dir) / group / f"{option}.yaml")
    if "serve" in data:
        return data["serve"]
    for entry in data.get("defaults") or []:  # a judge reuses a model option: `/model@_here_: NAME`
        if isinstance(entry, dict):
            for key, value in entry.items():
                if str(key).startswith("/model"):
                    return _served(conf_dir, "model", str(value))
    return None


def all_options(conf_dir: Path, group: str) -> list[str]:
    """What `group=all` stands for: every option, less those prefray serves itself (model, judge)
    and, for `model`, those kept for a paper's lineup only (`in_all: false`; `model=paper` has them)."""
    if group == "benchmark":
        return catalog.names(builtin_only=True)
    options = group_options(conf_dir, group)
    if group in EVALUATED_GROUPS:
        options = [o for o in options if served_by_prefray(conf_dir, group, o) is None]
    if group == "model":
        options = [o for o in options if _in_all(str(conf_dir), o)]
    return options


@cache
def _in_all(conf_dir: str, option: str) -> bool:
    return bool(_load(Path(conf_dir) / "model" / f"{option}.yaml").get("in_all", True))


def benchmark_conditions(conf_dir: Path, benchmark: str) -> tuple[list[str], str]:
    """The conditions `benchmark` defines and its default one (`conf_dir` is not read)."""
    return catalog.conditions(benchmark)


def paper_judge(conf_dir: Path, benchmark: str) -> str | None:
    """The judge option a benchmark's paper used (`paper_judge` in its config), if it names one."""
    value = catalog.benchmark_config(benchmark).get("paper_judge")
    return None if value is None else str(value)


def paper_models(conf_dir: Path, benchmark: str) -> list[str]:
    """The model options of a benchmark's paper lineup (`paper_models` in its config)."""
    value = catalog.benchmark_config(benchmark).get("paper_models")
    if not value:
        raise SweepError(f"model=paper: benchmark={benchmark} names no paper lineup (paper_models in "
                         f"{catalog.find(benchmark).config_file}); name its models with model=NAME")
    models = [str(m) for m in value]
    _check_options("model", models, group_options(conf_dir, "model"))
    return models


def default_judge(conf_dir: Path, benchmark: str, model: str) -> str:
    """The judge of a job that names none (see the module docstring)."""
    if served_by_prefray(conf_dir, "model", model) and model in group_options(conf_dir, "judge"):
        return model
    judge = paper_judge(conf_dir, benchmark)
    if judge is None:
        raise SweepError(f"benchmark={benchmark} names no paper_judge: choose one with judge=NAME")
    if judge not in group_options(conf_dir, "judge"):
        raise SweepError(f"benchmark={benchmark}: paper_judge '{judge}' is not a judge option; "
                         f"available: {', '.join(group_options(conf_dir, 'judge'))}")
    return judge


def default_options(conf_dir: Path) -> dict[str, str]:
    """The option each group gets from `conf/config.yaml`'s defaults list (groups set to null left out)."""
    cfg = OmegaConf.load(conf_dir / "config.yaml")
    chosen: dict[str, str] = {}
    for entry in cfg.get("defaults", []):
        if isinstance(entry, dict) or OmegaConf.is_dict(entry):
            chosen.update({str(k): str(v) for k, v in dict(entry).items() if v is not None})
    return chosen


def _values(override: Override, options: list[str] | None,
            every: Callable[[], list[str]] | None = None) -> list[str]:
    """The values one override stands for; `options` is the group's option list (or None) and
    `every` gives what its `all` means (read only for `all`: it loads every option's file)."""
    value = override.value()
    if options is not None and override.value_type == ValueType.ELEMENT and str(value) == "all":
        return list(every() if every is not None else options)
    if isinstance(value, Glob):
        if options is None:
            raise SweepError(f"{override.input_line}: glob() only works on a config group")
        return value.filter(options)
    if override.is_sweep_override():
        return list(override.sweep_string_iterator())
    return [override.get_value_element_as_str()]


def _check_options(group: str, values: list[str], options: list[str]) -> None:
    unknown = [v for v in values if v not in options]
    if unknown and group == "benchmark":
        raise SweepError(f"unknown benchmark {', '.join(map(repr, unknown))}; installed: {', '.join(options)}")
    if unknown:
        raise SweepError(f"unknown {group} option(s) {unknown}; available: {', '.join(options)}")


@dataclass
class _Selection:
    chosen: dict[str, list[str]]
    explicit: set[str]           # groups the command line names
    wildcard_condition: bool     # condition=all or a glob: never an error for a benchmark
    others: list[list[str]]


def _parse(overrides: list[str], conf_dir: Path, multirun: bool) -> _Selection:
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as exc:
        raise SweepError(f"cannot read overrides: {exc}") from None
    selection = _Selection({g: [v] for g, v in default_options(conf_dir).items() if g in GROUPS}, set(), False, [])
    for override in parsed:
        key = override.key_or_group
        if key in GROUPS and not (override.is_add() or override.is_delete()):
            options = group_options(conf_dir, key)
            values = _values(override, options, partial(all_options, conf_dir, key))
            _check_options(key, values, options + ([PAPER] if key == "model" else []))
            if not values:
                raise SweepError(f"{override.input_line} selects no {key}")
            selection.chosen[key] = values
            selection.explicit.add(key)
            if key == "condition":
                selection.wildcard_condition = str(override.value()) == "all" or isinstance(override.value(), Glob)
            sweeping = len(values) > 1 or override.is_sweep_override() or override.value() in ("all", PAPER)
        else:
            values = _values(override, None)
            selection.others.append([f"{override.get_key_element()}={v}" for v in values])
            sweeping = len(values) > 1
        if sweeping and not multirun:
            raise SweepError(f"'{override.input_line}' is a sweep: add -m (--multirun) to run several jobs")
    return selection


def expand(overrides: list[str], conf_dir: Path, multirun: bool) -> list[JobChoice]:
    selection = _parse(overrides, conf_dir, multirun)
    if "condition" in selection.explicit and "benchmark" not in selection.explicit:
        wanted = set(selection.chosen["condition"])
        among = (all_options if selection.wildcard_condition else group_options)(conf_dir, "benchmark")
        selection.chosen["benchmark"] = [b for b in among
                                         if wanted & set(benchmark_conditions(conf_dir, b)[0])]
    jobs = _pair(conf_dir, selection)
    if len(jobs) > 1 and not multirun:
        raise SweepError(f"these overrides make {len(jobs)} jobs: add -m (--multirun) to run several jobs")
    return jobs


def _pair(conf_dir: Path, selection: _Selection) -> list[JobChoice]:
    chosen, explicit = selection.chosen, selection.explicit
    explicit_condition = "condition" in explicit
    jobs: list[JobChoice] = []
    unused = set(chosen["condition"]) if explicit_condition and not selection.wildcard_condition else set()
    for benchmark in chosen["benchmark"]:
        defined, default = benchmark_conditions(conf_dir, benchmark)
        conditions = [c for c in chosen["condition"] if c in defined] if explicit_condition else [default]
        unused -= set(conditions)
        models = [m for chosen_model in chosen["model"]
                  for m in (paper_models(conf_dir, benchmark) if chosen_model == PAPER else [chosen_model])]
        for condition, model, rest in itertools.product(conditions, list(dict.fromkeys(models)),
                                                        itertools.product(*selection.others)):
            judges = chosen["judge"] if "judge" in explicit else [default_judge(conf_dir, benchmark, model)]
            jobs.extend(JobChoice(benchmark, model, condition, judge, tuple(rest)) for judge in judges)
    if unused:
        benchmarks = chosen["benchmark"] or group_options(conf_dir, "benchmark")
        raise SweepError(
            f"condition(s) {sorted(unused)} do not exist for benchmark(s) {benchmarks}; "
            + "; ".join(f"{b}: {', '.join(benchmark_conditions(conf_dir, b)[0])}" for b in benchmarks))
    return jobs
