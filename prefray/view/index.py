"""A job's unit index: the columns a units page lists and filters on, one file per job folder.

Scanning a job's shards costs per file (a run of 16-row shards has thousands), so the first visit
of a job reads its shards once and writes `RUN_DIR/.view/<job>.parquet`: one row per stored row
with its ids, stage, role, judge, status, cause, finish reason, verdict (the parsed answer without
its rationale), meta, answer text and preview, and the shard file it lives in (relative to the
job folder). Later pages filter
and page this one file in memory (the answer text stays on disk and is read only for a search),
and a transcript reads only the shard files its rows live in. The index is rebuilt when the job
folder changes (its modification time: shards are renamed into it) and kept in a temporary
folder when the run directory is read-only.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from prefray.engine.rundir import RunDir
from prefray.engine.rundir.shards import SHARD_SCHEMA
from prefray.engine.rundir.shards import shard_files as stored_files

RATIONALE_PATTERN = r'"rationale": "(?:[^"\\]|\\.)*"(, )?'
PREVIEW_CHARS = 240
SOURCE_COLUMNS = ["unit_id", "attempt", "stage", "role", "judge", "instance_id", "item", "sample", "status",
                  "cause", "finish_reason", "truncated", "parsed_json", "meta_json", "text"]
SIGNATURE_KEY = b"prefray.view.signature"


@dataclass
class JobIndex:
    path: Path           # the index file (has the `text` column)
    table: pa.Table      # every index column except `text`


def shard_files(folder: Path) -> list[str]:
    """The job folder's files holding rows (files a large file absorbed left out)."""
    return stored_files(folder)


def signature(folder: Path) -> str:
    """Changes whenever a shard is added to or removed from the job folder."""
    if not folder.is_dir():
        return "missing"
    stamps = [folder.stat().st_mtime_ns] + [p.stat().st_mtime_ns for p in folder.iterdir() if p.is_dir()]
    return ":".join(str(s) for s in stamps)


def index_path(run_dir: RunDir, folder: Path) -> Path:
    name = hashlib.sha1(str(folder.relative_to(run_dir.root)).encode()).hexdigest()[:16] + ".parquet"
    target = run_dir.view_index
    try:
        target.mkdir(exist_ok=True)
        if os.access(target, os.W_OK):
            return target / name
    except OSError:
        pass
    fallback = Path(tempfile.gettempdir()) / "prefray-view" / hashlib.sha1(str(run_dir.root).encode()).hexdigest()[:12]
    fallback.mkdir(parents=True, exist_ok=True)
    return fallback / name


def _derived(table: pa.Table, files: pa.Array) -> pa.Table:
    """Shard columns → index columns: verdict without rationale, preview, the row's shard file."""
    judged = pc.not_equal(table["role"], "subject")
    stripped = pc.replace_substring(
        pc.replace_substring_regex(table["parsed_json"], pattern=RATIONALE_PATTERN, replacement=""),
        pattern=", }", replacement="}")
    verdict = pc.if_else(judged, stripped, pa.scalar(None, pa.string()))
    text = table["text"].fill_null("")
    preview = pc.utf8_slice_codeunits(text, 0, PREVIEW_CHARS)
    long = pc.greater(pc.utf8_length(text), PREVIEW_CHARS)
    preview = pc.if_else(long, pc.binary_join_element_wise(preview, "…", ""), preview)
    return (table.drop_columns(["parsed_json"]).append_column("verdict", verdict)
            .append_column("preview", preview).append_column("file", files))


def build(folder: Path, target: Path, stamp: str) -> None:
    dataset = ds.dataset(shard_files(folder), format="parquet", schema=SHARD_SCHEMA, partitioning=None)
    batches, paths, counts = [], [], []
    for tagged in dataset.scanner(columns=SOURCE_COLUMNS).scan_batches():
        batches.append(tagged.record_batch)
        paths.append(os.path.relpath(tagged.fragment.path, folder))  # the run dir may move
        counts.append(tagged.record_batch.num_rows)
    schema = pa.schema([SHARD_SCHEMA.field(name) for name in SOURCE_COLUMNS])
    table = pa.Table.from_batches(batches, schema=schema)
    files = pa.DictionaryArray.from_arrays(pa.array(np.repeat(np.arange(len(paths)), counts), pa.int32()),
                                           pa.array(paths, pa.string())).cast(pa.string())
    table = _derived(table, files).replace_schema_metadata({SIGNATURE_KEY: stamp.encode()})
    temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    pq.write_table(table, temp, compression="zstd")
    os.replace(temp, target)


def load(run_dir: RunDir, folder: Path) -> JobIndex:
    """The job's index, built (or rebuilt) first when missing or out of date."""
    stamp = signature(folder)
    target = index_path(run_dir, folder)
    current = None
    if target.exists():
        metadata = pq.read_schema(target).metadata or {}
        current = metadata.get(SIGNATURE_KEY, b"").decode()
    if current != stamp:
        build(folder, target, stamp)
    columns = [n for n in pq.read_schema(target).names if n != "text"]
    return JobIndex(target, pq.read_table(target, columns=columns))


def texts(index: JobIndex) -> pa.ChunkedArray:
    return pq.read_table(index.path, columns=["text"])["text"]
