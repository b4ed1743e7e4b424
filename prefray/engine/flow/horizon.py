"""Limits a plan cannot run under are refused before Ray starts: one line each, with the numbers.

What makes a limit impossible, per rate-limit lane (endpoint and model id):
- rate (`model.rpm`, `model.tpm`): a lane paced at rpm sends n calls in at least (n - 1)/rpm
  minutes, and t input tokens need at least t/tpm minutes; beyond HORIZON_MINUTES the run would
  wait, silently, longer than anyone waits for a run (`model.rpm=1e-9` sends one call, then nothing
  for ~1,900 years).
- one call above the tpm (`model.tpm`): a provider that enforces a tpm refuses a request of more
  input tokens than the whole minute holds; when even the lane's smallest call is larger, no call
  can ever be answered.
- the budget (`run.budget_usd`): the first call a run sends is one of a stage that reads no earlier
  stage (every other stage waits for answers), and a call first reserves its maximum cost
  (money/budget.py); a budget below the cheapest of those reservations can pay for no call.
- the context window (`model.context_tokens`): a call's prompt and output budget must fit in it;
  when even the lane's smallest call does not, every call fails.
Timeouts and waits (`model.timeout_s`, `model.max_wait_s`, `run.batch.poll_s`) must be above 0 and
at most a week; the schema refuses the rest (engine/config/schema.py: SECONDS_MAX).

Counted, not simulated, in two steps so that a big sweep pays little:
1. The stages that read no earlier stage are built for each (benchmark, condition) cell once (no
   answers needed): their calls are exactly what the run sends first, whatever the answers. The
   budget, tpm and context checks read these; so does the rate check, as a lower bound.
2. The rate check of a lane that step 1 does not refuse needs the calls of every stage (judges,
   extractors, ...), which only the counting plan knows (flow/counting.py: the stages built from
   simulated answers, ~10 s for the whole suite). It is asked on a seeded sample of
   `SAMPLE_INSTANCES` instances per job first: a lane whose sample, scaled to its instances and
   times SAFETY, fits its horizon is cleared; only a lane near its horizon is counted in full, and
   refused on the plan's exact calls (the numbers `prefray plan` prints).
A job with stored rows (a resume) or a response cache holding answers sends fewer calls than it
builds: its lanes skip step 1's rate bound and are counted in full, with the stored rows and cache;
its first calls (stored already) are left out of the tpm and context checks, and the budget check
is left out (its next call may be a cheaper stage's, a cached answer costs nothing).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prefray.engine.benchmark import Benchmark, Job, Stage, StageContext
from prefray.engine.calls.limits import min_minutes
from prefray.engine.calls.output_budget import final_request, output_budget
from prefray.engine.calls.pricing import max_call_cost
from prefray.engine.flow.counting import SAMPLE_INSTANCES, _cell_key, count_jobs
from prefray.engine.rundir.cache import ResponseCache
from prefray.engine.rundir.layout import RunDir
from prefray.engine.sweep import Sweep
from prefray.engine.types import ChatRequest, ModelSpec

HORIZON_MINUTES = 7 * 24 * 60      # a week
SAFETY = 4                         # a sample's calls, scaled, times this: a lane cleared without a full count


Lane = tuple[str, str, float | None, float | None]


def lane_of(spec: ModelSpec) -> Lane:
    """Endpoint, model id and declared limits: what one limiter bucket paces (calls/limits.py)."""
    return spec.endpoint_key, spec.model_id, spec.rpm, spec.tpm


@dataclass
class _Group:
    """A cell's answer-independent calls that ask the same request parameters."""

    calls: int = 0
    tokens: int = 0
    smallest: ChatRequest | None = None
    smallest_tokens: int = 0

    def add(self, request: ChatRequest) -> None:
        tokens = request.estimated_input_tokens()
        self.calls += 1
        self.tokens += tokens
        if self.smallest is None or tokens < self.smallest_tokens:
            self.smallest, self.smallest_tokens = request, tokens


@dataclass
class LaneCalls:
    """A lane's calls found so far: how many, their input tokens, and its smallest call."""

    spec: ModelSpec
    role: str = "subject"                 # the role it answers (names the key a refusal points at)
    calls: int = 0
    tokens: int = 0
    smallest_input: int | None = None     # input tokens of the smallest call
    smallest_fit: int | None = None       # input + output budget of the call that needs the least context
    cheapest_usd: float | None = None     # the smallest reservation of one call
    counted: str = "at least"             # "at least" (step 1), "about" (a sample), "" (the plan's count)

    def minutes(self) -> float:
        """The least time these calls take at the lane's declared rpm and tpm."""
        return min_minutes(self.spec, self.calls, self.tokens)

    def add(self, group: _Group, spec: ModelSpec) -> None:
        request = final_request(spec, group.smallest)
        budget = output_budget(spec, group.smallest.params)
        self.calls += group.calls
        self.tokens += group.tokens
        self.smallest_input = _least(self.smallest_input, group.smallest_tokens)
        self.smallest_fit = _least(self.smallest_fit, group.smallest_tokens + (budget[1] if budget else 0))
        self.cheapest_usd = _least(self.cheapest_usd, max_call_cost(spec, request))


def _least(a: Any, b: Any) -> Any:
    return b if a is None else min(a, b)


def _independent(stages: list[Stage]) -> list[Stage]:
    """The stages built from the dataset alone: the first (reading every earlier stage: none) and
    any that reads no stage."""
    return [s for i, s in enumerate(stages) if s.inputs == () or (s.inputs is None and i == 0)]


def _cell_groups(job: Job, benchmark: Benchmark, instances: Sequence[Any]) -> dict[tuple[str, str], _Group]:
    """(role, request params) → the answer-independent calls of a job's cell."""
    groups: dict[tuple[str, str], _Group] = {}
    for stage in _independent(benchmark.stages(job)):
        for unit in stage.build(StageContext(job, instances, {})):
            params = json.dumps(unit.request.params, sort_keys=True, default=str)
            groups.setdefault((stage.role, params), _Group()).add(unit.request)
    return groups


def first_calls(jobs: Sequence[Job], benchmarks: dict[str, Benchmark],
                instances: dict[int, Sequence[Any]]) -> dict[Lane, LaneCalls]:
    """Step 1: per lane, the calls of the stages that read no earlier stage (built once per cell)."""
    cells: dict[str, dict[tuple[str, str], _Group]] = {}
    lanes: dict[Lane, LaneCalls] = {}
    for index, job in enumerate(jobs):
        if index not in instances:
            continue
        key = _cell_key(job)
        if key not in cells:
            cells[key] = _cell_groups(job, benchmarks[job.benchmark], instances[index])
        for (role, _), group in cells[key].items():
            spec = job.role_model(role)
            lanes.setdefault(lane_of(spec), LaneCalls(spec, role)).add(group, spec)
    return lanes


def setting(role: str, name: str) -> str:
    """The override that sets `name` for the model answering `role`."""
    return {"subject": f"model.{name}", "judge": f"judge.{name}"}.get(role, f"{name} of the {role} model")


def _over(lane: LaneCalls) -> str | None:
    """The lane's rate problem, if its calls cannot finish within the horizon."""
    spec, at = lane.spec, f"{lane.counted} " if lane.counted else ""
    rpm, tpm = setting(lane.role, "rpm"), setting(lane.role, "tpm")
    minutes = (lane.calls - 1) / spec.rpm if spec.rpm else 0.0
    if minutes > HORIZON_MINUTES:
        return (f"{rpm}={spec.rpm:g} cannot finish this plan: {spec.name} ({spec.model_id}) answers {at}"
                f"{lane.calls} calls, one every {60 / spec.rpm:.3g} s, so at least {minutes:.3g} minutes, beyond "
                f"the {HORIZON_MINUTES} minutes (7 days) a run may wait; raise {rpm} to at least "
                f"{(lane.calls - 1) / HORIZON_MINUTES:.3g} or lower limit")
    minutes = lane.tokens / spec.tpm if spec.tpm else 0.0
    if minutes > HORIZON_MINUTES:
        return (f"{tpm}={spec.tpm:g} cannot finish this plan: {spec.name} ({spec.model_id}) is sent {at}"
                f"{lane.tokens} input tokens in {lane.calls} calls, so at least {minutes:.3g} minutes, beyond the "
                f"{HORIZON_MINUTES} minutes (7 days) a run may wait; raise {tpm} to at least "
                f"{lane.tokens / HORIZON_MINUTES:.3g} or lower limit")
    return None


def _one_call_problems(lane: LaneCalls) -> list[str]:
    """A tpm or context window that not even the lane's smallest call fits."""
    spec, key, out = lane.spec, lambda name: setting(lane.role, name), []
    if spec.tpm and lane.smallest_input is not None and lane.smallest_input > spec.tpm:
        out.append(f"{key('tpm')}={spec.tpm:g} is below any one call: {spec.name} ({spec.model_id})'s smallest call "
                   f"is {lane.smallest_input} input tokens, and a provider enforcing the tpm refuses a request "
                   f"larger than its minute; raise {key('tpm')} to at least {lane.smallest_input}")
    if spec.context_tokens and lane.smallest_fit is not None and lane.smallest_fit > spec.context_tokens:
        out.append(f"{key('context_tokens')}={spec.context_tokens} holds no call: {spec.name} ({spec.model_id})'s "
                   f"smallest call needs {lane.smallest_fit} tokens (prompt and output budget); lower "
                   f"{key('params.max_tokens')} or {key('max_output_tokens')}")
    return out


def _declared_fit(spec: ModelSpec, role: str) -> str | None:
    """A lane with no answer-independent call: its own output budget alone must fit its context."""
    budget, key = output_budget(spec, {}), lambda name: setting(role, name)
    if spec.context_tokens and budget and budget[1] >= spec.context_tokens:
        return (f"{key('context_tokens')}={spec.context_tokens} holds no call: {spec.name} ({spec.model_id}) asks "
                f"{budget[1]} output tokens per call ({budget[0]}), leaving no room for a prompt; lower "
                f"{key('params.' + budget[0])} or {key('max_output_tokens')}")
    return None


def _budget_problem(lanes: dict[Lane, LaneCalls], budget_usd: float | None) -> str | None:
    priced = [lane for lane in lanes.values() if lane.cheapest_usd is not None]
    if budget_usd is None or not priced:
        return None
    cheapest = min(priced, key=lambda lane: lane.cheapest_usd)
    if budget_usd >= cheapest.cheapest_usd:
        return None
    return (f"run.budget_usd={budget_usd:g} cannot pay for one call: the run's first calls each reserve at least "
            f"{cheapest.cheapest_usd:.3g} USD ({cheapest.spec.name}, {cheapest.spec.model_id}: its maximum cost, "
            f"money/budget.py); raise run.budget_usd to at least {cheapest.cheapest_usd:.3g}")


def _counted(jobs: Sequence[Job], benchmarks: dict[str, Benchmark], instances: dict[int, Sequence[Any]],
             run_dir: RunDir, settings: dict[str, Any], lanes: set[Lane]) -> dict[Lane, LaneCalls]:
    """The counting plan's sent calls and input tokens per lane, over the jobs that use `lanes`."""
    picked = [i for i, job in enumerate(jobs) if i in instances
              and any(lane_of(s) in lanes for s in (job.model, *job.roles.values()))]
    if not picked:
        return {}
    cells: dict[tuple[str, str, str], list[Job]] = {}
    for i in picked:
        cells.setdefault((jobs[i].benchmark, jobs[i].model.name, jobs[i].condition), []).append(jobs[i])
    rows = count_jobs([jobs[i] for i in picked], benchmarks, {k: instances[i] for k, i in enumerate(picked)},
                 run_dir, settings)
    found: dict[Lane, LaneCalls] = {}
    names = ["benchmark", "model", "condition", "role", "judge", "cached", "calls", "input_tokens"]
    for row in rows.select(names).to_pylist():
        spec = _answering(cells[(row["benchmark"], row["model"], row["condition"])], row["role"], row["judge"])
        if row["cached"] or lane_of(spec) not in lanes:
            continue
        lane = found.setdefault(lane_of(spec), LaneCalls(spec, row["role"], counted=""))
        lane.calls += row["calls"]
        lane.tokens += row["input_tokens"]
    return found


def _answering(jobs: list[Job], role: str, judge: str) -> ModelSpec:
    """The model that answers a plan row's stage: the subject, or the role's model named `judge`."""
    specs = [job.role_model(role) for job in jobs]
    return next((s for s in specs if role == "subject" or s.name == judge), specs[0])


def estimated_lanes(jobs: Sequence[Job], benchmarks: dict[str, Benchmark], instances: dict[int, Sequence[Any]],
                    run_dir: RunDir, settings: dict[str, Any], lanes: set[Lane], safety: float,
                    sampled: dict[str, Any] | None = None) -> dict[Lane, LaneCalls]:
    """Calls and input tokens per lane of `lanes`, estimated: each (benchmark, condition) cell's plan
    counted once, for one of its jobs, on a seeded sample of `SAMPLE_INSTANCES` instances (the
    counting plan's); its calls and tokens per instance and role, times each job's instances, times
    `safety`, summed per lane. The models of a cell build the same units (counting.py), so one count
    serves them; `sampled` keeps each cell's count for the next estimate of the same sweep."""
    per_instance: dict[str, dict[str, tuple[float, float]]] = {} if sampled is None else sampled
    estimate: dict[Lane, LaneCalls] = {}
    for index, job in enumerate(jobs):
        specs = [(role, job.role_model(role)) for role in ("subject", *job.roles)]
        if index not in instances or not any(lane_of(spec) in lanes for _, spec in specs):
            continue
        key = _cell_key(job)
        if key not in per_instance:
            per_instance[key] = _rates(job, benchmarks, instances[index], run_dir, settings)
        for role, (calls, tokens) in per_instance[key].items():
            spec = job.role_model(role)
            if lane_of(spec) in lanes:
                lane = estimate.setdefault(lane_of(spec), LaneCalls(spec, role, counted="about"))
                lane.calls += round(calls * len(instances[index]) * safety)
                lane.tokens += round(tokens * len(instances[index]) * safety)
    return estimate


def _screened(jobs: Sequence[Job], benchmarks: dict[str, Benchmark], instances: dict[int, Sequence[Any]],
              run_dir: RunDir, settings: dict[str, Any], lanes: set[Lane], sampled: dict[str, Any]) -> set[Lane]:
    """The lanes that may not fit their horizon: their sampled estimate times SAFETY."""
    estimate = estimated_lanes(jobs, benchmarks, instances, run_dir, settings, lanes, SAFETY, sampled)
    return {lane for lane, calls in estimate.items() if _over(calls)}


def _rates(job: Job, benchmarks: dict[str, Benchmark], data: Sequence[Any], run_dir: RunDir,
           settings: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """Per role, the calls and input tokens per instance of a job's plan on a seeded sample."""
    sample = data
    if len(data) > SAMPLE_INSTANCES:
        sample = [data[k] for k in sorted(random.Random(0).sample(range(len(data)), SAMPLE_INSTANCES))]
    rows = count_jobs([job], benchmarks, {0: sample}, run_dir, {**settings, "cache": None})
    rates: dict[str, tuple[float, float]] = {}
    for row in rows.select(["role", "calls", "input_tokens"]).to_pylist():
        calls, tokens = rates.get(row["role"], (0.0, 0.0))
        rates[row["role"]] = (calls + row["calls"] / len(sample), tokens + row["input_tokens"] / len(sample))
    return rates


def _stored_any(job: Job, run_dir: RunDir) -> bool:
    return run_dir.job(job.benchmark, job.model.name, job.condition).is_dir()


def _resumed(jobs: Sequence[Job], run_dir: RunDir) -> set[Lane]:
    """Lanes of jobs that have stored rows: they send fewer calls than they build."""
    return {lane_of(s) for job in jobs if _stored_any(job, run_dir) for s in (job.model, *job.roles.values())}


def plan_settings(sweep: Sweep, cache: ResponseCache | None = None) -> dict[str, Any]:
    """The counting plan's settings for this sweep: `cache`, the response cache it may answer from
    (or None), `output_ratio` and `rerun_causes` (the stored failures a rerun sends again)."""
    return {"cache": cache, "output_ratio": sweep.run.estimate_output_ratio,
            "rerun_causes": sweep.policy.resend_causes}


def limited_lanes(jobs: Sequence[Job]) -> set[Lane]:
    """The lanes of these jobs with a declared rpm or tpm, sent interactively (not the batch tier)."""
    return {lane_of(s) for job in jobs for s in (job.model, *job.roles.values())
            if (s.rpm or s.tpm) and s.tier == "interactive"}


def limit_problems(sweep: Sweep, cache: ResponseCache | None = None) -> list[str]:
    """One line per limit the sweep cannot run under (empty: every limit can be met); `cache`: the
    response cache the counting plan may answer from, or None."""
    return job_limit_problems(sweep.job_list, sweep.benchmarks, sweep.instances, sweep.run_dir,
                              plan_settings(sweep, cache), sweep.run.budget_usd, sweep.sampled_rates)


def job_limit_problems(jobs: Sequence[Job], benchmarks: dict[str, Benchmark], instances: dict[int, Sequence[Any]],
                       run_dir: RunDir, settings: dict[str, Any], budget_usd: float | None,
                       sampled: dict[str, Any] | None = None) -> list[str]:
    """limit_problems of these jobs; `settings`: the counting plan's (`cache`, `output_ratio`,
    `rerun_causes`: the stored failures a rerun sends again); `sampled`: see `estimated_lanes`."""
    cache, resumed = settings.get("cache"), _resumed(jobs, run_dir)
    has_answers = cache is not None and cache.db.execute("SELECT 1 FROM responses LIMIT 1").fetchone()
    # a resumed job's first calls are stored already: its next call may be any stage's
    fresh = {i: data for i, data in instances.items() if not _stored_any(jobs[i], run_dir)}
    lanes = first_calls(jobs, benchmarks, fresh)
    problems = [p for lane in lanes.values() for p in _one_call_problems(lane)]
    seen = {lane_of(s): (s, role) for job in jobs for role, s in (("subject", job.model), *job.roles.items())}
    problems += [p for lane, (spec, role) in seen.items() if lane not in lanes and (p := _declared_fit(spec, role))]
    budget = None if has_answers or len(fresh) < len(instances) else _budget_problem(lanes, budget_usd)
    if budget is not None:   # (cached answers cost nothing, and a resume's next call may be a cheaper stage's)
        problems.append(budget)
    limited = limited_lanes(jobs)
    certain = set() if has_answers else limited - resumed
    over = {lane for lane in certain if lane in lanes and _over(lanes[lane])}
    problems += [_over(lanes[lane]) for lane in sorted(over)]
    rest = limited - over
    if not rest:
        return problems
    near = _screened(jobs, benchmarks, instances, run_dir, settings, rest - resumed, {} if sampled is None else sampled)
    exact = _counted(jobs, benchmarks, instances, run_dir, settings, near | (rest & resumed))
    return problems + [p for lane in sorted(exact) if (p := _over(exact[lane]))]
