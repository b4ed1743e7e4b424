"""The gateways' own record of what was paid: every try that reached a provider, as it happens.

Each gateway process appends JSON lines to RUN_DIR/ledger/<gateway>-<pid>.jsonl and flushes each
at once: a `sent` line just before a try goes out, and one line when it ends (`ok` with the usage
the provider reported, or the failure cause), whether or not the row of that unit ever reaches a
shard (a driver or gateway killed before writing, a re-ask, a retried fault). `costs.csv` is built
from these lines: calls = tries sent, tokens and dollars = what the provider reported. A line cut
short by a kill is skipped when read.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.json as pajson

LEDGER_DIR = "ledger"
SENT = "sent"

PAID_SCHEMA = pa.schema([
    ("provider", pa.string()), ("model_id", pa.string()), ("request_hash", pa.string()),
    ("outcome", pa.string()), ("input_tokens", pa.int64()), ("output_tokens", pa.int64()),
    ("cost_usd", pa.float64()), ("at", pa.float64()),
])


class PaidLog:
    """Append-only writer for one gateway process."""

    def __init__(self, run_dir: Path, name: str):
        folder = Path(run_dir) / LEDGER_DIR
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{name}-{os.getpid()}.jsonl"
        self.handle = open(self.path, "a", encoding="utf-8")

    def record(self, provider: str, model_id: str, request_hash: str, outcome: str,
               input_tokens: int, output_tokens: int, cost_usd: float) -> None:
        line = json.dumps({"provider": provider, "model_id": model_id, "request_hash": request_hash,
                           "outcome": outcome, "input_tokens": int(input_tokens),
                           "output_tokens": int(output_tokens), "cost_usd": float(cost_usd), "at": time.time()})
        self.handle.write(line + "\n")
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()


def read_paid(run_dir: Path) -> pa.Table | None:
    """Every recorded try of a run (None if the run has no ledger: written before it existed)."""
    folder = Path(run_dir) / LEDGER_DIR
    files = sorted(folder.glob("*.jsonl")) if folder.is_dir() else []
    if not files:
        return None
    return pa.concat_tables([_read_paid_file(path) for path in files])


def _read_paid_file(path: Path) -> pa.Table:
    """One gateway's record: parsed by Arrow's JSON reader; a file it cannot read whole (the last
    line of a killed gateway, cut mid-write) is read line by line, skipping lines that do not parse."""
    options = pajson.ParseOptions(explicit_schema=PAID_SCHEMA, unexpected_field_behavior="ignore")
    try:
        return pajson.read_json(path, parse_options=options).select(PAID_SCHEMA.names).cast(PAID_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pass
    records: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return pa.Table.from_pylist(records, schema=PAID_SCHEMA)
