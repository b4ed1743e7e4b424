"""Rate limits a plan cannot finish under are refused before Ray starts, with the numbers.

A lane paced at `rpm` requests a minute sends its first call at once and each next one 60/rpm
seconds later, so n calls need at least (n - 1)/rpm minutes. Counted, not simulated: each job's
evaluated model answers at least one call per dataset instance it is given (its first stage), so
the lower bound per lane (endpoint and model id) is the instances of its jobs. A lane whose lower
bound exceeds HORIZON_MINUTES would wait, silently, longer than anyone waits for a run
(`model.rpm=1e-9` sends one call, then nothing for ~1,900 years): the launch refuses instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

HORIZON_MINUTES = 7 * 24 * 60      # a week


def horizon_problems(jobs: Sequence[Any], instances: dict[int, Sequence[Any]]) -> list[str]:
    """One line per evaluated model whose rpm cannot send its jobs' first calls within the horizon."""
    calls: dict[tuple[str, str], int] = {}
    specs: dict[tuple[str, str], Any] = {}
    for index, job in enumerate(jobs):
        spec = job.model
        if not spec.rpm or getattr(spec, "tier", "interactive") != "interactive":
            continue
        lane = (spec.endpoint_key, spec.model_id)
        calls[lane] = calls.get(lane, 0) + len(instances.get(index, ()))
        specs[lane] = spec
    problems = []
    for lane, count in sorted(calls.items()):
        spec = specs[lane]
        minutes = (count - 1) / spec.rpm
        if minutes > HORIZON_MINUTES:
            problems.append(
                f"model.rpm={spec.rpm:g} cannot finish this plan: {spec.name} ({spec.model_id}) answers at least "
                f"{count} calls, one every {60 / spec.rpm:.3g} s, so at least {minutes:.3g} minutes, beyond the "
                f"{HORIZON_MINUTES} minutes (7 days) a run may wait; raise model.rpm to at least "
                f"{(count - 1) / HORIZON_MINUTES:.3g} or lower limit")
    return problems
