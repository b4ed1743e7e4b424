"""How a finished run ended: the units of its jobs that still have no answer, by cause."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Sequence

from prefray.engine.benchmark import Job
from prefray.engine.failures import failure_class
from prefray.engine.store import job_dir, latest_attempts, read_rows


def missing_units(run_dir: Path, jobs: Sequence[Job]) -> Counter:
    """Per cause, the units of `jobs` whose best row has no usable answer: infrastructure failures
    and budget skips (no_answer) and unreadable judge answers (judge_failure). A subject's own
    unparsable answer is a scored model failure, not a missing unit."""
    missing: Counter = Counter()
    for job in jobs:
        folder = job_dir(run_dir, job.benchmark, job.model.name, job.condition)
        if not folder.is_dir():
            continue
        rows = latest_attempts(read_rows(folder)).select(["role", "status", "cause"]).to_pylist()
        for row in rows:
            if failure_class(row["role"], row["status"], row["cause"]) in ("no_answer", "judge_failure"):
                missing[row["cause"] or row["status"]] += 1
    return missing
