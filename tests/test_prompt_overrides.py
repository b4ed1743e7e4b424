"""Every prompt file of every benchmark can be replaced with `benchmark.prompts.<name>=PATH`."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

BENCHMARKS = sorted(p.stem for p in (ROOT / "conf" / "benchmark").glob("*.yaml") if p.stem != "all")


@pytest.mark.parametrize("name", BENCHMARKS)
def test_each_prompt_file_is_listed_in_its_benchmark_config(name):
    config = yaml.safe_load((ROOT / "conf" / "benchmark" / f"{name}.yaml").read_text())
    package = importlib.import_module(config["impl"].partition(":")[0])
    folder = Path(package.__file__).parent / "prompts"
    files = {p.stem for p in folder.glob("*.txt")}
    assert files and set(config.get("prompts") or {}) == files
