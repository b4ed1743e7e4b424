"""What a prefray command's exit code says, and the one line printed when it is interrupted.

0   every cell of the run is complete
1   a job stopped on an internal error (the message names it)
2   refused before any call: bad config, missing keys or data, run.dir owned by another run
3   finished, but some units failed or were skipped (the summary says how to rerun them)
130 interrupted (Ctrl-C / SIGINT): what was answered is stored; the same command resumes
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prefray.engine.rundir.layout import RunDir

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CONFIG = 2
EXIT_INCOMPLETE = 3
EXIT_INTERRUPTED = 130

# The run directory the current command writes into, once it owns it (for the interrupt line).
_current_run: dict[str, Any] = {}
# Whether this process ends as soon as its command returns (the `prefray` script, `python -m
# prefray.COMMAND`), and whether a launch in it started a local Ray cluster (see end_process).
_process = {"ends_after_command": False, "started_cluster": False}

log = logging.getLogger(__name__)


def set_current_run(run: RunDir | None, shown: str | None = None) -> None:
    """`run` holds the rows; `shown` is how the line names it (a URI run dir's address)."""
    if run is None:
        _current_run.pop("dir", None)
        _current_run.pop("shown", None)
    else:
        _current_run["dir"] = run
        _current_run["shown"] = shown or str(run.root)


def stored_rows(run: RunDir) -> int:
    try:
        import pyarrow.dataset as ds

        from prefray.engine.rundir.shards import shard_files

        files = shard_files(run)
        return ds.dataset(files, format="parquet").count_rows() if files else 0
    except Exception:  # noqa: BLE001 - the line is printed on the way out, whatever the shards hold
        return 0


def interrupted_line(command: str) -> str:
    run_dir = _current_run.get("dir")
    if run_dir is None:
        return "prefray: interrupted before any call; nothing was run"
    rows = stored_rows(run_dir)
    return (f"prefray: interrupted; {rows} answered or failed unit row(s) are stored in {_current_run['shown']}; "
            f"run the same {command} command again to resume (stored units are not sent again)")


def run_cli(main: Callable[[], int], command: str, interrupted: str | None = None) -> int:
    """The one runner of every command's main (prefray.app.run, the `prefray` script): Ctrl-C ends it
    with one line and exit code 130, never a traceback. The line says what the run dir holds and how
    to resume, or `interrupted` when the command has its own (one that writes no run, e.g. compact).
    A full disk ends it with one line naming the file and exit code 1 (engine/rundir/diskfull.py)."""
    from prefray.engine.rundir.diskfull import disk_full_in, line

    try:
        return main()
    except OSError as exc:
        full = disk_full_in(exc)
        if full is None:
            raise
        log.error(line(full))
        return EXIT_ERROR
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not interrupt the line
        log.warning(interrupted or interrupted_line(command))
        return EXIT_INTERRUPTED


def ends_after_command() -> None:
    """Say that this process ends as soon as its command returns (a command's process entry: the
    `prefray` script, `python -m prefray.COMMAND`); never said in a process that goes on (a test
    or a notebook running a command in itself)."""
    _process["ends_after_command"] = True


def cluster_ends_with_process(started: bool) -> bool:
    """A launch that started (`started`) a local Ray cluster asks, once its calls are over, whether
    to leave the cluster to end with the process (True: the process ends as soon as the command
    returns, end_process) or to stop it itself (False)."""
    _process["started_cluster"] = _process["started_cluster"] or started
    return started and _process["ends_after_command"]


def end_process(code: int) -> int:
    """`code`, the exit code of a command's process. If a launch in it started a local Ray cluster,
    the process ends here: every process below it (Ray's, and the workers and agents Ray's raylet
    started) is killed at once, its output is flushed and it exits (`os._exit`). Neither Ray's
    orderly stop (~1.5 s: each process is sent SIGTERM and waited for up to a second in turn, its
    autoscaler monitor always the whole second) nor the interpreter's teardown of every module
    (~0.5 s) is waited for; the run's files are all closed by then. Otherwise (or where the
    processes below it cannot be listed) the interpreter exits as usual."""
    ray = sys.modules.get("ray")
    if not (_process["started_cluster"] and _process["ends_after_command"] and ray is not None
            and ray.is_initialized()):
        return code
    below = descendants(os.getpid())
    if below is None:
        return code
    for pid in below:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:   # ended meanwhile
            pass
    logging.shutdown()   # flushes every handler
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said on it
            pass
    os._exit(code)


def descendants(pid: int) -> list[int] | None:
    """The processes below `pid` (children, theirs, ...), parents first; None without /proc."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                parent = int(handle.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):   # ended meanwhile
            continue
        children.setdefault(parent, []).append(int(entry))
    found: list[int] = []
    todo = [pid]
    while todo:
        below = children.get(todo.pop(0), [])
        found.extend(below)
        todo.extend(below)
    return found
