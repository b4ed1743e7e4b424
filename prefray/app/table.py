"""The generated tables of the docs' config reference (docs/hooks.py builds that page from them;
run as a module, this file prints them): every config key, and every failure cause.

The key table is printed from the schema itself (and from the benchmark and condition option
files), so it cannot drift from what the validator accepts; the cause table from the one list of
causes and the failure policy. Tests compare both with the built reference page.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from prefray.app.validate import option_reference
from prefray.engine.config.rules import render
from prefray.engine.config.schema import (
    OPEN_MAPS,
    PROMPT_PATH,
    REQUIRED,
    ROLE_OPTION,
    SECTIONS,
    TopConfig,
    default_of,
    inferred_rule,
    rule_of,
)


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


def _fields(prefix: str, cls: type) -> Iterator[tuple[str, str, str, str]]:
    for f in dataclasses.fields(cls):
        if "section" in f.metadata:
            yield from _fields(f"{prefix}.{f.name}", f.metadata["section"])
            continue
        default = default_of(f)
        shown = "required" if default is REQUIRED else "{}" if default == {} else render(default)
        yield f"{prefix}.{f.name}", rule_of(f).describe(), shown, f.metadata["doc"]


def option_rows(group: str) -> Iterator[tuple[str, str, str, str]]:
    """Keys of every option of a group, merged across options (defaults listed per option): the
    built-in benchmarks' configs, or their conditions (a plugin documents its own keys)."""
    from prefray.app import catalog

    merged: dict[str, tuple[str, dict[str, str]]] = {}
    builtin = catalog.names(builtin_only=True)
    options = sorted({(b if group == "benchmark" else c, b) for b in builtin
                      for c in ([b] if group == "benchmark" else catalog.conditions(b)[0])})
    for option, benchmark in options:
        for key, allowed, default in _walk(group, option_reference(group, benchmark, option)):
            entry = merged.setdefault(key, (allowed, {}))
            entry[1].setdefault(option, default)
    for key, (allowed, defaults) in merged.items():
        values = set(defaults.values())
        if len(values) == 1:
            shown = values.pop()
        elif len(values) == len(defaults) > 2:
            shown = "differs per option"
        else:
            shown = "; ".join(f"{o}: {v}" for o, v in defaults.items())
        yield key, allowed, shown, "in " + ", ".join(defaults)


def _walk(prefix: str, reference: dict) -> Iterator[tuple[str, str, str]]:
    for name, ref in reference.items():
        key = f"{prefix}.{name}"
        if name == "prompts":
            yield f"{key}.NAME", PROMPT_PATH.describe(), "null"
        elif name == "roles" and isinstance(ref, dict):
            for role, value in ref.items():
                yield f"{key}.{role}", ROLE_OPTION.describe(), render(value)
        elif isinstance(ref, dict) and ref and name not in OPEN_MAPS:
            yield from _walk(key, ref)
        elif isinstance(ref, dict):
            yield key, OPEN_MAPS.get(name, inferred_rule(name, ref)).describe(), "{}" if not ref else "..."
        elif isinstance(ref, list):
            yield key, inferred_rule(name, ref).describe(), "[...]" if any(isinstance(v, dict) for v in ref) \
                else "[" + ", ".join(render(v) for v in ref) + "]"
        else:
            yield key, inferred_rule(name, ref).describe(), render(ref)


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
