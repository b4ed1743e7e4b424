"""The typed config schema: bad values stop the real CLI before Ray, with one line and exit 2."""

from __future__ import annotations

import dataclasses
import runpy
from pathlib import Path

import pytest

from prefray.app.compose import compose_overrides, conf_dir
from prefray.app.table import key_table
from prefray.app.validate import config_problems
from prefray.engine.config import RunConfig
from prefray.engine.config.schema import SECTIONS
from prefray.engine.types import ModelSpec
from tests.conftest import refused_here

ROOT = Path(__file__).resolve().parent.parent
CONF = conf_dir()

# (overrides, words the one line must contain). Paths use {tmp}, {file} (an existing file) and
# {empty} (an empty dataset file).
BAD_INPUTS = [
    (["limit=-1"], ["limit=-1", "integer >= 1"]),
    (["limit=0"], ["limit=0", "integer >= 1"]),
    (["limit=abc"], ["limit=abc", "integer"]),
    (["limit=2.5"], ["limit=2.5", "integer"]),
    (["benchmark.samples=0"], ["benchmark.samples=0", ">= 1"]),
    (["benchmark.samples=-2"], ["benchmark.samples=-2", ">= 1"]),
    (["benchmark.data.source=hub", "benchmark.data.path={empty}"], ["no instances"]),
    (["benchmark.data.source=hub", "benchmark.data.path={tmp}/missing.jsonl"], ["missing.jsonl"]),
    (["run.dir={file}"], ["run.dir=", "is a file"]),
    (["run.dir={file}/sub"], ["run.dir=", "cannot be made"]),
    (["run.dir=/proc/prefray-never"], ["run.dir=/proc/prefray-never", "not writable"]),
    (["run.seed=abc"], ["run.seed=abc", "integer"]),
    (["run.seed=-1"], ["run.seed=-1", ">= 0"]),
    (["run.cache_dir=/proc/prefray-cache"], ["run.cache_dir=/proc/prefray-cache", "not writable"]),
    (["run.cache_dir={file}"], ["run.cache_dir=", "is a file"]),
    (["model.base_url=not-a-url"], ["model.base_url=not-a-url", "URL"]),
    (["model.base_url=ftp://host/v1"], ["model.base_url=ftp://host/v1", "http(s)"]),
    (["run.shard_size=0"], ["run.shard_size=0", ">= 1"]),
    (["run.budget_usd=-5"], ["run.budget_usd=-5", "> 0"]),
    (["run.budget_usd=0"], ["run.budget_usd=0", "> 0"]),
    (["+foo=1"], ["foo=1", "unknown key"]),
    (["+run.foo=1"], ["run.foo=1", "unknown key"]),
    (["+model.foo=1"], ["model.foo=1", "unknown key"]),
    (["+benchmark.foo=1"], ["benchmark.foo=1", "unknown key"]),
    (["model.max_concurrency=0"], ["model.max_concurrency=0", ">= 1"]),
    (["model.max_attempts=0"], ["model.max_attempts=0", ">= 1"]),
    (["model.timeout_s=0"], ["model.timeout_s=0", "> 0"]),
    (["model.params.max_tokens=-5"], ["model.params.max_tokens=-5", ">= 1"]),
    (["judge.params.max_tokens=0"], ["judge.params.max_tokens=0", ">= 1"]),
    (["benchmark.generation.max_tokens=-5"], ["benchmark.generation.max_tokens=-5", ">= 1"]),
    (["benchmark.generation.temperature=5"], ["benchmark.generation.temperature=5", "<= 2"]),
    (["model.rpm=-1"], ["model.rpm=-1", "> 0"]),
    (["model.tpm=0"], ["model.tpm=0", "> 0"]),
    (["model.provider=azure"], ["model.provider=azure", "openai"]),
    (["model.price_input_per_mtok=-1"], ["model.price_input_per_mtok=-1", ">= 0"]),
    (["model.max_output_tokens=0"], ["model.max_output_tokens=0", ">= 1"]),
    (["model.serve=docker"], ["model.serve=docker", "fakellm"]),
    (["run.progress=maybe"], ["run.progress=maybe", "true or false"]),
    (["run.cache=maybe"], ["run.cache=maybe", "true or false"]),
    (["run.estimate_output_ratio=0"], ["run.estimate_output_ratio=0", "> 0"]),
    (["condition.memory=5"], ["condition.memory=5", "full | without_preferences"]),
    (["model=gpt-9"], ["gpt-9"]),
    (["run.tier=fast"], ["run.tier=fast", "interactive | batch"]),
    (["run.batch.max_requests=0"], ["run.batch.max_requests=0", ">= 1"]),
    (["model.reasoning_tokens=-1"], ["model.reasoning_tokens=-1", ">= 0"]),
]


@pytest.mark.parametrize("overrides,words", BAD_INPUTS, ids=[" ".join(o) for o, _ in BAD_INPUTS])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, overrides, words):
    existing = tmp_path / "a-file"
    existing.write_text("x")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    before = sorted(p.name for p in tmp_path.iterdir())
    values = {"tmp": str(tmp_path), "file": str(existing), "empty": str(empty)}
    args = [o.format(**values) for o in overrides]
    run_dir = tmp_path / "run"
    if not any(a.startswith("run.dir=") for a in args):
        args.append(f"run.dir={run_dir}")
    # In this process, with Ray forbidden: were it started before validation, the launch would fail
    # differently; a refusal must come first (tests/test_sweep_cli.py runs one as its own process).
    done = refused_here("model=fake", "judge=fake", *args)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1, done.stderr
    for word in words:
        assert word.format(**values) in lines[0], lines[0]
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == before       # no run dir, no manifest, no cache
    assert not Path("/proc/prefray-never").exists()


def test_there_are_at_least_30_bad_inputs():
    assert len(BAD_INPUTS) >= 30


def test_docs_reference_page_holds_the_key_table_of_the_schema():
    # The docs site's config reference is made from the schema when the site is built (docs/hooks.py).
    page = runpy.run_path(str(ROOT / "docs" / "hooks.py"))["reference_page"](CONF)
    assert key_table(CONF) in page.replace("&lt;", "<")


def test_the_model_schema_is_the_model_spec():
    assert SECTIONS["model"] is SECTIONS["judge"] is ModelSpec


def test_run_schema_has_every_run_key_of_the_config_file():
    from omegaconf import OmegaConf

    run = OmegaConf.to_container(OmegaConf.load(CONF / "config.yaml"))["run"]
    assert set(run) == {f.name for f in dataclasses.fields(RunConfig)}


@pytest.mark.parametrize("group", ["model", "judge"])
def test_every_shipped_option_is_valid(group):
    options = sorted(p.stem for p in (CONF / group).glob("*.yaml"))
    configs = compose_overrides([[f"{group}={o}"] for o in options], CONF)
    for option, cfg in zip(options, configs):
        assert config_problems(cfg, CONF) == [], option


def test_every_benchmark_and_condition_is_valid():
    from prefray.app.sweep import benchmark_conditions, group_options

    overrides = []
    for bench in group_options(CONF, "benchmark"):
        overrides += [[f"benchmark={bench}", f"condition={bench}/{c}"] for c in benchmark_conditions(CONF, bench)[0]]
    for cfg in compose_overrides(overrides, CONF):
        assert config_problems(cfg, CONF) == []


def test_several_bad_values_are_each_named_once():
    cfg = compose_overrides([["model=fake", "judge=fake", "limit=0", "run.shard_size=0"]], CONF)[0]
    problems = config_problems(cfg, CONF)
    assert [p.split("=")[0] for p in problems] == ["limit", "run.shard_size"]
