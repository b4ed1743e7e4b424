"""What was sent: every distinct request of a run, stored once, linked from rows by `request_hash`.

Layout: RUN_DIR/requests/requests-<digest>.parquet, written atomically like shards and compacted
like them when a run's calls are over (compact-<digest>.parquet). A request's hash
covers everything that was sent except the sample's seed (the seed is on the row), so the 20
samples of one prompt share one stored copy. Read the folder with `read_requests`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from prefray.engine.rundir import RunDir
from prefray.engine.rundir.diskfull import writing
from prefray.engine.rundir.shards import Compaction, compact_folder
from prefray.engine.types import ChatRequest

REQUEST_SCHEMA = pa.schema([
    ("request_hash", pa.string()),
    ("model_id", pa.string()),
    ("system", pa.string()),
    ("messages_json", pa.string()),
    ("params_json", pa.string()),
    ("json_schema_json", pa.string()),
])


def request_row(model_id: str, request: ChatRequest) -> dict[str, str | None]:
    return {
        "request_hash": request.prompt_hash(model_id),
        "model_id": model_id,
        "system": request.system,
        "messages_json": json.dumps(list(request.messages), ensure_ascii=False),
        "params_json": json.dumps(request.params, sort_keys=True, ensure_ascii=False),
        "json_schema_json": None if request.json_schema is None else json.dumps(request.json_schema, sort_keys=True),
    }


def read_requests(run_dir: RunDir, hashes: Iterable[str] | None = None, columns: list[str] | None = None) -> pa.Table:
    """Stored requests (optionally only these hashes, only these columns)."""
    folder = run_dir.requests
    files = sorted(str(p) for p in folder.glob("*.parquet")) if folder.is_dir() else []
    if not files:
        return REQUEST_SCHEMA.empty_table().select(columns or REQUEST_SCHEMA.names)
    dataset = ds.dataset(files, format="parquet", schema=REQUEST_SCHEMA)
    expr = None if hashes is None else ds.field("request_hash").isin(list(hashes))
    return dataset.to_table(filter=expr, columns=columns)


def compact_requests(run_dir: RunDir) -> Compaction:
    """Roll the store's files (one per shard that sent a new request) into large ones, as shards are."""
    folder = run_dir.requests
    return compact_folder(folder, schema=REQUEST_SCHEMA) if folder.is_dir() else Compaction()


class SeenDigests:
    """A set of equal-length digests at their own size: one sorted numpy array of fixed-width bytes
    (32 B a digest, no Python object each) and a small set of the latest, merged into it in bulk."""

    MERGE_AT = 4096

    def __init__(self, width: int, digests: Iterable[bytes] = ()):
        self.dtype = np.dtype(f"S{width}")
        self.sorted = np.unique(np.fromiter(digests, dtype=self.dtype))
        self.recent: set[bytes] = set()

    def __contains__(self, digest: bytes) -> bool:
        if digest in self.recent:
            return True
        at = int(np.searchsorted(self.sorted, digest))
        # numpy reads a fixed-width value back without trailing zero bytes: compare it the same way
        return at < len(self.sorted) and self.sorted[at] == digest.rstrip(b"\0")

    def __len__(self) -> int:
        return len(self.sorted) + len(self.recent)

    def update(self, digests: Iterable[bytes]) -> None:
        self.recent.update([digest for digest in digests if digest not in self])
        if len(self.recent) >= self.MERGE_AT:
            merged = np.concatenate([self.sorted, np.fromiter(self.recent, dtype=self.dtype)])
            self.sorted = np.unique(merged)
            self.recent.clear()


DIGEST_BYTES = 32   # request hashes are sha256 (engine/types.py: ChatRequest.prompt_hash)


class RequestStore:
    """Writes each distinct request of a run once (the driver keeps the digests it has seen, packed
    in a numpy array: 32 bytes a request rather than a Python object each)."""

    def __init__(self, run_dir: RunDir):
        self.folder = run_dir.requests
        self.run_dir = run_dir
        self._known: SeenDigests | None = None

    def _seen(self) -> SeenDigests:
        if self._known is None:
            stored = read_requests(self.run_dir, columns=["request_hash"])["request_hash"]
            self._known = SeenDigests(DIGEST_BYTES, (bytes.fromhex(h) for h in stored.to_pylist()))
        return self._known

    def add(self, model_id: str, requests: Iterable[ChatRequest]) -> None:
        seen = self._seen()
        rows = {}
        for request in requests:
            row = request_row(model_id, request)
            if bytes.fromhex(row["request_hash"]) not in seen:
                rows[row["request_hash"]] = row
        if not rows:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        table = pa.Table.from_pylist(list(rows.values()), schema=REQUEST_SCHEMA)
        digest = hashlib.sha1("".join(sorted(rows)).encode()).hexdigest()[:16]
        final = self.folder / f"requests-{digest}.parquet"
        temp = self.folder / f".{final.name}.{os.getpid()}.tmp"
        try:
            with writing(final):
                pq.write_table(table, temp)
                os.replace(temp, final)
        finally:
            temp.unlink(missing_ok=True)
        seen.update(bytes.fromhex(h) for h in rows)
