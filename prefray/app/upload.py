"""`prefray upload RUN_DIR DEST` — copy a run directory to object storage.

DEST is any location pyarrow's filesystems understand: `s3://bucket/prefix`, `gs://bucket/prefix`,
`hdfs://…` or a local path. Credentials come from the environment as each store's own client reads
them (for S3: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL). Everything
under RUN_DIR is copied (shards, manifest, metrics, request store, cache); files already at DEST are
overwritten, so copying again after a resumed run brings DEST up to date.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from prefray.app.commands import Parser, run_dir_argument
from prefray.engine.flow.exits import EXIT_CONFIG, EXIT_ERROR, EXIT_OK


def destination(uri: str):
    from pyarrow import fs

    if "://" not in uri:
        uri = str(Path(uri).resolve())
    return fs.FileSystem.from_uri(uri)


def parser(prog: str) -> argparse.ArgumentParser:
    parser = Parser(prog, __doc__)
    parser.add_argument("run_dir", type=run_dir_argument)
    parser.add_argument("dest")
    return parser


def run(args: argparse.Namespace) -> int:
    if not args.run_dir.root.is_dir():
        print(f"prefray: run dir {args.run_dir.root} does not exist", file=sys.stderr)
        return EXIT_CONFIG
    from pyarrow import ArrowException, fs

    try:
        dest_fs, dest_path = destination(args.dest)
        dest_fs.create_dir(dest_path, recursive=True)
        fs.copy_files(str(args.run_dir.root.resolve()), dest_path, source_filesystem=fs.LocalFileSystem(),
                      destination_filesystem=dest_fs)
    except (ArrowException, OSError, ValueError) as exc:
        print(f"prefray: cannot copy {args.run_dir.root} to {args.dest}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(f"prefray: copied {args.run_dir.root} to {args.dest}")
    return EXIT_OK
