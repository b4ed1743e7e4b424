"""The critical path of a sweep: which stages to serve first on a lane, and which lanes bound the run.

A sweep ends when its slowest lane has sent its last call. Two things kept the whole suite above
that bound (bench/RESULTS.md, the whole-suite row):
- a lane serves every job's waiting calls in fair turns, so a stage with many stages after it (PRISK
  narrowing: route → generate → reflect → extract → ...) waited behind stages nothing waits for (a
  judge's verdicts), and its chain reached the lane last;
- on a busy machine every gateway process gets the same share of the cores, so the slowest lane, one
  process among many, sent below its rate while lanes with time to spare took the cores.

So each stage gets a rank, the longest chain of stages after it in its job (`stage_ranks`): a lane
serves its highest-ranked waiting calls first (calls/limits.py, FairTurns). And each rate-limited lane's
minutes are estimated from the plan on a sample (`estimated_minutes`, the horizon's estimate without its
safety factor); the gateways of a lane with much less to do than the slowest one run at a higher
niceness (`gateway_niceness`), so when the cores are short the lanes that bound the run keep theirs.
"""

from __future__ import annotations

from collections.abc import Sequence

from prefray.engine.benchmark import Stage
from prefray.engine.sweep import Sweep

# A lane whose estimated minutes are below this share of the slowest lane's has time to spare.
SLACK_SHARE = 0.5
# The niceness of such a lane's gateway processes (the driver and the other gateways: 0). At 10 the
# kernel gives a process about a ninth of the CPU share of one at 0 when both want more (at 5, a
# third: the whole suite's 14 lanes with time to spare still took half the cores, and its slowest
# lane sent at 74% of its rate; bench/RESULTS.md).
SLACK_NICENESS = 10


def stage_ranks(stages: Sequence[Stage]) -> dict[str, int]:
    """Per stage, the number of stages on the longest chain that reads its rows after it (0: none)."""
    readers: dict[str, list[str]] = {s.name: [] for s in stages}
    for i, stage in enumerate(stages):
        inputs = [s.name for s in stages[:i]] if stage.inputs is None else list(stage.inputs)
        for name in inputs:
            if name in readers:
                readers[name].append(stage.name)
    ranks: dict[str, int] = {}
    for stage in reversed(stages):   # a stage is read only by later ones
        ranks[stage.name] = max((ranks[r] + 1 for r in readers[stage.name]), default=0)
    return ranks


def estimated_minutes(sweep: Sweep) -> dict[tuple, float]:
    """Each rate-limited lane's estimated minutes at its declared rates (horizon.py's sampled plan)."""
    from prefray.engine.flow.horizon import estimated_lanes, limited_lanes, plan_settings

    jobs = sweep.job_list
    limited = limited_lanes(jobs)
    if len(limited) < 2:
        return {}
    lanes = estimated_lanes(jobs, sweep.benchmarks, sweep.instances, sweep.run_dir, plan_settings(sweep),
                            limited, safety=1, sampled=sweep.sampled_rates)   # the limit check's counts
    return {lane: calls.minutes() for lane, calls in lanes.items()}


def gateway_niceness(minutes: dict[tuple, float]) -> dict[tuple[str, str], int]:
    """SLACK_NICENESS, by (endpoint key, model id), for each lane estimated below SLACK_SHARE of the
    slowest lane's minutes (calls/dispatch.py's Gateways.niceness)."""
    slowest = max(minutes.values(), default=0.0)
    if slowest <= 0:
        return {}
    return {(lane[0], lane[1]): SLACK_NICENESS for lane, value in minutes.items() if value < SLACK_SHARE * slowest}
