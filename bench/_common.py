"""Helpers shared by the bench scripts: a fake server subprocess and the CLI."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow.dataset as ds

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def fake_server(*args: str) -> Iterator[int]:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "prefray.fakellm", "--port", str(port), *args],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        for _ in range(200):
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield port
    finally:
        process.kill()
        process.wait()


def stats(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats") as response:
        return json.loads(response.read())


def launch(*args: str, env: dict | None = None) -> float:
    """Run the CLI; return its wall time in seconds."""
    import os

    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "prefray.launch", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    if done.returncode != 0:
        raise SystemExit(f"launch failed:\n{done.stdout}\n{done.stderr}")
    return time.perf_counter() - start


def rows(run_dir: Path) -> list[dict]:
    return ds.dataset(Path(run_dir) / "shards", format="parquet").to_table().to_pylist()
