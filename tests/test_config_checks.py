"""Config that would start Ray, or pay, before failing is refused first: integer ranges the providers
accept, ports, request parameters the provider's SDK takes, and upper bounds (issue 26)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from prefray.app.compose import compose_overrides, conf_dir
from prefray.app.provider_params import accepted, unknown_params
from prefray.app.validate import config_problems

ROOT = Path(__file__).resolve().parent.parent
CONF = conf_dir()

# (overrides, the one problem expected: its start, and words it must contain)
REFUSED = [
    (["run.seed=99999999999999999999"], "run.seed=99999999999999999999", ["<= 4611686018427387904"]),
    (["run.seed=4611686018427387905"], "run.seed=4611686018427387905", ["<= 4611686018427387904"]),
    (["model.base_url=http://127.0.0.1:99999/v1"], "model.base_url=http://127.0.0.1:99999/v1",
     ["port from 1 to 65535"]),
    (["model=gpt-4o", "model.base_url=http://127.0.0.1:0/v1"], "model.base_url=http://127.0.0.1:0/v1",
     ["port 0 is only for a model prefray serves itself", "from 1 to 65535"]),
    (["+model.params.bogus_param=5"], "model.params.bogus_param=5",
     ["not a request parameter of the openai SDK", "max_completion_tokens", "extra_body"]),
    (["model=claude-sonnet-4.5", "+model.params.reasoning_effort=high"], "model.params.reasoning_effort=high",
     ["anthropic SDK (messages.create)"]),
    (["+judge.params.frequency_penaltyy=1"], "judge.params.frequency_penaltyy=1", ["openai SDK"]),
    (["model.params.max_tokens=100000000000000000000"], "model.params.max_tokens=100000000000000000000",
     [">= 1 and <= 10000000"]),
    (["run.budget_usd=inf"], "run.budget_usd=inf", ["<= 1000000"]),
    (["run.budget_usd=1e9"], "run.budget_usd=1000000000.0", ["<= 1000000"]),
    (["limit=1000000000"], "limit=1000000000", ["<= 100000000"]),
    (["model.rpm=nan"], "model.rpm=nan", ["a number > 0"]),
    (["model.timeout_s=1e12"], "model.timeout_s=1000000000000.0", ["<= 604800"]),
    (["benchmark.samples=100000"], "benchmark.samples=100000", ["<= 10000"]),
    (["run.batch.poll_s=1e9"], "run.batch.poll_s=1000000000.0", ["<= 604800"]),
]


@pytest.mark.parametrize("overrides,start,words", REFUSED, ids=[" ".join(o) for o, *_ in REFUSED])
def test_a_value_no_provider_takes_is_one_problem(overrides, start, words):
    cfg = compose_overrides([["model=fake", "judge=fake", *overrides]], CONF)[0]
    problems = config_problems(cfg, CONF)
    assert len(problems) == 1, problems
    assert problems[0].startswith(start + ": "), problems[0]
    for word in words:
        assert word in problems[0], problems[0]


@pytest.mark.parametrize("overrides", [
    ["run.seed=4611686018427387904"],
    ["model.base_url=http://127.0.0.1:65535/v1"],
    ["model.base_url=https://example.org/v1"],
    ["+model.params.presence_penalty=0.5", "+model.params.logit_bias={}", "+model.params.extra_body.x=1"],
    ["model=claude-sonnet-4.5", "+model.params.top_k=5", "+model.params.temperature=0.2"],
    ["model=claude-sonnet-4.5", "+model.params.thinking={type: disabled}"],
    ["run.budget_usd=1000000"],
])
def test_what_the_providers_take_is_accepted(overrides):
    cfg = compose_overrides([["model=fake", "judge=fake", *overrides]], CONF)[0]
    assert config_problems(cfg, CONF) == []


def test_the_sdk_lists_are_the_sdks_own():
    openai_args, anthropic_args = accepted("openai"), accepted("anthropic")
    assert {"max_tokens", "max_completion_tokens", "reasoning_effort", "seed", "n", "extra_body"} <= openai_args
    assert {"max_tokens", "temperature", "top_k", "seed", "thinking", "extra_body"} <= anthropic_args
    # what prefray sets itself on every request is not a model parameter
    assert not {"model", "messages", "stream", "timeout"} & (openai_args | anthropic_args)
    assert unknown_params("openai", {"max_tokens", "temperature"}) == []
    assert unknown_params("anthropic", {"reasoning_effort", "max_tokens"}) == ["reasoning_effort"]


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


REFUSED_BEFORE_RAY = ["run.seed=99999999999999999999", "model.base_url=http://127.0.0.1:99999/v1",
                      "+model.params.bogus_param=5", "run.plots=maybe"]


@pytest.mark.e2e
def test_the_cli_refuses_before_ray_with_one_line(tmp_path):
    """Each override refused by its own `python -m prefray.launch` (the processes run at once)."""
    from tests.conftest import run_together

    # Ray is pointed at a port nobody listens on: a launch that started it first would fail otherwise
    env = {"RAY_ADDRESS": f"127.0.0.1:{_closed_port()}"}
    runs = [tmp_path / f"run{i}" for i in range(len(REFUSED_BEFORE_RAY))]
    refused = run_together(*([sys.executable, "-m", "prefray.launch", "model=fake", "judge=fake", override,
                              f"run.dir={run}"] for override, run in zip(REFUSED_BEFORE_RAY, runs)), env=env)
    for override, run, done in zip(REFUSED_BEFORE_RAY, runs, refused):
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert done.returncode == 2 and len(lines) == 1, (override, done.stderr)
        assert lines[0].startswith(f"prefray: nothing was run: {override.lstrip('+')}"), lines[0]
        assert not run.exists() and done.stdout == "", override
