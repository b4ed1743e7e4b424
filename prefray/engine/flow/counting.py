"""The counting plan: what a launch (or rerun) would send, counted in this process.

No runner, no Ray, no shards: each job's stages are built in order, as the runner builds them,
from the rows the earlier stages would store. A stage that a later one reads gets its answers from
the synthetic answer rule (the dry run's, flow/dryrun.py: `SimulatedGateways`, the stage's
`example_answer` where the parser cannot read it), so a judge, extractor or matcher is built from
the same rows the simulation would give it; a stage nobody reads gets no answers at all.

Tokens, per unit: input = the request's estimate (characters / 4 plus a few per message, the
limiter's) of its rendered prompt; output = `run.estimate_output_ratio` × the request's output
budget, twice for an answer asked again because it does not parse (the simulation's numbers).

Exact where the run itself decides: a unit already stored in the run directory is not sent again
(resume; a rerun's causes are sent again), and a request the response cache holds is counted as
cached, from the run's own shards and cache. Later stages are built from those stored or cached
answers, as in a launch.

Jobs that differ only in the evaluated model are counted once. A (benchmark, condition) cell's
units depend on the model only through its output budget (the assumed answer length, which later
stages that quote the answer read): the cell is counted in full, once, for its most common model
settings, and that count is priced for every model whose output budget is the same for every
stage params the count met (output_budget's rule). A job with other output budgets takes its calls
from that count, and its tokens from its own count on a seeded sample of `SAMPLE_INSTANCES`
instances (the ratio estimator: the sample's tokens per call × the calls; counted in full when the
dataset is no larger).
With a response cache that holds answers, a job shares the count only if the cache holds none of
its subject units' answers (looked up with its own model's requests); the others are counted one by
one, in full, with the cache. Jobs with stored rows (resume) are counted one by one, in full.

The prompt cache: a stage's sent requests are grouped by the prefix they declare
(calls/cache_order.py: PrefixGroups), and each row prices its groups for its own answering model
(calls/pricing.py: expected_cache; no cached price, nothing expected), so a count shared by many
models is priced for each. A job counted on a sample takes its cell's full count's groups, as
shares of input read and written (a sample of instances would split a prefix's group).
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from prefray.engine.benchmark import Benchmark, Job, ParseError, Stage, StageContext
from prefray.engine.calls.cache_order import PrefixGroups
from prefray.engine.calls.output_budget import final_request, output_budget
from prefray.engine.calls.pricing import cache_saving, call_cost, max_output_tokens
from prefray.engine.config.schema import RunConfig
from prefray.engine.flow.dryrun import SimulatedGateways
from prefray.engine.flow.runner import stored_row, unit_id
from prefray.engine.money.estimate_rows import PLAN_SCHEMA
from prefray.engine.rundir.cache import ResponseCache, cache_key
from prefray.engine.rundir.layout import RunDir
from prefray.engine.rundir.shards import SHARD_SCHEMA, latest_attempts, read_rows
from prefray.engine.sweep import Sweep
from prefray.engine.types import CallResult, Cause, ChatRequest, ModelSpec, WorkUnit

# Instances of a cell whose units are built and measured for an evaluated model whose output budget
# differs from the cell's most common one (a fixed, seeded sample; a smaller dataset is counted in full).
SAMPLE_INSTANCES = 16


log = logging.getLogger(__name__)


@dataclass
class _Tally:
    """A stage's units of one job (or of every job sharing the count): sent and cached."""

    sent: int = 0
    cached: int = 0
    measured: int = 0       # sent units whose input tokens are in `input` (all of them, or a sample's)
    input: int = 0          # input tokens of the measured units
    output: int = 0         # output tokens of the sent units (ratio × budget; twice for an answer asked again)
    budget: int = 0
    cached_input: int = 0
    cached_output: int = 0
    # the sent units' requests by the prompt-cache prefix they declare (of the cell's full count for
    # a tally scaled from a sample: see scaled_to)
    prefixes: PrefixGroups = field(default_factory=PrefixGroups)

    def sent_one(self, request: ChatRequest, input_tokens: int, output_tokens: int) -> None:
        """A unit sent, measured: its tokens, and its request for the prompt cache's expectation."""
        self.sent += 1
        self.measured += 1
        self.input += input_tokens
        self.output += output_tokens
        self.prefixes.add(request, input_tokens)

    def input_tokens(self) -> int:
        """Sent units' input tokens: exact when every unit was measured, else the measured mean × units."""
        if self.measured == self.sent:
            return self.input
        return round(self.input / self.measured * self.sent) if self.measured else 0

    def scaled_to(self, reference: _Tally) -> _Tally:
        """This tally, measured on a sample of instances, scaled to the reference's unit counts.

        Its prompt-cache prefixes are the reference's: a prefix's requests span instances (a
        BenchPreS profile's contexts), so a sample of instances would split its groups, and the
        stages that declare one build the same prefix text whatever the answering model's budget."""
        if not self.sent:
            return reference
        return _Tally(sent=reference.sent, measured=self.sent, input=self.input,
                      output=round(self.output / self.sent * reference.sent), budget=self.budget,
                      prefixes=reference.prefixes)


def _signature(spec: ModelSpec) -> tuple[Any, ...]:
    """What of a model shapes its units and their token counts: its output budget rule."""
    declared = next((int(spec.params[k]) for k in ("max_completion_tokens", "max_tokens")
                     if spec.params.get(k) is not None), None)
    return declared, spec.reasoning_tokens, spec.max_output_tokens


def _cell_key(job: Job) -> str:
    """Jobs with the same key build the same units from the same data (the evaluated model aside)."""
    roles = {role: (spec.name, spec.model_id, _signature(spec)) for role, spec in sorted(job.roles.items())}
    return json.dumps([job.benchmark, job.condition, asdict(job.settings), asdict(job.condition_settings), job.limit,
                       job.seed, roles], sort_keys=True, default=str)


def _reads(stages: list[Stage]) -> set[str]:
    """Stages some later stage builds its units from (they need answers)."""
    read: set[str] = set()
    for i, stage in enumerate(stages):
        read.update(s.name for s in stages[:i]) if stage.inputs is None else read.update(stage.inputs)
    return read


class _JobCount:
    """One job's stages built in order from the rows they would store; tallies per stage."""

    def __init__(self, job: Job, benchmark: Benchmark, instances: Sequence[Any], stored: pa.Table | None,
                 cache: ResponseCache | None, ratio: float, rerun_causes: frozenset[str]):
        self.job, self.benchmark, self.instances = job, benchmark, instances
        self.stored, self.cache, self.rerun_causes = stored, cache, rerun_causes
        self.answers = SimulatedGateways(ratio)
        self.subject_params: set[Any] = set()   # the distinct params the subject's stages ask for
        # the subject's units sent (request as built, sample), to look other models' answers up in the cache
        self.subject_units: list[tuple[ChatRequest, int]] = []
        self.subject_cached = 0

    def run(self) -> dict[tuple[str, str, str], _Tally]:
        stages = self.benchmark.stages(self.job)
        needed = _reads(stages)
        tables: dict[str, pa.Table] = {}
        tallies: dict[tuple[str, str, str], _Tally] = {}
        for i, stage in enumerate(stages):
            spec = self.job.role_model(stage.role)
            judge = "" if stage.role == "subject" else spec.name
            names = [s.name for s in stages[:i]] if stage.inputs is None else list(stage.inputs)
            context = StageContext(self.job, self.instances, {name: tables[name] for name in names})
            tally = tallies.setdefault((stage.name, stage.role, judge), _Tally())
            rows = self._stage(stage, spec, judge, stage.build(context), tally, stage.name in needed)
            if stage.name in needed:
                tables[stage.name] = rows
        return tallies

    def _stored_rows(self, stage: Stage, judge: str) -> pa.Table | None:
        if self.stored is None:
            return None
        mask = pc.and_(pc.equal(self.stored["stage"], stage.name), pc.equal(self.stored["judge"], judge))
        return self.stored.filter(mask)

    def _stage(self, stage: Stage, spec: ModelSpec, judge: str, units: Iterable[WorkUnit], tally: _Tally,
               keep: bool) -> pa.Table:
        stored = self._stored_rows(stage, judge)
        states = {} if stored is None else dict(zip(stored["unit_id"].to_pylist(),
                                                    zip(stored["status"].to_pylist(), stored["cause"].to_pylist(),
                                                        stored["attempt"].to_pylist())))
        pending: list[tuple[str, WorkUnit, int, ChatRequest]] = []
        for unit in units:
            uid = unit_id(self.job, stage, judge, unit) if states else ""
            state = states.get(uid)
            if state is not None and (state[0] == "ok" or state[1] not in self.rerun_causes):
                continue
            attempt = 1 if state is None else state[2] + 1
            if stage.role == "subject":
                self.subject_params.add(_frozen(unit.request.params))
            pending.append((uid, unit, attempt, final_request(spec, unit.request)))
        if pending:
            budget = max(max_output_tokens(r) for *_, r in pending)
            tally.budget = max(tally.budget, budget)
        hits: dict[str, CallResult] = {}
        keys: list[str] = []
        if self.cache is not None and pending:
            keys = [cache_key(spec, r, u.sample) for _, u, _, r in pending]
            hits = self.cache.get_many(keys)
            if stage.role == "subject":
                self.subject_cached += len(hits)
                self.subject_units.extend((u.request, u.sample) for _, u, _, _ in pending)
        rows: list[dict[str, Any]] = []
        for index, (uid, unit, attempt, request) in enumerate(pending):
            hit = hits.get(keys[index]) if hits else None
            if hit is None and not keep and stage.parse is None:   # no one reads its answer: counted without one
                tally.sent_one(request, request.estimated_input_tokens(), self.answers.output_tokens(request))
                continue
            value, result = self._answered(stage, spec, request, unit, hit or self.answers.answer(spec, request))
            if result.cached:
                tally.cached += 1
                tally.cached_input += result.input_tokens
                tally.cached_output += result.output_tokens
            else:
                tally.sent_one(request, result.input_tokens, result.output_tokens)
            if keep:
                rows.append(stored_row(self.job, stage, spec, judge, uid, unit, attempt, request, result, value))
        if not keep:
            return SHARD_SCHEMA.empty_table()
        new = pa.Table.from_pylist(rows, schema=SHARD_SCHEMA)
        if stored is None or stored.num_rows == 0:
            return new
        return latest_attempts(pa.concat_tables([stored.select(SHARD_SCHEMA.names).cast(SHARD_SCHEMA), new]))

    def _answered(self, stage: Stage, spec: ModelSpec, request: ChatRequest, unit: WorkUnit,
                  result: CallResult) -> tuple[Any, CallResult]:
        """The value stored with an answer, and the answer as stored, as the runner and the dry run
        make them: the example answer stands in for simulated text the parser cannot read, and an
        answer still unreadable is asked for once more (its tokens added) and then fails."""
        if stage.parse is None:
            return (None if stage.read is None else stage.read(unit, result.text)), result
        value = _try(stage, result.text)
        if value is _FAILED and stage.example_answer is not None:
            result.text = stage.example_answer
            value = _try(stage, result.text)
        if value is not _FAILED:
            return value, result
        second = self.answers.answer(spec, request)
        second.tries += result.tries
        second.input_tokens += result.input_tokens
        second.output_tokens += result.output_tokens
        value = _try(stage, second.text)
        if value is _FAILED:
            second.status, second.cause = "failed", Cause.PARSE_ERROR
            return None, second
        return value, second


_FAILED = object()


def _try(stage: Stage, text: str) -> Any:
    try:
        return stage.parse(text)  # type: ignore[misc]
    except ParseError:
        return _FAILED


def _stored(run_dir: RunDir, job: Job) -> pa.Table | None:
    """The best stored row of every unit of `job` (None when it has none)."""
    folder = run_dir.job(job.benchmark, job.model.name, job.condition)
    if not folder.is_dir():
        return None
    table = read_rows(folder, ds.field("benchmark") == job.benchmark)
    return latest_attempts(table) if table.num_rows else None


def _has_answers(cache: ResponseCache | None) -> bool:
    return cache is not None and cache.db.execute("SELECT 1 FROM responses LIMIT 1").fetchone() is not None


def count(sweep: Sweep, cache: ResponseCache | None = None) -> pa.Table:
    """The plan's rows (PLAN_SCHEMA) for the sweep's jobs under its send policy, with `cache` (a
    ResponseCache or None) answering what it holds."""
    return count_jobs(sweep.job_list, sweep.benchmarks, sweep.instances, sweep.run_dir,
                      {"cache": cache, "output_ratio": sweep.run.estimate_output_ratio,
                       "rerun_causes": sweep.policy.resend_causes})


def count_jobs(jobs: Sequence[Job], benchmarks: dict[str, Benchmark], instances: dict[int, Sequence[Any]],
               run_dir: RunDir, settings: dict[str, Any]) -> pa.Table:
    """The plan's rows (PLAN_SCHEMA) for `jobs`. `settings`: `cache` (a ResponseCache or None),
    `output_ratio` (share of the output budget an answer is assumed to use), `rerun_causes`."""
    ratio = float(settings.get("output_ratio", RunConfig.estimate_output_ratio))
    cache = settings.get("cache")
    cache = cache if _has_answers(cache) else None   # an empty cache answers nothing: not asked
    causes = frozenset(settings.get("rerun_causes", ()))

    def counter(i: int, of: Sequence[Any] | None = None, stored: pa.Table | None = None) -> _JobCount:
        job = jobs[i]
        return _JobCount(job, benchmarks[job.benchmark], instances[i] if of is None else of, stored, cache,
                         ratio, causes)

    tallies: dict[int, dict[Any, _Tally]] = {}
    cells: dict[str, list[int]] = {}
    for i, job in enumerate(jobs):
        stored = _stored(run_dir, job)
        if stored is not None:
            log.debug(f"plan: {_job_name(job)} resumes: counted on its own, against {stored.num_rows} stored row(s)")
            tallies[i] = counter(i, stored=stored).run()   # resumed: counted on its own
        else:
            cells.setdefault(_cell_key(job), []).append(i)
    for members in cells.values():
        log.debug(f"plan: {_job_name(jobs[members[0]])} counted for {len(members)} job(s) of its benchmark × "
                  f"condition cell, over {len(instances[members[0]])} instance(s)")
        tallies.update(_count_cell(members, jobs, instances, counter, cache))
    return pa.Table.from_pylist([row for i, job in enumerate(jobs) for row in _plan_rows(job, tallies[i])],
                                schema=PLAN_SCHEMA)


def _job_name(job: Job) -> str:
    return f"{job.benchmark}/{job.model.name}/{job.condition}/{job.roles['judge'].name}"


def _count_cell(members: list[int], jobs: Sequence[Job], instances: dict[int, Sequence[Any]],
                counter: Any, cache: ResponseCache | None) -> dict[int, dict[Any, _Tally]]:
    """The tallies of a cell's jobs: one full count, shared by every job whose output budgets match
    it (and of whose subject units the cache holds no answer); one count per other output budget, on
    a sample of instances when the dataset is larger (in full, per job, when a cache holds answers)."""
    common: dict[Any, list[int]] = {}
    for i in members:
        common.setdefault(_signature(jobs[i].model), []).append(i)
    first = max(common.values(), key=len)[0]
    reference = counter(first)
    full = reference.run()
    mine = _budgets(jobs[first].model, reference.subject_params)
    groups: dict[Any, list[int]] = {}
    for i in members:
        groups.setdefault(_budgets(jobs[i].model, reference.subject_params), []).append(i)
    out: dict[int, dict[Any, _Tally]] = {first: full}
    for budgets, group in groups.items():
        if cache is not None:
            for i in group:
                if i != first:
                    shares = (budgets == mine and not reference.subject_cached
                              and not _cached_any(cache, jobs[i].model, reference.subject_units))
                    out[i] = full if shares else counter(i).run()
            continue
        if budgets == mine:
            found = full
        elif len(instances[group[0]]) <= SAMPLE_INSTANCES:
            found = counter(group[0]).run()
        else:
            data = instances[group[0]]
            picked = sorted(random.Random(0).sample(range(len(data)), SAMPLE_INSTANCES))
            sample = counter(group[0], [data[k] for k in picked]).run()
            found = {key: sample[key].scaled_to(ref) if key in sample else ref for key, ref in full.items()}
        out.update({i: found for i in group})
    return out


def _cached_any(cache: ResponseCache, spec: ModelSpec, units: list[tuple[ChatRequest, int]]) -> bool:
    """Whether the cache holds `spec`'s answer to any of these units."""
    for start in range(0, len(units), 2048):
        chunk = units[start:start + 2048]
        if cache.get_many([cache_key(spec, final_request(spec, request), sample) for request, sample in chunk]):
            return True
    return False


def _frozen(params: dict[str, Any]) -> Any:
    try:
        return frozenset(params.items())
    except TypeError:   # a value that is not hashable (a nested mapping)
        return json.dumps(params, sort_keys=True, default=str)


def _budgets(spec: ModelSpec, params: set[Any]) -> tuple[Any, ...]:
    """The output budget `spec` gets for each of the stage params: equal budgets, equal units and tokens."""
    as_dicts = [dict(p) if isinstance(p, frozenset) else json.loads(p) for p in params]
    found = (output_budget(spec, p) for p in as_dicts)
    return tuple(sorted(-1 if budget is None else budget[1] for budget in found))


def _expected_cache(spec: ModelSpec, tally: _Tally, tokens_in: int) -> tuple[int, int]:
    """Input tokens of a stage's sent units that `spec` can expect read from and written to the
    prompt cache: its prefixes priced for `spec` (calls/cache_order.py: PrefixGroups), as shares of
    the input they were measured on, applied to the row's input (the same, unless scaled). A model
    with no cached price expects nothing: the plan does not know what its provider caches."""
    prefixes = tally.prefixes
    unpriced = spec.price_cache_read_per_mtok is None and spec.price_cache_write_per_mtok is None
    if unpriced or not prefixes.groups or not prefixes.input_tokens:   # no cached price: nothing expected
        return 0, 0
    got = prefixes.expected(spec)
    if prefixes.input_tokens == tokens_in:
        return got.read_tokens, got.write_tokens
    share = tokens_in / prefixes.input_tokens
    return min(tokens_in, round(got.read_tokens * share)), round(got.write_tokens * share)


def _plan_rows(job: Job, tallies: dict[tuple[str, str, str], _Tally]) -> list[dict[str, Any]]:
    rows = []
    for (stage, role, judge), tally in tallies.items():
        spec = job.role_model(role)
        base = {"benchmark": job.benchmark, "model": job.model.name, "condition": job.condition, "stage": stage,
                "role": role, "judge": judge, "provider": spec.provider, "model_id": spec.model_id,
                "output_budget": tally.budget, "sampled": tally.measured}
        if tally.sent:
            tokens_in = tally.input_tokens()
            reads, writes = _expected_cache(spec, tally, tokens_in)
            rows.append({**base, "cached": False, "calls": tally.sent, "input_tokens": tokens_in,
                         "output_tokens": tally.output,
                         "cost_usd": call_cost(spec, tokens_in, tally.output, reads, writes),
                         "max_cost_usd": call_cost(spec, tokens_in, tally.budget * tally.sent),
                         "cache_read_tokens": reads, "cache_write_tokens": writes,
                         "cache_saved_usd": cache_saving(spec, reads, writes),
                         "uncached_cost_usd": call_cost(spec, tokens_in, tally.output)})
        if tally.cached:
            rows.append({**base, "cached": True, "calls": tally.cached, "input_tokens": tally.cached_input,
                         "output_tokens": tally.cached_output, "cost_usd": 0.0, "max_cost_usd": 0.0,
                         "cache_read_tokens": 0, "cache_write_tokens": 0, "cache_saved_usd": 0.0,
                         "uncached_cost_usd": 0.0})
    return rows
