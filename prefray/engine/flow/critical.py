"""The critical path of a sweep: which stages to serve first on a lane, and which lanes bound the run.

A sweep ends when its slowest lane has sent its last call. Three things kept the whole suite above
that bound (bench/RESULTS.md, the whole-suite rows):
- a lane serves every job's waiting calls in fair turns, so a stage with many stages after it (PRISK
  narrowing: route → generate → reflect → extract → ...) waited behind stages nothing waits for (a
  judge's verdicts), and its chain reached the lane last;
- on a busy machine every gateway process gets the same share of the cores, so the slowest lane, one
  process among many, sent below its rate while lanes with time to spare took the cores;
- the slowest lane's work is partly another lane's answers (the BenchPreS judge's calls wait for each
  model's generations): with its producers' generations ranked behind their own long PRISK chains, the
  slowest lane judged everything there was to judge and stood idle for minutes.

So each stage gets a rank (`stage_ranks`): first the slowest lane its rows lead to (its own lane or
the lane of any stage that reads them, directly or through others; `LaneEstimate.tier`), then the
longest chain of stages after it in its job. A lane serves its highest-ranked waiting calls first
(calls/limits.py, FairTurns). Each rate-limited lane's minutes are estimated from the plan on a sample
(`estimated_minutes`, the horizon's estimate without its safety factor); the gateways of a lane with
much less to do than the slowest one run at a higher niceness (`LaneEstimate.niceness`), so when the
cores are short the lanes that bound the run keep theirs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from prefray.engine.benchmark import Stage
from prefray.engine.sweep import Sweep
from prefray.engine.types import ModelSpec

# A lane whose estimated minutes are below this share of the slowest lane's has time to spare.
SLACK_SHARE = 0.5
# The niceness of such a lane's gateway processes (the driver and the other gateways: 0). At 10 the
# kernel gives a process about a ninth of the CPU share of one at 0 when both want more (at 5, a
# third: the whole suite's 14 lanes with time to spare still took half the cores, and its slowest
# lane sent at 74% of its rate; bench/RESULTS.md).
SLACK_NICENESS = 10
# A rank is tier × TIER_STRIDE + chain: any tier outranks every chain below it (chains are a handful
# of stages long).
TIER_STRIDE = 1000


@dataclass(frozen=True)
class LaneEstimate:
    """Each rate-limited lane's estimated minutes (lanes as horizon.lane_of keys them); empty when
    there is nothing to compare (fewer than two such lanes, or no estimate)."""

    minutes: dict[tuple, float] = field(default_factory=dict)

    @cached_property
    def _tiers(self) -> dict[tuple, int]:
        order = sorted(set(self.minutes.values()))
        return {lane: order.index(value) + 1 for lane, value in self.minutes.items() if value > 0}

    def tier(self, spec: ModelSpec) -> int:
        """The lane's place among the estimated lanes, slowest highest; 0 for a lane not estimated."""
        from prefray.engine.flow.horizon import lane_of

        return self._tiers.get(lane_of(spec), 0)

    def niceness(self) -> dict[tuple[str, str], int]:
        """SLACK_NICENESS, by (endpoint key, model id), for each lane estimated below SLACK_SHARE of
        the slowest lane's minutes (calls/dispatch.py's Gateways.niceness)."""
        slowest = max(self.minutes.values(), default=0.0)
        if slowest <= 0:
            return {}
        return {(lane[0], lane[1]): SLACK_NICENESS for lane, value in self.minutes.items()
                if value < SLACK_SHARE * slowest}


def stage_ranks(stages: Sequence[Stage], tier_of: Callable[[Stage], int] = lambda stage: 0) -> dict[str, int]:
    """Per stage: the highest `tier_of` among it and the stages that read its rows after it (directly or
    through others) × TIER_STRIDE, plus the number of stages on the longest chain that reads its rows
    (0: none)."""
    readers: dict[str, list[str]] = {s.name: [] for s in stages}
    for i, stage in enumerate(stages):
        inputs = [s.name for s in stages[:i]] if stage.inputs is None else list(stage.inputs)
        for name in inputs:
            if name in readers:
                readers[name].append(stage.name)
    chains: dict[str, int] = {}
    tiers: dict[str, int] = {}
    for stage in reversed(stages):   # a stage is read only by later ones
        chains[stage.name] = max((chains[r] + 1 for r in readers[stage.name]), default=0)
        tiers[stage.name] = max([tier_of(stage), *(tiers[r] for r in readers[stage.name])])
    return {s.name: tiers[s.name] * TIER_STRIDE + chains[s.name] for s in stages}


def estimated_minutes(sweep: Sweep) -> LaneEstimate:
    """Each rate-limited lane's estimated minutes at its declared rates (horizon.py's sampled plan)."""
    from prefray.engine.flow.horizon import estimated_lanes, limited_lanes, plan_settings

    jobs = sweep.job_list
    limited = limited_lanes(jobs)
    if len(limited) < 2:
        return LaneEstimate()
    lanes = estimated_lanes(jobs, sweep.benchmarks, sweep.instances, sweep.run_dir, plan_settings(sweep),
                            limited, safety=1, sampled=sweep.sampled_rates)   # the limit check's counts
    return LaneEstimate({lane: calls.minutes() for lane, calls in lanes.items()})
