"""How a finished run ended: the units of its jobs that still have no answer, by cause."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from prefray.engine.benchmark import Job
from prefray.engine.config.schema import RunConfig
from prefray.engine.failures import failure_class
from prefray.engine.rundir import RunDir
from prefray.engine.rundir.shards import BEST_ROW_COLUMNS, latest_attempts, read_rows
from prefray.engine.sweep import SendPolicy, Sweep


def _best_rows(run: RunDir, jobs: Sequence[Job]):
    """(job, row) for the best row of every stored unit of `jobs`."""
    for job in jobs:
        folder = run.job(job.benchmark, job.model.name, job.condition)
        if not folder.is_dir():
            continue
        rows = latest_attempts(read_rows(folder, columns=BEST_ROW_COLUMNS + ["role", "cause"]))
        for row in rows.select(["role", "status", "cause"]).to_pylist():
            yield job, row


def missing_units(run_dir: RunDir, jobs: Sequence[Job], by_cell: bool = False) -> Counter:
    """Per cause, the units of `jobs` whose best row has no answer: infrastructure failures and
    budget skips (the failure policy's no_answer, what a rerun finishes). A subject's own unparsable
    answer is a scored model failure and a judge's an excluded judge failure: neither is missing."""
    missing: Counter = Counter()
    for job, row in _best_rows(run_dir, jobs):
        if failure_class(row["role"], row["status"], row["cause"]) == "no_answer":
            key = (job.benchmark, job.model.name, job.condition) if by_cell else row["cause"] or row["status"]
            missing[key] += 1
    return missing


def failure_counts(run_dir: RunDir, jobs: Sequence[Job]) -> Counter:
    """The best rows of `jobs` per failure class (engine/failures.py)."""
    return Counter(failure_class(row["role"], row["status"], row["cause"]) for _, row in _best_rows(run_dir, jobs))


def policy_summary(counts: Counter) -> str:
    """The failure policy's own words for a run's failures."""
    return (f"{counts['no_answer']} unit(s) without an answer, {counts['judge_failure']} judge failure(s) "
            f"(excluded), {counts['model_failure']} model failure(s) (scored)")


# Causes of units that have no answer (not the subject's own failures: those are scored).
def no_answer_causes() -> frozenset[str]:
    from prefray.engine.failures import NO_ANSWER_CAUSES

    return NO_ANSWER_CAUSES


def unbuilt_units(sweep: Sweep) -> Counter:
    """Per (benchmark, model, condition): later-stage units that were never built because the
    units they depend on have no answer. Found by planning the rerun against the simulated
    provider (in a scratch copy, nothing is sent): the units it would create that are not stored."""
    from prefray.engine.flow.dryrun import simulate

    stored = set(read_rows(sweep.run_dir, columns=["unit_id"]).column("unit_id").to_pylist())
    rows = simulate(sweep.with_policy(SendPolicy(resend_causes=no_answer_causes())),
                    output_ratio=RunConfig.estimate_output_ratio)
    unbuilt: Counter = Counter()
    for uid, benchmark, model, condition in zip(*(rows[c].to_pylist() for c in
                                                  ("unit_id", "benchmark", "model", "condition"))):
        if uid not in stored:
            unbuilt[(benchmark, model, condition)] += 1
    return unbuilt


def write_incomplete(run_dir: RunDir, missing: dict[tuple[str, str, str], int], unbuilt: Counter) -> Path:
    """RUN_DIR/incomplete.csv: per cell, units without an answer and units never built."""
    import csv

    path = run_dir.incomplete_csv
    cells = sorted(set(missing) | set(unbuilt))
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["benchmark", "model", "condition", "no_answer", "unbuilt", "incomplete_units"])
        for cell in cells:
            writer.writerow([*cell, missing.get(cell, 0), unbuilt.get(cell, 0),
                             missing.get(cell, 0) + unbuilt.get(cell, 0)])
    return path
