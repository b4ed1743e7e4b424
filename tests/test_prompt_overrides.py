"""Every prompt file of every benchmark can be replaced with `benchmark.prompts.<name>=PATH`."""

from __future__ import annotations

import pytest

from prefray.app import catalog

BENCHMARKS = catalog.names(builtin_only=True)


@pytest.mark.parametrize("name", BENCHMARKS)
def test_each_prompt_file_is_listed_in_its_benchmark_config(name):
    config = catalog.benchmark_config(name)
    folder = catalog.find(name).folder / "prompts"
    files = {p.stem for p in folder.glob("*.txt")}
    assert files and set(config.get("prompts") or {}) == files
