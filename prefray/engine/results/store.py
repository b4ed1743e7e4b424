"""Result shards: Parquet files written atomically under the run directory.

Layout: RUN_DIR/shards/benchmark=B/model=M/condition=C/<stage>-<id>.parquet. Every row carries
its own ids, so the folders are for people and for pruning; the dataset is read with an explicit
schema and no partitioning. A shard is written to a hidden temp file in the same folder and
renamed into place, so a crash leaves either the whole shard or nothing the reader sees.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

SHARD_SCHEMA = pa.schema([
    ("unit_id", pa.string()),
    ("attempt", pa.int32()),
    ("benchmark", pa.string()),
    ("model", pa.string()),
    ("condition", pa.string()),
    ("stage", pa.string()),
    ("role", pa.string()),
    ("judge", pa.string()),
    ("instance_id", pa.string()),
    ("item", pa.string()),
    ("sample", pa.int32()),
    ("seed", pa.int64()),
    ("meta_json", pa.string()),
    ("request_hash", pa.string()),
    ("provider", pa.string()),
    ("model_id", pa.string()),
    ("model_version", pa.string()),
    ("params_json", pa.string()),
    ("status", pa.string()),
    ("cause", pa.string()),
    ("error", pa.string()),
    ("text", pa.string()),
    ("parsed_json", pa.string()),
    ("finish_reason", pa.string()),
    ("truncated", pa.bool_()),
    ("input_tokens", pa.int64()),
    ("output_tokens", pa.int64()),
    ("cost_usd", pa.float64()),
    ("cached", pa.bool_()),
    ("tries", pa.int32()),
    ("latency_s", pa.float64()),
    ("started_at", pa.float64()),
    ("finished_at", pa.float64()),
])


def job_dir(run_dir: Path, benchmark: str, model: str, condition: str) -> Path:
    return Path(run_dir) / "shards" / f"benchmark={benchmark}" / f"model={model}" / f"condition={condition}"


def write_shard(folder: Path, stage: str, rows: list[dict]) -> Path:
    """Write rows as one shard, atomically. Returns the shard's path."""
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=SHARD_SCHEMA)
    digest = hashlib.sha1("".join(f"{r['unit_id']}:{r['attempt']}" for r in rows).encode()).hexdigest()[:16]
    final = folder / f"{stage}-{digest}.parquet"
    temp = folder / f".{final.name}.{os.getpid()}.tmp"
    pq.write_table(table, temp)
    with open(temp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(temp, final)
    return final


def read_rows(root: Path, filter_expr: ds.Expression | None = None, columns: list[str] | None = None) -> pa.Table:
    """Every stored row under `root` (a run dir or any folder below its shards/); only `columns` if given."""
    root = Path(root)
    base = root / "shards" if (root / "shards").is_dir() or (root / "manifest.json").exists() else root
    files = sorted(str(p) for p in base.rglob("*.parquet") if not p.name.startswith((".", "_")))
    if not files:
        empty = SHARD_SCHEMA.empty_table()
        return empty if columns is None else empty.select(columns)
    dataset = ds.dataset(files, format="parquet", schema=SHARD_SCHEMA, partitioning=None)
    return dataset.to_table(columns=columns, filter=filter_expr)


def latest_attempts(table: pa.Table) -> pa.Table:
    """Keep, for every unit, its best row: an ok row if any, else the latest attempt (sorted by unit)."""
    if table.num_rows == 0:
        return table
    ok_rank = pc.equal(table["status"], "ok").cast(pa.int32())
    keys = pa.table({"unit_id": table["unit_id"], "_ok": ok_rank, "attempt": table["attempt"]})
    order = pc.sort_indices(keys, sort_keys=[("unit_id", "ascending"), ("_ok", "descending"),
                                             ("attempt", "descending")])
    ids = pc.take(table["unit_id"], order).combine_chunks()
    previous = pa.concat_arrays([pa.nulls(1, ids.type), ids.slice(0, len(ids) - 1)])
    first_of_unit = pc.fill_null(pc.not_equal(ids, previous), True)
    return table.take(pc.filter(order, first_of_unit))
