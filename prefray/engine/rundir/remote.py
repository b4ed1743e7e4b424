"""Run directories on object storage: `run.dir=s3://bucket/prefix` (or any URI pyarrow opens).

Every writer of a run (the driver's shards and request store, the gateways' journal and paid
ledger, the manifest, metrics, report and plots) writes local files, and several rely on what a
local file system gives them (atomic rename, append, flock, SQLite). So a run whose run.dir is a
URI works in a local *staging* folder that mirrors it (`run.staging_dir`, by default
~/.cache/prefray/staging/<hash of the URI>/run):

- before planning, every file the URI already holds is pulled into staging (resume works from
  an empty staging folder, on any machine);
- a background thread uploads each new or changed file within SYNC_SECONDS of being written
  (the append-only journal and ledger every LOG_SYNC_SECONDS), never blocking the event loop;
- at the end — also after an error or Ctrl-C — everything left is uploaded, and files the run
  removed (the journal a finished run folds away) are removed at the URI too;
- the response cache (by default next to the staging folder) is merged with the one kept at
  <parent of the URI>/.prefray-cache/responses.sqlite at the start and merged back at the end.

Hidden files (temp files, local locks, the viewer's index) stay local. Credentials come only
from the environment, as each store's own client reads them (for S3: AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL); they are never written
anywhere. Ownership of a URI run dir is a lease object (engine/rundir/ownership.py, RemoteLease).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prefray.engine.config.schema import RunConfig
from prefray.engine.rundir.cache import ResponseCache
from prefray.engine.rundir.layout import CACHE_FILE as CACHE_NAME
from prefray.engine.rundir.layout import CACHE_FOLDER, LOG_FOLDERS, RunDir
from prefray.engine.rundir.ownership import RemoteLease

SYNC_SECONDS = 2.0
LOG_SYNC_SECONDS = 30.0
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")

log = logging.getLogger(__name__)


def is_uri(value: Any) -> bool:
    return isinstance(value, str) and bool(_URI.match(value))


def open_location(uri: str) -> tuple[Any, str]:
    """(pyarrow FileSystem, path inside it) for a URI; credentials from the environment."""
    from pyarrow import fs

    return fs.FileSystem.from_uri(uri)


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def reach_problem(key: str, uri: str) -> str | None:
    """Why the store behind `uri` cannot be used (unreachable, refused credentials, no such bucket),
    or None. Only reads: nothing is created."""
    from pyarrow import ArrowException, fs

    try:
        store, path = open_location(uri)
        bucket = path.strip("/").split("/")[0]
        bucketed = store.type_name in ("s3", "gcs")
        info = store.get_file_info(bucket if bucketed else path)
    except (ArrowException, OSError, ValueError) as exc:
        return f"{key}={uri}: cannot reach it: {one_line(exc)}"
    if bucketed and info.type == fs.FileType.NotFound:
        return f"{key}={uri}: bucket '{bucket}' does not exist (or these credentials cannot see it)"
    if bucketed and not path.strip("/").count("/"):
        return f"{key}={uri}: name a prefix inside the bucket, e.g. {uri.rstrip('/')}/runs/first"
    if info.type == fs.FileType.File:
        return f"{key}={uri}: is a file, not a folder"
    return None


def default_staging(uri: str) -> Path:
    digest = hashlib.sha256(uri.encode()).hexdigest()[:16]
    return Path("~/.cache/prefray/staging").expanduser() / digest / "run"


def staging_dir(uri: str, setting: str | None) -> Path:
    return Path(setting).expanduser().absolute() if setting else default_staging(uri)


def remote_cache_path(root: str) -> str:
    parent = root.rstrip("/").rsplit("/", 1)[0]
    return f"{parent}/{CACHE_FOLDER}/{CACHE_NAME}"


def _hidden(relative: str) -> bool:
    return any(part.startswith(".") for part in relative.split("/"))


class Mirror:
    """A local folder kept in step with a remote run directory."""

    def __init__(self, uri: str, local: Path, cache_file: Path | None = None):
        self.uri = uri
        self.store, self.root = open_location(uri)
        self.root = self.root.rstrip("/")
        self.local = Path(local)
        self.cache_file = cache_file
        self.known: dict[str, tuple[int, int]] = {}   # relative path → (size, mtime_ns) as at the URI
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.heartbeat = None           # called by the background thread (the lease's refresh)
        self.failures: dict[str, str] = {}   # what the background thread failed at, and why
        self.touched = 0                # files uploaded or removed at the URI by this run

    # -- pulling ------------------------------------------------------------------------------

    def remote_files(self) -> dict[str, int]:
        from pyarrow import fs

        selector = fs.FileSelector(self.root, recursive=True, allow_not_found=True)
        prefix = self.root + "/"
        return {info.path[len(prefix):]: info.size for info in self.store.get_file_info(selector)
                if info.type == fs.FileType.File and info.path.startswith(prefix)}

    def pull(self) -> int:
        """Copy every (non-hidden) file at the URI into the staging folder; return how many.

        A file staging already holds is replaced only by a longer copy: run files only grow or
        are written once (shards, requests), so a longer local file (a log whose last lines a
        killed run never uploaded) is the newer one and is uploaded at the next push."""
        self.local.mkdir(parents=True, exist_ok=True)
        pulled = 0
        for relative, size in sorted(self.remote_files().items()):
            if _hidden(relative):
                continue
            target = self.local / relative
            local_size = target.stat().st_size if target.is_file() else -1
            if local_size < size:
                self._download(f"{self.root}/{relative}", target)
                pulled += 1
            if local_size <= size:
                self.known[relative] = _signature(target)
        if self.cache_file is not None:
            self.merge_cache()
        return pulled

    def _download(self, remote: str, target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = target.with_name(f".{target.name}.{os.getpid()}.pull.tmp")
        with self.store.open_input_stream(remote) as source, open(temp, "wb") as sink:
            while chunk := source.read(1 << 20):
                sink.write(chunk)
        os.replace(temp, target)

    # -- pushing ------------------------------------------------------------------------------

    def changed(self, include_logs: bool = True) -> list[str]:
        found = []
        for path in self.local.rglob("*"):
            relative = path.relative_to(self.local).as_posix()
            if _hidden(relative) or not path.is_file():
                continue
            if not include_logs and relative.split("/")[0] in LOG_FOLDERS:
                continue
            if self.known.get(relative) != _signature(path):
                found.append(relative)
        return sorted(found)

    def push(self, include_logs: bool = True) -> int:
        """Upload every new or changed file; return how many were sent."""
        with self._lock:
            files = self.changed(include_logs)
            for relative in files:
                path = self.local / relative
                signature = _signature(path)
                self._upload(path, f"{self.root}/{relative}")
                self.known[relative] = signature
            self.touched += len(files)
            return len(files)

    def _upload(self, path: Path, remote: str) -> None:
        with open(path, "rb") as source, self.store.open_output_stream(remote) as sink:
            while chunk := source.read(1 << 20):
                sink.write(chunk)

    def drop_removed(self) -> int:
        """Remove at the URI the files this run removed locally (e.g. a folded-away journal)."""
        with self._lock:
            gone = [r for r in self.known if not (self.local / r).exists()]
            for relative in gone:
                with contextlib.suppress(FileNotFoundError):
                    self.store.delete_file(f"{self.root}/{relative}")
                del self.known[relative]
            self.touched += len(gone)
            return len(gone)

    def finish(self) -> int:
        """Everything left: all changed files, removals, and the merged response cache; return how
        many run files were uploaded or removed over the whole run."""
        self.push()
        self.drop_removed()
        if not self.touched:
            return 0
        if self.cache_file is not None and self.cache_file.exists():
            self.merge_cache()
            self._upload(self.cache_file, remote_cache_path(self.root))
        return self.touched

    # -- the response cache -------------------------------------------------------------------

    def merge_cache(self) -> None:
        """Add the entries of the cache kept at the URI's parent to the local one."""
        from pyarrow import fs

        remote = remote_cache_path(self.root)
        if self.store.get_file_info(remote).type != fs.FileType.File:
            return
        with tempfile.TemporaryDirectory(prefix="prefray-cache-") as folder:
            copy = Path(folder) / CACHE_NAME
            self._download(remote, copy)
            merge_cache_files(copy, self.cache_file)

    # -- the background thread -----------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="prefray-mirror", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        last_logs = time.monotonic()
        while not self._stop.wait(SYNC_SECONDS):
            logs = time.monotonic() - last_logs >= LOG_SYNC_SECONDS
            self._try("copying files", lambda logs=logs: self.push(include_logs=logs))
            self._try("renewing the lease", self.heartbeat)
            if logs:
                last_logs = time.monotonic()

    def _try(self, what: str, step) -> None:
        """One round of work of the background thread: a failure is said once and retried."""
        if step is None:
            return
        try:
            step()
            self.failures.pop(what, None)
        except Exception as exc:  # noqa: BLE001 - retried next round; reported once
            if what not in self.failures:
                log.warning(f"prefray: {what} at {self.uri} failed, will retry: {one_line(exc)}")
            self.failures[what] = one_line(exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None


def _signature(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns


def merge_cache_files(source: Path, target: Path) -> None:
    """Insert the responses of SQLite cache `source` that `target` lacks (target created if missing)."""
    ResponseCache(target).close()   # creates the table if the file is new
    db = sqlite3.connect(target, timeout=30, isolation_level=None)
    try:
        db.execute("ATTACH DATABASE ? AS other", (str(source),))
        db.execute("INSERT OR IGNORE INTO responses SELECT * FROM other.responses")
        db.execute("DETACH DATABASE other")
    finally:
        db.close()


@contextlib.contextmanager
def staged_run(location: str | Path, run: dict[str, Any] | RunConfig, own: bool = True) -> Iterator[RunDir]:
    """The local run dir to work in, as the one RunDir the command passes down: `location` itself,
    or for a URI its staging mirror — pulled first, owned through a lease (with `own`), kept in step
    while the block runs and finished at its end however it ends. Raises RunDirBusy when another
    live run holds the lease."""
    settings = RunConfig.from_config(run) if is_uri(location) else None
    local = RunDir(staging_dir(str(location), settings.staging_dir) if settings is not None else location)
    if settings is None:
        yield local
        return
    uri = str(location)
    cache = local.default_cache if settings.cache and not settings.cache_dir else None
    mirror = Mirror(uri, local.root, cache)
    lease = RemoteLease(mirror.store, mirror.root) if own else None
    if lease is not None:
        lease.acquire()
        mirror.heartbeat = lease.refresh
    try:
        pulled = mirror.pull()
        if pulled:
            log.info(f"prefray: pulled {pulled} file(s) of {uri} into {local.root}")
        if not own:
            yield local
            return
        mirror.start()
        try:
            yield local
        finally:
            mirror.stop()
            finish_or_say(mirror)
    finally:
        if lease is not None:
            with contextlib.suppress(OSError):
                lease.release()


def finish_or_say(mirror: Mirror) -> None:
    try:
        touched = mirror.finish()
    except Exception as exc:  # noqa: BLE001 - the results are safe in staging; say how to copy them
        log.error(f"prefray: could not copy the results to {mirror.uri}: {one_line(exc)}; they are in "
                  f"{mirror.local} (prefray upload {mirror.local} {mirror.uri} copies them)")
        raise SystemExit(1) from None
    if touched:
        log.info(f"prefray: results are in {mirror.uri}")
