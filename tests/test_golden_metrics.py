"""Golden run: the three benchmarks on the fake provider, pinned byte for byte.

`tests/golden/` holds metrics.csv, deltas.csv and judge_agreement.csv of
`-m model=fake judge=fake benchmark=all condition=all limit=2`, written by the code before the engine
was restructured. Any change that moves a published number, or the layout of a run directory, or
what a resume sends, fails here. Regenerate the files only for a change that means to move a number,
and say which number and why in the commit.

One family of numbers is compared to a tolerance instead of byte for byte: PRISK's factorial fit
(`*_score_{beta,ci_low,ci_high,p,df}[term]`, prisk/factorial.py). Its REML optimizer stops within its
tolerance at a point that moves with the CPU's floating-point kernels: the same answers gave these
rows up to 3e-7 apart (relative; the Satterthwaite df of a variance component at its boundary) on
two machines, and the same bytes on each. Every other row, and every other column of those rows,
stays byte for byte.
"""

from __future__ import annotations

import csv
import io
import math
import re
from pathlib import Path

import pytest

from prefray.benchmarks.prisk.factorial import TERMS

pytestmark = pytest.mark.e2e

GOLDEN = Path(__file__).parent / "golden"
PINNED = ("metrics.csv", "deltas.csv", "judge_agreement.csv")
SWEEP = ("-m", "model=fake", "judge=fake", "benchmark=all", "condition=all", "limit=2",
         "run.cache=false", "run.progress=false")
TOP_LEVEL = {"calls.csv", "costs.csv", "deltas.csv", "deltas.parquet", "judge_agreement.csv", "ledger",
             "manifest.json", "metrics.csv", "metrics.md", "metrics.parquet", "plots", "requests", "shards"}
FIT = re.compile(rf"_score_(beta|ci_low|ci_high|p|df)\[({'|'.join(TERMS)})\]$")   # factorial_rows' names
FIT_RTOL = 1e-5
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


def moved(name: str, got: bytes, pinned: bytes) -> list[str]:
    """The rows of `got` that differ from `pinned`: byte for byte, but the factorial fit's values to
    FIT_RTOL (see the module docstring)."""
    if got == pinned:
        return []
    ours, theirs = got.decode().splitlines(), pinned.decode().splitlines()
    if len(ours) != len(theirs):
        return [f"{name}: {len(ours)} lines against {len(theirs)}"]
    if name != "metrics.csv":
        return [line for line, other in zip(ours, theirs) if line != other]
    header = next(csv.reader(io.StringIO(theirs[0])))
    value, metric = header.index("value"), header.index("metric")
    out = []
    for line, other in zip(ours, theirs):
        if line == other:
            continue
        row, pin = next(csv.reader(io.StringIO(line))), next(csv.reader(io.StringIO(other)))
        rest_same = row[:value] + row[value + 1:] == pin[:value] + pin[value + 1:]
        if not (FIT.search(pin[metric]) and rest_same
                and math.isclose(float(row[value]), float(pin[value]), rel_tol=FIT_RTOL)):
            out.append(f"{line} (pinned: {other})")
    return out


def test_moved_compares_the_fit_to_its_tolerance_and_every_other_row_byte_for_byte():
    header = '"benchmark","model","condition","judge","metric","value","n"\n'
    pinned = (header + '"prisk_irp","m","factorial","j","IRP_score_df[memory]",48.5242351529718,56\n'
              '"prisk_irp","m","base","j","IRP_mean",3.0,56\n').encode()
    near = pinned.replace(b"48.5242351529718", b"48.52423618059798")      # 2e-8 apart
    far = pinned.replace(b"48.5242351529718", b"48.6")
    mean = pinned.replace(b"3.0,56", b"3.0000000000000004,56")
    n = pinned.replace(b"48.5242351529718,56", b"48.52423618059798,55")
    assert moved("metrics.csv", near, pinned) == []
    assert len(moved("metrics.csv", far, pinned)) == 1
    assert len(moved("metrics.csv", mean, pinned)) == 1      # not a fit row: byte for byte
    assert len(moved("metrics.csv", n, pinned)) == 1         # the fit's other columns: byte for byte
    assert len(moved("deltas.csv", near, pinned)) == 1


def test_metrics_of_all_three_benchmarks_are_byte_identical_to_the_golden_files(golden_run):
    run_dir, first, *_ = golden_run
    assert first.returncode == 0, first.stderr
    for name in PINNED:
        assert moved(name, (run_dir / name).read_bytes(), (GOLDEN / name).read_bytes()) == [], f"{name} moved"


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
        assert moved(name, (run_dir / name).read_bytes(), (GOLDEN / name).read_bytes()) == [], \
            f"{name} moved on resume"
