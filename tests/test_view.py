"""The viewer's reading and pages on a hand-built run directory (no server, no browser)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from prefray.engine.benchmark import metric_rows
from prefray.engine.results.stats import DELTA_SCHEMA
from prefray.engine.rundir import RunDir
from prefray.engine.rundir.shards import SHARD_SCHEMA, write_shard
from prefray.view.data import PAGE_SIZE, Cell, CellQuery, RunData, strip_rationale
from prefray.view.pages import cell_html, overview_html, unit_html

EVIL = '<script>alert("x")</script>'
REQUEST_SCHEMA = pa.schema([("request_hash", pa.string()), ("model_id", pa.string()), ("system", pa.string()),
                            ("messages_json", pa.string()), ("params_json", pa.string()),
                            ("json_schema_json", pa.string())])


def _row(**fields) -> dict:
    base = {name: None for name in SHARD_SCHEMA.names}
    base.update({"attempt": 1, "benchmark": "bench", "model": "m", "condition": "c", "status": "ok", "tries": 1,
                 "input_tokens": 10, "output_tokens": 5, "cost_usd": 0.001, "latency_s": 0.2, "truncated": False,
                 "finish_reason": "stop", "cached": False, "meta_json": "{}", "item": ""})
    base.update(fields)
    return base


def build_run(run_dir: Path, instances: int = 3, with_requests: bool = True) -> None:
    """Generation rows (one per instance, sample 0), one judge row per generation with a rationale,
    the requests they link to, and a metrics table with intervals."""
    rows, judged, requests = [], [], []
    for i in range(instances):
        category = "tone" if i % 2 == 0 else "style"
        answer = f"answer number {i} {EVIL}" if i == 0 else f"answer number {i}"
        rows.append(_row(unit_id=f"gen{i}", stage="generate", role="subject", judge="", instance_id=f"p{i}",
                         sample=0, text=answer, request_hash=f"rq-gen{i}",
                         meta_json=json.dumps({"category": category, "domain": "legal"}, sort_keys=True)))
        verdict = {"rationale": f"reason {i} {EVIL}", "applied": i % 2 == 0}
        judged.append(_row(unit_id=f"jud{i}", stage="judge", role="judge", judge="fj", instance_id=f"p{i}",
                           sample=0, item="0", text=json.dumps(verdict), parsed_json=json.dumps(verdict),
                           request_hash=f"rq-jud{i}", meta_json=json.dumps({"category": category}, sort_keys=True)))
        requests += [{"request_hash": f"rq-gen{i}", "model_id": "fake-model", "system": None,
                      "messages_json": json.dumps([{"role": "user", "content": f"please write {i} {EVIL}"}]),
                      "params_json": "{}", "json_schema_json": None},
                     {"request_hash": f"rq-jud{i}", "model_id": "fake-model", "system": "be a judge",
                      "messages_json": json.dumps([{"role": "user", "content": f"judge answer {i}"}]),
                      "params_json": "{}", "json_schema_json": None}]
    folder = RunDir(run_dir).job("bench", "m", "c")
    write_shard(folder, "generate", rows)
    write_shard(folder, "judge", judged)
    if with_requests:
        (run_dir / "requests").mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(requests, schema=REQUEST_SCHEMA), run_dir / "requests" / "r-0.parquet")
    metrics = metric_rows([{"benchmark": "bench", "model": "m", "condition": "c", "judge": "fj", "metric": "MR",
                            "value": 0.5, "n": instances},
                           {"benchmark": "bench", "model": "m", "condition": "c", "judge": "fj",
                            "metric": "MR[category=tone]", "value": float("nan"), "n": 0}])
    metrics = metrics.append_column("incomplete_units", pa.array([0, 0], pa.int64()))
    metrics = metrics.append_column("complete", pa.array([True, True]))
    metrics = metrics.append_column("ci_low", pa.array([0.25, None], pa.float64()))
    metrics = metrics.append_column("ci_high", pa.array([0.75, None], pa.float64()))
    pq.write_table(metrics, run_dir / "metrics.parquet")


CELL = Cell("bench", "m", "c", "fj")


def test_overview_lists_metrics_with_intervals_and_links_cells(tmp_path):
    build_run(tmp_path)
    deltas = [{"benchmark": "bench", "model": "m", "condition": "", "judge": "fj", "metric": "MR",
               "compared": "condition", "a": "defense", "b": "default", "delta": -0.125, "clusters": 12,
               "ci_low": -0.25, "ci_high": -0.03}]
    pq.write_table(pa.Table.from_pylist(deltas, schema=DELTA_SCHEMA), tmp_path / "deltas.parquet")
    page = overview_html(RunData(RunDir(tmp_path)))
    assert "condition: defense − default" in page and "[-0.250, -0.030]" in page and "-0.125" in page
    assert "[0.250, 0.750]" in page and "no data" in page  # the NaN breakdown is no data, not 0
    assert "/cell?benchmark=bench&amp;model=m&amp;condition=c&amp;judge=fj" in page


def test_cell_filters_and_pages(tmp_path):
    build_run(tmp_path, instances=PAGE_SIZE + 7)
    data = RunData(RunDir(tmp_path))
    everything = data.cell_page(CellQuery(CELL))
    assert everything.total == 2 * (PAGE_SIZE + 7) and len(everything.rows) == PAGE_SIZE
    pages = [data.cell_page(CellQuery(CELL, page=p)).rows for p in range(3)]
    assert [len(p) for p in pages] == [PAGE_SIZE, PAGE_SIZE, 14]
    assert len({r["unit_id"] for p in pages for r in p}) == 2 * (PAGE_SIZE + 7)  # no row twice, none missed
    judged = data.cell_page(CellQuery(CELL, stage="judge", verdict="applied=true"))
    assert judged.total == (PAGE_SIZE + 7 + 1) // 2
    assert all(json.loads(r["verdict"]) == {"applied": True} for r in judged.rows)  # rationale stripped
    tone = data.cell_page(CellQuery(CELL, meta='category="tone"', role="subject"))
    assert tone.total == (PAGE_SIZE + 7 + 1) // 2
    assert data.cell_page(CellQuery(CELL, q="ANSWER NUMBER 1")).total == 1 + 10  # 1, 10..19
    assert data.cell_page(CellQuery(Cell("bench", "m", "c", "other-judge"))).total == PAGE_SIZE + 7
    facets = data.facets(CELL)
    assert ("applied=true", (PAGE_SIZE + 8) // 2) in facets.verdict
    assert ('category="style"', 2 * ((PAGE_SIZE + 7) // 2)) in facets.meta
    assert dict(facets.columns["stage"]) == {"generate": PAGE_SIZE + 7, "judge": PAGE_SIZE + 7}


def test_rationale_is_stripped_from_the_verdict_summary():
    assert strip_rationale('{"rationale": "a \\"quoted\\" b", "applied": true}') == '{"applied": true}'
    assert strip_rationale('{"applied": true, "rationale": "x"}') == '{"applied": true}'


def test_transcript_shows_messages_answer_verdict_rationale_and_escapes_model_text(tmp_path):
    build_run(tmp_path)
    page = unit_html(RunData(RunDir(tmp_path)), CELL, "gen0")
    assert "please write 0" in page and "answer number 0" in page and "reason 0" in page
    assert EVIL not in page and "&lt;script&gt;" in page
    assert "{&quot;applied&quot;: true}" in page and "jud0" in page  # the judge row is linked
    judge_page = unit_html(RunData(RunDir(tmp_path)), CELL, "jud0")
    assert "judge answer 0" in judge_page and "be a judge" in judge_page and "gen0" in judge_page
    assert unit_html(RunData(RunDir(tmp_path)), CELL, "nope") is None


def test_old_runs_without_a_request_store_say_so(tmp_path):
    build_run(tmp_path, with_requests=False)
    page = unit_html(RunData(RunDir(tmp_path)), CELL, "gen1")
    assert "request not stored" in page and "answer number 1" in page


def test_cell_page_escapes_and_lists_rows(tmp_path):
    build_run(tmp_path)
    page = cell_html(RunData(RunDir(tmp_path)), CellQuery(CELL))
    assert EVIL not in page and "rows 1–6 of 6" in page


@pytest.mark.e2e
def test_export_writes_one_self_contained_file_and_a_missing_run_dir_is_one_clear_line(tmp_path):
    """`python -m prefray.view` as processes (run at once): an export, and a run dir that is not there."""
    from tests.conftest import run_together

    build_run(tmp_path / "run")
    (tmp_path / "run" / "plots").mkdir()
    (tmp_path / "run" / "plots" / "bench__MR.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"/>')
    out = tmp_path / "report.html"
    done, missing = run_together([sys.executable, "-m", "prefray.view", str(tmp_path / "run"), "--export", str(out)],
                                 [sys.executable, "-m", "prefray.view", str(tmp_path / "nope")])
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert "data:image/svg+xml;base64," in text and "[0.250, 0.750]" in text and "/plots/" not in text
    assert missing.returncode == 2 and "run directory not found" in missing.stderr


@pytest.mark.parametrize("filters", [{}, {"stage": "judge", "verdict": "applied=true"},
                                     {"meta": 'category="tone"', "q": "NUMBER 1"}, {"page": 1}])
def test_pages_scanned_before_the_index_exists_match_the_indexed_pages(tmp_path, filters):
    build_run(tmp_path, instances=PAGE_SIZE + 7)
    data = RunData(RunDir(tmp_path))
    query = CellQuery(CELL, **filters)
    scanned = data._scanned_page(query, PAGE_SIZE)
    indexed = data.cell_page(query)
    assert scanned.total is None and indexed.total is not None
    assert [(r["unit_id"], r["preview"], r["verdict"]) for r in scanned.rows] == \
        [(r["unit_id"], r["preview"], r["verdict"]) for r in indexed.rows]
    assert scanned.rows  # the filters select something


def test_a_job_without_a_judge_lists_every_row_and_the_index_follows_new_shards(tmp_path):
    build_run(tmp_path)
    data = RunData(RunDir(tmp_path))
    whole_job = Cell("bench", "m", "c", "")
    assert data.cell_page(CellQuery(whole_job)).total == 6
    time.sleep(0.01)
    write_shard(RunDir(tmp_path).job("bench", "m", "c"), "generate",
                [_row(unit_id="late", stage="generate", role="subject", judge="", instance_id="p9", sample=0,
                      text="late answer")])
    assert data.cell_page(CellQuery(whole_job)).total == 7
    assert data.cell_page(CellQuery(whole_job, q="late")).rows[0]["unit_id"] == "late"


def test_server_answers_pages_and_refuses_bad_requests(tmp_path):
    import asyncio

    from aiohttp.test_utils import TestClient, TestServer

    from prefray.view.server import make_app

    build_run(tmp_path)
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "bench__MR.png").write_bytes(b"\x89PNG fake")

    async def visit() -> None:
        async with TestClient(TestServer(make_app(RunData(RunDir(tmp_path), wait_s=5.0)))) as client:
            cell = "benchmark=bench&model=m&condition=c&judge=fj"
            page = await client.get(f"/cell?{cell}&q=%3Cscript%3E")
            text = await page.text()
            assert page.status == 200 and "<script>" not in text and "rows 1–4 of 4" in text  # 1 answer, 3 verdicts
            assert (await client.get(f"/unit?{cell}&unit=gen2")).status == 200
            assert (await client.get(f"/unit?{cell}&unit=nope")).status == 404
            assert (await client.get(f"/cell?{cell}&page=x")).status == 400
            assert (await client.get("/cell?benchmark=bench")).status == 400
            figure = await client.get("/plots/bench__MR.png")
            assert figure.status == 200 and figure.content_type == "image/png"
            assert (await client.get("/plots/..%2Fmetrics.parquet")).status == 404

    asyncio.run(visit())


def test_a_moved_run_dir_keeps_working(tmp_path):
    build_run(tmp_path / "a")
    assert "answer number 1" in unit_html(RunData(RunDir(tmp_path / "a")), CELL, "gen1")  # builds .view/
    (tmp_path / "a").rename(tmp_path / "b")
    assert "answer number 1" in unit_html(RunData(RunDir(tmp_path / "b")), CELL, "gen1")


def test_transcript_shows_the_stored_nickname_decision(tmp_path):
    build_run(tmp_path)
    text = f"Dear <Jo> and Jo, {EVIL}"
    found = {"nicknames": {"4": {"nickname": "Jo", "span": "Jo", "start": 14}}}
    absent = {"nicknames": {"4": {"nickname": "Jo", "span": None, "start": None}}}
    write_shard(RunDir(tmp_path).job("bench", "m", "c"), "generate", [
        _row(unit_id="nick-yes", stage="generate", role="subject", judge="", instance_id="q1", sample=0, text=text,
             parsed_json=json.dumps(found)),
        _row(unit_id="nick-no", stage="generate", role="subject", judge="", instance_id="q2", sample=0,
             text="Dear friend", parsed_json=json.dumps(absent))])
    page = unit_html(RunData(RunDir(tmp_path)), CELL, "nick-yes")
    # the stored span (the second "Jo", at 14) is marked in the answer; the rest stays escaped
    assert 'Dear &lt;Jo&gt; and <mark class="nickname">Jo</mark>, &lt;script&gt;' in page
    assert "nickname <b>Jo</b>: matched <mark>Jo</mark> at character 14 (applied)" in page
    assert EVIL not in page
    page = unit_html(RunData(RunDir(tmp_path)), CELL, "nick-no")
    assert "nickname <b>Jo</b>: not in the answer (not applied)" in page and "<mark" not in page
