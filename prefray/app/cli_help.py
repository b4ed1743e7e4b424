"""The reference part of `prefray launch --help`: config groups and their options, run
settings with their defaults, and the other entry points. Read from `conf/` and the entry points'
own docstrings, so it never goes stale."""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
import textwrap
from pathlib import Path

from prefray.app.sweep import (
    all_options,
    benchmark_conditions,
    default_options,
    group_options,
    paper_judge,
    served_by_prefray,
)

ENTRY_POINTS = ("plan", "rerun", "rejudge", "view")
FALLBACK = {"view": "`prefray view RUN_DIR` — look at a finished run's metrics, plots and rows."}
WIDTH = 100
KEY_LINE = re.compile(r"^(\s*)([A-Za-z_][\w-]*):\s*(.*?)\s*$")


def _wrap(text: str, indent: str = "  ", hanging: str = "      ") -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=hanging, break_on_hyphens=False)


def _served_note(conf: Path, group: str) -> str:
    served = [o for o in group_options(conf, group) if served_by_prefray(conf, group, o)]
    kinds = ", ".join(f"{o} ({served_by_prefray(conf, group, o)})" for o in served)
    return f"served by prefray itself, not in {group}=all, select by name: {kinds}" if served else ""


def _conditions(conf: Path, benchmarks: list[str]) -> str:
    """`a, b: c*, d; e: ...` — benchmarks with the same conditions share an entry; * the default."""
    by_list: dict[str, list[str]] = {}
    for benchmark in benchmarks:
        defined, default = benchmark_conditions(conf, benchmark)
        listed = ", ".join(c + ("*" if c == default else "") for c in defined)
        by_list.setdefault(listed, []).append(benchmark)
    return "; ".join(f"{', '.join(names)}: {listed}" for listed, names in by_list.items())


def groups(conf: Path) -> list[str]:
    defaults = default_options(conf)
    benchmarks = group_options(conf, "benchmark")
    lines = ["config groups (group=option; with -m: group=a,b, group=glob(pattern), group=all):"]
    suite = all_options(conf, "benchmark")
    plugins = [b for b in benchmarks if b not in suite]
    lines += _wrap(f"benchmark: {', '.join(suite)} (benchmark=all)"
                   + (f"; installed plugins, by name or benchmark='glob(*)': {', '.join(plugins)}" if plugins else "")
                   + f" (default: {defaults.get('benchmark')})")
    lines += _wrap(f"condition: per benchmark (* = its default) — {_conditions(conf, benchmarks)}. "
                   "condition=all without benchmark= is every benchmark of benchmark=all with each of its conditions.")
    in_all = all_options(conf, "model")
    lineup = [o for o in group_options(conf, "model") if o not in in_all and not served_by_prefray(conf, "model", o)]
    lines += _wrap(f"model: {', '.join(in_all)} (model=all); {_served_note(conf, 'model')} "
                   f"(default: {defaults.get('model')})")
    if lineup:
        lines += _wrap("  kept for the papers' lineups, not in model=all (model=paper, or by name): "
                       + ", ".join(lineup))
    judges = ", ".join(f"{b} {paper_judge(conf, b)}" for b in benchmarks if paper_judge(conf, b))
    lines += _wrap(f"judge: {', '.join(all_options(conf, 'judge'))} (judge=all); {_served_note(conf, 'judge')} "
                   f"(default: each benchmark's paper judge — {judges}; a model prefray serves itself is "
                   "judged by the judge option of the same name)")
    return lines


def run_settings(conf: Path) -> list[str]:
    """`key=default  comment` for every plain setting of config.yaml (defaults list left out)."""
    lines = _wrap("run settings (key=value; default shown; any other key of the composed config is set the "
                  "same way, e.g. benchmark.samples=1 or model.rpm=100; --cfg prints it):", "", "  ")
    comment: list[str] = []
    prefix: dict[int, str] = {}
    for raw in (conf / "config.yaml").read_text().splitlines():
        stripped = raw.strip()
        if stripped.startswith("#"):
            comment.append(stripped.lstrip("# "))
            continue
        match = KEY_LINE.match(raw)
        if not match or stripped.startswith("-"):
            comment = []
            continue
        depth, key, value = len(match.group(1)), match.group(2), match.group(3)
        prefix = {d: p for d, p in prefix.items() if d < depth}
        name = "".join(prefix.values()) + key
        if key == "defaults" and depth == 0:
            comment = []
            continue
        if value == "":
            prefix[depth] = name + "."
        elif depth > 0 or key != "defaults":
            lines += _wrap(f"{name}={value}  {' '.join(comment)}".rstrip())
        comment = []
    return lines


def _summary(module: str) -> str:
    spec = importlib.util.find_spec(f"prefray.app.{module}")  # the command's own docstring
    if spec is None or not spec.origin:
        return FALLBACK.get(module, f"prefray {module}")
    doc = ast.get_docstring(ast.parse(Path(spec.origin).read_text())) or f"prefray {module}"
    usage, _, rest = doc.partition("\n\n")
    usage = usage.replace("\n", " ")
    if rest and " — " not in usage:  # a usage line alone: add the first sentence that follows it
        usage += " — " + rest.replace("\n", " ").split(". ")[0].rstrip(".") + "."
    return usage


def entry_points() -> list[str]:
    lines = ["other entry points (each has its own --help):"]
    for module in ENTRY_POINTS:
        lines += _wrap(_summary(module))
    return lines


def epilog(conf: Path) -> str:
    """The text after argparse's own usage; never fails a launch (a broken conf is reported later)."""
    try:
        parts = [groups(conf), run_settings(conf), entry_points()]
    except Exception as exc:  # noqa: BLE001 - help must not hide the real error a launch will name
        return f"(cannot list the options of {conf}: {exc})"
    return "\n\n".join("\n".join(part) for part in parts)


class HelpWithOptions(argparse.ArgumentParser):
    """argparse's parser whose --help ends with the options read from `conf` (read only for help)."""

    def __init__(self, conf: Path, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(**kwargs)
        self.conf = conf

    def format_help(self) -> str:
        return super().format_help() + "\n" + epilog(self.conf) + "\n"
