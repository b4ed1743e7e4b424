"""compare, report and the side-by-side viewer on a real run: one BenchPreS launch against the fake
provider (limit=1, one sample), shared by the module, and a copy of it as the second run."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from tests.conftest import ROOT, _port_open, command_here, free_port, launch_here, start_fake_server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def runs(tmp_path_factory, ray_address) -> tuple[Path, Path]:
    server = start_fake_server()
    first = tmp_path_factory.mktemp("compare") / "first"
    try:
        done = launch_here("benchmark=benchpres", "model=fake", "judge=fake", *server.model_overrides(),
                           f"run.dir={first}", "limit=1", "benchmark.samples=1", "run.plots=false")
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        server.process.kill()
        server.process.wait()
    second = first.with_name("second")
    shutil.copytree(first, second, ignore=shutil.ignore_patterns(".view", ".prefray.lock"))
    return first, second


def test_a_run_against_its_copy_has_no_difference(runs, tmp_path):
    first, second = runs
    out = tmp_path / "compare.csv"
    done = command_here("compare", str(first), str(second), "--csv", str(out))
    assert done.returncode == 0, done.stderr
    rows = pacsv.read_csv(out).to_pylist()
    metrics = {(r["condition"], r["metric"]) for r in rows}
    assert {("default", "MR"), ("default", "AAR")} <= metrics
    for row in rows:
        assert row["delta"] == 0 and row["p"] == 1 and row["n_pairs"] > 0
    assert "left out: 0 only in" in done.stdout
    assert out.with_suffix(".png").exists()


def test_the_report_writes_benchpres_table1_from_the_runs_metrics(runs, tmp_path):
    first, _ = runs
    done = command_here("report", str(first), "--markdown", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "benchpres_table1.md").read_text()
    metrics = {(r["metric"], r["condition"]): r for r in pq.read_table(first / "metrics.parquet").to_pylist()}
    mr = metrics[("MR", "default")]
    assert f"| fake | {100 * mr['value']:.2f}" in text and f"({mr['n']})" in text


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_side_by_side_in_chromium(runs, tmp_path):
    from playwright.sync_api import sync_playwright

    first, second = runs
    port = free_port()
    viewer = subprocess.Popen([sys.executable, "-m", "prefray.compare", str(first), str(second), "--view",
                               "--port", str(port)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              start_new_session=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.time() + 60
        while not _port_open(port):
            assert time.time() < deadline and viewer.poll() is None, viewer.stdout.read().decode()
            time.sleep(0.2)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            page.goto(f"http://127.0.0.1:{port}/")
            assert "Paired comparison" in page.inner_text("body")
            page.locator("a.pairs").first.click()
            page.wait_for_url("**/pair?**")
            page.screenshot(path=str(tmp_path / "pairs.png"), full_page=True)
            page.locator("a.transcript-b").first.click()
            page.wait_for_url("**/b/unit?**")
            answer_b = page.locator("pre.answer").first.inner_text()
            page.go_back()
            page.locator("a.transcript-a").first.click()
            page.wait_for_url("**/a/unit?**")
            assert page.locator("pre.answer").first.inner_text() == answer_b   # the copy: the same answer
            page.locator("nav a", has_text="overview").click()
            page.wait_for_url("**/a/")
            browser.close()
    finally:
        os.killpg(viewer.pid, signal.SIGTERM)
        viewer.wait(timeout=10)
