"""The run's record of its provider batches: RUN_DIR/batches/<batch id>.json, written atomically.

A record is written the moment a provider accepts a batch, before anything waits on it: a driver
killed later finds it on relaunch and collects the batch instead of sending its requests again.
Once a batch has ended, its answers are written into the record too, so they survive a crash
between collecting them and storing their rows.

Requests are matched by their identity: provider, the row's `request_hash` (everything sent but
the seed) and the seed — computable both from a request and from a stored row.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prefray.engine.rundir import RunDir
from prefray.engine.rundir.shards import read_rows
from prefray.engine.types import CallResult, ChatRequest, ModelSpec


def request_key(provider: str, request_hash: str, seed: int | None) -> str:
    identity = f"{provider}|{request_hash}|{'' if seed is None else seed}"
    return hashlib.sha256(identity.encode()).hexdigest()


def key_of(spec: ModelSpec, request: ChatRequest) -> str:
    return request_key(spec.provider, request.prompt_hash(spec.model_id), request.seed)


@dataclass
class BatchRecord:
    batch_id: str
    provider: str
    endpoint_key: str
    model_id: str
    created_at: float
    # custom_id → request key, for every request of the batch
    entries: dict[str, str]
    input_file_id: str | None = None
    # filled once the batch ended: custom_id → CallResult fields
    results: dict[str, dict[str, Any]] | None = None
    ended_at: float | None = None
    status: str = "submitted"

    @property
    def ended(self) -> bool:
        return self.results is not None

    def result(self, custom_id: str) -> CallResult | None:
        if self.results is None or custom_id not in self.results:
            return None
        return CallResult(**self.results[custom_id])


@dataclass
class BatchStore:
    run_dir: RunDir
    records: dict[str, BatchRecord] = field(default_factory=dict)

    @property
    def folder(self) -> Path:
        return self.run_dir.batches

    def load(self) -> dict[str, BatchRecord]:
        """Every record of the run (unreadable files are reported by name and skipped)."""
        self.records = {}
        if not self.folder.is_dir():
            return self.records
        for path in sorted(self.folder.glob("*.json")):
            try:
                record = BatchRecord(**json.loads(path.read_text()))
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{path}: not a batch record ({exc})") from None
            self.records[record.batch_id] = record
        return self.records

    def save(self, record: BatchRecord) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{_safe(record.batch_id)}.json"
        temp = path.with_name(f".{path.name}.tmp")
        temp.write_text(json.dumps(asdict(record), sort_keys=True))
        os.replace(temp, path)
        self.records[record.batch_id] = record

    def finish(self, record: BatchRecord, results: dict[str, CallResult], status: str, ended_at: float) -> None:
        record.results = {cid: asdict(result) for cid, result in results.items()}
        record.status, record.ended_at = status, ended_at
        self.save(record)


def _safe(batch_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in batch_id)


def delivered_after(run_dir: RunDir) -> dict[str, float]:
    """Request key → latest `finished_at` among the run's stored rows (what rows already hold)."""
    latest: dict[str, float] = {}
    if not run_dir.shards.is_dir():
        return latest
    table = read_rows(run_dir).select(["provider", "request_hash", "seed", "finished_at"])
    for provider, request_hash, seed, finished in zip(*(table[c].to_pylist() for c in table.column_names)):
        key = request_key(provider, request_hash, seed)
        latest[key] = max(latest.get(key, 0.0), finished or 0.0)
    return latest
