"""All shards of a run → long-format metrics (CSV, Parquet, Markdown) and a calls summary."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from prefray.engine.benchmark import METRIC_SCHEMA, Benchmark
from prefray.engine.store import latest_attempts, read_rows

CALLS_SCHEMA = pa.schema([
    ("benchmark", pa.string()), ("model", pa.string()), ("condition", pa.string()), ("stage", pa.string()),
    ("judge", pa.string()), ("ok", pa.int64()), ("failed", pa.int64()), ("skipped", pa.int64()),
    ("input_tokens", pa.int64()), ("output_tokens", pa.int64()), ("cost_usd", pa.float64()),
])


def compute_metrics(run_dir: Path, benchmarks: dict[str, Benchmark], settings: dict[str, dict[str, Any]]) -> pa.Table:
    rows = latest_attempts(read_rows(run_dir))
    tables = [METRIC_SCHEMA.empty_table()]
    for name in sorted(set(rows["benchmark"].to_pylist())):
        if name not in benchmarks:
            continue
        part = rows.filter(pc.equal(rows["benchmark"], name))
        tables.append(benchmarks[name].metrics(part, settings.get(name, {})).cast(METRIC_SCHEMA))
    table = pa.concat_tables(tables)
    return table.sort_by([("benchmark", "ascending"), ("model", "ascending"), ("condition", "ascending"),
                          ("judge", "ascending"), ("metric", "ascending")])


def summarize_calls(run_dir: Path) -> pa.Table:
    """Per job and stage: units ok / failed / skipped, tokens and cost (best attempt per unit)."""
    rows = latest_attempts(read_rows(run_dir))
    if rows.num_rows == 0:
        return CALLS_SCHEMA.empty_table()
    keys = ["benchmark", "model", "condition", "stage", "judge"]
    flags = {s: pc.equal(rows["status"], s).cast(pa.int64()) for s in ("ok", "failed", "skipped")}
    table = rows.select(keys + ["input_tokens", "output_tokens", "cost_usd"])
    for status, flag in flags.items():
        table = table.append_column(status, flag)
    grouped = table.group_by(keys).aggregate([(c, "sum") for c in
                                              ("ok", "failed", "skipped", "input_tokens", "output_tokens", "cost_usd")])
    grouped = grouped.rename_columns([c.removesuffix("_sum") for c in grouped.column_names])
    return grouped.select(CALLS_SCHEMA.names).cast(CALLS_SCHEMA).sort_by([(k, "ascending") for k in keys])


def write_atomic(path: Path, write) -> None:
    temp = path.with_name(f".{path.name}.tmp")
    write(temp)
    os.replace(temp, path)


def write_outputs(run_dir: Path, metrics: pa.Table, calls: pa.Table, markdown: str) -> None:
    run_dir = Path(run_dir)
    write_atomic(run_dir / "metrics.parquet", lambda p: pq.write_table(metrics, p))
    write_atomic(run_dir / "metrics.csv", lambda p: pacsv.write_csv(metrics, p))
    write_atomic(run_dir / "calls.csv", lambda p: pacsv.write_csv(calls, p))
    write_atomic(run_dir / "metrics.md", lambda p: p.write_text(markdown, encoding="utf-8"))
