"""The SDK as the benchmarks' one door: every hook typed on `Benchmark`, its value types exported by
`prefray.sdk`, and what each installed benchmark declares is of those types."""

from __future__ import annotations

from collections.abc import Sequence
from typing import get_type_hints

import pytest

from prefray import sdk
from prefray.app import catalog
from prefray.sdk import figures, judgecheck, tables

HOOKS = {
    "comparisons": Sequence[sdk.Comparison],
    "combined_metrics": Sequence[sdk.Combined],
    "figures": Sequence[figures.ScatterSpec | figures.MetricsSpec | figures.CellsSpec],
    "condition_order": Sequence[str],
    "judge_check": judgecheck.JudgeCheck | None,
    "paper_tables": Sequence[tables.PaperTable],
}


def test_every_declared_hook_is_typed_on_the_base_class_with_an_empty_default():
    hints = get_type_hints(sdk.Benchmark, localns={"JudgeCheck": judgecheck.JudgeCheck})
    assert {name: hints[name] for name in HOOKS} == HOOKS
    assert [getattr(sdk.Benchmark, name) for name in HOOKS] == [(), (), (), (), None, ()]
    for method in ("load", "stages", "metrics", "unit_scores", "notes", "text_needed"):
        assert callable(getattr(sdk.Benchmark, method))


@pytest.mark.parametrize("name", catalog.names())
def test_what_a_benchmark_declares_is_of_the_hooks_types(name):
    benchmark = catalog.load(name)
    assert isinstance(benchmark, sdk.Benchmark)
    assert all(isinstance(c, sdk.Comparison) for c in benchmark.comparisons)
    assert all(isinstance(c, sdk.Combined) for c in benchmark.combined_metrics)
    assert all(isinstance(f, figures.ScatterSpec | figures.MetricsSpec | figures.CellsSpec) for f in benchmark.figures)
    assert all(isinstance(t, tables.PaperTable) for t in benchmark.paper_tables)
    check = benchmark.judge_check
    if check is not None:   # a Protocol of data members: its attributes and methods are there
        for member in ("judged", "role", "level", "columns", "optional", "group_column", "labels", "problems",
                       "stages", "verdicts"):
            assert hasattr(check, member), (name, member)


def test_the_built_in_benchmarks_declare_their_papers_tables_on_their_objects():
    declared = {name: [t.name for t in catalog.load(name).paper_tables] for name in catalog.names(builtin_only=True)}
    assert declared == {"benchpres": ["benchpres_table1"], "cupid": ["cupid_table1"],
                        **{p: ["prisk_table2", "prisk_table4"] for p in
                           ("prisk_irp", "prisk_narrowing", "prisk_sycophancy")}}
