"""A run directory has one owner at a time: the launch holding RUN_DIR/.prefray.lock.

The owner holds an exclusive `flock` on the lock file for as long as it runs and writes its host,
pid, start time and command into it. The kernel drops the flock when the owner's process ends in
any way (even kill -9), so on the same host a lock that can be taken belongs to nobody. A lock
written on another host cannot be checked from here: it is honoured until its owner clears it at
its end, or a user removes the file after making sure that run is gone.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

LOCK_NAME = ".prefray.lock"


class RunDirBusy(Exception):
    """Another live run owns the run directory; the message names it and says what to do."""


def _describe(owner: dict) -> str:
    return (f"host {owner.get('host', '?')}, pid {owner.get('pid', '?')}, started {owner.get('started_at', '?')}")


class RunDirLock:
    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self.handle = None

    def acquire(self) -> "RunDirLock":
        """Take the lock or raise RunDirBusy at once (never waits)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+", encoding="utf-8")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = _read(handle)
            handle.close()
            raise RunDirBusy(f"{self.run_dir} is in use by another prefray run ({_describe(owner)}); "
                             "wait for it to end or use another run.dir") from None
        owner = _read(handle)
        if owner and owner.get("host") != socket.gethostname():
            handle.close()
            raise RunDirBusy(f"{self.run_dir} is owned by a prefray run on another machine ({_describe(owner)}); "
                             f"if that run is gone, delete {self.path} and launch again")
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                                 "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                 "command": [sys.executable, *sys.argv]}))
        handle.flush()
        os.fsync(handle.fileno())
        self.handle = handle
        return self

    def release(self) -> None:
        """Clear the owner record and drop the lock (the file stays: removing it would race)."""
        if self.handle is None:
            return
        try:
            self.handle.seek(0)
            self.handle.truncate()
            self.handle.flush()
        finally:
            fcntl.flock(self.handle.fileno(), fcntl.LOCK_UN)
            self.handle.close()
            self.handle = None

    def __enter__(self) -> "RunDirLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read(handle) -> dict:
    handle.seek(0)
    text = handle.read().strip()
    if not text:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}
