"""CUPID instances: the hub schema (`kixlab/CUPID`, split `test`) read from Parquet/JSON/JSONL files
or through the `datasets` library, and the project's own sample set.

Every row is validated; a bad row raises DataError naming the file, the row and the field.
Only `Session.dialogue` and `Instance.request` may ever reach the evaluated model; the context
factors, preferences and checklist are ground truth for selection and scoring.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefray.engine.benchmark import DataError
from prefray.engine.datafiles import read_hub_split, read_records

SAMPLE_PATH = Path(__file__).parent / "sample" / "cupid_sample.jsonl"
INSTANCE_TYPES = ("consistent", "contrastive", "changing")
N_SESSIONS = 8
ROLES = ("user", "assistant")
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


def instance_type_of(key: str) -> str:
    return key.rpartition("|")[2]


def oracle_indices(inst: Instance) -> tuple[int, ...]:
    """Prior sessions with the current context factor and the current preference (the oracle)."""
    return tuple(i for i, s in enumerate(inst.sessions)
                 if s.context_factor == inst.context_factor and s.contextual_preference == inst.preference)


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
    if not isinstance(checklist, list) or not 2 <= len(checklist) <= 4:
        raise DataError(f"{where}: field 'current_checklist' must be a list of 2-4 questions")
    items = tuple(_text(c, where, f"current_checklist[{k}]") for k, c in enumerate(checklist))
    prior = record.get("prior_interactions")
    if not isinstance(prior, list) or len(prior) != N_SESSIONS:
        count = len(prior) if isinstance(prior, list) else "no list"
        raise DataError(f"{where}: field 'prior_interactions' must hold exactly {N_SESSIONS} sessions, got {count}")
    sessions = tuple(_session(s, where, f"prior_interactions[{i}]") for i, s in enumerate(prior))
    return Instance(record["persona_id"], record["instance_type"], record["current_request"],
                    record["current_context_factor"], record["current_contextual_preference"], items, sessions)


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
    instances = [to_instance(r, f"{where}: row {i}") for i, r in enumerate(records, start=1)]
    seen: set[str] = set()
    for i, inst in enumerate(instances, start=1):
        if inst.instance_id in seen:
            raise DataError(f"{where}: row {i}: duplicate (persona_id, instance_type) {inst.instance_id!r}")
        seen.add(inst.instance_id)
    return instances[:limit] if limit is not None else instances
