"""The dry run: what a launch (or rerun) would send, found without sending anything.

`simulate` runs the real job runner in a scratch copy of the run directory against
`SimulatedGateways`, so it sees exactly the units a launch would send: resume and the response
cache are honoured, and later stages are built from simulated answers of earlier ones. `plan
--simulate` and a rerun's estimate price the rows it returns (money/estimate.py; the plan counts
without it by default, flow/counting.py, with the same answers); the end of a run counts with it
the later-stage units that could not be built (flow/outcome.py).

The dry run's differences from a real run live here, not in the runner: `DryRunner` keeps no
requests and no answers, and a stage's example answer stands in for a simulated one its parser
cannot read.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from prefray.engine.benchmark import Job, Stage
from prefray.engine.calls.pricing import call_cost, max_output_tokens
from prefray.engine.calls.providers import synthetic
from prefray.engine.config.schema import RunConfig
from prefray.engine.flow.runner import JobRunner, Outlets, run_jobs, try_parse
from prefray.engine.rundir import RunDir
from prefray.engine.rundir.cache import ResponseCache
from prefray.engine.rundir.quarantine import drop_unreadable
from prefray.engine.rundir.shards import SHARD_SCHEMA
from prefray.engine.sweep import Sweep
from prefray.engine.types import CallResult, ChatRequest, ModelSpec


@dataclass
class SimulatedGateways:
    """Answers every request locally: nothing is sent.

    Text comes from the synthetic answer rule (calls/providers/synthetic.py, the fake provider's
    too), so parsers and later stages work, padded to the assumed answer length; tokens are
    estimated: input = characters / 4 (+ a few per message), output = `output_ratio` × the
    request's max tokens.
    """

    output_ratio: float = RunConfig.estimate_output_ratio

    async def run_batch(self, spec: ModelSpec, requests: list[ChatRequest]) -> list[CallResult]:
        return [self.answer(spec, r) for r in requests]

    def output_tokens(self, request: ChatRequest) -> int:
        """The answer's assumed length: `output_ratio` × the request's output budget (at least 1)."""
        return max(1, int(max_output_tokens(request) * self.output_ratio))

    def answer(self, spec: ModelSpec, request: ChatRequest) -> CallResult:
        messages = list(request.messages)
        output_tokens = self.output_tokens(request)
        if request.json_schema is not None:
            text = synthetic.render_json(synthetic.answer_json(request.json_schema, messages, request.seed))
        else:
            text = synthetic.answer_text(messages, request.seed)
            text += " lorem" * max(0, (output_tokens * 4 - len(text)) // 6)
        input_tokens = request.estimated_input_tokens()
        now = time.time()
        return CallResult(status="ok", text=text, model_version="estimate", input_tokens=input_tokens,
                          output_tokens=output_tokens, tries=1, started_at=now, finished_at=now,
                          cost_usd=call_cost(spec, input_tokens, output_tokens))

    async def close(self) -> None:
        return None


class DryRunner(JobRunner):
    """A job runner for simulated answers: it stores rows (in the scratch run dir) but keeps no
    requests and writes no answers to the response cache; a stage's `example_answer` stands in
    for a simulated answer its parser cannot read."""

    def keep_requests(self, spec: ModelSpec, requests: list[ChatRequest]) -> None:
        return None

    def keep_answers(self, keys: list[str], results: list[CallResult]) -> None:
        return None

    def unparsed(self, stage: Stage, results: list[CallResult], parsed: list[Any], failed: list[int]) -> list[int]:
        if stage.example_answer is None:
            return failed
        for i in failed:
            results[i].text = stage.example_answer
        return [i for i in failed if not try_parse(stage, results[i], parsed, i)]


def _scratch_copy(run_dir: RunDir) -> tuple[RunDir, set[str]]:
    """A scratch run dir holding hard links to the stored shards; returns it and their names."""
    scratch = RunDir(tempfile.mkdtemp(prefix="prefray-estimate-"))
    if run_dir.shards.is_dir():
        shutil.copytree(run_dir.shards, scratch.shards, copy_function=_link_or_copy)
        drop_unreadable(scratch)    # the run's owner quarantines them: their units are asked again
    return scratch, set(_shard_names(scratch))


def _shard_names(scratch: RunDir) -> list[str]:
    return [str(p.relative_to(scratch.root)) for p in scratch.shards.glob("**/*.parquet")]


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _new_rows(scratch: RunDir, existing: set[str]) -> pa.Table:
    new = [scratch / name for name in _shard_names(scratch) if name not in existing]
    return pa.concat_tables([SHARD_SCHEMA.empty_table(), *(pq.read_table(p, schema=SHARD_SCHEMA) for p in new)])


async def _run_all(runners: list[JobRunner], dispatcher: SimulatedGateways) -> list[tuple[Job, BaseException]]:
    try:
        return await run_jobs(runners)
    finally:
        await dispatcher.close()


def simulate(sweep: Sweep, cache: ResponseCache | None = None, output_ratio: float | None = None) -> pa.Table:
    """The rows the sweep would add to its run dir under its send policy, answered by the simulation
    (`cache`: the response cache it may answer from; `output_ratio`: the share of its max tokens an
    answer is assumed to use, run.estimate_output_ratio unless given)."""
    ratio = sweep.run.estimate_output_ratio if output_ratio is None else float(output_ratio)
    scratch, existing = _scratch_copy(sweep.run_dir)
    try:
        # new rows are told apart by their files: keep them small
        scratch_sweep = replace(sweep, run_dir=scratch, run=replace(sweep.run, compact=False))
        dispatcher = SimulatedGateways(ratio)
        outlets = Outlets(None, cache=cache)
        runners: list[JobRunner] = [DryRunner(prepared, scratch_sweep, outlets, dispatcher)
                                    for prepared in scratch_sweep.jobs]
        crashed = asyncio.run(_run_all(runners, dispatcher))
        for job, error in crashed:
            raise RuntimeError(f"estimate of {job.benchmark}/{job.model.name}/{job.condition} failed: {error}")
        return _new_rows(scratch, existing)
    finally:
        shutil.rmtree(scratch.root, ignore_errors=True)
