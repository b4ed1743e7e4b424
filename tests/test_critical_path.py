"""The critical path: a lane serves the stages with the most stages after them first, and the
gateways of lanes with time to spare give the cores to the lanes that bound the run."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from prefray.engine.benchmark import Stage
from prefray.engine.calls.limits import ModelLimits
from prefray.engine.flow.critical import SLACK_NICENESS, TIER_STRIDE, LaneEstimate, stage_ranks


def _stage(name: str, inputs: tuple[str, ...] | None = None) -> Stage:
    return Stage(name, lambda context: [], inputs=inputs)


def test_a_stage_ranks_by_the_longest_chain_that_reads_it():
    # a ← b (reads every earlier stage: a) ; c reads a only ; d reads a, b, c ; e reads nothing
    stages = [_stage("a"), _stage("b"), _stage("c", ("a",)), _stage("d"), _stage("e", ())]
    # longest chains after each: a → b → d (2), b → d (1), c → d (1), d (0), e (0)
    assert stage_ranks(stages) == {"a": 2, "b": 1, "c": 1, "d": 0, "e": 0}


def test_a_stage_ranks_first_by_the_slowest_lane_its_rows_lead_to():
    # a → b → c → d (a long chain on lanes with time to spare: tier 1), e → f (f on the slowest lane:
    # tier 3), g on a middle lane (tier 2) reading nothing; h reads e and runs on tier 1
    tier = {"a": 1, "b": 1, "c": 1, "d": 1, "e": 1, "f": 3, "g": 2, "h": 1}
    stages = [_stage("a", ()), _stage("b", ("a",)), _stage("c", ("b",)), _stage("d", ("c",)),
              _stage("e", ()), _stage("f", ("e",)), _stage("g", ()), _stage("h", ("e",))]
    ranks = stage_ranks(stages, lambda stage: tier[stage.name])
    # e's rows lead to f's slowest lane: e outranks a, whose chain is longer but stays on tier 1
    assert ranks == {"a": TIER_STRIDE + 3, "b": TIER_STRIDE + 2, "c": TIER_STRIDE + 1, "d": TIER_STRIDE,
                     "e": 3 * TIER_STRIDE + 1, "f": 3 * TIER_STRIDE, "g": 2 * TIER_STRIDE, "h": TIER_STRIDE}
    assert sorted(ranks, key=ranks.get, reverse=True)[:3] == ["e", "f", "g"]


def test_lanes_are_tiered_by_their_estimated_minutes():
    from prefray.app.compose import compose_sweep

    _, jobs, _ = compose_sweep(["model=fake", "judge=fake", "benchmark=benchpres", "condition=default"], False)
    spec = jobs[0].model
    lane = (spec.endpoint_key, spec.model_id, spec.rpm, spec.tpm)
    other = ("elsewhere", "other-model", 60, None)
    assert LaneEstimate({lane: 30.0, other: 10.0}).tier(spec) == 2
    assert LaneEstimate({lane: 10.0, other: 30.0}).tier(spec) == 1
    assert LaneEstimate({lane: 0.0, other: 30.0}).tier(spec) == 0   # nothing to send: no tier
    assert LaneEstimate({other: 30.0}).tier(spec) == 0 and LaneEstimate().tier(spec) == 0


def test_the_built_in_benchmarks_rank_their_stages():
    """BenchPreS: generate is read by the judge and completeness stages, which nothing reads."""
    from prefray.app.compose import compose_sweep

    _, jobs, benchmarks = compose_sweep(["model=fake", "judge=fake", "benchmark=benchpres", "condition=default"],
                                        False)
    ranks = stage_ranks(benchmarks["benchpres"].stages(jobs[0]))
    assert ranks["generate"] == 1 and ranks["judge"] == 0
    assert max(ranks.values()) == 1 and list(ranks.values()).count(0) == len(ranks) - 1


async def send_ranked(limits: ModelLimits, calls: list[tuple[str, int]], latency: float) -> list[str]:
    """Queue one call per (tag, rank), in this order; return the tags in the order the lane sent them."""
    sent: list[str] = []

    async def one(tag: str, rank: int) -> None:
        async with limits.slot(10, tag, rank):
            sent.append(tag)
            await asyncio.sleep(latency)

    tasks = []
    for tag, rank in calls:
        tasks.append(asyncio.ensure_future(one(tag, rank)))
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    return sent


def test_a_lane_serves_higher_ranks_first_and_takes_turns_within_a_rank():
    # one call at a time, 50 ms each: every call is in line before the first is done. The first
    # "leaf" goes on arrival and the second holds the turn waiting for the slot (as in
    # test_limits.py's turns); then the chains of rank 2 alternate, then rank 1, then the leaves
    calls = [("leaf", 0)] * 4 + [("mid", 1)] * 2 + [("x", 2)] * 3 + [("y", 2)] * 2
    sent = asyncio.run(send_ranked(ModelLimits(None, None, 1), calls, 0.05))
    assert sent == ["leaf", "leaf", "x", "y", "x", "y", "x", "mid", "mid", "leaf", "leaf"]


def test_lanes_well_below_the_slowest_one_are_niced():
    minutes = {("e", "slowest", 1, None): 100.0, ("e", "close", 1, None): 60.0,
               ("e", "half", 1, None): 50.0, ("f", "idle", 1, None): 49.9}
    # below half of the slowest lane's minutes: time to spare
    assert LaneEstimate(minutes).niceness() == {("f", "idle"): SLACK_NICENESS}
    assert LaneEstimate({}).niceness() == {} and LaneEstimate({("e", "m", None, None): 0.0}).niceness() == {}


NICE_SCRIPT = """
import json, os, threading, time
from prefray.engine.calls.gateway import lower_priority
stop = threading.Event()
before = threading.Thread(target=stop.wait)
before.start()
os.setpriority(os.PRIO_PROCESS, before.native_id, 7)   # a thread already nicer than asked stays so
lower_priority(3)
after = threading.Thread(target=stop.wait)
after.start()
nice = {t: os.getpriority(os.PRIO_PROCESS, int(t)) for t in os.listdir("/proc/self/task")}
stop.set()
print(json.dumps({"main": nice[str(threading.main_thread().native_id)], "before": nice[str(before.native_id)],
                  "after": nice[str(after.native_id)], "all": sorted(nice.values())}))
"""


def test_a_process_lowers_the_priority_of_every_thread_and_never_raises_it():
    from tests.conftest import ROOT

    done = subprocess.run([sys.executable, "-c", NICE_SCRIPT], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    base = __import__("os").getpriority(__import__("os").PRIO_PROCESS, 0)
    assert out["main"] == max(3, base) and out["after"] == max(3, base) and out["before"] == max(7, base)
    assert min(out["all"]) >= max(3, base)


GATEWAYS_SCRIPT = """
import asyncio, json, os, sys
import ray
from prefray.engine.calls.dispatch import Gateways
from prefray.engine.types import ModelSpec

url = sys.argv[1]
bound = ModelSpec(name="bound", provider="openai", model_id="bound-model", base_url=url, rpm=600)
slack = ModelSpec(name="slack", provider="openai", model_id="slack-model", base_url=url, rpm=60)
gateways = Gateways(niceness={(slack.endpoint_key, slack.model_id): 5})
gateways.start([bound, slack])

def threads_nice(actor):
    return sorted({os.getpriority(os.PRIO_PROCESS, int(t)) for t in os.listdir("/proc/self/task")})

found = {key.split("|")[-1]: ray.get(handle.__ray_call__.remote(threads_nice))
         for key, handle in gateways.handles.items()}
asyncio.run(gateways.close())
print(json.dumps(found))
"""


@pytest.mark.e2e
def test_the_gateways_of_a_lane_with_time_to_spare_run_niced(ray_address, make_fake_server):
    from tests.conftest import script_here

    server = make_fake_server()
    done = script_here(GATEWAYS_SCRIPT, server.openai_url)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"bound-model#0": [0], "slack-model#0": [5]}


def rate_limited_sweep(tmp_path):
    """BenchPreS on the fake, 4 instances, the model at 60 rpm and the judge at 30, checked."""
    from prefray.app.compose import compose_sweep, run_dir_of, sweep_of
    from prefray.app.preflight import preflight
    from prefray.engine.rundir.layout import RunDir

    configs, jobs, benchmarks = compose_sweep(["model=fake", "judge=fake", "benchmark=benchpres", "condition=default",
                                               "limit=4", "model.rpm=60", "judge.rpm=30", f"run.dir={tmp_path}/r"],
                                              False)
    instances, errors = preflight(jobs, benchmarks)
    assert not errors
    return sweep_of(configs, jobs, benchmarks, instances, RunDir(run_dir_of(configs)))


def test_a_lanes_estimate_is_its_counted_calls_at_its_rate_when_the_sample_is_the_whole_data(tmp_path):
    """With at most SAMPLE_INSTANCES instances the sample is all of them: the estimate of each lane's
    minutes is then the counting plan's calls of that lane ÷ its rpm (computed here from the plan)."""
    from prefray.engine.flow.counting import count
    from prefray.engine.flow.critical import estimated_minutes

    sweep = rate_limited_sweep(tmp_path)
    jobs = sweep.job_list
    plan = count(sweep).to_pylist()
    calls = {role: sum(r["calls"] for r in plan if (r["role"] == "subject") == (role == "subject"))
             for role in ("subject", "judge")}
    assert calls["subject"] > 0 and calls["judge"] > calls["subject"]
    minutes = {lane[1]: value for lane, value in estimated_minutes(sweep).minutes.items()}
    assert minutes == pytest.approx({jobs[0].model.model_id: calls["subject"] / 60,
                                     jobs[0].roles["judge"].model_id: calls["judge"] / 30})


def test_the_lane_estimate_reads_the_limit_checks_sampled_counts(tmp_path):
    """The limit check samples each cell's plan once; the run's lane estimate reads those counts (a
    count doubled in between doubles the estimate) and a sweep under another send policy starts empty."""
    from prefray.engine.flow.critical import estimated_minutes
    from prefray.engine.flow.horizon import limit_problems
    from prefray.engine.sweep import SendPolicy

    sweep = rate_limited_sweep(tmp_path)
    assert sweep.sampled_rates == {} and limit_problems(sweep) == []
    assert len(sweep.sampled_rates) == 1
    checked = estimated_minutes(sweep).minutes
    for rates in sweep.sampled_rates.values():
        rates.update({role: (2 * calls, 2 * tokens) for role, (calls, tokens) in rates.items()})
    assert estimated_minutes(sweep).minutes == pytest.approx({lane: 2 * value for lane, value in checked.items()})
    other = sweep.with_policy(SendPolicy(resend_causes=frozenset({"timeout"})))
    assert other.sampled_rates == {} and estimated_minutes(other).minutes == pytest.approx(checked)


def test_a_job_ranks_the_stages_that_feed_the_slowest_lane_first(tmp_path):
    """The sweep's lane estimate reaches a job's stage ranks: with the judge's lane estimated slowest,
    BenchPreS generation (which the judge reads) ranks on the judge's tier; with the model's lane
    slowest, the judge's verdicts (read by nothing on a slower lane) rank below generation's tier."""
    from prefray.engine.flow.critical import estimated_minutes
    from prefray.engine.flow.runner import JobRunner, Outlets

    sweep = rate_limited_sweep(tmp_path)
    prepared = sweep.jobs[0]
    stages = prepared.benchmark.stages(prepared.job)
    judge_slowest = estimated_minutes(sweep)   # the judge at 30 rpm judges every answer: the slower lane
    model, judge = prepared.job.model, prepared.job.roles["judge"]
    assert judge_slowest.tier(judge) == 2 and judge_slowest.tier(model) == 1
    ranks = JobRunner(prepared, sweep, Outlets.of(sweep.run_dir), None, judge_slowest).stage_ranks(stages)
    assert ranks["generate"] == 2 * TIER_STRIDE + 1 and ranks["judge"] == 2 * TIER_STRIDE
    swapped = LaneEstimate({lane: 1000.0 if lane[1] == model.model_id else value
                            for lane, value in judge_slowest.minutes.items()})
    ranks = JobRunner(prepared, sweep, Outlets.of(sweep.run_dir), None, swapped).stage_ranks(stages)
    assert ranks["generate"] == 2 * TIER_STRIDE + 1 and ranks["judge"] == TIER_STRIDE
    unranked = JobRunner(prepared, sweep, Outlets.of(sweep.run_dir), None).stage_ranks(stages)
    assert unranked["generate"] == 1 and unranked["judge"] == 0
