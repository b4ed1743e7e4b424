"""All shards of a run → long-format metrics (CSV, Parquet, Markdown) and a calls summary."""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from prefray.engine.benchmark import METRIC_SCHEMA, Benchmark
from prefray.engine.config.schema import BenchmarkSettings
from prefray.engine.logs import STDOUT
from prefray.engine.results.heap import give_back, heap_reused
from prefray.engine.results.protocol_metrics import no_answer_units, outcome_metrics
from prefray.engine.results.stats import add_intervals, rows_by_benchmark
from prefray.engine.rundir import RunDir
from prefray.engine.rundir.diskfull import writing
from prefray.engine.rundir.paid import SENT, read_paid
from prefray.engine.rundir.shards import SHARD_SCHEMA, best_attempts_order, decoded, read_rows, take_columns
from prefray.engine.sweep import Sweep

CALLS_SCHEMA = pa.schema([
    ("benchmark", pa.string()), ("model", pa.string()), ("condition", pa.string()), ("stage", pa.string()),
    ("judge", pa.string()), ("ok", pa.int64()), ("failed", pa.int64()), ("skipped", pa.int64()),
    ("input_tokens", pa.int64()), ("output_tokens", pa.int64()), ("cost_usd", pa.float64()),
    # prompt caching: input tokens read from and written to the provider's cache, the share of
    # input read from it, and what it saved (negative: writes cost more than reads saved)
    ("cache_read_tokens", pa.int64()), ("cache_write_tokens", pa.int64()), ("cache_hit_rate", pa.float64()),
    ("cache_saved_usd", pa.float64()),
])
CACHE_SUMS = ("cache_read_tokens", "cache_write_tokens", "cache_saved_usd")

log = logging.getLogger(__name__)


def compute_metrics(rows: pa.Table, benchmarks: dict[str, Benchmark],
                    settings: dict[str, BenchmarkSettings]) -> pa.Table:
    """Each benchmark's metrics over the best attempt of every unit."""
    tables = [METRIC_SCHEMA.empty_table()]
    for name, part in rows_by_benchmark(rows).items():
        if name not in benchmarks:
            continue
        benchmark = benchmarks[name]
        tables.append(benchmark.metrics(part, settings.get(name) or benchmark.settings_of({})).cast(METRIC_SCHEMA))
    return sort_metrics(pa.concat_tables(tables))


def sort_metrics(table: pa.Table) -> pa.Table:
    return table.sort_by([("benchmark", "ascending"), ("model", "ascending"), ("condition", "ascending"),
                          ("judge", "ascending"), ("metric", "ascending")])


def summarize_calls(rows: pa.Table) -> pa.Table:
    """Per job and stage: units ok / failed / skipped, tokens and cost (best attempt per unit)."""
    if rows.num_rows == 0:
        return CALLS_SCHEMA.empty_table()
    keys = ["benchmark", "model", "condition", "stage", "judge"]
    flags = {s: pc.equal(rows["status"], s).cast(pa.int64()) for s in ("ok", "failed", "skipped")}
    table = with_cache_columns(rows).select(keys + ["input_tokens", "output_tokens", "cost_usd", *CACHE_SUMS])
    for status, flag in flags.items():
        table = table.append_column(status, flag)
    grouped = table.group_by(keys).aggregate([(c, "sum") for c in ("ok", "failed", "skipped", "input_tokens",
                                                                   "output_tokens", "cost_usd", *CACHE_SUMS)])
    grouped = with_hit_rate(grouped.rename_columns([c.removesuffix("_sum") for c in grouped.column_names]))
    return grouped.select(CALLS_SCHEMA.names).cast(CALLS_SCHEMA).sort_by([(k, "ascending") for k in keys])


def with_cache_columns(table: pa.Table) -> pa.Table:
    """`table` with its prompt-cache columns, nulls (rows or tries recorded before they were) as 0."""
    for name in CACHE_SUMS:
        kind = pa.float64() if name.endswith("_usd") else pa.int64()
        if name in table.column_names:
            table = table.set_column(table.column_names.index(name), name,
                                     pc.fill_null(table[name].cast(kind), pa.scalar(0, kind)))
        else:
            table = table.append_column(name, pa.array(np.zeros(table.num_rows), kind))
    return table


def with_hit_rate(table: pa.Table) -> pa.Table:
    """Grouped sums with `cache_hit_rate`: input tokens read from the cache over all input tokens."""
    inputs = table["input_tokens"].to_numpy(zero_copy_only=False).astype(float)
    reads = table["cache_read_tokens"].to_numpy(zero_copy_only=False).astype(float)
    rate = np.divide(reads, inputs, out=np.zeros_like(reads), where=inputs > 0)
    return table.append_column("cache_hit_rate", pa.array(rate, pa.float64()))


LEDGER_KEYS = ["provider", "model_id", "stage"]
LEDGER_SUMS = ("calls", "cached", "unsettled", "input_tokens", "output_tokens", "cost_usd", *CACHE_SUMS)
NOT_STORED = "(not stored)"
PAID_COLUMNS = ["provider", "model_id", "request_hash", "outcome", "input_tokens", "output_tokens", "cost_usd",
                *CACHE_SUMS]


def ledger(rows: pa.Table, paid: pa.Table | None = None) -> pa.Table:
    """What was paid, by provider, model id and stage.

    `paid` is the gateways' own record (engine/rundir/paid.py): every try sent to a provider, with the
    usage it reported, stored row or not; its stage is that of the stored row with the same
    request (NOT_STORED when none was written). `cached` counts rows answered from the cache.
    Runs without that record fall back to the stored rows (every attempt counts: each was paid)."""
    rows = with_cache_columns(rows)
    if paid is None:
        return _ledger_from_rows(rows)
    paid = with_cache_columns(paid)
    stored, paid_keys, space = _request_codes(rows, paid)
    paid = paid.drop_columns(["request_hash"])   # coded: its strings are freed now
    first_row = _first_positions(stored, space)[np.maximum(paid_keys, 0)]   # of the request's first stored row
    first_row[paid_keys < 0] = -1
    sent = pc.equal(paid["outcome"], SENT).cast(pa.int64())
    zeros = pa.array(np.zeros(paid.num_rows, dtype=np.int64))
    table = pa.table({
        "provider": paid["provider"], "model_id": paid["model_id"],
        "stage": pc.fill_null(pc.take(rows["stage"], pa.array(first_row, mask=first_row < 0)), NOT_STORED),
        "calls": sent, "cached": zeros,
        "unsettled": pc.subtract(pc.multiply(sent, 2), 1),   # +1 per try sent, -1 per try ended
        "input_tokens": paid["input_tokens"], "output_tokens": paid["output_tokens"], "cost_usd": paid["cost_usd"],
        **{name: paid[name] for name in CACHE_SUMS},
    })
    cached = rows.filter(rows["cached"].fill_null(False))
    none = pa.array(np.zeros(cached.num_rows, dtype=np.int64))
    hits = pa.table({
        "provider": cached["provider"], "model_id": cached["model_id"], "stage": cached["stage"],
        "calls": none, "cached": pa.array(np.ones(cached.num_rows, dtype=np.int64)), "unsettled": none,
        "input_tokens": none, "output_tokens": none, "cost_usd": pa.array(np.zeros(cached.num_rows)),
        "cache_read_tokens": none, "cache_write_tokens": none, "cache_saved_usd": pa.array(np.zeros(cached.num_rows)),
    })
    # rows paid through another path than a gateway (e.g. a provider's batch API): from the rows
    elsewhere = _first_positions(paid_keys, space)[np.maximum(stored, 0)] < 0
    elsewhere[stored < 0] = True
    others = _ledger_rows(rows.filter(pa.array(elsewhere)), with_cached=False)
    order = LEDGER_KEYS + list(LEDGER_SUMS)
    return _grouped(pa.concat_tables([t.select(order) for t in (table, hits, others)]))


def _request_codes(rows: pa.Table, paid: pa.Table) -> tuple[np.ndarray, np.ndarray, int]:
    """One integer in [0, space) per (request_hash, model_id) of every stored row and every paid
    try, equal where both are equal, -1 where either is null (it matches nothing); and `space`."""
    hashes, n_hashes = _codes(rows["request_hash"], paid["request_hash"])
    models, n_models = _codes(rows["model_id"], paid["model_id"])
    joint = np.where((hashes < 0) | (models < 0), -1, hashes * max(n_models, 1) + models)
    space = n_hashes * max(n_models, 1)
    if space > 4 * len(joint):   # many model ids: renumber the pairs that occur densely
        valid = joint >= 0
        distinct, joint[valid] = np.unique(joint[valid], return_inverse=True)
        space = len(distinct)
    return joint[:rows.num_rows], joint[rows.num_rows:], space


def _codes(*columns: pa.ChunkedArray) -> tuple[np.ndarray, int]:
    """The values of `columns`, end to end, as indices into one dictionary (-1 for null), and its size."""
    chunks = [chunk for column in columns for chunk in column.chunks]
    if not chunks:
        return np.zeros(0, dtype=np.int64), 0
    encoded = pc.dictionary_encode(pa.chunked_array(chunks, type=pa.string()))
    indices = [np.asarray(chunk.indices.fill_null(-1), dtype=np.int64) for chunk in encoded.chunks]
    return np.concatenate(indices), len(encoded.chunks[0].dictionary)


def _first_positions(keys: np.ndarray, space: int) -> np.ndarray:
    """For every key in [0, space): the position of its first occurrence in `keys`, -1 if none."""
    first = np.full(space, -1, dtype=np.int64)
    positions = np.flatnonzero(keys >= 0)[::-1]
    first[keys[positions]] = positions   # of repeated keys, the last assignment (the first row) stays
    return first


def _ledger_from_rows(rows: pa.Table) -> pa.Table:
    if rows.num_rows == 0:
        return pa.table({k: pa.array([], pa.string()) for k in LEDGER_KEYS})
    return _grouped(_ledger_rows(rows, with_cached=True))


def _ledger_rows(rows: pa.Table, with_cached: bool) -> pa.Table:
    """Ledger entries from stored rows (every attempt was paid unless cached or skipped)."""
    cached = rows["cached"].fill_null(False)
    if not with_cached:
        rows = rows.filter(pc.invert(cached))
        cached = rows["cached"].fill_null(False)
    sent = pc.and_(pc.invert(cached), pc.not_equal(rows["status"], "skipped"))
    table = rows.select(LEDGER_KEYS + ["input_tokens", "output_tokens", "cost_usd", *CACHE_SUMS])
    table = table.append_column("calls", sent.cast(pa.int64()))
    table = table.append_column("cached", cached.cast(pa.int64()))
    table = table.append_column("unsettled", pa.array(np.zeros(rows.num_rows, dtype=np.int64)))
    return table.select(LEDGER_KEYS + list(LEDGER_SUMS))


def _grouped(table: pa.Table) -> pa.Table:
    if table.num_rows == 0:
        return pa.table({k: pa.array([], pa.string()) for k in LEDGER_KEYS})
    grouped = table.group_by(LEDGER_KEYS, use_threads=False).aggregate([(c, "sum") for c in LEDGER_SUMS])
    grouped = with_hit_rate(grouped.rename_columns([c.removesuffix("_sum") for c in grouped.column_names]))
    return grouped.select(LEDGER_KEYS + list(LEDGER_SUMS) + ["cache_hit_rate"]).sort_by(
        [(k, "ascending") for k in LEDGER_KEYS])


def with_completeness(metrics: pa.Table, best: pa.Table) -> pa.Table:
    """Mark each metric row with its cell's units that got no answer (failure policy: excluded,
    the cell is incomplete until a rerun answers them). A metric row whose condition is no job of
    its own (a benchmark that splits one job's results by condition, or fits across conditions)
    takes the count of every job of its benchmark × model."""
    missing = no_answer_units(best)
    per_model: dict[tuple[str, str], int] = {}
    for (benchmark, model, _), count in missing.items():
        per_model[(benchmark, model)] = per_model.get((benchmark, model), 0) + count
    counts = [missing[(b, m, c)] if (b, m, c) in missing else per_model.get((b, m), 0) for b, m, c in zip(
        *(metrics[k].to_pylist() for k in ("benchmark", "model", "condition")))]
    return metrics.append_column("incomplete_units", pa.array(counts, pa.int64())).append_column(
        "complete", pa.array([n == 0 for n in counts], pa.bool_()))


# What no metric, summary or ledger reads: left on disk when a run is aggregated.
UNREAD_COLUMNS = ("seed", "model_version", "params_json", "error", "finish_reason", "tries", "latency_s",
                  "started_at", "finished_at")
AGGREGATED_COLUMNS = [name for name in SHARD_SCHEMA.names if name not in UNREAD_COLUMNS]
# Read for every row; `text` (the bulk of a run) only for the rows whose metrics read it.
NARROW_COLUMNS = [name for name in AGGREGATED_COLUMNS if name != "text"]
TEXT_KEYS = ["unit_id", "attempt", "status"]
# Read dictionary-encoded, reordered as such and decoded after: columns of repeated values that
# neither the ledger nor the best attempts' sort reads (at 1M rows, reading and reordering every
# column took 2.2 s and 1.19 GB at the peak with them as strings, 1.85 s and 0.83 GB so).
ENCODED_COLUMNS = ["model", "condition", "role", "judge", "instance_id", "item", "meta_json", "cause", "parsed_json"]
# What `ledger` reads of the stored rows.
LEDGER_COLUMNS = ["provider", "model_id", "stage", "request_hash", "cached", "status", "input_tokens",
                  "output_tokens", "cost_usd", *CACHE_SUMS]


def text_needed(best: pa.Table, benchmarks: dict[str, Benchmark]) -> pa.Array:
    """True for each row of `best` whose text a metric reads: the rows a benchmark's `text_needed`
    names (by default every row), no row of a benchmark not aggregated."""
    needed = np.zeros(best.num_rows, dtype=bool)
    for name, (part, positions) in benchmark_parts(best).items():
        if name in benchmarks:
            flags = pc.fill_null(benchmarks[name].text_needed(part), False).to_numpy(zero_copy_only=False)
            needed[positions[flags]] = True
    return pa.array(needed)


def benchmark_parts(rows: pa.Table) -> dict[str, tuple[pa.Table, np.ndarray]]:
    """Each benchmark's rows and their positions in `rows`: a slice, not a copy, where they are
    contiguous (rows sorted by benchmark, as `latest_attempts` leaves them)."""
    names = rows["benchmark"]
    if names.null_count == 0 and len(names):
        runs = pc.run_end_encode(names.combine_chunks())
        values = runs.values.to_pylist()
        if len(set(values)) == len(values):   # one contiguous run per benchmark
            ends = runs.run_ends.to_pylist()
            return {name: (rows.slice(start, end - start), np.arange(start, end))
                    for name, start, end in zip(values, [0, *ends[:-1]], ends)}
    out = {}
    for name in pc.unique(names).drop_null().to_pylist():
        positions = pc.indices_nonzero(pc.fill_null(pc.equal(names, name), False))
        out[name] = (rows.take(positions), positions.to_numpy())
    return out


def with_text(run_dir: RunDir, best: pa.Table, needed: pa.Array) -> pa.Table:
    """`best` with a `text` column: the stored text of the rows `needed` marks, null elsewhere."""
    positions = pc.indices_nonzero(needed)
    if len(positions) == 0:
        return best.append_column("text", pa.nulls(best.num_rows, pa.string()))
    wanted = best.select(TEXT_KEYS).take(positions).append_column("_position", positions.cast(pa.int64()))
    units = pc.unique(wanted["unit_id"])
    texts = read_rows(run_dir, filter_expr=ds.field("unit_id").isin(units), columns=[*TEXT_KEYS, "text"])
    texts = texts.group_by(TEXT_KEYS, use_threads=False).aggregate([("text", "first")])  # one per row key
    found = wanted.join(texts, TEXT_KEYS, join_type="left outer").sort_by("_position")
    where = pc.if_else(needed, pc.subtract(pc.cumulative_sum(needed.cast(pa.int64())), 1), pa.scalar(None, pa.int64()))
    return best.append_column("text", pc.take(found["text_first"], where))


def best_rows_and_ledger(run_dir: RunDir) -> tuple[pa.Table, pa.Table]:
    """The best attempt of every unit (`latest_attempts`) and the ledger of every attempt, from one
    read of the stored rows. On a thread beside them (mostly Arrow's C++ code, which runs without
    the GIL), the paid record is read while the stored rows are, then the ledger computed while the
    best attempts are sorted out. The rows are reordered one column at a time, each read column let
    go once taken; the ENCODED_COLUMNS are reordered as dictionary indices and decoded after."""
    with ThreadPoolExecutor(1) as pool:
        paid = pool.submit(read_paid, run_dir, PAID_COLUMNS)
        all_rows = read_rows(run_dir, columns=NARROW_COLUMNS, encoded=ENCODED_COLUMNS)
        costs = pool.submit(lambda rows: ledger(rows, paid.result()), all_rows.select(LEDGER_COLUMNS))
        if all_rows.num_rows == 0:
            return decoded(all_rows), costs.result()
        order = best_attempts_order(all_rows)
        columns, schema = dict(zip(all_rows.column_names, all_rows.columns)), all_rows.schema
        del all_rows   # only the best attempt of every unit from here on
        best = decoded(take_columns(columns, order, schema))
        costs = costs.result()
    pa.default_memory_pool().release_unused()   # hand the freed attempts' memory back to the system
    return best, costs


def within_asked(best: pa.Table, asked: dict[tuple[str, str, str], dict[tuple[str, str], set[str]]]
                 ) -> tuple[pa.Table, int]:
    """The rows of each (benchmark, model, condition) folder and (stage, judge) in `asked` that are
    among its units (every other row as it is), and how many were left out."""
    if not asked or not best.num_rows:
        return best, 0
    keep = pa.array([True] * best.num_rows)
    for (benchmark, model, condition), stages in asked.items():
        cell = pc.and_(pc.and_(pc.equal(best["benchmark"], benchmark), pc.equal(best["model"], model)),
                       pc.equal(best["condition"], condition))
        for (stage, judge), units in stages.items():
            ran = pc.and_(cell, pc.and_(pc.equal(best["stage"], stage), pc.equal(best["judge"], judge)))
            outside = pc.and_(ran, pc.invert(pc.is_in(best["unit_id"], pa.array(sorted(units), pa.string()))))
            keep = pc.and_(keep, pc.invert(outside))
    kept = best.filter(keep)
    return kept, best.num_rows - kept.num_rows


def aggregate_sweep(sweep: Sweep,
                    asked: dict[tuple[str, str, str], dict[tuple[str, str], set[str]]] | None = None) -> pa.Table:
    """aggregate_run over the sweep's run dir, with its benchmarks, their settings, its budget and its
    run.plots / run.figures / run.panel choices."""
    run = sweep.run
    return aggregate_run(sweep.run_dir, sweep.benchmarks, {j.benchmark: j.settings for j in sweep.job_list},
                         run.budget_usd, plots=run.plots, figures=run.figures,
                         panels=sweep.panels() if run.panel else None, asked=asked)


@heap_reused()
def aggregate_run(paths: RunDir, benchmarks: dict[str, Benchmark], settings: dict[str, dict[str, Any]],
                  budget_usd: float | None = None, quiet: bool = False, plots: bool = True,
                  seed: int = 0, figures: str = "headline", panels: dict[str, list[str]] | None = None,
                  asked: dict[tuple[str, str, str], dict[tuple[str, str], set[str]]] | None = None) -> pa.Table:
    """Write metrics.{csv,parquet,md} (with bootstrap CIs, seeded by `seed`), deltas.{csv,parquet},
    calls.csv, costs.csv, judge_agreement.csv and plots/ (`figures`: headline, all or none; `plots`
    False: none); print a summary. `panels` (benchmark → its judges): each benchmark's panel verdicts
    join the rows, as one more judge (agreement.panel_rows). `asked` (a resumed job folder → its
    stages and judges the launch ran → the units it built): those rows cover only these units; the line
    before the summary says how many stored rows were left out (costs count every try paid)."""
    give_back()   # what the calls freed (a launch aggregates in the process that ran them) goes back first
    best, costs = best_rows_and_ledger(paths)
    best, left_out = within_asked(best, asked or {})
    draw = plots and figures != "none"
    drawing = early_drawing_pool(best.num_rows) if draw else None
    try:
        metrics, calls = _aggregate(paths, best, costs, benchmarks, settings, budget_usd, seed, panels)
        if draw:
            from prefray.engine.results.plots import condition_orders, figure_specs, write_plots

            write_plots(paths, metrics, figure_specs(benchmarks), condition_orders(benchmarks),
                        breakdowns=figures == "all", pool=drawing)
    finally:
        if drawing is not None:
            drawing.shutdown(cancel_futures=True)
    if not quiet and log.isEnabledFor(logging.INFO):   # the summary shows at the info level (not --quiet)
        from prefray.engine.results.report import print_summary

        if left_out:
            log.info(f"prefray: metrics over what this launch asked for: {left_out} stored row(s) of other "
                     "instances or samples (a larger limit or benchmark.samples before) left out; they stay stored",
                     extra=STDOUT)
        print_summary(metrics, calls, costs, budget_usd)
        log.info(f"metrics: {paths.metrics_csv}  {paths.metrics_md}", extra=STDOUT)
    return metrics


# From this many rows a run's metrics take long enough (~0.5 s per 100k rows) for a drawing process
# started when they begin to be ready when its figures are.
EARLY_DRAWING_ROWS = 100_000


def early_drawing_pool(rows: int) -> Any:
    """A drawing process started now (plots.drawing_pool) for a run of `rows` rows on a machine with
    more than one core, else None (the figures start their processes, if any, themselves)."""
    if rows < EARLY_DRAWING_ROWS or (os.cpu_count() or 1) < 2:
        return None
    from prefray.engine.results.plots import drawing_pool

    return drawing_pool()


def _aggregate(paths: RunDir, best: pa.Table, costs: pa.Table, benchmarks: dict[str, Benchmark],
               settings: dict[str, BenchmarkSettings], budget_usd: float | None, seed: int,
               panels: dict[str, list[str]] | None) -> tuple[pa.Table, pa.Table]:
    """aggregate_run's tables from the best attempts and the ledger: (metrics, calls summary)."""
    from prefray.engine.results.agreement import (
        judge_agreement,
        judge_values,
        judged_by_several,
        panel_rows,
        without_panels,
    )
    from prefray.engine.results.report import render_markdown

    best = with_text(paths, best, text_needed(best, benchmarks))
    give_back()   # between the steps, each one's freed memory goes back to the system (heap.py)
    calls = summarize_calls(best)
    judged = best
    if panels:
        best = pa.concat_tables([without_panels(best), panel_rows(best, panels)])
    metrics = pa.concat_tables([compute_metrics(best, benchmarks, settings), outcome_metrics(best)])
    give_back()
    metrics = with_completeness(sort_metrics(metrics), best)
    metrics = add_intervals(paths, metrics, best, benchmarks, settings, seed=seed)
    give_back()
    agreement = judge_agreement(judge_values(judged_by_several(without_panels(judged))), seed=seed)
    present = set(metrics["benchmark"].to_pylist())
    notes = [note for name in sorted(benchmarks) if name in present
             for note in benchmarks[name].notes(metrics.filter(pc.equal(metrics["benchmark"], name)))]
    write_outputs(paths, metrics, calls, render_markdown(metrics, calls, costs, agreement, budget_usd, notes))
    write_atomic(paths.costs_csv, lambda p: pacsv.write_csv(costs, p))
    write_atomic(paths.judge_agreement_csv, lambda p: pacsv.write_csv(agreement, p))
    return metrics, calls


def write_atomic(path: Path, write) -> None:
    temp = path.with_name(f".{path.name}.tmp")
    try:
        with writing(path):
            write(temp)
            os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def write_outputs(paths: RunDir, metrics: pa.Table, calls: pa.Table, markdown: str) -> None:
    write_atomic(paths.metrics_parquet, lambda p: pq.write_table(metrics, p))
    write_atomic(paths.metrics_csv, lambda p: pacsv.write_csv(metrics, p))
    write_atomic(paths.calls_csv, lambda p: pacsv.write_csv(calls, p))
    write_atomic(paths.metrics_md, lambda p: p.write_text(markdown, encoding="utf-8"))
