"""Golden run: the three benchmarks on the fake provider, pinned byte for byte.

`tests/golden/` holds metrics.csv, deltas.csv and judge_agreement.csv of
`-m model=fake judge=fake benchmark=all condition=all limit=2`, written by the code before the engine
was restructured. Any change that moves a published number, or the layout of a run directory, or
what a resume sends, fails here. Regenerate the files only for a change that means to move a number,
and say which number and why in the commit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

GOLDEN = Path(__file__).parent / "golden"
PINNED = ("metrics.csv", "deltas.csv", "judge_agreement.csv")
SWEEP = ("-m", "model=fake", "judge=fake", "benchmark=all", "condition=all", "limit=2",
         "run.cache=false", "run.progress=false")
TOP_LEVEL = {"calls.csv", "costs.csv", "deltas.csv", "deltas.parquet", "judge_agreement.csv", "ledger",
             "manifest.json", "metrics.csv", "metrics.md", "metrics.parquet", "plots", "requests", "shards"}
CELLS = {("benchpres", c) for c in ("default", "defense", "no_preferences")} \
    | {("cupid", c) for c in ("full", "oracle", "oracle_preference", "summary")} \
    | {("prisk_irp", c) for c in ("base", "profile", "profile_retrieval", "reflection", "retrieval")} \
    | {("prisk_narrowing", "factorial")} \
    | {("prisk_sycophancy", c) for c in ("base", "profile", "profile_retrieval", "reflection", "retrieval")}


@pytest.fixture(scope="module")
def golden_run(tmp_path_factory, ray_address):
    from tests.conftest import launch_here, start_fake_server

    server = start_fake_server()
    run_dir = tmp_path_factory.mktemp("golden") / "run"
    args = (*SWEEP, f"run.dir={run_dir}", *server.model_overrides())
    try:
        first = launch_here(*args)                 # in this process, a driver of the session's cluster
        sent_first = server.stats()["requests"]
        again = launch_here(*args)
        sent_again = server.stats()["requests"] - sent_first
        yield run_dir, first, again, sent_first, sent_again
    finally:
        server.process.kill()
        server.process.wait()


def test_metrics_of_all_three_benchmarks_are_byte_identical_to_the_golden_files(golden_run):
    run_dir, first, *_ = golden_run
    assert first.returncode == 0, first.stderr
    for name in PINNED:
        assert (run_dir / name).read_bytes() == (GOLDEN / name).read_bytes(), f"{name} moved"


def test_the_run_directory_keeps_its_layout(golden_run):
    run_dir, *_ = golden_run
    shown = {p.name for p in run_dir.iterdir() if not p.name.startswith(".")}
    assert shown == TOP_LEVEL
    cells = {(b.name.removeprefix("benchmark="), c.name.removeprefix("condition="))
             for b in (run_dir / "shards").iterdir() for m in b.iterdir() for c in m.iterdir()}
    assert cells == CELLS
    for folder in (run_dir / "shards").glob("benchmark=*/model=fake/condition=*"):
        assert any(folder.glob("*.parquet")), folder
    assert [p.suffix for p in (run_dir / "ledger").iterdir()] == [".parquet"]


def test_a_resume_of_the_finished_run_sends_nothing_and_changes_no_number(golden_run):
    run_dir, first, again, sent_first, sent_again = golden_run
    assert sent_first > 0
    assert again.returncode == 0, again.stderr
    assert sent_again == 0
    for name in PINNED:
        assert (run_dir / name).read_bytes() == (GOLDEN / name).read_bytes(), f"{name} moved on resume"
