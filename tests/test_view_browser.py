"""The viewer in a real browser: headless Chromium (Debian's `chromium`) driven by Playwright.

A BenchPreS run is made by the real CLI against the fake provider; the viewer serves it; the
browser goes overview → cell → transcript and finds the stored answer, the request's messages and
the judge's verdict (and rationale when the judge gives one). Screenshots are saved under the
test's tmp dir (`screenshots/`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from prefray.fakellm.answers import answer_text
from tests.conftest import ROOT, _port_open, free_port

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SAMPLE = ROOT / "prefray/benchmarks/benchpres/sample/benchpres_sample.jsonl"
REQUEST_SCHEMA = pa.schema([("request_hash", pa.string()), ("model_id", pa.string()), ("system", pa.string()),
                            ("messages_json", pa.string()), ("params_json", pa.string()),
                            ("json_schema_json", pa.string())])

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
pytestmark = [pytestmark, pytest.mark.e2e]


def ensure_generation_requests(run_dir: Path, rows: list[dict]) -> None:
    """Runs made before the engine kept requests have no RUN_DIR/requests/: write the generation
    requests in the documented format, each checked against the fake's answer rule first (the fake
    answers a function of the last user message and the seed, so a wrong prompt cannot pass)."""
    if (run_dir / "requests").is_dir():
        return
    prompts = [json.loads(line)["prompt"] for line in SAMPLE.read_text().splitlines()]
    out = []
    for row in rows:
        if row["stage"] != "generate":
            continue
        messages = next(m for m in ([{"role": "user", "content": p}] for p in prompts)
                        if answer_text(m, row["seed"]) == row["text"])
        out.append({"request_hash": row["request_hash"], "model_id": row["model_id"], "system": None,
                    "messages_json": json.dumps(messages, ensure_ascii=False), "params_json": row["params_json"],
                    "json_schema_json": None})
    (run_dir / "requests").mkdir()
    pq.write_table(pa.Table.from_pylist(out, schema=REQUEST_SCHEMA), run_dir / "requests" / "requests-test.parquet")


def stored_request(run_dir: Path, request_hash: str) -> dict:
    table = ds.dataset(run_dir / "requests", format="parquet").to_table(
        filter=ds.field("request_hash") == request_hash)
    assert table.num_rows >= 1, f"request {request_hash} not in the store"
    return table.to_pylist()[0]


def start_viewer(run_dir: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "prefray.view", str(run_dir), "--port", str(port)],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 30
    while not _port_open(port):
        if time.time() > deadline or process.poll() is not None:
            process.kill()
            raise RuntimeError(f"viewer did not start: {process.stdout.read().decode() if process.stdout else ''}")
        time.sleep(0.1)
    return process, f"http://127.0.0.1:{port}"


def test_overview_to_cell_to_transcript_in_chromium(run_cli, fake_server, tmp_path):
    from playwright.sync_api import sync_playwright

    run_dir = tmp_path / "run"
    run_cli("benchmark=benchpres", "model=fake", "judge=fake", *fake_server.model_overrides(),
            f"run.dir={run_dir}", "limit=1", "benchmark.samples=1")
    rows = ds.dataset(run_dir / "shards", format="parquet").to_table().to_pylist()
    ensure_generation_requests(run_dir, rows)
    generation = next(r for r in rows if r["stage"] == "generate")
    judged = [r for r in rows if r["stage"] == "judge" and r["instance_id"] == generation["instance_id"]
              and r["sample"] == generation["sample"]]
    assert judged, "the run has judge rows for the generation"
    request = stored_request(run_dir, generation["request_hash"])
    sent = json.loads(request["messages_json"])
    shots = tmp_path / "screenshots"
    shots.mkdir()

    viewer, base = start_viewer(run_dir)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            page.goto(base + "/")
            assert "MR" in page.inner_text("body") and "95% CI" in page.inner_text("body")
            page.screenshot(path=str(shots / "1-overview.png"), full_page=True)

            cell_link = page.locator("a", has_text="units").first
            cell_link.click()
            page.wait_for_url("**/cell?**")
            assert "benchpres" in page.title()
            for _ in range(50):  # a job's first visit may be served before its index is built
                if "being built" not in page.locator("#count").inner_text():
                    break
                time.sleep(0.2)
                page.reload()
            page.select_option("select[name=stage]", "generate")
            page.click("form.filters button")
            page.wait_for_url("**stage=generate**")
            assert page.locator("#count").inner_text().endswith(f"of {sum(r['stage'] == 'generate' for r in rows)} "
                                                                "(every stored row: each attempt of each unit; "
                                                                "judge rows of this cell's judge)")
            page.screenshot(path=str(shots / "2-cell.png"), full_page=True)

            page.locator("a.unit").first.click()
            page.wait_for_url("**/unit?**")
            body = page.inner_text("body")
            assert page.locator("pre.answer").first.inner_text() == generation["text"]
            assert page.locator(".msg pre").first.inner_text().strip() == sent[-1]["content"].strip()
            for judge_row in judged:
                verdict = json.loads(judge_row["parsed_json"])
                if verdict.get("rationale"):
                    assert verdict.pop("rationale") in body
                assert json.dumps(verdict, ensure_ascii=False) in body
            assert "Judge rows of this instance and sample" in body
            for decided in json.loads(generation["parsed_json"])["nicknames"].values():  # stored with the answer
                outcome = "not in the answer" if decided["span"] is None else f"matched {decided['span']}"
                assert f"nickname {decided['nickname']}: {outcome}" in body
            page.screenshot(path=str(shots / "3-transcript.png"), full_page=True)
            browser.close()
    finally:
        os.killpg(viewer.pid, signal.SIGTERM)
        viewer.wait(timeout=10)
    assert all((shots / name).stat().st_size > 0 for name in ("1-overview.png", "2-cell.png", "3-transcript.png"))
