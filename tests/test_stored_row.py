"""One function builds a stored row: the rows a later stage builds from are the same whether the
counting plan made them or the job runner stored them (the simulated dry run)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from prefray.engine.benchmark import Benchmark, Job, Stage, StageContext
from prefray.engine.config.schema import BenchmarkSettings, ConditionSettings
from prefray.engine.flow.counting import count
from prefray.engine.flow.dryrun import simulate
from prefray.engine.rundir import RunDir
from prefray.engine.rundir.shards import SHARD_SCHEMA
from prefray.engine.sweep import Sweep
from prefray.engine.types import ChatRequest, ModelSpec, WorkUnit

SUBJECT = ModelSpec("subject", "openai", "s", price_input_per_mtok=2.0, price_output_per_mtok=8.0)
JUDGE = ModelSpec("judge", "openai", "j", price_input_per_mtok=1.0, price_output_per_mtok=4.0)
# What a later stage may read of an answer's row (times and latencies differ from run to run; the
# plan leaves unit_id empty when nothing is stored, as it has no stored unit to match).
COMPARED = ["stage", "role", "judge", "instance_id", "item", "sample", "seed", "meta_json",
            "request_hash", "provider", "model_id", "params_json", "status", "cause", "text", "input_tokens",
            "output_tokens", "cost_usd", "cached", "cache_read_tokens", "cache_write_tokens", "cache_saved_usd",
            "tries"]


@dataclass
class SeenRows(Benchmark):
    """An answer stage of three units, then a judge stage that keeps the answer rows it is given."""

    name: str = "seen"
    seen: list[pa.Table] = field(default_factory=list)

    def stages(self, job: Job) -> list[Stage]:
        return [Stage("answer", self.answers), Stage("judge", self.verdicts, role="judge")]

    def answers(self, ctx: StageContext) -> list[WorkUnit]:
        return [WorkUnit(f"i{i}", ChatRequest(messages=({"role": "user", "content": f"question {i}"},),
                                              params={"max_tokens": 40}), meta={"n": i}) for i in range(3)]

    def verdicts(self, ctx: StageContext) -> list[WorkUnit]:
        rows = ctx.results["answer"]
        self.seen.append(rows)
        return [WorkUnit(r["instance_id"], ChatRequest(messages=({"role": "user", "content": "judge " + r["text"]},)))
                for r in rows.to_pylist()]


def answer_rows(made_by, tmp_path) -> list[dict]:
    benchmark = SeenRows()
    job = Job("seen", "default", SUBJECT, {"judge": JUDGE}, BenchmarkSettings("seen"), ConditionSettings("default"))
    made_by(Sweep.assemble([job], {"seen": benchmark}, {0: [None]}, RunDir(tmp_path / "run")))
    (rows,) = benchmark.seen
    assert rows.schema.names == SHARD_SCHEMA.names
    return sorted(rows.select(COMPARED).to_pylist(), key=lambda r: r["instance_id"])


def test_the_plan_and_the_runner_store_the_same_row(tmp_path):
    counted, stored = answer_rows(count, tmp_path), answer_rows(simulate, tmp_path)
    assert len(counted) == 3
    assert counted == stored
    # the plan's rows carry what the runner's do: the request's hash and parameters, the answer's cost
    # and its prompt-cache columns (zero here: the simulation reads and writes no prompt cache)
    assert all(r["request_hash"] and r["params_json"] == '{"max_tokens": 40}' for r in counted)
    assert all(r["cost_usd"] > 0 for r in counted)
    assert {(r["cache_read_tokens"], r["cache_write_tokens"], r["cache_saved_usd"]) for r in counted} == {(0, 0, 0.0)}
