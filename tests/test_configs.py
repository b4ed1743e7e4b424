"""Every config option composes, and every model option carries every ModelSpec field."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from prefray.engine.sweep import expand, group_options
from prefray.engine.types import ModelSpec
from prefray.launch import build_job, compose_configs, conf_dir

CONF = conf_dir()


@pytest.mark.parametrize("option", group_options(CONF, "model"))
def test_model_option_lists_every_field(option):
    data = OmegaConf.to_container(OmegaConf.load(CONF / "model" / f"{option}.yaml"))
    fields = {f.name for f in dataclasses.fields(ModelSpec)}
    assert set(data) == fields, f"model/{option}.yaml: missing {fields - set(data)}, unknown {set(data) - fields}"
    spec = ModelSpec.from_config(data)
    assert spec.name == option and spec.provider in ("openai", "anthropic")
    assert spec.api_key_env or spec.serve, "a remote model needs api_key_env"


def test_every_job_of_the_full_suite_composes_into_a_job():
    choices = expand(["model=all", "benchmark=all", "condition=all", "judge=all"], CONF, multirun=True)
    configs = compose_configs(choices, CONF)
    jobs = [build_job(cfg, CONF) for cfg in configs]
    assert {j.roles["judge"].name for j in jobs} == set(group_options(CONF, "judge"))
    for cfg in configs:
        assert cfg["condition"]["name"] in cfg["benchmark"]["conditions"]
        assert cfg["benchmark"]["impl"]
