"""Command-line overrides → the list of jobs of a sweep, with Hydra's override grammar.

`group=all` expands to every option of the group (there is no file named all); `group=a,b` and
`group=glob(...)` work as in Hydra. Conditions belong to benchmarks: `condition=all` means every
condition each selected benchmark defines; an explicit condition that no selected benchmark
defines is an error, and one that only some define applies to those.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Glob, Override, ValueType
from hydra.errors import HydraException
from omegaconf import OmegaConf

GROUPS = ("benchmark", "model", "condition", "judge")


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
                  f"condition={self.condition}", f"judge={self.judge}"]
        return groups + list(self.overrides)


def group_options(conf_dir: Path, group: str) -> list[str]:
    return sorted(p.stem for p in (conf_dir / group).glob("*.yaml") if p.stem != "all")


def benchmark_conditions(conf_dir: Path, benchmark: str) -> tuple[list[str], str]:
    cfg = OmegaConf.load(conf_dir / "benchmark" / f"{benchmark}.yaml")
    conditions = list(cfg.get("conditions") or [])
    return conditions, str(cfg.get("default_condition") or (conditions[0] if conditions else ""))


def _defaults(conf_dir: Path) -> dict[str, str]:
    cfg = OmegaConf.load(conf_dir / "config.yaml")
    chosen: dict[str, str] = {}
    for entry in cfg.get("defaults", []):
        if isinstance(entry, dict) or OmegaConf.is_dict(entry):
            chosen.update({str(k): str(v) for k, v in dict(entry).items()})
    return chosen


def _values(override: Override, options: list[str] | None) -> list[str]:
    """The values one override stands for; `options` is the group's option list (or None)."""
    value = override.value()
    if options is not None and override.value_type == ValueType.ELEMENT and str(value) == "all":
        return list(options)
    if isinstance(value, Glob):
        if options is None:
            raise SweepError(f"{override.input_line}: glob() only works on a config group")
        return value.filter(options)
    if override.is_sweep_override():
        return list(override.sweep_string_iterator())
    return [override.get_value_element_as_str()]


def _check_options(group: str, values: list[str], options: list[str]) -> None:
    unknown = [v for v in values if v not in options]
    if unknown:
        raise SweepError(f"unknown {group} option(s) {unknown}; available: {', '.join(options)}")


def expand(overrides: list[str], conf_dir: Path, multirun: bool) -> list[JobChoice]:
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as exc:
        raise SweepError(f"cannot read overrides: {exc}") from None
    chosen = {g: [v] for g, v in _defaults(conf_dir).items() if g in GROUPS}
    explicit_condition = False
    wildcard_condition = False
    others: list[list[str]] = []
    for override in parsed:
        key = override.key_or_group
        if key in GROUPS and not (override.is_add() or override.is_delete()):
            options = group_options(conf_dir, key)
            values = _values(override, options)
            _check_options(key, values, options)
            if not values:
                raise SweepError(f"{override.input_line} selects no {key}")
            chosen[key] = values
            if key == "condition":
                explicit_condition = True
                wildcard_condition = str(override.value()) == "all" or isinstance(override.value(), Glob)
            sweeping = len(values) > 1 or override.is_sweep_override() or override.value() == "all"
        else:
            values = _values(override, None)
            chosen_line = [f"{override.get_key_element()}={v}" for v in values]
            others.append(chosen_line)
            sweeping = len(values) > 1
        if sweeping and not multirun:
            raise SweepError(f"'{override.input_line}' is a sweep: add -m (--multirun) to run several jobs")
    return _pair(conf_dir, chosen, explicit_condition, wildcard_condition, others)


def _pair(conf_dir: Path, chosen: dict[str, list[str]], explicit_condition: bool, wildcard_condition: bool,
          others: list[list[str]]) -> list[JobChoice]:
    jobs: list[JobChoice] = []
    unused = set(chosen["condition"]) if explicit_condition and not wildcard_condition else set()
    for benchmark in chosen["benchmark"]:
        defined, default = benchmark_conditions(conf_dir, benchmark)
        conditions = [c for c in chosen["condition"] if c in defined] if explicit_condition else [default]
        unused -= set(conditions)
        for condition, model, judge, rest in itertools.product(
                conditions, chosen["model"], chosen["judge"], itertools.product(*others)):
            jobs.append(JobChoice(benchmark, model, condition, judge, tuple(rest)))
    if unused:
        raise SweepError(
            f"condition(s) {sorted(unused)} do not exist for benchmark(s) {chosen['benchmark']}; "
            + "; ".join(f"{b}: {', '.join(benchmark_conditions(conf_dir, b)[0])}" for b in chosen["benchmark"]))
    return jobs
