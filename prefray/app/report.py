"""`prefray report RUN_DIR [--latex] [--markdown] [--out DIR]`

Writes each benchmark's headline table in its paper's layout (BenchPreS Table 1, CUPID Table 1,
PRISK Table 2) from the run's metrics.parquet: rows are the run's models, every cell the value with
its 95% cluster-bootstrap interval and n, a dash where the run has no such cell, † where units of the
cell got no answer. `--latex` writes NAME.tex (a booktabs `table*`), `--markdown` NAME.md (both when
neither is given), into DIR (default RUN_DIR/tables/).

A benchmark declares its tables as `paper_tables` on its object, or as `PAPER_TABLES` in a module
`paper_tables` beside it (prefray/benchmarks/*/paper_tables.py); see prefray.engine.results.paper_tables.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

from prefray.app.commands import Parser
from prefray.engine.flow.exits import EXIT_CONFIG, EXIT_OK

PROG_NAME = "prefray report"


def parser(prog: str) -> argparse.ArgumentParser:
    parser = Parser(prog, __doc__)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--latex", action="store_true", help="write NAME.tex for each table")
    parser.add_argument("--markdown", action="store_true", help="write NAME.md for each table")
    parser.add_argument("--out", type=Path, metavar="DIR", help="where to write (default RUN_DIR/tables/)")
    return parser


def paper_tables(benchmark: Any) -> tuple:
    """The tables a benchmark declares: its `paper_tables`, else PAPER_TABLES of its package's
    `paper_tables` module, else none."""
    declared = getattr(benchmark, "paper_tables", None)
    if declared is not None:
        return tuple(declared)
    package = type(benchmark).__module__.rpartition(".")[0]
    if not package:
        return ()
    try:
        module = importlib.import_module(f"{package}.paper_tables")
    except ModuleNotFoundError as exc:
        if exc.name != f"{package}.paper_tables":
            raise
        return ()
    return tuple(getattr(module, "PAPER_TABLES", ()))


def run(args: argparse.Namespace) -> int:
    import pyarrow.parquet as pq

    from prefray.app.compose import load_benchmarks
    from prefray.app.sweep import SweepError
    from prefray.engine.results.aggregate import write_atomic
    from prefray.engine.results.manifest import recorded_configs
    from prefray.engine.results.paper_tables import fill, latex, markdown
    from prefray.engine.rundir import RunDir

    paths = RunDir(args.run_dir)
    if not args.run_dir.is_dir() or not paths.manifest.exists():
        return _refuse(f"{args.run_dir}: not a prefray run directory (no manifest.json)")
    if not paths.metrics_parquet.exists():
        return _refuse(f"{args.run_dir}: no metrics.parquet; a finished launch writes it (rerun the run to aggregate)")
    try:
        benchmarks = load_benchmarks(recorded_configs(paths))
    except (SweepError, ValueError, KeyError) as exc:
        return _refuse(f"{args.run_dir}: cannot read its manifest: {str(exc).splitlines()[0]}")
    metrics = pq.read_table(paths.metrics_parquet)
    tables = {}
    for name in sorted(benchmarks):
        for table in paper_tables(benchmarks[name]):
            tables.setdefault(table.name, table)
    if not tables:
        return _refuse(f"{args.run_dir}: no benchmark of this run ({', '.join(sorted(benchmarks))}) declares a "
                       "paper table")
    formats = [f for f, chosen in (("latex", args.latex), ("markdown", args.markdown)) if chosen] or \
        ["latex", "markdown"]
    out = args.out or args.run_dir / "tables"
    out.mkdir(parents=True, exist_ok=True)
    for table in tables.values():
        rows = fill(table, metrics)
        if not rows:
            print(f"{table.title}: the run has none of its cells; not written")
            continue
        for kind in formats:
            path = out / f"{table.name}.{'tex' if kind == 'latex' else 'md'}"
            text = latex(table, rows) if kind == "latex" else markdown(table, rows)
            write_atomic(path, lambda p, text=text: p.write_text(text, encoding="utf-8"))
            print(f"wrote {path}")
    return EXIT_OK


def _refuse(message: str) -> int:
    print(f"{PROG_NAME}: {message}", file=sys.stderr)
    return EXIT_CONFIG
