"""What a run dir on object storage costs: the same sweep with run.dir local and on S3.

Starts a Ray head, a fake provider (fixed latency) and moto's S3 server over HTTP here, then runs
one BenchPreS sweep three times: into a local run dir, into s3://bench/run (staged locally and
uploaded as it goes), and again into the same URI from an empty staging folder (a resume on
another machine: everything is pulled, nothing is sent). Prints wall times and their ratios, the
files and bytes in the bucket, and the calls each run sent.

Usage: python bench/object_storage.py [--limit 10] [--latency 0.2]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, fake_server, free_port, launch, stats
from shared_limits import start_head


def start_moto() -> tuple[subprocess.Popen, str]:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-p", str(port)], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(3)
    return server, f"http://127.0.0.1:{port}"


def bucket_files(endpoint: str) -> tuple[int, int]:
    from pyarrow import fs

    store = fs.S3FileSystem(access_key="bench", secret_key="bench", region="us-east-1",
                            endpoint_override=endpoint, scheme="http")
    infos = [i for i in store.get_file_info(fs.FileSelector("bench/run", recursive=True))
             if i.type == fs.FileType.File]
    return len(infos), sum(i.size for i in infos)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--latency", type=float, default=0.2)
    args = parser.parse_args()
    temp = Path(tempfile.mkdtemp(prefix="prefray-bench-s3-"))
    head, address = start_head(str(temp / "ray"))
    moto, endpoint = start_moto()
    env = {"RAY_ADDRESS": address, "AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "bench",
           "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
    try:
        from pyarrow import fs

        fs.S3FileSystem(access_key="bench", secret_key="bench", region="us-east-1", endpoint_override=endpoint,
                        scheme="http", allow_bucket_creation=True).create_dir("bench")
        with fake_server("--latency", str(args.latency)) as port:
            url = f"http://127.0.0.1:{port}/v1"
            sweep = ["model=fake", "judge=fake", f"model.base_url={url}", f"judge.base_url={url}",
                     f"limit={args.limit}", "run.cache=false", "run.progress=false"]
            timings, calls = {}, {}
            for name, extra in (("local", [f"run.dir={temp / 'local'}"]),
                                ("s3", ["run.dir=s3://bench/run", f"run.staging_dir={temp / 'stage-a'}"]),
                                ("s3 resume, empty staging", ["run.dir=s3://bench/run",
                                                              f"run.staging_dir={temp / 'stage-b'}"])):
                before = stats(port)["requests"]
                timings[name] = launch(*sweep, *extra, env=env)
                calls[name] = stats(port)["requests"] - before
        files, size = bucket_files(endpoint)
        for name, seconds in timings.items():
            print(f"{name:26s} {seconds:6.1f} s  ({seconds / timings['local']:.2f}× local)  calls sent {calls[name]}")
        print(f"bucket: {files} files, {size / 1e6:.2f} MB")
    finally:
        for process in (moto, head):
            os.killpg(process.pid, signal.SIGTERM)
            process.wait()


if __name__ == "__main__":
    main()
