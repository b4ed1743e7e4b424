"""BenchPreS-style instances from CIMemories profiles plus a user's own preference file.

CIMemories (facebookresearch/CIMemories) profile JSON: a list of
  {bio: {name, sex, address, age}, information_attributes: {key: {value, information_domain, event,
   memory_statement}}, contexts: [{recipient, task}, …]}
Preference file (YAML or JSON): profile name → its 5 preferences, one per category:
  Joanna Reyes:
    - category: nickname
      statement: "Please always call me 'Captain Jo'."
      labels: {"IRS Agent|Resolve tax discrepancy": false, …}   # g per recipient|task
One instance per (profile, labelled context). The memory block holds the attributes' memory
statements in order with the preferences interleaved exactly as in the sample (render.py; the
tagged layout puts bio sentences first), wrapped in the layout's task prompt. Domains come from
the context's own `domain` field, else the paper's 39-context table (sample/contexts.csv), where
five CIMemories task wordings are mapped to the paper's (column `cimemories_task`), else "other":
such contexts are named in one warning line at load time and counted in `unmapped_contexts`.
Labels may name a context in either wording.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from prefray.benchmarks.benchpres.categories import CATEGORIES
from prefray.benchmarks.benchpres.data import Instance, Preference, instance_id
from prefray.benchmarks.benchpres.render import (
    EVERY,
    bio_statements,
    context_key,
    interleave,
    memory_item_template,
    memory_layout,
    normalize_context_key,
    render_memory,
    render_prompt,
    task_template,
)
from prefray.benchmarks.benchpres.scoring import nickname_of
from prefray.benchmarks.benchpres.settings import BenchPresSettings
from prefray.sdk import DataError

CONTEXTS_PATH = Path(__file__).parent / "sample" / "contexts.csv"
_VALUE_TYPES = (str, int, float, bool, list, type(None))


_WARNED: set[str] = set()


def _context_table() -> list[dict[str, str]]:
    with open(CONTEXTS_PATH, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def context_aliases() -> dict[str, str]:
    """CIMemories wording → the paper's wording, for the contexts worded differently (Table 6)."""
    return {context_key(r["recipient"], r["cimemories_task"]): context_key(r["recipient"], r["task"])
            for r in _context_table() if r.get("cimemories_task")}


def known_domains() -> dict[str, str]:
    """Domain of each of the paper's 39 contexts, under the paper's key and the CIMemories key."""
    domains = {context_key(r["recipient"], r["task"]): r["domain"] for r in _context_table()}
    return {**domains, **{alias: domains[key] for alias, key in context_aliases().items()}}


def canonical(key: str, aliases: dict[str, str]) -> str:
    return aliases.get(key, key)


def warn_unmapped(path: Path, keys: list[str]) -> None:
    """One warning line naming every context that falls in domain "other" (once per process)."""
    if not keys:
        return
    line = (f"prefray: warning: {path}: {len(keys)} context(s) match none of the paper's 39 contexts and "
            f"get domain 'other' (metric unmapped_contexts): " + "; ".join(repr(k) for k in keys))
    if line not in _WARNED:
        _WARNED.add(line)
        print(line, file=sys.stderr)


def _text(value: Any, where: str, field: str, optional: bool = False) -> str | None:
    if optional and value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"{where}: field '{field}' must be a non-empty string")
    return value


def read_profiles(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        raise DataError(f"{path}: CIMemories profile file not found")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of profiles")
    return data


def check_profile(profile: Any, where: str) -> tuple[dict[str, Any], list[str], list[dict[str, str]]]:
    """(bio, memory statements in attribute order, contexts) of one valid profile."""
    if not isinstance(profile, dict):
        raise DataError(f"{where}: a profile must be an object")
    bio = profile.get("bio")
    if not isinstance(bio, dict):
        raise DataError(f"{where}: field 'bio' must be an object")
    _text(bio.get("name"), where, "bio.name")
    for key in ("sex", "address"):
        _text(bio.get(key), where, f"bio.{key}", optional=True)
    if bio.get("age") is not None and (isinstance(bio["age"], bool) or not isinstance(bio["age"], (int, str))):
        raise DataError(f"{where}: field 'bio.age' must be a number or null")
    attributes = profile.get("information_attributes")
    if not isinstance(attributes, dict) or not attributes:
        raise DataError(f"{where}: field 'information_attributes' must be a non-empty object")
    statements = []
    for key, attribute in attributes.items():
        field = f"information_attributes.{key}"
        if not isinstance(attribute, dict):
            raise DataError(f"{where}: field '{field}' must be an object")
        statements.append(_text(attribute.get("memory_statement"), where, f"{field}.memory_statement"))
        if not isinstance(attribute.get("value"), _VALUE_TYPES):
            raise DataError(f"{where}: field '{field}.value' must be a string, number, boolean, list or null")
        for name in ("information_domain", "event"):
            _text(attribute.get(name), where, f"{field}.{name}", optional=True)
    contexts = profile.get("contexts")
    if not isinstance(contexts, list) or not contexts:
        raise DataError(f"{where}: field 'contexts' must be a non-empty list")
    for number, ctx in enumerate(contexts):
        if not isinstance(ctx, dict):
            raise DataError(f"{where}: field 'contexts[{number}]' must be an object")
        for name in ("recipient", "task"):
            _text(ctx.get(name), where, f"contexts[{number}].{name}")
    return bio, statements, contexts


def read_preferences(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise DataError(f"{path}: preference file not found")
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise DataError(f"{path}: cannot be read as {'JSON' if path.suffix == '.json' else 'YAML'} ({exc})") from None
    if not isinstance(data, dict) or not data:
        raise DataError(f"{path}: expected a mapping of profile name to its preferences")
    return data


def check_preferences(entries: Any, where: str, aliases: dict[str, str]) -> list[tuple[str, str, dict[str, bool]]]:
    """(category, statement, labels by context key) for the 5 preferences of one profile."""
    if not isinstance(entries, list) or len(entries) != len(CATEGORIES):
        raise DataError(f"{where}: expected a list of {len(CATEGORIES)} preferences, one per category {CATEGORIES}")
    out = []
    for number, entry in enumerate(entries):
        at = f"{where}: preference {number}"
        if not isinstance(entry, dict):
            raise DataError(f"{at}: must be an object with category, statement, labels")
        category = entry.get("category")
        if category not in CATEGORIES or category in [c for c, _, _ in out]:
            raise DataError(f"{at}: field 'category' must be one of {CATEGORIES}, each used once; got {category!r}")
        statement = _text(entry.get("statement"), at, "statement")
        if category == "nickname" and not nickname_of(statement):
            raise DataError(f"{at}: field 'statement': nickname preference {statement!r} names no nickname "
                            "(quote it, e.g. call me 'Jo')")
        labels = entry.get("labels")
        if not isinstance(labels, dict) or not labels:
            raise DataError(f"{at}: field 'labels' must map 'recipient|task' to true/false")
        normalized = {}
        for key, value in labels.items():
            if not isinstance(value, bool):
                raise DataError(f"{at}: field 'labels.{key}' must be true or false, got {value!r}")
            normalized[canonical(normalize_context_key(str(key)), aliases)] = value
        out.append((category, statement, normalized))
    first = set(out[0][2])
    for number, (_, _, labels) in enumerate(out[1:], start=1):
        if set(labels) != first:
            raise DataError(f"{where}: preference {number}: field 'labels' must name the same contexts as "
                            f"preference 0 (differs at {sorted(set(labels) ^ first)[0]!r})")
    return out


def cimemories_instances(profiles_path: str | None, preferences_path: str | None,
                         settings: BenchPresSettings | None = None) -> list[Instance]:
    if not profiles_path or not preferences_path:
        raise DataError("benchmark.data: the cimemories source needs data.path (profile JSON) and "
                        "data.preferences (YAML/JSON preference file)")
    ppath, fpath = Path(profiles_path), Path(preferences_path)
    layout = memory_layout(settings)
    template, item = task_template(layout, settings), memory_item_template(settings)
    profiles, wanted = read_profiles(ppath), read_preferences(fpath)
    domains, aliases, found, instances, unmapped = known_domains(), context_aliases(), set(), [], []
    for row, profile in enumerate(profiles, start=1):
        where = f"{ppath}: profile {row}"
        bio, memories, contexts = check_profile(profile, where)
        name = bio["name"]
        if name not in wanted:
            continue
        found.add(name)
        prefs = check_preferences(wanted[name], f"{fpath}: profile {name!r}", aliases)
        if len(memories) < EVERY * len(prefs):
            raise DataError(f"{where}: field 'information_attributes' has {len(memories)} statements; "
                            f"{EVERY * len(prefs)} are needed to interleave the preferences")
        lines = interleave(memories, [s for _, s, _ in prefs])
        memory = render_memory(bio_statements(bio, layout) + lines if layout == "tagged" else lines, item)
        by_key = {canonical(context_key(c["recipient"].strip(), c["task"].strip()), aliases): c for c in contexts}
        unknown = sorted(set(prefs[0][2]) - set(by_key))
        if unknown:
            raise DataError(f"{fpath}: profile {name!r}: field 'labels': context {unknown[0]!r} is not "
                            f"among the contexts of {where}")
        for key, ctx in by_key.items():
            if key not in prefs[0][2]:
                continue
            preferences = tuple(Preference(s, labels[key], c) for c, s, labels in prefs)
            recipient, task = ctx["recipient"].strip(), ctx["task"].strip()
            own = ctx.get("domain") if isinstance(ctx.get("domain"), str) and ctx["domain"].strip() else None
            domain = own or domains.get(key, "other")
            if not own and key not in domains:
                unmapped.append(context_key(recipient, task))
            instances.append(Instance(instance_id(name, recipient, task),
                                      render_prompt(memory, recipient, task, template),
                                      preferences, name, task, recipient, domain, source=f"{where} ({key})",
                                      context_known=bool(own) or key in domains))
    missing = sorted(set(wanted) - found)
    if missing:
        raise DataError(f"{fpath}: profile {missing[0]!r} is not in {ppath}")
    if not instances:
        raise DataError(f"{fpath}: no (profile, context) pair to evaluate")
    warn_unmapped(ppath, sorted(set(unmapped)))
    return instances
