"""Check a composed config against the schema before anything starts: one line per bad value.

Every problem names the key, the value given and what the key allows, so the user can fix the
override without reading code. Nothing is created or written here (run.dir and run.cache_dir
are checked by `paths.path_problems`, which leaves nothing behind).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefray.app.provider_params import SDK_CALL, accepted, unknown_params
from prefray.engine.config.rules import Rule, render
from prefray.engine.config.schema import (
    NAMED_RULES,
    OPTION_SECTIONS,
    REQUIRED,
    SECTIONS,
    ModelSpec,
    TopConfig,
    default_of,
    fields_of,
    rule_of,
)

TOP_KEYS = ("benchmark", "condition", "judge", "limit", "model", "run")


def bad(key: str, value: Any, rule: Rule) -> str:
    return f"{key}={render(value)}: allowed is {rule.describe()}"


def unknown(key: str, value: Any, known: list[str]) -> str:
    shown = render(value) if not isinstance(value, (dict, list)) else "..."
    return f"{key}={shown}: unknown key; allowed keys here: {', '.join(sorted(known))}"


def check_value(key: str, value: Any, rule: Rule, out: list[str]) -> None:
    if not rule.accepts(value):
        out.append(bad(key, value, rule))


def check_dataclass(prefix: str, values: Any, cls: type, out: list[str], required: bool = False) -> None:
    """A section against its dataclass (run, model, judge, a benchmark's settings or condition): no
    unknown keys, every value within its rule, nested sections key by key; with `required`, a key
    without a default must be given."""
    if not isinstance(values, dict):
        out.append(f"{prefix}={render(values)}: allowed is a mapping of {prefix}.* keys")
        return
    fields = fields_of(cls)
    for name, value in values.items():
        if name not in fields:
            out.append(unknown(f"{prefix}.{name}", value, list(fields)))
            continue
        check_field(f"{prefix}.{name}", value, fields[name], out, required)
    if required:
        out += [f"{prefix}.{name}: missing; a value is required ({rule_of(f).describe()})"
                for name, f in fields.items() if name not in values and f.metadata.get("in_files", True)
                and default_of(f) is REQUIRED]
    if cls is ModelSpec:
        check_model(prefix, values, out)


def check_field(full: str, value: Any, f: Any, out: list[str], required: bool) -> None:
    """One key of a section: its rule, then what it holds (a nested section, a map of sections, the
    values of a mapping, request parameters)."""
    before = len(out)
    check_value(full, value, rule_of(f), out)
    if len(out) > before or not isinstance(value, dict):
        return
    if "section" in f.metadata:
        check_dataclass(full, value, f.metadata["section"], out, required)
    elif "section_map" in f.metadata:
        for name, inner in value.items():
            check_dataclass(f"{full}.{name}", inner, f.metadata["section_map"], out, required)
    elif f.metadata.get("each") is not None:
        for name, inner in value.items():
            check_value(f"{full}.{name}", inner, f.metadata["each"], out)
    if f.name == "params" or f.metadata.get("open"):
        check_open(full, value, out)


def check_model(prefix: str, values: dict, out: list[str]) -> None:
    """What a model option's keys allow together: port 0 only for a model prefray serves itself (it
    binds a free port), and request parameters its provider's SDK takes."""
    from urllib.parse import urlparse

    base_url, serve = values.get("base_url"), values.get("serve")
    url_rule = rule_of(fields_of(ModelSpec)["base_url"])
    if isinstance(base_url, str) and not serve and url_rule.accepts(base_url) and urlparse(base_url).port == 0:
        out.append(f"{prefix}.base_url={render(base_url)}: port 0 is only for a model prefray serves itself "
                   f"({prefix}.serve); allowed is a port from 1 to 65535")
    params, provider = values.get("params"), values.get("provider")
    if isinstance(params, dict) and provider in SDK_CALL:
        unknown = unknown_params(provider, set(params))
        if unknown:
            names = ", ".join(f"{prefix}.params.{n}={_shown(params[n])}" for n in unknown)
            out.append(f"{names}: not a request parameter of the {provider} SDK ({SDK_CALL[provider]}); allowed are "
                       f"{', '.join(sorted(accepted(provider)))} (extra_body.NAME sends one the SDK does not know)")


def check_open(prefix: str, values: dict, out: list[str]) -> None:
    """An open mapping: any key, but well-known names keep their bounds at any depth."""
    for name, value in values.items():
        full = f"{prefix}.{name}"
        if isinstance(value, dict):
            check_open(full, value, out)
        elif name in NAMED_RULES:
            check_value(full, value, NAMED_RULES[name].or_null() if value is None else NAMED_RULES[name], out)


def _shown(value: Any) -> str:
    return "..." if isinstance(value, (dict, list)) else render(value)


def option_types(benchmark: str) -> tuple[type, type] | str:
    """The settings and condition types the installed benchmark declares, or why they cannot be read."""
    from prefray.app import catalog

    try:
        loaded = catalog.load(benchmark)
    except catalog.UnknownBenchmark as exc:
        return str(exc)
    except (ImportError, AttributeError) as exc:
        return f"benchmark={benchmark}: cannot load '{catalog.find(benchmark).impl}': {exc}"
    return loaded.settings_type, loaded.condition_type


def origin(group: str, section: Any, names: dict[str, Any], problem: str) -> str:
    """A benchmark or condition problem with the option it is about and where its value was set: the
    option file (when the value there is the one refused), an override, or nowhere (a missing key)."""
    from prefray.app import catalog

    benchmark, condition = str(names["benchmark"]), str(names["condition"])
    found = catalog.find(benchmark)
    option = f"benchmark={benchmark}" + (f" condition={condition}" if group == "condition" else "")
    try:
        if group == "benchmark":
            file, written = found.config_file, catalog.benchmark_config(benchmark)
        else:
            file, written = found.condition_file(condition), catalog.condition_config(benchmark, condition)
    except catalog.UnknownBenchmark:   # no such option file: the problem is said without its source
        return f"{problem} ({option})"
    path = problem.split(": ", 1)[0].split("=", 1)[0].split(".")[1:]
    given, written = _at(section, path), _at(written, path)
    source = (f"not set in {file}" if given is _ABSENT else f"set in {file}" if written == given
              else "set by an override")
    return f"{problem} ({option}: {source})"


_ABSENT = object()


def _at(values: Any, path: list[str]) -> Any:
    for part in path:
        values = values.get(part, _ABSENT) if isinstance(values, dict) else _ABSENT
    return values


def config_problems(cfg: dict[str, Any], conf: Path) -> list[str]:
    """Every schema problem of one composed job config (empty = valid)."""
    out: list[str] = []
    for name, value in cfg.items():
        if name not in TOP_KEYS:
            out.append(unknown(name, value, list(TOP_KEYS)))
    limit_field = fields_of(TopConfig)["limit"]
    check_value("limit", cfg.get("limit"), rule_of(limit_field), out)
    for section, cls in SECTIONS.items():
        if section == "judge" and cfg.get(section) is None:
            continue  # no judge named: each benchmark is judged by its paper's judge (config.yaml)
        check_dataclass(section, cfg.get(section), cls, out)
    names = {group: (v.get("name") if isinstance(v := cfg.get(group), dict) else None) for group in OPTION_SECTIONS}
    types = option_types(str(names["benchmark"]))
    if isinstance(types, str):
        return [*out, types]  # its keys cannot be checked against a benchmark that cannot be loaded
    for group, cls in zip(OPTION_SECTIONS, types):
        found: list[str] = []
        check_dataclass(group, cfg.get(group), cls, found, required=True)
        out += [origin(group, cfg.get(group), names, problem) for problem in found]
    return out


def sweep_problems(configs: list[dict[str, Any]], conf: Path) -> list[str]:
    """Problems of every job of a sweep, each reported once, then the run paths' problems."""
    from prefray.app.paths import path_problems

    seen: list[str] = []
    for cfg in configs:
        for problem in config_problems(cfg, conf):
            if problem not in seen:
                seen.append(problem)
    if not seen:
        for problem in path_problems([c.get("run") or {} for c in configs]):
            if problem not in seen:
                seen.append(problem)
    return seen
