"""BenchPreS instances: the hub schema (files or the `datasets` library), the sample, CIMemories.

Sources (benchmark.data.source):
  sample       the project's own sample set, rendered from sample/profiles.yaml in the run's
               memory layout (sample/benchpres_sample.jsonl is its export in the default layout)
  hub          a Parquet / JSON / JSONL file in the hub schema at data.path
  <owner/name> a dataset id on the hub, read with the `datasets` library (split data.split)
  cimemories   CIMemories profiles at data.path plus a preference file at data.preferences
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefray.benchmarks.benchpres.categories import CATEGORIES, derive_categories
from prefray.benchmarks.benchpres.scoring import nickname_of
from prefray.benchmarks.benchpres.settings import BenchPresData, BenchPresSettings
from prefray.sdk import DataError
from prefray.sdk.data import read_hub_split, read_records

SAMPLE_PATH = Path(__file__).parent / "sample" / "benchpres_sample.jsonl"
PROFILES_PATH = Path(__file__).parent / "sample" / "profiles.yaml"
_TEXT_FIELDS = ("prompt", "name", "task", "recipient", "domain")
MAX_LISTED = 20  # bad rows listed in one error; the rest are counted


@dataclass(frozen=True)
class Preference:
    statement: str
    applies: bool     # gold label g: True = apply in this context, False = suppress
    category: str


@dataclass(frozen=True)
class Instance:
    instance_id: str
    prompt: str
    preferences: tuple[Preference, ...]
    name: str
    task: str
    recipient: str
    domain: str
    source: str = ""  # "<file>: row N", for error messages
    context_known: bool = True  # False: a CIMemories context in no domain table (domain "other")


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def instance_id(name: str, recipient: str, task: str) -> str:
    return "--".join(slug(part) for part in (name, recipient, task))


def _categories(record: dict[str, Any], attributes: list[str], where: str) -> list[str]:
    """One category per attribute, each of CATEGORIES exactly once (as in a CIMemories profile)."""
    given = record.get("preference_category")
    if given is not None:
        if (not isinstance(given, list) or len(given) != len(attributes)
                or any(c not in CATEGORIES for c in given)):
            raise DataError(f"{where}: field 'preference_category' must list one of {CATEGORIES} per attribute")
        field, found = "preference_category", list(given)
    else:
        field, found = "preference_attribute", derive_categories(attributes)
        for number, (attribute, category) in enumerate(zip(attributes, found)):
            if category is None:
                raise DataError(f"{where}: field 'preference_attribute[{number}]': {attribute!r} is no "
                                "recognisable preference; add a 'preference_category' column")
    repeated = sorted({c for c in found if found.count(c) > 1})
    if repeated:
        numbers = [i for i, c in enumerate(found) if c == repeated[0]]
        raise DataError(f"{where}: field '{field}': category {repeated[0]!r} is given to attributes {numbers}; "
                        f"a row holds one preference per category {CATEGORIES}")
    return [str(c) for c in found]


def check_nicknames(preferences: tuple[Preference, ...], where: str, field: str) -> None:
    for pref in preferences:
        if pref.category == "nickname" and not nickname_of(pref.statement):
            raise DataError(f"{where}: field '{field}': nickname preference {pref.statement!r} names no "
                            "nickname (quote it, e.g. call me 'Jo')")


def to_instance(record: dict[str, Any], where: str) -> Instance:
    """Validate one hub-schema row; `where` names file and row in error messages."""
    if not isinstance(record, dict):
        raise DataError(f"{where}: a row must be an object, got {type(record).__name__}")
    for name in _TEXT_FIELDS:
        if not isinstance(record.get(name), str) or not record[name].strip():
            raise DataError(f"{where}: field '{name}' must be a non-empty string")
    attributes, labels = record.get("preference_attribute"), record.get("preference_label")
    if not isinstance(attributes, list) or not attributes or not all(isinstance(a, str) and a for a in attributes):
        raise DataError(f"{where}: field 'preference_attribute' must be a list of non-empty strings")
    if not isinstance(labels, list) or not all(isinstance(v, bool) for v in labels):
        raise DataError(f"{where}: field 'preference_label' must be a list of booleans")
    if len(attributes) != len(CATEGORIES):
        raise DataError(f"{where}: field 'preference_attribute' has {len(attributes)} preferences; a row holds "
                        f"{len(CATEGORIES)}, one per category {CATEGORIES}")
    if len(labels) != len(attributes):
        raise DataError(f"{where}: field 'preference_label' has {len(labels)} labels for {len(attributes)} attributes")
    categories = _categories(record, attributes, where)
    preferences = tuple(Preference(a, g, c) for a, g, c in zip(attributes, labels, categories))
    check_nicknames(preferences, where, "preference_attribute")
    return Instance(instance_id(record["name"], record["recipient"], record["task"]), record["prompt"],
                    preferences, *(record[k] for k in ("name", "task", "recipient", "domain")), source=where)


def hub_instances(records: list[dict[str, Any]], origin: str) -> list[Instance]:
    """Every row validated; all bad rows are reported in one DataError (the first MAX_LISTED, then a count)."""
    instances, problems = [], []
    for number, record in enumerate(records, start=1):
        try:
            instances.append(to_instance(record, f"{origin}: row {number}"))
        except DataError as exc:
            problems.append(str(exc))
    if problems:
        more = len(problems) - MAX_LISTED
        tail = [f"… and {more} more bad row(s) in {origin}"] if more > 0 else []
        raise DataError("\n".join(problems[:MAX_LISTED] + tail))
    return instances


def sample_instances(settings: BenchPresSettings | None) -> list[Instance]:
    from prefray.benchmarks.benchpres.render import memory_layout
    from prefray.benchmarks.benchpres.sample.build import BuildError, sample_rows

    try:
        rows = sample_rows(memory_layout(settings), settings)
    except BuildError as exc:
        raise DataError(f"{PROFILES_PATH}: {exc}") from None
    return hub_instances(rows, str(PROFILES_PATH))


def load_instances(data: BenchPresData, limit: int | None, settings: BenchPresSettings | None = None) -> list[Instance]:
    """The instances named by a benchmark's `data` settings, validated, first `limit` of them.
    `settings` (the benchmark config) gives the memory layout and prompt overrides."""
    source, path = data.source, data.path
    if source == "sample":
        instances = sample_instances(settings)
    elif source == "hub":
        if not path:
            raise DataError("benchmark.data.path: the hub source needs the path of a Parquet/JSON/JSONL file")
        instances = hub_instances(read_records(Path(path)), str(path))
    elif source == "cimemories":
        from prefray.benchmarks.benchpres.cimemories import cimemories_instances

        instances = cimemories_instances(path, data.preferences, settings)
    elif "/" in source:
        split = data.split
        instances = hub_instances(read_hub_split(source, split, "benchmark.data.source"), f"{source}[{split}]")
    else:
        raise DataError(f"benchmark.data.source: unknown source '{source}' (sample | hub | cimemories | owner/name)")
    seen: set[str] = set()
    for inst in instances:
        if inst.instance_id in seen:
            raise DataError(f"{inst.source}: duplicate (name, recipient, task) {inst.instance_id}")
        seen.add(inst.instance_id)
    return instances[:limit] if limit is not None else instances
