"""The generated tables of the docs' config reference (docs/hooks.py builds that page from them;
run as a module, this file prints them): every config key, and every failure cause.

The key table is printed from the schema itself (and from the settings types the built-in
benchmarks declare for their config and conditions), so it cannot drift from what the validator
accepts; the cause table from the one list of
causes and the failure policy. Tests compare both with the built reference page.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from prefray.engine.config.rules import render
from prefray.engine.config.schema import REQUIRED, SECTIONS, TopConfig, default_of, rule_of


def fixed_rows() -> Iterator[tuple[str, str, str, str]]:
    for f in dataclasses.fields(TopConfig):
        yield f.name, rule_of(f).describe(), render(default_of(f)), f.metadata["doc"]
    done: set[type] = set()
    for section, cls in SECTIONS.items():
        if cls in done:
            continue
        done.add(cls)
        name = "{model,judge}" if section == "model" else section
        yield from _fields(name, cls)


def _fields(prefix: str, cls: type, values: object = None) -> Iterator[tuple[str, str, str, str]]:
    """(key, allowed, default, meaning) of every key of `cls`; the default shown is the value in
    `values` (an instance of `cls`) when given."""
    for f in dataclasses.fields(cls):
        given = getattr(values, f.name) if values is not None else None
        if "section" in f.metadata:
            yield from _fields(f"{prefix}.{f.name}", f.metadata["section"], given)
        elif "section_map" in f.metadata:
            yield from _fields(f"{prefix}.{f.name}.NAME", f.metadata["section_map"])
        elif f.metadata.get("each") is not None:
            yield f"{prefix}.{f.name}.NAME", f.metadata["each"].describe(), "null", f.metadata["doc"]
        elif (prefix, f.name) not in _NOT_SHOWN:
            shown = _shown(default_of(f) if values is None else given)
            yield f"{prefix}.{f.name}", rule_of(f).describe(), shown, f.metadata["doc"]


# what the option is, not a setting: its name (`benchmark=NAME`, `condition=NAME`) and where its code is
_NOT_SHOWN = {("benchmark", "name"), ("benchmark", "impl"), ("condition", "name")}


def _shown(default: object) -> str:
    if default is REQUIRED:
        return "required"
    if isinstance(default, dict):
        return "{}" if not default else "{" + ", ".join(f"{k}: {_shown(v)}" for k, v in default.items()) + "}"
    if isinstance(default, list):
        if len(default) > 4 or any(isinstance(v, dict) for v in default):
            return f"[{len(default)} entries]"
        return "[" + ", ".join(map(render, default)) + "]"
    return render(default)


def option_rows(group: str) -> Iterator[tuple[str, str, str, str]]:
    """Keys of every built-in benchmark's settings (group `benchmark`, with the values its config
    file sets) or of its conditions (group `condition`), merged across benchmarks (listed per
    benchmark where they differ; a plugin documents its own keys)."""
    from prefray.app import catalog

    merged: dict[str, tuple[str, dict[str, str], dict[str, str]]] = {}
    for name in catalog.names(builtin_only=True):
        loaded = catalog.load(name)
        rows = (_fields(group, loaded.settings_type, loaded.settings_of(catalog.benchmark_config(name)))
                if group == "benchmark" else _fields(group, loaded.condition_type))
        for key, allowed, default, doc in rows:
            entry = merged.setdefault(key, (doc, {}, {}))
            entry[1].setdefault(name, allowed)
            entry[2].setdefault(name, default)
    for key, (doc, allowed, defaults) in merged.items():
        yield key, _per_benchmark(allowed), _per_benchmark(defaults), f"{doc} (in {', '.join(defaults)})"


def _per_benchmark(values: dict[str, str]) -> str:
    distinct = set(values.values())
    if len(distinct) == 1:
        return distinct.pop()
    return "; ".join(f"{name}: {value}" for name, value in values.items())


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def key_table(conf: Path) -> str:
    lines = ["| key | allowed | default | meaning |", "|---|---|---|---|"]
    rows = [*fixed_rows(), *option_rows("benchmark"), *option_rows("condition")]
    for key, allowed, default, doc in rows:
        lines.append(f"| `{key}` | {_cell(allowed)} | {_cell(default)} | {_cell(doc)} |")
    return "\n".join(lines)


def cause_table() -> str:
    """Every failure cause a row can carry (engine/types.py Cause), its failure class on the
    evaluated model's row and on a judge's (engine/failures.py), and whether a rerun asks again."""
    from prefray.engine.failures import NO_ANSWER_CAUSES, cause_classes
    from prefray.engine.types import CAUSE_MEANINGS, Cause

    lines = ["| cause | what happened | class (evaluated model / judge) | `prefray.rerun` asks again |",
             "|---|---|---|---|"]
    for cause in Cause:
        subject, judge = cause_classes(cause)
        again = "yes" if cause in NO_ANSWER_CAUSES else f"with `causes={cause}`"
        lines.append(f"| `{cause}` | {_cell(CAUSE_MEANINGS[cause])} | {subject} / {judge} | {again} |")
    return "\n".join(lines)


def default_conf() -> Path:
    return Path(os.environ.get("PREFRAY_CONF") or Path(__file__).resolve().parents[2] / "conf")


if __name__ == "__main__":
    sys.stdout.write(key_table(default_conf()) + "\n\n" + cause_table() + "\n")
