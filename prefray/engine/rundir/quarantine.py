"""Corrupt shards are moved aside, not read: RUN_DIR/quarantine/ keeps them, their units are asked again.

A shard is written to a temp file and renamed into place (rundir/shards.py), so prefray itself never
leaves a half-written one; a file cut short by a failing disk, a copy or a hand edit would stop
every reader of the run with Arrow's "Parquet magic bytes not found", naming no file. The owner of
a run dir (a launch, rerun or rejudge, before anything reads the shards) checks every shard's
footer; an unreadable one is moved to RUN_DIR/quarantine/<its path under shards/>, with one line
naming both. Its units are then missing from the run, so the same command asks them again; units
stored in other shards are not touched (nothing stored elsewhere is paid again). The estimate of
a rerun or rejudge leaves them out the same way (flow/dryrun.py).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from prefray.engine.rundir.layout import RunDir

QUARANTINE = "quarantine"

log = logging.getLogger(__name__)


def unreadable_shards(run: RunDir) -> list[tuple[Path, str]]:
    """The shard files of the run dir whose Parquet footer cannot be read, each with the reason."""
    base = run.shards
    found = []
    for path in sorted(base.rglob("*.parquet")) if base.is_dir() else []:
        if path.name.startswith((".", "_")):
            continue
        try:
            pq.read_metadata(path)
        except FileNotFoundError:
            continue     # removed meanwhile (absorbed by a compaction)
        except (OSError, pa.ArrowException) as exc:
            found.append((path, str(exc).split(". ")[0].strip().rstrip(".") or type(exc).__name__))
    return found


def quarantine_corrupt(run: RunDir, location: str | None = None) -> list[Path]:
    """Move the unreadable shards of the run dir into RUN_DIR/quarantine/ and say so, one line each;
    returns where they went. Only the run dir's owner calls this."""
    shown = location or str(run.root)
    moved = []
    for path, reason in unreadable_shards(run):
        relative = path.relative_to(run.shards)
        target = run.root / QUARANTINE / relative
        if target.exists():
            target = target.with_name(f"{target.stem}-{int(time.time())}{target.suffix}")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, target)
        moved.append(target)
        log.warning(f"prefray: shard {Path('shards') / relative} is unreadable ({reason}); moved to "
                    f"{shown.rstrip('/')}/{QUARANTINE}/{target.relative_to(run.root / QUARANTINE)}, "
                    "a launch or rerun asks its units again")
    return moved


def drop_unreadable(scratch: RunDir) -> None:
    """In a scratch copy of a run (the estimate's): remove the shards the owner would quarantine."""
    for path, _ in unreadable_shards(scratch):
        path.unlink(missing_ok=True)


def stale_note(run: RunDir, location: str | None = None) -> str | None:
    """One line if the run's metrics may not match its shards: a shard unreadable, or changed (or
    moved aside) after metrics.csv was written; None otherwise. Cheap: footers and file times."""
    shown = location or str(run.root)
    unreadable = unreadable_shards(run)
    if unreadable:
        first = unreadable[0][0].relative_to(run.root)
        return (f"{len(unreadable)} shard(s) unreadable ({first}{', ...' if len(unreadable) > 1 else ''}): the "
                f"metrics may count rows that are no longer readable; prefray rerun {shown} quarantines "
                "them, asks their units again and writes the metrics anew")
    metrics = run.metrics_csv
    if not metrics.exists():
        return None
    changed = [p.stat().st_mtime for folder in (run.shards, run.root / QUARANTINE) if folder.is_dir()
               for p in folder.rglob("*.parquet")]
    written = metrics.stat().st_mtime
    if changed and max(changed) > written + 1.0:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(written))
        latest = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(max(changed)))
        return (f"the metrics are older than the shards (metrics.csv written {when}, shards changed {latest}); "
                f"prefray rerun {shown} writes them anew")
    return None
