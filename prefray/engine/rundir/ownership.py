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

from prefray.engine.rundir.layout import LEASE as LEASE_NAME
from prefray.engine.rundir.layout import RunDir


class RunDirBusy(Exception):
    """Another live run owns the run directory; the message names it and says what to do."""


def _describe(owner: dict) -> str:
    return (f"host {owner.get('host', '?')}, pid {owner.get('pid', '?')}, started {owner.get('started_at', '?')}")


class RunDirLock:
    def __init__(self, run_dir: RunDir):
        self.run_dir = run_dir.root
        self.path = run_dir.lock
        self.handle = None

    def acquire(self) -> RunDirLock:
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

    def __enter__(self) -> RunDirLock:
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




class RemoteLease:
    """Ownership of a run directory on object storage, where there is no flock: a lease object
    RUN_DIR/.prefray.lease holding the owner's host, pid, a random token and a heartbeat time the
    owner refreshes every REFRESH_SECONDS. A launch refuses while the heartbeat is younger than
    STALE_SECONDS and takes the lease over when it is older (its owner is gone). Taking it writes
    the lease and reads it back after CONFIRM_SECONDS: of two launches that write at once, the
    one whose token is not there refuses."""

    REFRESH_SECONDS = 15.0
    STALE_SECONDS = 90.0
    CONFIRM_SECONDS = 1.0

    def __init__(self, store, root: str):
        self.store = store
        self.path = f"{root.rstrip('/')}/{LEASE_NAME}"
        self.token = os.urandom(8).hex()
        self.started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.held = False
        self._last_refresh = 0.0

    def read(self) -> dict:
        from pyarrow import fs

        if self.store.get_file_info(self.path).type != fs.FileType.File:
            return {}
        with self.store.open_input_stream(self.path) as source:
            text = source.read().decode("utf-8", "replace").strip()
        try:
            data = json.loads(text) if text else {}
        except json.JSONDecodeError:
            return {}
        return data if isinstance(data, dict) else {}

    def _write(self) -> None:
        record = {"host": socket.gethostname(), "pid": os.getpid(), "started_at": self.started_at,
                  "heartbeat": time.time(), "token": self.token}
        with self.store.open_output_stream(self.path) as sink:
            sink.write(json.dumps(record).encode())
        self._last_refresh = time.monotonic()

    def _busy(self, owner: dict) -> RunDirBusy:
        age = time.time() - float(owner.get("heartbeat") or 0)
        return RunDirBusy(f"{self.path} is leased by another prefray run ({_describe(owner)}, last heartbeat "
                          f"{age:.0f}s ago); wait for it to end, or for {self.STALE_SECONDS:.0f}s without a "
                          "heartbeat after it died, or use another run.dir")

    def acquire(self) -> RemoteLease:
        owner = self.read()
        if owner and time.time() - float(owner.get("heartbeat") or 0) < self.STALE_SECONDS:
            raise self._busy(owner)
        self._write()
        time.sleep(self.CONFIRM_SECONDS)
        owner = self.read()
        if owner.get("token") != self.token:
            raise self._busy(owner)
        self.held = True
        return self

    def refresh(self) -> None:
        """Renew the heartbeat (called often; writes at most every REFRESH_SECONDS)."""
        if self.held and time.monotonic() - self._last_refresh >= self.REFRESH_SECONDS:
            self._write()

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        if self.read().get("token") == self.token:
            self.store.delete_file(self.path)
