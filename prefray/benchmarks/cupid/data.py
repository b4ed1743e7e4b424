"""CUPID instances: the hub schema (`kixlab/CUPID`, split `test`) read from Parquet/JSON/JSONL files
or through the `datasets` library, and the project's own sample set.

Every row is validated and every bad row is reported at once (up to MAX_LISTED, then a count)
in one DataError naming the file, the row and the field. A checklist of other than 2-4 items is
unusual but possible in real data: it is kept, with a warning; an empty one is an error.
Only `Session.dialogue` and `Instance.request` may ever reach the evaluated model; the context
factors, preferences and checklist are ground truth for selection and scoring.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefray.sdk import DataError
from prefray.sdk.data import read_hub_split, read_records

SAMPLE_PATH = Path(__file__).parent / "sample" / "cupid_sample.jsonl"
INSTANCE_TYPES = ("consistent", "contrastive", "changing")
N_SESSIONS = 8
ROLES = ("user", "assistant")
MAX_LISTED = 20
USUAL_CHECKLIST = (2, 4)  # the paper's decomposer writes 2-4 items (2.90 on average)
_TEXT_FIELDS = ("persona_id", "current_request", "current_context_factor", "current_contextual_preference")


@dataclass(frozen=True)
class Turn:
    role: str  # "user" | "assistant"
    content: str


@dataclass(frozen=True)
class Session:
    context_factor: str          # hidden
    contextual_preference: str   # hidden
    dialogue: tuple[Turn, ...]   # the only part the model sees


@dataclass(frozen=True)
class Instance:
    persona_id: str
    instance_type: str
    request: str
    context_factor: str          # hidden
    preference: str              # hidden: the ground-truth contextual preference
    checklist: tuple[str, ...]   # hidden: the ground-truth checklist
    sessions: tuple[Session, ...]

    @property
    def instance_id(self) -> str:
        return instance_id(self.persona_id, self.instance_type)


def instance_id(persona_id: str, instance_type: str) -> str:
    """Results are keyed by (persona, type): a persona alone collides across the three types."""
    return f"{persona_id}|{instance_type}"


def normalized(text: str) -> str:
    """Text compared for identity: whitespace collapsed, case folded."""
    return " ".join(text.split()).casefold()


def oracle_indices(inst: Instance) -> tuple[int, ...]:
    """Prior sessions with the current context factor and the current preference (the oracle),
    compared after normalising whitespace and case."""
    factor, preference = normalized(inst.context_factor), normalized(inst.preference)
    return tuple(i for i, s in enumerate(inst.sessions)
                 if normalized(s.context_factor) == factor and normalized(s.contextual_preference) == preference)


def _text(value: Any, where: str, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"{where}: field '{name}' must be a non-empty string")
    return value


def _session(value: Any, where: str, name: str) -> Session:
    if not isinstance(value, dict):
        raise DataError(f"{where}: field '{name}' must be an object with context_factor, "
                        "contextual_preference and dialogue")
    dialogue = value.get("dialogue")
    if not isinstance(dialogue, list) or not dialogue:
        raise DataError(f"{where}: field '{name}.dialogue' must be a non-empty list of turns")
    turns = []
    for j, turn in enumerate(dialogue):
        if not isinstance(turn, dict) or turn.get("role") not in ROLES:
            raise DataError(f"{where}: field '{name}.dialogue[{j}].role' must be one of {ROLES}")
        turns.append(Turn(turn["role"], _text(turn.get("content"), where, f"{name}.dialogue[{j}].content")))
    return Session(_text(value.get("context_factor"), where, f"{name}.context_factor"),
                   _text(value.get("contextual_preference"), where, f"{name}.contextual_preference"),
                   tuple(turns))


def to_instance(record: Any, where: str) -> Instance:
    """Validate one hub-schema row; `where` names file and row in error messages."""
    if not isinstance(record, dict):
        raise DataError(f"{where}: a row must be an object")
    for name in _TEXT_FIELDS:
        _text(record.get(name), where, name)
    if record.get("instance_type") not in INSTANCE_TYPES:
        raise DataError(f"{where}: field 'instance_type' must be one of {INSTANCE_TYPES}, "
                        f"got {record.get('instance_type')!r}")
    checklist = record.get("current_checklist")
    if not isinstance(checklist, list) or not checklist:
        raise DataError(f"{where}: field 'current_checklist' must be a non-empty list of questions")
    items = tuple(_text(c, where, f"current_checklist[{k}]") for k, c in enumerate(checklist))
    prior = record.get("prior_interactions")
    if not isinstance(prior, list) or len(prior) != N_SESSIONS:
        count = len(prior) if isinstance(prior, list) else "no list"
        raise DataError(f"{where}: field 'prior_interactions' must hold exactly {N_SESSIONS} sessions, got {count}")
    sessions = tuple(_session(s, where, f"prior_interactions[{i}]") for i, s in enumerate(prior))
    inst = Instance(record["persona_id"], record["instance_type"], record["current_request"],
                    record["current_context_factor"], record["current_contextual_preference"], items, sessions)
    if not oracle_indices(inst):
        raise DataError(f"{where}: no prior session has the current context factor and preference "
                        "(fields 'current_context_factor', 'current_contextual_preference'): the oracle "
                        "condition would show none")
    return inst


def _report(where: str, errors: list[str]) -> str:
    listed = errors[:MAX_LISTED]
    more = f"\n      ... and {len(errors) - MAX_LISTED} more bad row(s)" if len(errors) > MAX_LISTED else ""
    return f"{where}: {len(errors)} bad row(s):\n      " + "\n      ".join(listed) + more


_warned: set[str] = set()


def warn_once(message: str) -> None:
    """Print a data warning to stderr, once per process however many conditions load the file."""
    if message not in _warned:
        _warned.add(message)
        print(f"prefray: warning: {message}", file=sys.stderr)


def validate(records: list[Any], where: str) -> list[Instance]:
    """Every row checked; all problems reported together in one DataError."""
    instances, errors, seen, unusual = [], [], {}, []
    for i, record in enumerate(records, start=1):
        try:
            inst = to_instance(record, f"row {i}")
        except DataError as exc:
            errors.append(str(exc))
            continue
        if inst.instance_id in seen:
            errors.append(f"row {i}: duplicate (persona_id, instance_type) {inst.instance_id!r} "
                          f"(first in row {seen[inst.instance_id]})")
            continue
        seen[inst.instance_id] = i
        low, high = USUAL_CHECKLIST
        if not low <= len(inst.checklist) <= high:
            unusual.append(f"row {i} ({len(inst.checklist)})")
        instances.append(inst)
    if errors:
        raise DataError(_report(where, errors))
    if unusual:
        listed = ", ".join(unusual[:MAX_LISTED]) + (f" and {len(unusual) - MAX_LISTED} more"
                                                    if len(unusual) > MAX_LISTED else "")
        warn_once(f"{where}: {len(unusual)} row(s) have a checklist outside the paper's 2-4 items, kept as "
                  f"they are: {listed}")
    return instances


def load_instances(source: str, path: str | None, limit: int | None, split: str = "test") -> list[Instance]:
    if source == "sample":
        records, where = read_records(SAMPLE_PATH), str(SAMPLE_PATH)
    elif source == "hub":
        if not path:
            raise DataError("benchmark.data.path: the hub source needs a Parquet/JSON/JSONL file or a hub id")
        file = Path(path)
        if file.suffix in (".parquet", ".json", ".jsonl") or file.exists():
            records, where = read_records(file), str(file)
        else:
            records, where = read_hub_split(path, split, "benchmark.data.path"), f"{path}[{split}]"
    else:
        raise DataError(f"benchmark.data.source: unknown source '{source}' (sample | hub)")
    instances = validate(list(records), where)
    return instances[:limit] if limit is not None else instances
