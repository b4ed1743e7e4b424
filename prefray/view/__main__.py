"""python -m prefray.view RUN_DIR [--port P] [--allow-host NAME] [--export FILE.html]"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from prefray.view.data import RunData

WAIT_S = 0.25  # a page waits this long for a job's index before scanning the shards directly


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m prefray.view",
                                     description="Browse a run: metrics, figures, units, transcripts.")
    parser.add_argument("run_dir", help="a run directory, or a URI run dir (s3://bucket/prefix, ...)")
    parser.add_argument("--port", type=int, default=8770, help="port on 127.0.0.1 (default 8770)")
    parser.add_argument("--export", type=Path, metavar="FILE.html",
                        help="write one self-contained HTML file instead of serving")
    parser.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                        help="also answer requests whose Host header is NAME (or NAME:PORT), e.g. behind a "
                             "proxy; repeatable (default: only 127.0.0.1, localhost and [::1] with the port)")
    args = parser.parse_args(argv)
    args.run_dir = local_copy(args.run_dir)
    if args.run_dir is None:
        return 2
    if not args.run_dir.is_dir():
        print(f"prefray.view: run directory not found: {args.run_dir}", file=sys.stderr)
        return 2
    if args.export is not None:
        data = RunData(args.run_dir)
        from prefray.view.export import export_html

        print(f"wrote {export_html(data, args.export)}")
        return 0
    from prefray.view.server import serve

    serve(RunData(args.run_dir, wait_s=WAIT_S), args.port, tuple(args.allow_host))
    return 0


def local_copy(location: str) -> Path | None:
    """The run dir to read: `location` itself, or a URI run dir pulled into its staging folder (a
    snapshot: pull again by starting the viewer again). None after printing why it cannot be read."""
    from prefray.engine.rundir.remote import is_uri, reach_problem, staged_run

    if not is_uri(location):
        return Path(location)
    problem = reach_problem("run dir", location)
    if problem:
        print(f"prefray.view: {problem}", file=sys.stderr)
        return None
    with staged_run(location, {"cache": False}, own=False) as local:
        return local


if __name__ == "__main__":
    sys.exit(main())
