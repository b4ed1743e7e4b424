"""A full disk stops a command with one line naming the file, never a traceback.

Every write into a run dir goes to a temp file renamed into place (shards, request store, the
ledger's Parquet, metrics) or appends whole lines to a gateway's log (rundir/appendlog.py), so a
write the disk refuses leaves nothing half-written that a reader would take for data: the temp file
is removed, a cut log line is skipped by its readers. The write sites wrap themselves in
`writing(path)`, which turns "no space left on device" into `DiskFull(path)`; a gateway that cannot
record a try in its ledger does not send it (engine/calls/gateway.py), so a full disk costs at most
the calls already in flight. The command's runner (flow/exits.py) prints `line(...)` and exits 1;
the same command resumes once there is space.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class DiskFull(OSError):
    """No space left to write `path`."""

    def __init__(self, path: str | Path):
        super().__init__(errno.ENOSPC, "no space left on device", str(path))
        self.path = str(path)

    def __reduce__(self):   # crosses Ray's process boundary with its path
        return DiskFull, (self.path,)


def is_full(error: BaseException) -> bool:
    """An OSError of a full disk or quota (Arrow's carry the errno in their text only)."""
    if not isinstance(error, OSError):
        return False
    text = str(error)
    return error.errno in FULL_ERRNOS or "[errno 28]" in text.lower() or "No space left on device" in text


@contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """Turn a full disk while writing `path` into DiskFull(path)."""
    try:
        yield
    except DiskFull:
        raise
    except OSError as exc:
        if is_full(exc):
            raise DiskFull(path) from exc
        raise


def disk_full_in(error: BaseException | None) -> OSError | None:
    """The full-disk error behind `error` (through Ray's task errors and exception chains), if any."""
    seen: set[int] = set()
    found: OSError | None = None
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, DiskFull):
            return error
        if found is None and is_full(error):
            found = error    # type: ignore[assignment]
        error = getattr(error, "cause", None) or error.__cause__ or error.__context__
    return found


def line(error: OSError) -> str:
    """The one line a full disk ends a command with."""
    path = getattr(error, "path", None) or error.filename or "a file of the run dir"
    return (f"prefray: the disk is full: could not write {path}; stopped (the rows stored before are kept, "
            "nothing was half-written); free space on that disk and run the same command again to resume")
