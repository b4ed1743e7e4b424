"""Can the run write where it is told to? Checked before anything is created, leaving nothing behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from prefray.engine.config.rules import render
from prefray.engine.config.schema import RunConfig
from prefray.engine.rundir.remote import is_uri, reach_problem, staging_dir

DIR_ALLOWED = "a directory (created if missing) this user can write"


def nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def can_write_in(folder: Path) -> bool:
    """True if a file can be made in `folder`: permission bits, then a real probe removed at once."""
    if not os.access(folder, os.W_OK | os.X_OK):
        return False
    try:
        probe = tempfile.mkdtemp(prefix=".prefray-probe-", dir=folder)
    except OSError:
        return False
    try:
        os.rmdir(probe)
    except OSError:
        pass
    return True


def dir_problem(key: str, value: Any, target: Path) -> str | None:
    """Why `target` cannot be (or become) a writable directory, or None."""
    target = target.expanduser()
    if target.exists() and not target.is_dir():
        return f"{key}={render(value)}: {target} is a file; allowed is {DIR_ALLOWED}"
    anchor = nearest_existing(target.absolute())
    if not anchor.is_dir():
        return f"{key}={render(value)}: {anchor} is a file, so {target} cannot be made; allowed is {DIR_ALLOWED}"
    if not can_write_in(anchor):
        where = "is" if anchor == target.absolute() else f"would be made in {anchor}, which is"
        return f"{key}={render(value)}: {target} {where} not writable; allowed is {DIR_ALLOWED}"
    return None


def default_run_dir() -> Path:
    return Path("outputs")


def path_problems(runs: list[dict[str, Any] | RunConfig]) -> list[str]:
    """run.dir and the response cache folder of every job (they are normally all the same)."""
    problems: list[str] = []
    checked: set[tuple] = set()
    for run in map(RunConfig.from_config, runs):
        if is_uri(run.dir):
            where = (run.dir, run.staging_dir, run.cache, run.cache_dir)
            if where not in checked:   # one look at the bucket per sweep, not per job
                checked.add(where)
                problems += [p for p in uri_problems(run) if p not in problems]
            continue
        run_dir = Path(run.dir) if run.dir else default_run_dir()
        found = [dir_problem("run.dir", run.dir, run_dir)]
        # the default cache folder sits next to run.dir: a bad run.dir is reported once, alone
        if run.cache and (run.cache_dir or found[0] is None):
            folder = Path(run.cache_dir) if run.cache_dir else run_dir.expanduser().absolute().parent / ".prefray-cache"
            found.append(dir_problem("run.cache_dir", run.cache_dir, folder))
        problems += [p for p in found if p and p not in problems]
    return problems


def uri_problems(run: RunConfig) -> list[str]:
    """A URI run.dir: its store reachable with the environment's credentials (bucket there), and the
    local staging folder (and an explicit cache folder) writable. Nothing is created anywhere."""
    uri = run.dir
    found = [reach_problem("run.dir", uri),
             dir_problem("run.staging_dir", run.staging_dir, staging_dir(uri, run.staging_dir))]
    if run.cache and run.cache_dir:
        found.append(dir_problem("run.cache_dir", run.cache_dir, Path(run.cache_dir)))
    return [p for p in found if p]
