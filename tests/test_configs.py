"""Every config option composes, and every model option carries every ModelSpec field."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from prefray.app.compose import build_job, compose_configs, conf_dir
from prefray.app.sweep import all_options, expand, group_options
from prefray.engine.types import ModelSpec

CONF = conf_dir()


@pytest.mark.parametrize("option", group_options(CONF, "model"))
def test_model_option_lists_every_field(option):
    data = OmegaConf.to_container(OmegaConf.load(CONF / "model" / f"{option}.yaml"))
    # seed_offset is set by `judge.repeats=K` on a judge's copies (prefray/app/panel.py), never in a file
    fields = {f.name for f in dataclasses.fields(ModelSpec)} - {"seed_offset"}
    assert set(data) == fields, f"model/{option}.yaml: missing {fields - set(data)}, unknown {set(data) - fields}"
    spec = ModelSpec.from_config(data)
    assert spec.name == option and spec.provider in ("openai", "anthropic")
    assert spec.api_key_env or spec.serve, "a remote model needs api_key_env"


def test_every_option_composes_into_a_job():
    """Each benchmark × condition pair, each model and each judge, composed once (the full product
    is only expanded, in test_sweep_cli: composing thousands of jobs would add minutes)."""
    pairs = expand(["model=fake", "benchmark=glob(*)", "condition=all", "judge=fake"], CONF, multirun=True)
    # glob(*) is every option (every installed benchmark); `all` leaves out the models prefray serves
    # itself (test_sweep_cli)
    models = expand(["model=glob(*)", "judge=fake"], CONF, multirun=True)
    judges = expand(["model=fake", "judge=glob(*)"], CONF, multirun=True)
    configs = compose_configs(pairs + models + judges, CONF)
    jobs = [build_job(cfg, CONF) for cfg in configs]
    assert {j.model.name for j in jobs} == set(group_options(CONF, "model"))
    assert {j.roles["judge"].name for j in jobs} == set(group_options(CONF, "judge"))
    assert {j.benchmark for j in jobs} == set(group_options(CONF, "benchmark"))
    for cfg in configs:
        assert cfg["condition"]["name"] in cfg["benchmark"]["conditions"]
        assert cfg["benchmark"]["impl"]


# the built-in suite (a plugin may name no paper judge); not `benchmark`: pytest-benchmark's fixture
@pytest.mark.parametrize("name", all_options(CONF, "benchmark"))
def test_benchmark_names_an_evaluated_paper_judge(name):
    from prefray.app.sweep import all_options, paper_judge

    assert paper_judge(CONF, name) in all_options(CONF, "judge")
