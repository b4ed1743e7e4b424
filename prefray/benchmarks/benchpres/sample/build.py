"""Build the BenchPreS sample dataset (benchpres_sample.jsonl).

Reads ``profiles.yaml`` and ``contexts.csv`` from this folder and writes one
JSON object per (profile, context) pair, profiles first, then contexts in
``contexts.csv`` order.

Usage::

    python -m prefray.benchmarks.benchpres.sample.build
    python build.py [--out PATH]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import yaml

from prefray.benchmarks.benchpres.render import (
    DEFAULT_LAYOUT,
    EVERY,
    bio_statements,
    context_key,
    interleave,
    memory_item_template,
    render_memory,
    render_prompt,
    task_template,
)
from prefray.benchmarks.benchpres.scoring import nickname_of
from prefray.benchmarks.benchpres.settings import BenchPresSettings

HERE = Path(__file__).resolve().parent
PROFILES_PATH = HERE / "profiles.yaml"
CONTEXTS_PATH = HERE / "contexts.csv"
OUT_PATH = HERE / "benchpres_sample.jsonl"

CATEGORIES = ["role", "style", "tone", "markers", "nickname"]


class BuildError(ValueError):
    """Raised when profiles.yaml or contexts.csv is inconsistent."""


def load_contexts(path: Path = CONTEXTS_PATH) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    keys = [context_key(r["recipient"], r["task"]) for r in rows]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise BuildError(f"{path.name}: duplicate contexts: {dupes}")
    return rows


def validate_profile(profile: dict, contexts: list[dict]) -> None:
    name = profile.get("name") or "<unnamed profile>"
    for field in ("name", "bio", "memories", "preferences", "labels"):
        if field not in profile:
            raise BuildError(f"profile {name!r}: missing field {field!r}")

    prefs = profile["preferences"]
    cats = [p.get("category") for p in prefs]
    if cats != CATEGORIES:
        raise BuildError(f"profile {name!r}: preference categories must be {CATEGORIES}, got {cats}")
    for p in prefs:
        if not isinstance(p.get("statement"), str) or not p["statement"].strip():
            raise BuildError(f"profile {name!r}: empty {p['category']} statement")
    nick = prefs[CATEGORIES.index("nickname")]["statement"]
    if not nickname_of(nick):
        raise BuildError(f"profile {name!r}: nickname statement names no nickname (quote it): {nick!r}")
    if len(profile["memories"]) < EVERY * len(CATEGORIES):
        raise BuildError(
            f"profile {name!r}: need at least {EVERY * len(CATEGORIES)} memories "
            f"to interleave preferences, got {len(profile['memories'])}"
        )

    labels = profile["labels"] or {}
    expected = [context_key(c["recipient"], c["task"]) for c in contexts]
    for key in expected:
        if key not in labels:
            raise BuildError(f"profile {name!r}: no labels for context {key!r}")
        value = labels[key]
        if not isinstance(value, list) or len(value) != len(CATEGORIES):
            raise BuildError(
                f"profile {name!r}, context {key!r}: expected a list of "
                f"{len(CATEGORIES)} labels, got {value!r}"
            )
        if not all(isinstance(v, bool) for v in value):
            raise BuildError(f"profile {name!r}, context {key!r}: labels must be true/false, got {value!r}")
    unknown = sorted(set(labels) - set(expected))
    if unknown:
        raise BuildError(f"profile {name!r}: labels for contexts not in contexts.csv: {unknown}")


def memory_lines(bio: dict, memories: list[str], preferences: list[str], layout: str) -> list[str]:
    """The sample's memory lines. knowledge layout: the bio as first-person statements is the start
    of the memory list and the preferences are interleaved over all of it (as in a CIMemories
    profile, whose bio is among its statements); tagged layout: bio sentences, then the memories
    with the preferences interleaved."""
    if layout == "tagged":
        return bio_statements(bio, layout) + interleave(memories, preferences)
    return interleave(bio_statements(bio, layout) + memories, preferences)


def build_rows(profiles: list[dict], contexts: list[dict], template: str, layout: str = DEFAULT_LAYOUT,
               item: str | None = None) -> list[dict]:
    rows = []
    for profile in profiles:
        validate_profile(profile, contexts)
        statements = [p["statement"] for p in profile["preferences"]]
        categories = [p["category"] for p in profile["preferences"]]
        bio = {"name": profile["name"], **profile["bio"]}
        memory = render_memory(memory_lines(bio, profile["memories"], statements, layout), item)
        for ctx in contexts:
            key = context_key(ctx["recipient"], ctx["task"])
            rows.append(
                {
                    "prompt": render_prompt(memory, ctx["recipient"], ctx["task"], template),
                    "preference_attribute": statements,
                    "preference_label": list(profile["labels"][key]),
                    "preference_category": categories,
                    "name": profile["name"],
                    "task": ctx["task"],
                    "recipient": ctx["recipient"],
                    "domain": ctx["domain"],
                }
            )
    return rows


def sample_rows(layout: str = DEFAULT_LAYOUT, settings: BenchPresSettings | None = None) -> list[dict]:
    """The sample's hub-schema rows rendered in `layout` (task prompt through `benchmark.prompts`)."""
    with open(PROFILES_PATH, encoding="utf-8") as f:
        profiles = yaml.safe_load(f)["profiles"]
    return build_rows(profiles, load_contexts(), task_template(layout, settings), layout,
                      memory_item_template(settings))


def build(out_path: Path = OUT_PATH) -> list[dict]:
    rows = sample_rows()
    with open(out_path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT_PATH, help="output JSONL path")
    args = parser.parse_args(argv)
    try:
        rows = build(args.out)
    except BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    n_true = sum(sum(r["preference_label"]) for r in rows)
    n_all = sum(len(r["preference_label"]) for r in rows)
    print(f"wrote {len(rows)} rows to {args.out}")
    print(f"mean per context: {n_true / len(rows):.2f} applied, {(n_all - n_true) / len(rows):.2f} suppressed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
