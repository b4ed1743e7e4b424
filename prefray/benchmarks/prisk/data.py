"""PRISK data: profiles with memory conversations and the three item files, validated on load.

A dataset is a folder with profiles.jsonl, irp_items.jsonl, narrowing_items.jsonl and
sycophancy_items.jsonl (schema: /work/shared/SCHEMAS.md, sample: ./sample). Each sub-benchmark
reads profiles.jsonl and its own item file; a bad line raises DataError naming file, line, field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefray.sdk import DataError

SAMPLE_DIR = Path(__file__).parent / "sample"
ATTRIBUTES = ("age", "gender", "marital_status", "profession", "economic_status", "education",
              "health_status", "mental_health_status", "emotional_state", "stated_preference")
ITEM_FILES = {"irp": "irp_items.jsonl", "narrowing": "narrowing_items.jsonl",
              "sycophancy": "sycophancy_items.jsonl"}
_NUMBER = re.compile(r"-?\d+(\.\d+)?")


@dataclass(frozen=True)
class Turn:
    role: str
    content: str


@dataclass(frozen=True)
class Conversation:
    conversation_id: str
    topic: str
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Profile:
    profile_id: str
    attributes: tuple[tuple[str, Any], ...]   # the 10 attributes, in ATTRIBUTES order
    memory: tuple[Conversation, ...]

    def attribute(self, name: str) -> Any:
        return dict(self.attributes)[name]


@dataclass(frozen=True)
class IrpItem:
    item_id: str
    kind: str                       # "benchmark" (exact match) | "synthetic" (judged)
    query: str
    source: str = ""                # benchmark items: gsm8k | csqa | mmlu | ...
    domain: str = ""                # synthetic items
    choices: tuple[str, ...] = ()   # empty: numeric answer
    gold: str = ""

    @property
    def group(self) -> str:
        return self.source if self.kind == "benchmark" else "synthetic"


@dataclass(frozen=True)
class NarrowingItem:
    item_id: str
    query: str
    group: str = "narrowing"


@dataclass(frozen=True)
class SycophancyItem:
    item_id: str
    type: str                       # "agreement" | "perspective"
    query: str
    verdict: str = ""
    topic: str = ""
    favoured_by: str = ""
    # stated preferences the item's direction refers to; None: every persona (the direction follows
    # from attributes every profile has, such as age or education)
    relevant_preferences: tuple[str, ...] | None = None

    @property
    def group(self) -> str:
        return self.type

    def relevant_to(self, profile: Profile) -> bool:
        return self.relevant_preferences is None or profile.attribute("stated_preference") in self.relevant_preferences


Item = IrpItem | NarrowingItem | SycophancyItem


@dataclass(frozen=True)
class Instance:
    """One unit of evaluation: an item alone (base) or a (profile, item) pair."""

    instance_id: str
    item: Item
    profile: Profile | None = None


class _Row:
    """One JSONL line with checked field access; errors name file, line and field."""

    def __init__(self, file: str, line: int, data: dict[str, Any], prefix: str = ""):
        self.file, self.line, self.data, self.prefix = file, line, data, prefix

    def fail(self, field: str, message: str) -> DataError:
        return DataError(f"{self.file}: line {self.line}: field '{self.prefix}{field}': {message}")

    def only(self, allowed: set[str]) -> None:
        extra = sorted(set(self.data) - allowed)
        if extra:
            raise self.fail(extra[0], "unexpected field")

    def get(self, key: str, kind: type, optional: bool = False) -> Any:
        if key not in self.data or (optional and self.data[key] is None):
            if optional:
                return None
            raise self.fail(key, "missing")
        value = self.data[key]
        if (kind is int and isinstance(value, bool)) or not isinstance(value, kind):
            raise self.fail(key, f"expected {kind.__name__}, got {type(value).__name__}")
        if isinstance(value, str) and not value.strip():
            raise self.fail(key, "empty string")
        return value

    def child(self, data: Any, prefix: str) -> _Row:
        if not isinstance(data, dict):
            raise DataError(f"{self.file}: line {self.line}: field '{self.prefix}{prefix}': expected object")
        return _Row(self.file, self.line, data, f"{self.prefix}{prefix}.")


def read_jsonl(path: Path) -> list[_Row]:
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    rows = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}: line {number}: not valid JSON ({exc.msg})") from None
        if not isinstance(data, dict):
            raise DataError(f"{path}: line {number}: expected a JSON object")
        rows.append(_Row(str(path), number, data))
    if not rows:
        raise DataError(f"{path}: no rows")
    return rows


def _unique(seen: set[str], row: _Row, field: str, value: str) -> None:
    if value in seen:
        raise row.fail(field, f"duplicate id {value!r}")
    seen.add(value)


def to_profile(row: _Row, conversation_ids: set[str]) -> Profile:
    row.only({"profile_id", "attributes", "memory"})
    profile_id = row.get("profile_id", str)
    attrs = row.child(row.get("attributes", dict), "attributes")
    attrs.only(set(ATTRIBUTES))
    values = tuple((a, attrs.get(a, int if a == "age" else str)) for a in ATTRIBUTES)
    memory = row.get("memory", list)
    if not memory:
        raise row.fail("memory", "needs at least one conversation")
    return Profile(profile_id, values, tuple(_conversation(row, i, c, conversation_ids) for i, c in enumerate(memory)))


def _conversation(row: _Row, index: int, data: Any, seen: set[str]) -> Conversation:
    conv = row.child(data, f"memory[{index}]")
    conv.only({"conversation_id", "topic", "turns"})
    conversation_id = conv.get("conversation_id", str)
    _unique(seen, conv, "conversation_id", conversation_id)
    turns = conv.get("turns", list)
    if not turns:
        raise conv.fail("turns", "needs at least one turn")
    parsed = []
    for t, turn_data in enumerate(turns):
        turn = conv.child(turn_data, f"turns[{t}]")
        turn.only({"role", "content"})
        role = turn.get("role", str)
        if role not in ("user", "assistant"):
            raise turn.fail("role", f"must be 'user' or 'assistant', got {role!r}")
        parsed.append(Turn(role, turn.get("content", str)))
    return Conversation(conversation_id, conv.get("topic", str), tuple(parsed))


def to_irp_item(row: _Row) -> IrpItem:
    kind = row.get("kind", str)
    item_id, query = row.get("item_id", str), row.get("question", str)
    if kind == "synthetic":
        row.only({"item_id", "kind", "domain", "question", "choices", "gold"})
        for key in ("choices", "gold"):
            if row.data.get(key) is not None:
                raise row.fail(key, "must be null for synthetic items")
        return IrpItem(item_id, kind, query, domain=row.get("domain", str))
    if kind != "benchmark":
        raise row.fail("kind", f"must be 'benchmark' or 'synthetic', got {kind!r}")
    row.only({"item_id", "kind", "source", "question", "choices", "gold"})
    choices = row.get("choices", list, optional=True) or []
    gold = _gold(row, bool(choices))
    if not choices and not _NUMBER.fullmatch(gold.replace(",", "")):
        raise row.fail("gold", f"an item without choices needs a numeric gold answer, got {gold!r}")
    if choices:
        if not 2 <= len(choices) <= 26 or not all(isinstance(c, str) and c.strip() for c in choices):
            raise row.fail("choices", "must be a list of 2-26 non-empty strings (or null for numeric answers)")
        letters = [chr(ord("A") + i) for i in range(len(choices))]
        if gold not in letters:
            raise row.fail("gold", f"must be one of {letters}, got {gold!r}")
    return IrpItem(item_id, kind, query, source=row.get("source", str), choices=tuple(choices), gold=gold)


def _gold(row: _Row, has_choices: bool) -> str:
    """The gold answer as text; a numeric gold may be a JSON number (4, 28.75) or a string."""
    value = row.data.get("gold")
    if not has_choices and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return row.get("gold", str)


def to_narrowing_item(row: _Row) -> NarrowingItem:
    row.only({"item_id", "query"})
    return NarrowingItem(row.get("item_id", str), row.get("query", str))


def to_sycophancy_item(row: _Row) -> SycophancyItem:
    kind, item_id, query = row.get("type", str), row.get("item_id", str), row.get("query", str)
    if kind == "agreement":
        row.only({"item_id", "type", "query", "verdict"})
        verdict = row.get("verdict", str)
        if verdict != "at_fault":
            # the paper's agreement sycophancy is failing "to correct a user who is clearly at fault";
            # the 1-5 scale measures how far an answer excuses an asker who was in the wrong
            raise row.fail("verdict", f"must be 'at_fault' (agreement items are stories whose asker was in the "
                                      f"wrong), got {verdict!r}")
        return SycophancyItem(item_id, kind, query, verdict=verdict)
    if kind == "perspective":
        row.only({"item_id", "type", "query", "topic", "favoured_by", "relevant_preferences"})
        relevant = row.get("relevant_preferences", list, optional=True)
        if relevant is not None and (not relevant or not all(isinstance(p, str) and p.strip() for p in relevant)):
            raise row.fail("relevant_preferences", "expected a non-empty list of non-empty strings, or null")
        return SycophancyItem(item_id, kind, query, topic=row.get("topic", str),
                              favoured_by=row.get("favoured_by", str),
                              relevant_preferences=tuple(relevant) if relevant is not None else None)
    raise row.fail("type", f"must be 'agreement' or 'perspective', got {kind!r}")


_ITEM_READERS: dict[str, Callable[[_Row], Item]] = {
    "irp": to_irp_item, "narrowing": to_narrowing_item, "sycophancy": to_sycophancy_item}


def load_profiles(folder: Path) -> list[Profile]:
    seen: set[str] = set()
    conversation_ids: set[str] = set()
    profiles = []
    for row in read_jsonl(folder / "profiles.jsonl"):
        profile = to_profile(row, conversation_ids)
        _unique(seen, row, "profile_id", profile.profile_id)
        profiles.append(profile)
    return profiles


def load_items(folder: Path, kind: str) -> list[Item]:
    seen: set[str] = set()
    items = []
    for row in read_jsonl(folder / ITEM_FILES[kind]):
        item = _ITEM_READERS[kind](row)
        _unique(seen, row, "item_id", item.item_id)
        items.append(item)
    return items


def first_per_group(items: list[Item], limit: int | None) -> list[Item]:
    """The first `limit` items of each group (IRP source or synthetic, sycophancy type), in file order."""
    if limit is None:
        return items
    counts: dict[str, int] = {}
    kept = []
    for item in items:
        counts[item.group] = counts.get(item.group, 0) + 1
        if counts[item.group] <= limit:
            kept.append(item)
    return kept


def load_instances(kind: str, path: str | None, limit: int | None, personalized: bool) -> list[Instance]:
    """Base: one instance per item. Personalized: profile × item, instance id `<profile>--<item>`.

    `limit=N` keeps the first N items of each item group and the first N profiles.
    """
    folder = Path(path) if path else SAMPLE_DIR
    if not folder.is_dir():
        raise DataError(f"benchmark.data.path: {folder} is not a folder with the PRISK files")
    items = first_per_group(load_items(folder, kind), limit)
    profiles = load_profiles(folder)
    if not personalized:
        return [Instance(item.item_id, item) for item in items]
    profiles = profiles[:limit] if limit is not None else profiles
    # a perspective item is paired only with the personas whose stated preference it refers to
    return [Instance(f"{p.profile_id}--{item.item_id}", item, p) for p in profiles for item in items
            if not isinstance(item, SycophancyItem) or item.relevant_to(p)]
