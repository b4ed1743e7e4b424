"""The response cache: an identical request is never paid twice.

One SQLite file shared by every run under the same outputs root (default
`<parent of run.dir>/.prefray-cache/responses.sqlite`). The key covers the endpoint, the
request's content hash (model, params, messages, schema, seed) and the sample index, so samples
of a model that ignores seeds stay distinct. Only answers that ended ok (and parsed, where the
stage parses) are stored.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from prefray.engine.types import CallResult, ChatRequest, ModelSpec

_SCHEMA = """CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY, text TEXT NOT NULL, model_version TEXT NOT NULL,
    input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, stored_at REAL NOT NULL)"""


def cache_key(spec: ModelSpec, request: ChatRequest, sample: int) -> str:
    identity = f"{spec.provider}|{spec.base_url or ''}|{request.content_hash(spec.model_id)}|{sample}"
    if spec.seed_offset:   # a judge's repeat is another answer to the same request
        identity += f"|seed+{spec.seed_offset}"
    return hashlib.sha256(identity.encode()).hexdigest()


@dataclass
class ResponseCache:
    path: Path

    def __post_init__(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(_SCHEMA)

    def get_many(self, keys: list[str]) -> dict[str, CallResult]:
        found: dict[str, CallResult] = {}
        for start in range(0, len(keys), 500):
            chunk = keys[start:start + 500]
            marks = ",".join("?" * len(chunk))
            query = ("SELECT key, text, model_version, input_tokens, output_tokens FROM responses "
                     f"WHERE key IN ({marks})")
            for key, text, version, tokens_in, tokens_out in self.db.execute(query, chunk):
                now = time.time()
                found[key] = CallResult(status="ok", text=text, model_version=version, input_tokens=tokens_in,
                                        output_tokens=tokens_out, tries=0, started_at=now, finished_at=now,
                                        cached=True)
        return found

    def put_many(self, entries: list[tuple[str, CallResult]]) -> None:
        rows = [(k, r.text, r.model_version, r.input_tokens, r.output_tokens, time.time())
                for k, r in entries if r.status == "ok" and not r.cached]
        if rows:
            self.db.executemany("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?)", rows)

    def close(self) -> None:
        self.db.close()
