"""`prefray compact RUN_DIR`

Rolls the small result shards of a run (one Parquet file per batch of units, as runs wrote them
before compaction existed, or as a killed run left them) into a few large Parquet files per job
folder (zstd, row groups of 64k rows), and the gateways' JSON-lines paid record into one Parquet
file. Every row is kept once; metrics are unchanged. Refuses while another prefray command owns
RUN_DIR. Exit codes: 0 done, 2 refused (nothing changed), 1 a
shard could not be read (the files compacted before it are complete, the others unchanged).
"""

from __future__ import annotations

import argparse
import sys

import pyarrow as pa

from prefray.app.commands import Parser, run_dir_argument
from prefray.engine.flow.exits import EXIT_CONFIG, EXIT_ERROR, EXIT_OK
from prefray.engine.rundir import RunDir
from prefray.engine.rundir.ownership import RunDirBusy, RunDirLock


def parser(prog: str) -> argparse.ArgumentParser:
    parser = Parser(prog, __doc__)
    parser.add_argument("run_dir", type=run_dir_argument, help="a run directory (holding shards/)")
    return parser


def run_dir_problem(run: RunDir) -> str | None:
    if not run.root.is_dir():
        return f"{run.root} is not a directory"
    if not run.shards.is_dir():
        return f"{run.root} is not a prefray run directory (it has no shards/ folder)"
    return None


def run(args: argparse.Namespace) -> int:
    from prefray.engine.results.request_store import compact_requests
    from prefray.engine.rundir.journal import clean_leftovers
    from prefray.engine.rundir.paid import compact_paid
    from prefray.engine.rundir.shards import compact_run, job_folders, shard_files

    run: RunDir = args.run_dir
    problem = run_dir_problem(run)
    if problem:
        print(f"prefray: {problem}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        lock = RunDirLock(run).acquire()
    except RunDirBusy as exc:
        print(f"prefray: not compacting: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except OSError as exc:
        print(f"prefray: not compacting: cannot take the lock of {run.root}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        clean_leftovers(run)
        before = len(shard_files(run))
        done = compact_run(run)
        ledgers = compact_paid(run)
        requests = compact_requests(run)
        after = len(shard_files(run))
    except (OSError, pa.ArrowException, RuntimeError) as exc:
        print(f"prefray: compaction of {run.root} stopped: {type(exc).__name__}: {exc}; folders compacted "
              "before it are complete, the rest are unchanged", file=sys.stderr)
        return EXIT_ERROR
    finally:
        lock.release()
    print(f"prefray: compacted {run.root}: {before} → {after} Parquet file(s) in {len(job_folders(run))} "
          f"job folder(s); {done.rows} row(s) rewritten from {done.absorbed} file(s); {ledgers} paid-record "
          f"file(s) rolled into one; {requests.absorbed} request file(s) rolled into {requests.written}")
    return EXIT_OK
