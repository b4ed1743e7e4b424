"""`prefray report RUN_DIR [--latex] [--markdown] [--out DIR]`

Writes each benchmark's headline table in its paper's layout (BenchPreS Table 1, CUPID Table 1,
PRISK Tables 2 and 4) from the run's metrics.parquet (a paired-difference column from deltas.parquet):
rows are the run's models, every cell the value with
its 95% cluster-bootstrap interval and n, a dash where the run has no such cell, † where units of the
cell got no answer. `--latex` writes NAME.tex (a booktabs `table*`), `--markdown` NAME.md (both when
neither is given), into DIR (default RUN_DIR/tables/). A table that marks rows by the model's
config (BenchPreS Table 1: * on non-reasoning models, `reasoning: false`) reads the configs the run
recorded.

A benchmark declares its tables as `paper_tables` on its object (`Benchmark.paper_tables`, of
`prefray.sdk.tables.PaperTable`); see prefray.engine.results.paper_tables.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from prefray.app.commands import Parser, run_dir_argument
from prefray.engine.flow.exits import EXIT_CONFIG, EXIT_OK

PROG_NAME = "prefray report"


def parser(prog: str) -> argparse.ArgumentParser:
    parser = Parser(prog, __doc__)
    parser.add_argument("run_dir", type=run_dir_argument)
    parser.add_argument("--latex", action="store_true", help="write NAME.tex for each table")
    parser.add_argument("--markdown", action="store_true", help="write NAME.md for each table")
    parser.add_argument("--out", type=Path, metavar="DIR", help="where to write (default RUN_DIR/tables/)")
    return parser


def run(args: argparse.Namespace) -> int:
    import pyarrow.parquet as pq

    from prefray.app.compose import load_benchmarks
    from prefray.app.sweep import SweepError
    from prefray.engine.results.aggregate import write_atomic
    from prefray.engine.results.manifest import recorded_configs
    from prefray.engine.results.paper_tables import fill, latex, markdown
    paths = args.run_dir
    if not paths.root.is_dir() or not paths.manifest.exists():
        return _refuse(f"{paths.root}: not a prefray run directory (no manifest.json)")
    if not paths.metrics_parquet.exists():
        return _refuse(f"{paths.root}: no metrics.parquet; a finished launch writes it (rerun the run to aggregate)")
    try:
        configs = recorded_configs(paths)
        benchmarks = load_benchmarks(configs)
    except (SweepError, ValueError, KeyError) as exc:
        return _refuse(f"{paths.root}: cannot read its manifest: {str(exc).splitlines()[0]}")
    metrics = pq.read_table(paths.metrics_parquet)
    deltas = pq.read_table(paths.deltas_parquet) if paths.deltas_parquet.exists() else None
    models = {cfg["model"]["name"]: cfg["model"] for cfg in configs if isinstance(cfg.get("model"), dict)}
    tables = {}
    for name in sorted(benchmarks):
        for table in benchmarks[name].paper_tables:
            tables.setdefault(table.name, table)
    if not tables:
        return _refuse(f"{paths.root}: no benchmark of this run ({', '.join(sorted(benchmarks))}) declares a "
                       "paper table")
    formats = [f for f, chosen in (("latex", args.latex), ("markdown", args.markdown)) if chosen] or \
        ["latex", "markdown"]
    out = args.out or paths / "tables"
    out.mkdir(parents=True, exist_ok=True)
    for table in tables.values():
        rows = fill(table, metrics, deltas, models)
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
