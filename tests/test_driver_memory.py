"""The driver holds units and rows only for the calls in flight: a stage takes units from its build
as shards go out (and lets go of those a built list held once they are sent), and a stage whose
rows wait unread sends no more."""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass, field

from prefray.engine.benchmark import Benchmark, Job, Stage, StageContext
from prefray.engine.config.schema import BenchmarkSettings, ConditionSettings, RunConfig
from prefray.engine.flow.dryrun import DryRunner, SimulatedGateways
from prefray.engine.flow.runner import FEED_BACKLOG_ROWS, Outlets, StageFlow, inflight_shards
from prefray.engine.rundir import RunDir
from prefray.engine.sweep import Sweep
from prefray.engine.types import CallResult, ChatRequest, ModelSpec, WorkUnit

SPEC = ModelSpec("m", "openai", "m", max_concurrency=4)
SHARD = 2


@dataclass
class CountingDispatcher:
    """The simulated provider (nothing is sent), counting shards in flight; each answer waits a tick."""

    inner: SimulatedGateways = field(default_factory=SimulatedGateways)
    in_flight: int = 0
    most_in_flight: int = 0
    shards: int = 0

    async def run_batch(self, spec: ModelSpec, requests: list[ChatRequest]) -> list[CallResult]:
        self.in_flight += 1
        self.shards += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0.001)
        self.in_flight -= 1
        return await self.inner.run_batch(spec, requests)

    async def close(self) -> None:
        return None


@dataclass
class LazyBenchmark(Benchmark):
    """One stage of 200 units, yielded one by one; it notes how many were taken before each send."""

    name: str = "lazy"
    taken: int = 0

    def stages(self, job: Job) -> list[Stage]:
        return [Stage("ask", self.units)]

    def units(self, ctx: StageContext):
        for i in range(200):
            self.taken += 1
            yield WorkUnit("inst", ChatRequest(messages=({"role": "user", "content": f"q{i}"},)), sample=i)


def test_a_stage_takes_its_units_as_shards_go_out(tmp_path):
    benchmark, dispatcher = LazyBenchmark(), CountingDispatcher()
    original = dispatcher.run_batch
    answered, held = [0], []

    async def noted(spec, requests):
        held.append(benchmark.taken - 200 - answered[0])   # the counting pass took all 200 first
        results = await original(spec, requests)
        answered[0] += len(requests)
        return results

    dispatcher.run_batch = noted
    job = Job("lazy", "default", SPEC, {}, BenchmarkSettings("lazy"), ConditionSettings("default"))
    sweep = Sweep.assemble([job], {"lazy": benchmark}, {0: []}, RunDir(tmp_path), RunConfig(shard_size=SHARD))
    runner = DryRunner(sweep.jobs[0], sweep, Outlets.of(sweep.run_dir), dispatcher)
    asyncio.run(runner.run())
    bound = inflight_shards(SPEC, SHARD)
    assert bound == 4
    assert dispatcher.shards == 100                       # every unit was sent, once
    assert dispatcher.most_in_flight == bound             # never more shards at once than the bound
    # units built and not yet answered: the shards in flight and the one being filled, never all 200
    assert max(held) <= (bound + 1) * SHARD
    assert runner.stored(Stage("ask", benchmark.units), "").num_rows == 200


@dataclass
class ListBenchmark(Benchmark):
    """One stage of 200 units built as a list; it keeps a weak reference to each unit built."""

    name: str = "listed"
    built: list = field(default_factory=list)

    def stages(self, job: Job) -> list[Stage]:
        return [Stage("ask", self.units)]

    def units(self, ctx: StageContext) -> list[WorkUnit]:
        units = [WorkUnit("inst", ChatRequest(messages=({"role": "user", "content": f"q{i}"},)), sample=i)
                 for i in range(200)]
        self.built = [weakref.ref(unit) for unit in units]
        return units


def test_a_stage_lets_go_of_the_units_of_its_built_list_once_they_are_sent(tmp_path):
    benchmark, dispatcher = ListBenchmark(), CountingDispatcher()
    original = dispatcher.run_batch
    alive = []

    async def noted(spec, requests):
        alive.append(sum(ref() is not None for ref in benchmark.built))
        return await original(spec, requests)

    dispatcher.run_batch = noted
    job = Job("listed", "default", SPEC, {}, BenchmarkSettings("listed"), ConditionSettings("default"))
    sweep = Sweep.assemble([job], {"listed": benchmark}, {0: []}, RunDir(tmp_path), RunConfig(shard_size=SHARD))
    asyncio.run(DryRunner(sweep.jobs[0], sweep, Outlets.of(sweep.run_dir), dispatcher).run())
    assert dispatcher.shards == 100 and len(alive) == 100
    assert alive[0] == 200                    # the whole list was built before the first send
    # the last shards see only what is not yet sent: the shards in flight and the one being filled
    assert alive[-1] <= (inflight_shards(SPEC, SHARD) + 1) * SHARD
    assert all(ref() is None for ref in benchmark.built)


def test_a_stage_whose_rows_wait_unread_sends_no_more():
    async def scenario() -> tuple[bool, bool, int]:
        flow = StageFlow({"generate": "", "judge": "j"})
        feed = flow.subscribe(["generate"])
        rows = [{"unit_id": f"u{i}", "attempt": 1, "stage": "generate", "status": "ok"}
                for i in range(FEED_BACKLOG_ROWS)]
        flow.stored("generate", rows)
        room = asyncio.ensure_future(flow.room("generate"))
        await asyncio.sleep(0.01)
        held = not room.done()
        taken = await feed.next_rows()
        await asyncio.sleep(0.01)
        return held, room.done(), taken["generate"].num_rows

    held, released, taken = asyncio.run(scenario())
    assert held and released and taken == FEED_BACKLOG_ROWS


def test_prisk_answer_stages_build_their_units_as_shards_go_out(tmp_path, monkeypatch):
    """PRISK's answer stages (route, reflect, generate, the base answers) yield their units: the
    driver holds the shards in flight, not a personalized condition's every prompt at once."""
    from prefray.benchmarks.prisk import IRP, pipeline
    from prefray.benchmarks.prisk.data import load_instances

    built: list[weakref.ref] = []

    def noted_unit(*args, **kwargs):
        unit = WorkUnit(*args, **kwargs)
        built.append(weakref.ref(unit))
        return unit

    monkeypatch.setattr(pipeline, "WorkUnit", noted_unit)
    dispatcher = CountingDispatcher()
    original, alive = dispatcher.run_batch, []

    async def noted(spec, requests):
        if spec is SPEC:    # the model's sends (its judge's go to another model)
            alive.append(sum(ref() is not None for ref in built))
        return await original(spec, requests)

    dispatcher.run_batch = noted
    instances = load_instances("irp", None, 3, True)          # 36 (persona, query) instances
    judge = ModelSpec("j", "openai", "j")
    job = Job(IRP.name, "profile", SPEC, {"judge": judge}, IRP.settings_of({"samples": 2}),
              IRP.condition_of({"name": "profile", "profile": True, "retrieval": False}))
    sweep = Sweep.assemble([job], {IRP.name: IRP}, {0: instances}, RunDir(tmp_path), RunConfig(shard_size=SHARD))
    asyncio.run(DryRunner(sweep.jobs[0], sweep, Outlets.of(sweep.run_dir), dispatcher).run())
    answers = 36 * 2
    assert len(built) == 2 * answers               # a counting pass, then the units sent
    assert len(alive) == answers // SHARD          # the generate stage's shards
    # units built and not yet answered: the shards in flight and the one being filled, never all 72
    assert max(alive) <= (inflight_shards(SPEC, SHARD) + 1) * SHARD
