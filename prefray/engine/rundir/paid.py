"""The gateways' own record of what was paid: every try that reached a provider, as it happens.

Each gateway process appends JSON lines to RUN_DIR/ledger/<gateway>-<pid>-<token>.jsonl and flushes each
at once: a `sent` line just before a try goes out, and one line when it ends (`ok` with the usage
the provider reported, or the failure cause), whether or not the row of that unit ever reaches a
shard (a driver or gateway killed before writing, a re-ask, a retried fault). `costs.csv` is built
from these lines: calls = tries sent, tokens and dollars = what the provider reported. A line cut
short by a kill is skipped when read.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.json as pajson
import pyarrow.parquet as pq

from prefray.engine.rundir.appendlog import AppendLog
from prefray.engine.rundir.diskfull import writing
from prefray.engine.rundir.layout import RunDir
from prefray.engine.rundir.shards import ABSORBED_KEY, absorbed_by, sync_folder

SENT = "sent"

PAID_SCHEMA = pa.schema([
    ("provider", pa.string()), ("model_id", pa.string()), ("request_hash", pa.string()),
    ("outcome", pa.string()), ("input_tokens", pa.int64()), ("output_tokens", pa.int64()),
    ("cost_usd", pa.float64()), ("at", pa.float64()),
    # of input_tokens: read from and written to the provider's prompt cache; what caching saved
    # (null in a ledger written before they were recorded)
    ("cache_read_tokens", pa.int64()), ("cache_write_tokens", pa.int64()), ("cache_saved_usd", pa.float64()),
])


class PaidLog(AppendLog):
    """The paid record of one gateway process."""

    def __init__(self, run_dir: RunDir, name: str):
        super().__init__(run_dir.ledger, name)

    def record(self, provider: str, model_id: str, request_hash: str, outcome: str,
               input_tokens: int, output_tokens: int, cost_usd: float, cache_read_tokens: int = 0,
               cache_write_tokens: int = 0, cache_saved_usd: float = 0.0) -> None:
        self.write({"provider": provider, "model_id": model_id, "request_hash": request_hash, "outcome": outcome,
                    "input_tokens": int(input_tokens), "output_tokens": int(output_tokens),
                    "cost_usd": float(cost_usd), "at": time.time(), "cache_read_tokens": int(cache_read_tokens),
                    "cache_write_tokens": int(cache_write_tokens), "cache_saved_usd": float(cache_saved_usd)})


PARQUET_PREFIX = "paid-"


def read_paid(run_dir: RunDir, columns: list[str] | None = None) -> pa.Table | None:
    """Every recorded try of a run (None if the run has no ledger: written before it existed);
    `columns` picks columns of PAID_SCHEMA (all by default)."""
    rolled, lines = _ledger_files(run_dir.ledger)
    if not rolled and not lines:
        return None
    schema = pa.schema([PAID_SCHEMA.field(name) for name in columns or PAID_SCHEMA.names])
    parts = [_read_rolled(path, schema) for path in rolled]
    parts += [_read_paid_file(path).select(schema.names) for path in lines]
    return pa.concat_tables(parts)


def _read_rolled(path: Path, schema: pa.Schema) -> pa.Table:
    """`schema`'s columns of a rolled ledger file; a column it was written without is null."""
    present = set(pq.read_schema(path).names)
    table = pq.read_table(path, columns=[n for n in schema.names if n in present])
    for name in schema.names:
        if name not in present:
            table = table.append_column(schema.field(name), pa.nulls(table.num_rows, schema.field(name).type))
    return table.select(schema.names).cast(schema)


def _ledger_files(folder: Path) -> tuple[list[Path], list[Path]]:
    """(rolled Parquet files, JSON-lines files no Parquet file absorbed) of a ledger folder."""
    if not folder.is_dir():
        return [], []
    rolled = sorted(folder.glob(f"{PARQUET_PREFIX}*.parquet"))
    absorbed = {name for path in rolled for name in absorbed_by(path)}
    return rolled, sorted(p for p in folder.glob("*.jsonl") if p.name not in absorbed)


def compact_paid(run: RunDir) -> int:
    """Roll the run's JSON-lines ledger files into one Parquet file (call it once no gateway writes:
    after the run's calls, or as the run dir's owner); returns the files absorbed."""
    folder = run.ledger
    rolled, lines = _ledger_files(folder)
    _drop_absorbed(folder, rolled)
    if not lines:
        return 0
    names = [path.name for path in lines]
    digest = hashlib.sha1("\n".join(names).encode()).hexdigest()[:16]
    final = folder / f"{PARQUET_PREFIX}{digest}.parquet"
    temp = folder / f".{final.name}.{os.getpid()}.tmp"
    try:
        with writing(final):
            schema = PAID_SCHEMA.with_metadata({ABSORBED_KEY: json.dumps(names).encode()})
            with pq.ParquetWriter(temp, schema, compression="zstd") as writer:
                for path in lines:
                    for piece in _paid_pieces(path):
                        writer.write_table(piece)
            pa.default_memory_pool().release_unused()   # hand the pages back rather than keep them for later
            with open(temp, "rb") as handle:
                os.fsync(handle.fileno())
            os.replace(temp, final)
    finally:
        temp.unlink(missing_ok=True)
    sync_folder(folder)
    for path in lines:
        path.unlink(missing_ok=True)
    return len(lines)


def _drop_absorbed(folder: Path, rolled: list[Path]) -> None:
    """Delete JSON-lines files a Parquet file absorbed but a kill left on disk."""
    for path in rolled:
        for name in absorbed_by(path):
            (folder / name).unlink(missing_ok=True)


PIECE_BYTES = 2 * 2**20   # of JSON lines parsed at once: a ledger is rolled without holding it whole


def _read_paid_file(path: Path) -> pa.Table:
    """One gateway's record (see _paid_pieces)."""
    return pa.concat_tables([PAID_SCHEMA.empty_table(), *_paid_pieces(path)])


def _paid_pieces(path: Path) -> Iterator[pa.Table]:
    """One gateway's record, PIECE_BYTES of lines at a time, each parsed by Arrow's JSON reader; a
    piece it cannot read whole (the last line of a killed gateway, cut mid-write) is read line by
    line, skipping lines that do not parse."""
    with open(path, "rb") as handle:
        while lines := handle.readlines(PIECE_BYTES):
            yield _parse_lines(lines)


def _parse_lines(lines: list[bytes]) -> pa.Table:
    options = pajson.ParseOptions(explicit_schema=PAID_SCHEMA, unexpected_field_behavior="ignore")
    try:
        table = pajson.read_json(pa.BufferReader(b"".join(lines)), parse_options=options,
                                 read_options=pajson.ReadOptions(use_threads=False))
        return table.select(PAID_SCHEMA.names).cast(PAID_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pass
    records: list[dict[str, Any]] = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return pa.Table.from_pylist(records, schema=PAID_SCHEMA)
