"""The BenchPreS-shaped job of bench/peer_inspect.py as an inspect-ai task.

The same job prefray runs with `benchmark=benchpres model=fake judge=fake condition=default` and the
given overrides: the instances come from prefray's own BenchPreS loader, so the requests are the
same text. Each sample is one (instance, sample index) pair: its answer is generated with the seed
prefray gives that sample (the job's seed + the index) and the benchmark's generation parameters.
The scorer is model-graded: the judge model is asked, for every preference of the instance that is
not a nickname (a nickname is matched in the text, no call), whether the answer applies it, and
once how complete the answer is, with the benchmark's judge prompts, parameters, seed and JSON
schemas; those calls go out together. The score is the share of preferences judged applied.

Usage (what bench/peer_inspect.py does):
    inspect_ai.eval(benchpres_job(overrides="limit=10 benchmark.samples=2", judge_url=URL,
                                  judge_connections=20),
                    model="openai/fake-model", model_base_url=URL, model_args={"responses_api": False}, ...)
"""

from __future__ import annotations

import asyncio
import functools
import json
from typing import Any

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ChatMessageUser, GenerateConfig, ResponseSchema, get_model
from inspect_ai.scorer import Score, Target, mean, scorer
from inspect_ai.solver import Generate, TaskState, solver
from inspect_ai.util import JSONSchema

JUDGE_MODEL = "openai/fake-judge"


@functools.cache
def prefray_job(overrides: str) -> tuple[Any, list[Any]]:
    """prefray's BenchPreS job for these overrides and its instances, loaded by the benchmark."""
    from prefray.app.compose import compose_sweep

    _, jobs, benchmarks = compose_sweep(["benchmark=benchpres", "model=fake", "judge=fake", "condition=default",
                                         *overrides.split()], False)
    job = jobs[0]
    return job, list(benchmarks[job.benchmark].load(job))


def generation_config(job: Any, seed: int) -> GenerateConfig:
    params = dict(job.settings.get("generation", {}))
    return GenerateConfig(seed=seed, **params)


def judge_config(job: Any, schema: dict[str, Any], connections: int) -> GenerateConfig:
    params = dict(job.settings.get("judge_params", {}))
    return GenerateConfig(seed=job.seed, max_connections=connections, **params,
                          response_schema=ResponseSchema(name="answer", json_schema=JSONSchema.model_validate(schema),
                                                         strict=True))


@solver
def seeded_answer(overrides: str):
    """Generate the sample's answer with the seed and parameters prefray gives it."""
    job, _ = prefray_job(overrides)

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        config = generation_config(job, state.metadata["seed"])
        return await generate(state, **config.model_dump(exclude_none=True))

    return solve


@scorer(metrics=[mean()])
def preferences_judged(overrides: str, judge_url: str, judge_connections: int):
    """Model-graded: one judge call per non-nickname preference and one for completeness, at once."""
    from prefray.benchmarks.benchpres.benchmark import completeness_messages, judge_messages
    from prefray.benchmarks.benchpres.scoring import COMPLETENESS_SCHEMA, VERDICT_SCHEMA

    job, instances = prefray_job(overrides)
    judge = get_model(JUDGE_MODEL, base_url=judge_url, api_key="bench", responses_api=False)
    verdict = judge_config(job, VERDICT_SCHEMA, judge_connections)
    completeness = judge_config(job, COMPLETENESS_SCHEMA, judge_connections)

    async def ask(messages: tuple[dict[str, str], ...], config: GenerateConfig) -> str:
        output = await judge.generate([ChatMessageUser(content=m["content"]) for m in messages], config=config)
        return output.completion

    async def score(state: TaskState, target: Target) -> Score:
        inst = instances[state.metadata["instance"]]
        answer = state.output.completion or ""
        asked = [ask(judge_messages(p.statement, answer, job.settings), verdict)
                 for p in inst.preferences if p.category != "nickname"]
        asked.append(ask(completeness_messages(inst.recipient, inst.task, answer, job.settings), completeness))
        replies = await asyncio.gather(*asked)
        applied = sum(verdict_of(r) for r in replies[:-1])
        return Score(value=applied / max(1, len(replies) - 1), answer=answer[:80])

    return score


def verdict_of(reply: str) -> bool:
    try:
        return json.loads(reply).get("applied") is True
    except (ValueError, AttributeError):
        return False


@task
def benchpres_job(overrides: str = "", judge_url: str = "", judge_connections: int = 10) -> Task:
    job, instances = prefray_job(overrides)
    samples = [Sample(id=f"{inst.instance_id}#{k}", input=[ChatMessageUser(content=inst.prompt)],
                      metadata={"instance": index, "seed": job.seed + k})
               for index, inst in enumerate(instances) for k in range(int(job.settings.get("samples", 1)))]
    return Task(dataset=MemoryDataset(samples), solver=seeded_answer(overrides),
                scorer=preferences_judged(overrides, judge_url, judge_connections))
