"""Result shards: Parquet files written atomically under the run directory.

Layout: RUN_DIR/shards/benchmark=B/model=M/condition=C/<stage>-<id>.parquet. Every row carries
its own ids, so the folders are for people and for pruning; the dataset is read with an explicit
schema and no partitioning. A shard is written to a hidden temp file in the same folder and
renamed into place, so a crash leaves either the whole shard or nothing the reader sees.

Small shards are the write-ahead form of a running job: compaction rolls them into large files
(compact-<id>.parquet: zstd, row groups of 64k rows) and then deletes them. A large file names the
files it absorbed in its Parquet metadata, and readers skip an absorbed file still on disk, so a
crash between the rename of the large file and the deletion of its inputs counts no row twice; the
next owner of the run dir (or the next compaction) deletes the leftovers.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from prefray.engine.rundir.diskfull import writing
from prefray.engine.rundir.layout import MANIFEST, SHARDS, RunDir

if TYPE_CHECKING:   # read_rows imports it: a gateway process imports this module, and pyarrow.dataset imports pandas
    import pyarrow.dataset as ds

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
    # of input_tokens: read from and written to the provider's prompt cache, and what that saved
    ("cache_read_tokens", pa.int64()),
    ("cache_write_tokens", pa.int64()),
    ("cache_saved_usd", pa.float64()),
    ("tries", pa.int32()),
    ("latency_s", pa.float64()),
    ("started_at", pa.float64()),
    ("finished_at", pa.float64()),
])


def write_shard(folder: Path, stage: str, rows: list[dict]) -> Path:
    """Write rows as one shard, atomically. Returns the shard's path."""
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=SHARD_SCHEMA)
    digest = hashlib.sha1("".join(f"{r['unit_id']}:{r['attempt']}" for r in rows).encode()).hexdigest()[:16]
    final = folder / f"{stage}-{digest}.parquet"
    temp = folder / f".{final.name}.{os.getpid()}.tmp"
    try:
        with writing(final):
            pq.write_table(table, temp)
            with open(temp, "rb") as handle:
                os.fsync(handle.fileno())
            os.replace(temp, final)
    finally:
        temp.unlink(missing_ok=True)     # a write the disk refused leaves nothing behind
    return final


def read_rows(root: RunDir | Path, filter_expr: ds.Expression | None = None,
              columns: list[str] | None = None, encoded: Sequence[str] = ()) -> pa.Table:
    """Every stored row of a run, or under `root` when it is a folder below a run's shards/, each
    once; only `columns` if given; the string columns named in `encoded` dictionary-encoded (as a
    Parquet file stores a column of repeated values: cheaper to read and to reorder; `decoded` turns
    them back into strings).

    A compaction may run meanwhile (in another thread): a file it deleted between listing and
    reading, or a listing that changed during the read, makes the read start again, so the rows
    returned are those of one consistent set of files.
    """
    base = shards_base(root)
    files = shard_files(base)
    for _ in range(READ_TRIES):
        try:
            table = _read(files, filter_expr, columns, encoded)
        except (OSError, pa.ArrowException):
            if all(os.path.exists(f) for f in files):
                raise
            table = None
        now = shard_files(base)
        if table is not None and now == files:
            return table
        files = now
    raise RuntimeError(f"the shards under {base} kept changing while being read ({READ_TRIES} tries)")


def _read(files: list[str], filter_expr: ds.Expression | None, columns: list[str] | None,
          encoded: Sequence[str]) -> pa.Table:
    schema = pa.schema([pa.field(f.name, pa.dictionary(pa.int32(), f.type)) if f.name in encoded else f
                        for f in SHARD_SCHEMA])
    if not files:
        empty = schema.empty_table()
        return empty if columns is None else empty.select(columns)
    import pyarrow.dataset as ds

    options = ds.ParquetReadOptions(dictionary_columns=list(encoded))
    dataset = ds.dataset(files, format=ds.ParquetFileFormat(read_options=options), schema=schema, partitioning=None)
    return dataset.to_table(columns=columns, filter=filter_expr)


def decoded(table: pa.Table) -> pa.Table:
    """`table` with each dictionary-encoded column as a column of its values (`read_rows`' `encoded`)."""
    for index, field in enumerate(table.schema):
        if pa.types.is_dictionary(field.type):
            table = table.set_column(index, field.name, table[field.name].cast(field.type.value_type))
    return table


def shards_base(root: RunDir | Path) -> Path:
    """The folder whose Parquet files hold the rows: a run's shards/, or the folder below it given."""
    if isinstance(root, RunDir):
        return root.shards
    if (Path(root) / SHARDS).is_dir() or (Path(root) / MANIFEST).exists():
        raise TypeError(f"{root} is a run directory: pass its RunDir")   # its metrics files are no shards
    return Path(root)


def shard_files(root: RunDir | Path) -> list[str]:
    """The Parquet files holding the rows under `root`: hidden, temp and absorbed files left out."""
    base = shards_base(root)
    if not base.is_dir():
        return []
    files = sorted(p for p in base.rglob("*.parquet") if not p.name.startswith((".", "_")))
    absorbed = {p.parent / name for p in files if is_compacted(p) for name in absorbed_by(p)}
    return [str(p) for p in files if p not in absorbed]


def is_compacted(path: Path) -> bool:
    return path.name.startswith(COMPACT_PREFIX)


def absorbed_by(path: Path) -> list[str]:
    """Names of the files (same folder) whose rows the large file `path` holds."""
    try:
        metadata = pq.read_schema(path).metadata or {}
    except FileNotFoundError:
        return []
    return json.loads(metadata.get(ABSORBED_KEY, b"[]"))


# -- compaction ---------------------------------------------------------------------------------

COMPACT_PREFIX = "compact-"
ABSORBED_KEY = b"prefray.absorbed"
ROW_GROUP_ROWS = 65_536
ROW_GROUP_BYTES = 8 * 2**20      # of Arrow data: long answers close a row group early
READ_BATCH_ROWS = 1_024
FILE_ROWS = 16 * ROW_GROUP_ROWS    # a large file is full at ~1M rows; full files are left as they are
READ_TRIES = 8
_folder_locks: dict[Path, threading.Lock] = {}
_locks_guard = threading.Lock()


@dataclass(frozen=True)
class Compaction:
    """What one compaction did: files absorbed, large files written, rows they hold."""

    absorbed: int = 0
    written: int = 0
    rows: int = 0

    def __add__(self, other: Compaction) -> Compaction:
        return Compaction(self.absorbed + other.absorbed, self.written + other.written, self.rows + other.rows)


def _folder_lock(folder: Path) -> threading.Lock:
    with _locks_guard:
        return _folder_locks.setdefault(Path(folder).resolve(), threading.Lock())


def drop_absorbed(root: RunDir | Path) -> int:
    """Delete files a large file absorbed but a crash left on disk; returns how many."""
    base = shards_base(root)
    removed = 0
    for large in sorted(base.rglob(f"{COMPACT_PREFIX}*.parquet")) if base.is_dir() else []:
        for name in absorbed_by(large):
            path = large.parent / name
            if path.exists():
                path.unlink()
                removed += 1
    return removed


def compact_folder(folder: Path, small_only: bool = False, schema: pa.Schema = SHARD_SCHEMA) -> Compaction:
    """Roll the shards of one job folder into large files, each written atomically before the
    files it absorbed are deleted. `small_only` rolls only small shards (while the job runs);
    otherwise large files that are not full are merged too. Writers may add shards meanwhile.
    `schema`: the files' schema (the run's request store is compacted the same way)."""
    folder = Path(folder)
    with _folder_lock(folder):
        drop_absorbed(folder)
        inputs = _compaction_inputs(folder, small_only)
        done = Compaction()
        for group in _groups(inputs):
            if len(group) > 1:
                done += _merge(folder, group, schema)
        return done


def _compaction_inputs(folder: Path, small_only: bool) -> list[tuple[Path, int]]:
    """(file, rows) of this folder's files to roll: every small shard, and large files not full."""
    found = []
    for path in sorted(folder.glob("*.parquet")):
        if path.name.startswith((".", "_")):
            continue
        if is_compacted(path) and small_only:
            continue
        rows = pq.read_metadata(path).num_rows
        if not (is_compacted(path) and rows >= FILE_ROWS):
            found.append((path, rows))
    return found


def _groups(inputs: list[tuple[Path, int]]) -> list[list[tuple[Path, int]]]:
    """Consecutive inputs packed into groups of at most FILE_ROWS rows (a bigger file stays alone)."""
    groups: list[list[tuple[Path, int]]] = []
    total = 0
    for item in inputs:
        if not groups or total + item[1] > FILE_ROWS:
            groups.append([])
            total = 0
        groups[-1].append(item)
        total += item[1]
    return groups


def _merge(folder: Path, group: list[tuple[Path, int]], base: pa.Schema) -> Compaction:
    names = [path.name for path, _ in group]
    expected = sum(rows for _, rows in group)
    digest = hashlib.sha1("\n".join(names).encode()).hexdigest()[:16]
    final = folder / f"{COMPACT_PREFIX}{digest}.parquet"
    temp = folder / f".{final.name}.{os.getpid()}.tmp"
    schema = base.with_metadata({ABSORBED_KEY: json.dumps(names).encode()})
    try:
        with writing(final):
            written = _write_large(temp, schema, [str(path) for path, _ in group])
        if written != expected:
            raise RuntimeError(f"compaction of {folder} read {written} rows where the footers hold {expected}")
        os.replace(temp, final)
    finally:
        temp.unlink(missing_ok=True)
    sync_folder(folder)
    for path, _ in group:
        path.unlink(missing_ok=True)
    return Compaction(absorbed=len(group), written=1, rows=written)


def _write_large(path: Path, schema: pa.Schema, files: list[str]) -> int:
    """Stream `files` into one zstd Parquet file; returns the rows written. The files are read one
    after another, a batch at a time, and a row group closes at ROW_GROUP_ROWS rows or
    ROW_GROUP_BYTES of Arrow data, so the memory this takes does not grow with the rows (the driver
    runs it mid-job). Reading file by file holds far less than a dataset scan of them all."""
    plain = schema.remove_metadata()
    written, pending, rows, size = 0, [], 0, 0
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        for batch in _batches(files, plain):
            pending.append(batch)
            rows += batch.num_rows
            size += batch.nbytes
            if rows >= ROW_GROUP_ROWS or size >= ROW_GROUP_BYTES:
                written += _flush(writer, pending, plain)
                pending, rows, size = [], 0, 0
        written += _flush(writer, pending, plain)
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())
    pa.default_memory_pool().release_unused()   # hand the pages back rather than keep them for later
    return written


def _batches(files: list[str], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Every row of `files` in `schema` (a column an older file lacks is null)."""
    for name in files:
        with pq.ParquetFile(name) as source:
            for batch in source.iter_batches(batch_size=READ_BATCH_ROWS, use_threads=False):
                yield batch if batch.schema.equals(schema) else _conformed(batch, schema)


def _conformed(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    columns = [batch.column(f.name).cast(f.type) if f.name in batch.schema.names else pa.nulls(batch.num_rows, f.type)
               for f in schema]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _flush(writer: pq.ParquetWriter, batches: list[pa.RecordBatch], schema: pa.Schema) -> int:
    if not batches:
        return 0
    table = pa.Table.from_batches(batches, schema=schema)
    writer.write_table(table, row_group_size=table.num_rows)
    return table.num_rows


def sync_folder(folder: Path) -> None:
    """Make the rename durable before the absorbed files go."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def job_folders(run_dir: RunDir) -> list[Path]:
    """Every folder under RUN_DIR/shards that holds Parquet files."""
    base = run_dir.shards
    return sorted({p.parent for p in base.rglob("*.parquet")}) if base.is_dir() else []


def compact_run(run_dir: RunDir) -> Compaction:
    """Compact every job folder of a run (its owner calls this: see prefray.compact)."""
    done = Compaction()
    for folder in job_folders(run_dir):
        done += compact_folder(folder)
    return done


# What latest_attempts reads to pick a unit's best row: read these (and what else is needed)
# rather than whole rows where the text is not needed.
BEST_ROW_COLUMNS = ["benchmark", "unit_id", "status", "attempt"]


def latest_attempts(table: pa.Table) -> pa.Table:
    """Keep, for every unit, its best row: an ok row if any, else the latest attempt (sorted by
    benchmark, then unit: each benchmark's rows are one contiguous slice)."""
    if table.num_rows == 0:
        return table
    return table.take(best_attempts_order(table))


def best_attempts_order(table: pa.Table) -> pa.Array:
    """The positions of `latest_attempts(table)`'s rows in `table`, in its order."""
    ok_rank = pc.equal(table["status"], "ok").cast(pa.int32())
    keys = pa.table({"benchmark": table["benchmark"] if "benchmark" in table.column_names else pa.nulls(table.num_rows),
                     "unit_id": table["unit_id"], "_ok": ok_rank, "attempt": table["attempt"]})
    order = pc.sort_indices(keys, sort_keys=[("benchmark", "ascending"), ("unit_id", "ascending"),
                                             ("_ok", "descending"), ("attempt", "descending")])
    ids = pc.take(table["unit_id"], order).combine_chunks()
    previous = pa.concat_arrays([pa.nulls(1, ids.type), ids.slice(0, len(ids) - 1)])
    first_of_unit = pc.fill_null(pc.not_equal(ids, previous), True)
    return pc.filter(order, first_of_unit)


def take_columns(columns: dict[str, pa.ChunkedArray], indices: pa.Array, schema: pa.Schema) -> pa.Table:
    """`Table.take(indices)` of the table of `columns` (`schema`), the dict emptied as it goes: each
    column is taken, then let go, so the rows read and their reordered copy are not both held whole
    (unless the caller holds them elsewhere)."""
    taken, freed = [], 0
    for name in schema.names:
        column = columns.pop(name)
        taken.append(column.take(indices))
        freed += column.nbytes
        del column
        if freed >= TRIM_BYTES:   # columns let go: their pages back to the system (a trim costs ~10 ms)
            pa.default_memory_pool().release_unused()
            freed = 0
    return pa.Table.from_arrays(taken, schema=schema)


TRIM_BYTES = 32 << 20
