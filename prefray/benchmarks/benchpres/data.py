"""BenchPreS instances: the hub schema (Parquet/JSON/JSONL files) and the project's sample set."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefray.engine.benchmark import DataError

SAMPLE_PATH = Path(__file__).parent / "sample" / "benchpres_sample.jsonl"
CATEGORIES = ("role", "style", "tone", "markers", "nickname")
_TEXT_FIELDS = ("prompt", "name", "task", "recipient", "domain")


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


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def read_records(path: Path) -> list[dict[str, Any]]:
    """Rows of a Parquet, JSON (list) or JSONL file, as dicts."""
    if not path.exists():
        raise DataError(f"{path}: dataset file not found")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}: not valid JSON ({exc})") from None
        if not isinstance(data, list):
            raise DataError(f"{path}: expected a JSON list of rows")
        return data
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}: row {number}: not valid JSON ({exc.msg})") from None
    return rows


def derive_category(statement: str) -> str:
    """Best-effort category for hub rows that do not carry one."""
    lowered = statement.lower()
    if "call me" in lowered or "nickname" in lowered or "address me as" in lowered:
        return "nickname"
    if any(w in lowered for w in ("emoji", "exclamation", "caps", "hashtag", "sign off", "sign-off")):
        return "markers"
    if any(w in lowered for w in ("tone", "playful", "formal", "casual", "warm", "witty")):
        return "tone"
    if any(w in lowered for w in ("act as", "role", "like my", "as if you were", "persona")):
        return "role"
    return "style"


def to_instance(record: dict[str, Any], where: str) -> Instance:
    """Validate one hub-schema row; `where` names file and row in error messages."""
    for name in _TEXT_FIELDS:
        if not isinstance(record.get(name), str) or not record[name].strip():
            raise DataError(f"{where}: field '{name}' must be a non-empty string")
    attributes, labels = record.get("preference_attribute"), record.get("preference_label")
    if not isinstance(attributes, list) or not all(isinstance(a, str) and a for a in attributes):
        raise DataError(f"{where}: field 'preference_attribute' must be a list of non-empty strings")
    if not isinstance(labels, list) or not all(isinstance(v, bool) for v in labels):
        raise DataError(f"{where}: field 'preference_label' must be a list of booleans")
    if len(labels) != len(attributes):
        raise DataError(f"{where}: field 'preference_label' has {len(labels)} labels for {len(attributes)} attributes")
    categories = record.get("preference_category") or [derive_category(a) for a in attributes]
    if len(categories) != len(attributes) or any(c not in CATEGORIES for c in categories):
        raise DataError(f"{where}: field 'preference_category' must list one of {CATEGORIES} per attribute")
    preferences = tuple(Preference(a, g, c) for a, g, c in zip(attributes, labels, categories))
    instance_id = "--".join(_slug(record[k]) for k in ("name", "recipient", "task"))
    return Instance(instance_id, record["prompt"], preferences,
                    *(record[k] for k in ("name", "task", "recipient", "domain")))


def load_instances(source: str, path: str | None, limit: int | None) -> list[Instance]:
    if source == "sample":
        file = SAMPLE_PATH
    elif source == "hub":
        if not path:
            raise DataError("benchmark.data.path: the hub source needs the path of a Parquet/JSON/JSONL file")
        file = Path(path)
    else:
        raise DataError(f"benchmark.data.source: unknown source '{source}' (sample | hub)")
    records = read_records(file)
    instances = [to_instance(r, f"{file}: row {i}") for i, r in enumerate(records, start=1)]
    seen: set[str] = set()
    for i, inst in enumerate(instances, start=1):
        if inst.instance_id in seen:
            raise DataError(f"{file}: row {i}: duplicate (name, recipient, task) {inst.instance_id}")
        seen.add(inst.instance_id)
    return instances[:limit] if limit is not None else instances
