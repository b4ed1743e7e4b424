"""The run viewer: `prefray view RUN_DIR [--port P] [--export FILE.html]`.

Reads a run directory lazily (metrics.parquet, plots/, shards/, requests/) and serves an overview,
each cell's units with filters and paging, and each unit's transcript on 127.0.0.1. A URI run dir
(s3://bucket/prefix, ...) is pulled into its staging folder first; `--export` writes the same pages
as one self-contained HTML file instead of serving.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from prefray.app.commands import Parser
from prefray.engine.flow.exits import EXIT_CONFIG, EXIT_OK
from prefray.engine.rundir.layout import RunDir

WAIT_S = 0.25  # a page waits this long for a job's index before scanning the shards directly


def parser(prog: str) -> argparse.ArgumentParser:
    parser = Parser(prog, "Browse a run: metrics, figures, units, transcripts.")
    parser.add_argument("run_dir", help="a run directory, or a URI run dir (s3://bucket/prefix, ...)")
    parser.add_argument("--port", type=int, default=8770, help="port on 127.0.0.1 (default 8770)")
    parser.add_argument("--export", type=Path, metavar="FILE.html",
                        help="write one self-contained HTML file instead of serving")
    parser.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                        help="also answer requests whose Host header is NAME (or NAME:PORT), e.g. behind a "
                             "proxy; repeatable (default: only 127.0.0.1, localhost and [::1] with the port)")
    return parser


def run(args: argparse.Namespace) -> int:
    from prefray.view.data import RunData

    run_dir = local_copy(args.run_dir)
    if run_dir is None:
        return EXIT_CONFIG
    if not run_dir.root.is_dir():
        print(f"prefray view: run directory not found: {run_dir.root}", file=sys.stderr)
        return EXIT_CONFIG
    from prefray.engine.rundir.quarantine import stale_note

    note = stale_note(run_dir, args.run_dir)
    if note:
        print(f"prefray view: {note}", file=sys.stderr)
    if args.export is not None:
        from prefray.view.export import export_html

        print(f"wrote {export_html(RunData(run_dir), args.export)}")
        return EXIT_OK
    from prefray.view.server import serve

    serve(RunData(run_dir, wait_s=WAIT_S), args.port, tuple(args.allow_host))
    return EXIT_OK


def local_copy(location: str) -> RunDir | None:
    """The run dir to read: `location` itself, or a URI run dir pulled into its staging folder (a
    snapshot: pull again by starting the viewer again). None after printing why it cannot be read."""
    from prefray.engine.rundir.remote import is_uri, reach_problem, staged_run

    problem = reach_problem("run dir", location) if is_uri(location) else None
    if problem:
        print(f"prefray view: {problem}", file=sys.stderr)
        return None
    with staged_run(location, {"cache": False}, own=False) as local:
        return local
