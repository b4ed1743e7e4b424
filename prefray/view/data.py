"""What the viewer reads from a run directory, lazily: nothing is loaded before a page asks for it.

The overview reads only metrics.parquet and lists plots/. A cell's page filters and pages the job's
unit index (index.py: one file per job, built on the job's first visit). A unit's page reads the
rows of one instance and sample from the shard files the index points to, and the requests they
link to (RUN_DIR/requests/, by request_hash).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from prefray.engine.rundir import RunDir
from prefray.engine.rundir.shards import SHARD_SCHEMA
from prefray.view.index import PREVIEW_CHARS, SOURCE_COLUMNS, JobIndex, shard_files, signature, texts
from prefray.view.index import load as load_index

PAGE_SIZE = 50
FACET_COLUMNS = ["stage", "role", "status", "cause"]
RATIONALE = re.compile(r'"rationale": "(?:[^"\\]|\\.)*"(, )?')
MAX_FACET_VALUES = 40
MAX_DISTINCT_JSON = 5000
PLOT_SUFFIXES = (".svg", ".png")
LISTING_S = 1.0  # the run's listing of job folders and figures is read again after this long
FILTER_COLUMNS = {"stage", "role", "status", "cause"}


class UnknownCell(LookupError):
    """A request named something the run does not have (a cell, a filter value, a figure)."""


@dataclass(frozen=True)
class Cell:
    benchmark: str
    model: str
    condition: str
    judge: str = ""


Job = tuple[str, str, str]  # benchmark, model, condition: one folder of shards


@dataclass(frozen=True)
class CellQuery:
    """A cell and the filters of its units page (empty = no filter)."""

    cell: Cell
    stage: str = ""
    role: str = ""
    status: str = ""
    cause: str = ""
    verdict: str = ""   # "key=value" on the parsed answer (judge verdicts)
    meta: str = ""      # "key=value" on the unit's meta (category, domain, instance type …)
    q: str = ""         # case-insensitive text search in answers
    page: int = 0


@dataclass
class Page:
    rows: list[dict[str, Any]]
    total: int | None   # None: not counted yet (the job's index is being built)
    query: CellQuery


@dataclass
class Facets:
    columns: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    meta: list[tuple[str, int]] = field(default_factory=list)      # "key=value", rows
    verdict: list[tuple[str, int]] = field(default_factory=list)   # "key=value", rows


def _json_pair_regex(pair: str) -> str:
    """`key=value` (value in JSON; bare text is a string) → a regex for `"key": value` as json.dumps
    writes it."""
    key, _, value = pair.partition("=")
    try:
        literal = json.dumps(json.loads(value), ensure_ascii=False)
    except ValueError:
        literal = json.dumps(value, ensure_ascii=False)
    return re.escape(f"{json.dumps(key, ensure_ascii=False)}: {literal}") + r"(, |\}|$)"


def _scalar_pairs(text: str | None) -> list[str]:
    """Top-level short scalar fields of a JSON object as `key=value` (value in JSON)."""
    if not text:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        return []
    if not isinstance(value, dict):
        return []
    pairs = []
    for key, item in value.items():
        if key == "rationale" or isinstance(item, (dict, list)) or (isinstance(item, str) and len(item) > 60):
            continue
        pairs.append(f"{key}={json.dumps(item, ensure_ascii=False)}")
    return pairs


def strip_rationale(parsed: str | None) -> str | None:
    if parsed is None:
        return None
    return RATIONALE.sub("", parsed).replace(", }", "}")


class RunData:
    """A run directory, read on demand.

    With `wait_s` set (the server), a job whose index is not built yet gets it built in the
    background: a page waits for it at most `wait_s` seconds, then is served by a direct scan of
    the shards that stops once the page is full (no total, no filter choices until the index is
    ready). Without it (export, tests), the index is built before answering.
    """

    def __init__(self, run_dir: RunDir, wait_s: float | None = None):
        self.run_dir = run_dir.root
        self.paths = run_dir
        if not self.run_dir.is_dir():
            raise FileNotFoundError(f"run directory not found: {self.run_dir}")
        self.wait_s = wait_s
        self._listed: tuple[float, dict[Job, Path], dict[str, Path]] | None = None
        self._indexes: dict[Path, tuple[str, JobIndex]] = {}
        self._building: dict[tuple[Path, str], Future] = {}
        self._facets: dict[Cell, Facets] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="view-index")

    # -- overview -------------------------------------------------------------------------------
    def metrics(self) -> pa.Table:
        path = self.paths.metrics_parquet
        return pq.read_table(path) if path.exists() else pa.table({})

    def cell_costs(self) -> list[dict[str, Any]]:
        """Per cell (benchmark, model, condition, judge): dollars paid, the share of input tokens read
        from the provider's prompt cache and the dollars it saved, from calls.csv (empty if none)."""
        path = self.paths.calls_csv
        if not path.exists():
            return []
        import pyarrow.csv as pacsv

        calls = pacsv.read_csv(path)
        if "cache_read_tokens" not in calls.column_names or calls.num_rows == 0:
            return []
        keys = ["benchmark", "model", "condition", "judge"]
        grouped = calls.select(keys + ["input_tokens", "cost_usd", "cache_read_tokens", "cache_saved_usd"]).cast(
            pa.schema([*(pa.field(k, pa.string()) for k in keys), pa.field("input_tokens", pa.int64()),
                       pa.field("cost_usd", pa.float64()), pa.field("cache_read_tokens", pa.int64()),
                       pa.field("cache_saved_usd", pa.float64())]))
        grouped = grouped.group_by(keys).aggregate([(c, "sum") for c in ("input_tokens", "cost_usd",
                                                                          "cache_read_tokens", "cache_saved_usd")])
        out = []
        for row in grouped.sort_by([(k, "ascending") for k in keys]).to_pylist():
            inputs = row["input_tokens_sum"] or 0
            out.append({**{k: row[k] or "" for k in keys}, "cost_usd": row["cost_usd_sum"] or 0.0,
                        "cache_hit_rate": (row["cache_read_tokens_sum"] or 0) / inputs if inputs else 0.0,
                        "cache_saved_usd": row["cache_saved_usd_sum"] or 0.0})
        return out

    def deltas(self) -> pa.Table:
        """Paired differences with intervals (stats.DELTA_SCHEMA), when the run has them."""
        path = self.paths.deltas_parquet
        return pq.read_table(path) if path.exists() else pa.table({})

    def _listing(self) -> tuple[dict[Job, Path], dict[str, Path]]:
        """The run's own job folders (shards/benchmark=*/model=*/condition=*) and figure files
        (plots/*.svg|png), listed from the disk and read again after LISTING_S. Every path the
        viewer reads comes from here or from a job's index: never from a request's text."""
        now = time.monotonic()
        if self._listed is not None and now - self._listed[0] < LISTING_S:
            return self._listed[1], self._listed[2]
        jobs: dict[Job, Path] = {}
        for folder in sorted(self.paths.shards.glob("benchmark=*/model=*/condition=*")):
            if folder.is_dir():
                key = tuple(part.split("=", 1)[1] for part in (folder.parent.parent.name, folder.parent.name,
                                                               folder.name))
                jobs[key] = folder
        figures: dict[str, Path] = {}
        plots = self.paths.plots
        if plots.is_dir():
            figures = {p.name: p for p in sorted(plots.iterdir())
                       if p.suffix in PLOT_SUFFIXES and not p.name.startswith(".") and p.is_file()}
        self._listed = (now, jobs, figures)
        return jobs, figures

    def plots(self) -> list[Path]:
        """One file per figure under plots/ (SVG preferred when both formats exist)."""
        by_stem: dict[str, Path] = {}
        for path in self._listing()[1].values():
            current = by_stem.get(path.stem)
            if current is None or PLOT_SUFFIXES.index(path.suffix) < PLOT_SUFFIXES.index(current.suffix):
                by_stem[path.stem] = path
        return [by_stem[s] for s in sorted(by_stem)]

    def plot_file(self, name: str) -> Path | None:
        """The figure file the run's plots/ listing has under exactly this name."""
        return self._listing()[1].get(name)

    def cells(self) -> list[Cell]:
        """Every cell with metrics, plus every job folder (judge "") that has none."""
        found: set[Cell] = set()
        metrics = self.metrics()
        if metrics.num_rows:
            for row in metrics.select(["benchmark", "model", "condition", "judge"]).to_pylist():
                found.add(Cell(row["benchmark"], row["model"], row["condition"], row["judge"] or ""))
        jobs = {(c.benchmark, c.model, c.condition) for c in found}
        for key in self._listing()[0]:
            if key not in jobs:
                found.add(Cell(*key))
        return sorted(found, key=lambda c: (c.benchmark, c.model, c.condition, c.judge))

    def lookup(self, benchmark: str, model: str, condition: str, judge: str = "") -> Cell:
        """The run's own cell with these keys: a job folder of the run, and a judge its metrics or
        its stored rows name ("" = every row of the job). UnknownCell otherwise. The rows are
        checked once the job's index is built: until then (a first visit, see wait_s) a judge is let
        through, as it is only ever compared with the rows' values."""
        cell = Cell(benchmark, model, condition, judge)
        self.folder(cell)
        if judge and cell not in self.cells():
            index = self.index(Cell(benchmark, model, condition))
            if index is not None and judge not in set(index.table["judge"].unique().to_pylist()):
                raise UnknownCell(f"this cell has no judge {judge!r}")
        return cell

    def check_filters(self, query: CellQuery) -> None:
        """UnknownCell unless each filter's value is one the cell's rows have (checked once the
        job's index is built; the text search `q` is free text)."""
        if not any(getattr(query, name) for name in (*FILTER_COLUMNS, "verdict", "meta")):
            return
        facets = self.facets(query.cell)
        if not facets.columns:
            return
        for name in sorted(FILTER_COLUMNS):
            value = getattr(query, name)
            if value and value not in {v for v, _ in facets.columns.get(name, [])}:
                raise UnknownCell(f"no row of this cell has {name} {value!r}")
        for name in ("verdict", "meta"):
            value = getattr(query, name)
            if value and value not in {v for v, _ in getattr(facets, name)}:
                raise UnknownCell(f"{name} {value!r} is not one of this cell's filter choices")

    # -- a cell's units -------------------------------------------------------------------------
    def folder(self, cell: Cell) -> Path:
        """The job folder of the cell, as the run's listing has it (UnknownCell when it has none)."""
        folder = self._listing()[0].get((cell.benchmark, cell.model, cell.condition))
        if folder is None:
            raise UnknownCell(f"this run has no stored rows for benchmark {cell.benchmark!r}, model "
                              f"{cell.model!r}, condition {cell.condition!r}")
        return folder

    def index(self, cell: Cell) -> JobIndex | None:
        """The job's unit index; None while it is being built in the background (see wait_s)."""
        folder = self.folder(cell)
        stamp = signature(folder)
        with self._lock:
            cached = self._indexes.get(folder)
            if cached is not None and cached[0] == stamp:
                return cached[1]
            future = self._building.get((folder, stamp))
            if future is None:
                future = self._building[(folder, stamp)] = self._pool.submit(load_index, self.paths, folder)
        try:
            built = future.result(timeout=self.wait_s)
        except FutureTimeout:
            return None
        with self._lock:
            self._building.pop((folder, stamp), None)
            self._indexes[folder] = (stamp, built)
            job = (cell.benchmark, cell.model, cell.condition)
            self._facets = {c: f for c, f in self._facets.items() if (c.benchmark, c.model, c.condition) != job}
        return built

    @staticmethod
    def cell_expression(cell: Cell) -> ds.Expression:
        if not cell.judge:
            return ds.scalar(True)
        return (ds.field("role") == "subject") | (ds.field("judge") == cell.judge)

    @classmethod
    def query_expression(cls, query: CellQuery) -> ds.Expression:
        """The page's filters except the text search (which reads the answers from disk)."""
        expr = cls.cell_expression(query.cell)
        for name in FACET_COLUMNS:
            value = getattr(query, name)
            if value:
                expr &= ds.field(name) == value
        if query.verdict:
            expr &= pc.match_substring_regex(ds.field("verdict"), pattern=_json_pair_regex(query.verdict))
        if query.meta:
            expr &= pc.match_substring_regex(ds.field("meta_json"), pattern=_json_pair_regex(query.meta))
        return expr

    def cell_page(self, query: CellQuery, page_size: int = PAGE_SIZE) -> Page:
        index = self.index(query.cell)
        if index is None:
            return self._scanned_page(query, page_size)
        table = index.table.append_column("_position", pa.array(range(index.table.num_rows), pa.int64()))
        table = table.filter(self.query_expression(query))
        if query.q:
            found = pc.match_substring(texts(index).take(table["_position"]), pattern=query.q, ignore_case=True)
            table = table.filter(found.fill_null(False))
        rows = table.slice(query.page * page_size, page_size).drop_columns(["_position"]).to_pylist()
        return Page(rows, table.num_rows, query)

    def _scanned_page(self, query: CellQuery, page_size: int) -> Page:
        """A page straight from the shards, the filters pushed into the scan, stopped once full."""
        expr = self.query_expression(replace(query, verdict=""))
        if query.verdict:
            expr &= pc.match_substring_regex(ds.field("parsed_json"), pattern=_json_pair_regex(query.verdict))
        if query.q:
            expr &= pc.match_substring(ds.field("text"), pattern=query.q, ignore_case=True)
        dataset = ds.dataset(shard_files(self.folder(query.cell)), format="parquet", schema=SHARD_SCHEMA,
                             partitioning=None)
        skip, rows = query.page * page_size, []
        for batch in dataset.scanner(columns=SOURCE_COLUMNS, filter=expr, batch_size=4 * page_size).to_batches():
            if skip >= batch.num_rows:
                skip -= batch.num_rows
                continue
            rows += batch.slice(skip, page_size - len(rows)).to_pylist()
            skip = 0
            if len(rows) >= page_size:
                break
        for row in rows:
            text = row["text"] or ""
            row["preview"] = text[:PREVIEW_CHARS] + ("…" if len(text) > PREVIEW_CHARS else "")
            row["verdict"] = strip_rationale(row["parsed_json"]) if row["role"] != "subject" else None
        return Page(rows, None, query)

    def facets(self, cell: Cell) -> Facets:
        """Filter choices of a cell with their row counts (computed once per cell and index)."""
        index = self.index(cell)
        if index is None:
            return Facets()
        table = index.table
        if cell in self._facets:
            return self._facets[cell]
        table = table.filter(self.cell_expression(cell))
        facets = Facets()
        for name in FACET_COLUMNS:
            counts = pc.value_counts(table[name].drop_null()).to_pylist()
            facets.columns[name] = sorted((c["values"], c["counts"]) for c in counts if c["values"])
        facets.meta = _json_facet(table["meta_json"])
        facets.verdict = _json_facet(table["verdict"])
        self._facets[cell] = facets
        return facets

    # -- a unit ---------------------------------------------------------------------------------
    def _rows_where(self, cell: Cell, expr: ds.Expression) -> list[dict[str, Any]]:
        """Full stored rows matching `expr`, read only from the shard files the index points to
        (from every shard of the job while its index is being built)."""
        index, folder = self.index(cell), self.folder(cell)
        located = [] if index is None else sorted(set(index.table.filter(expr)["file"].to_pylist()))
        files = [str(folder / name) for name in located]
        if index is None or not all(os.path.exists(f) for f in files):
            files = shard_files(folder)
        if not files:
            return []
        dataset = ds.dataset(files, format="parquet", schema=SHARD_SCHEMA, partitioning=None)
        return dataset.to_table(filter=expr).to_pylist()

    def unit_rows(self, cell: Cell, unit_id: str) -> list[dict[str, Any]]:
        return sorted(self._rows_where(cell, ds.field("unit_id") == unit_id), key=lambda r: r["attempt"])

    def linked_rows(self, cell: Cell, instance_id: str, sample: int | None) -> list[dict[str, Any]]:
        """Every row of the same benchmark/model/condition, instance and sample (all stages, all judges)."""
        expr = ds.field("instance_id") == instance_id
        expr &= ds.field("sample").is_null() if sample is None else ds.field("sample") == sample
        rows = self._rows_where(cell, expr)
        return sorted(rows, key=lambda r: (r["role"] != "subject", r["stage"], r["judge"] or "", r["item"] or "",
                                           r["attempt"]))

    def requests(self, hashes: list[str]) -> dict[str, dict[str, Any]]:
        """Stored requests by hash (empty when the run keeps none: runs made before the store)."""
        folder = self.paths.requests
        wanted = sorted({h for h in hashes if h})
        if not wanted or not folder.is_dir():
            return {}
        files = sorted(str(p) for p in folder.rglob("*.parquet") if not p.name.startswith((".", "_")))
        if not files:
            return {}
        table = ds.dataset(files, format="parquet").to_table(filter=ds.field("request_hash").isin(wanted))
        return {row["request_hash"]: row for row in table.to_pylist()}


def _json_facet(column: pa.ChunkedArray | pa.Array) -> list[tuple[str, int]]:
    """`key=value` pairs of short top-level scalars across the distinct JSON objects of a column,
    weighted by rows; keys with more than MAX_FACET_VALUES values (ids, free text) are left out."""
    counts = pc.value_counts(column.drop_null()).to_pylist()[:MAX_DISTINCT_JSON]
    pairs: dict[str, int] = {}
    for entry in counts:
        for pair in _scalar_pairs(entry["values"]):
            pairs[pair] = pairs.get(pair, 0) + entry["counts"]
    by_key: dict[str, int] = {}
    for pair in pairs:
        key = pair.partition("=")[0]
        by_key[key] = by_key.get(key, 0) + 1
    return sorted((p, n) for p, n in pairs.items() if by_key[p.partition("=")[0]] <= MAX_FACET_VALUES)
