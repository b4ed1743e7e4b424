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
    OPEN_MAPS,
    OPTION_SECTIONS,
    PROMPT_PATH,
    ROLE_OPTION,
    SECTIONS,
    ModelSpec,
    TopConfig,
    fields_of,
    inferred_rule,
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


def check_dataclass(prefix: str, values: Any, cls: type, out: list[str]) -> None:
    """A fixed section (run, model, judge): no unknown keys, every value within its rule."""
    if not isinstance(values, dict):
        out.append(f"{prefix}={render(values)}: allowed is a mapping of {prefix}.* keys")
        return
    fields = fields_of(cls)
    for name, value in values.items():
        if name not in fields:
            out.append(unknown(f"{prefix}.{name}", value, list(fields)))
            continue
        check_value(f"{prefix}.{name}", value, rule_of(fields[name]), out)
        nested = fields[name].metadata.get("section")
        if nested is not None and isinstance(value, dict):
            check_dataclass(f"{prefix}.{name}", value, nested, out)
        if name == "params" and isinstance(value, dict):
            check_open(f"{prefix}.params", value, out)
    if cls is ModelSpec:
        check_model(prefix, values, out)


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


def check_option(prefix: str, values: Any, reference: dict, out: list[str]) -> None:
    """A benchmark/condition section against its option file: same keys, same types."""
    if not isinstance(values, dict):
        out.append(f"{prefix}={render(values)}: allowed is a mapping")
        return
    for name, value in values.items():
        full = f"{prefix}.{name}"
        if name == "prompts":
            check_value(full, value, OPEN_MAPS["prompts"], out)
            for prompt, file in (value or {}).items() if isinstance(value, dict) else ():
                check_value(f"{full}.{prompt}", file, PROMPT_PATH, out)
            continue
        if name not in reference:
            out.append(unknown(full, value, list(reference)))
            continue
        ref = reference[name]
        if name == "roles" and isinstance(ref, dict):
            check_roles(full, value, ref, out)
        elif isinstance(ref, dict) and ref:
            check_option(full, value, ref, out)
        elif isinstance(ref, dict) or name in OPEN_MAPS:
            check_value(full, value, OPEN_MAPS.get(name, inferred_rule(name, ref)), out)
            if isinstance(value, dict):
                check_open(full, value, out)
        else:
            check_value(full, value, inferred_rule(name, ref), out)


def check_roles(prefix: str, values: Any, reference: dict, out: list[str]) -> None:
    if not isinstance(values, dict):
        out.append(f"{prefix}={render(values)}: allowed is a mapping of role -> model option")
        return
    for role, option in values.items():
        if role not in reference:
            out.append(unknown(f"{prefix}.{role}", option, list(reference)))
        else:
            check_value(f"{prefix}.{role}", option, ROLE_OPTION, out)


def option_reference(group: str, benchmark: Any, condition: Any = None) -> dict:
    """The option file a benchmark or condition section is checked against ({} when there is none):
    the installed benchmark's config, or one of its conditions (app/catalog.py)."""
    from prefray.app import catalog

    try:
        if group == "benchmark":
            return catalog.benchmark_config(str(benchmark))
        return catalog.condition_config(str(benchmark), str(condition))
    except catalog.UnknownBenchmark:
        return {}


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
    from prefray.app import catalog

    try:
        catalog.find(str(names["benchmark"]))
    except catalog.UnknownBenchmark as exc:
        return [*out, str(exc)]  # its keys cannot be checked against a config that is not installed
    for group in OPTION_SECTIONS:
        check_option(group, cfg.get(group), option_reference(group, names["benchmark"], names["condition"]), out)
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
