"""The viewer's side-by-side comparison (prefray.view.compare), served in this process on a loopback
port: the comparison page, a cell's shared units, the links to both runs' transcripts, and the
single-run viewer's security rules (Host check, known parameters, cells looked up, no path built)."""

from __future__ import annotations

import asyncio
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pytest
from aiohttp.test_utils import TestClient, TestServer
from test_compare import shard_rows, toy, toy_scores, write_run  # noqa: F401 (toy: a fixture)
from yarl import URL

from prefray.engine.results.compare import adjusted, compare_rows
from prefray.engine.rundir import RunDir
from prefray.engine.rundir.shards import SHARD_SCHEMA
from prefray.view.compare import Comparison, make_compare_app, shared_answers
from prefray.view.data import RunData


def marked_rows(run: str, units: list[tuple[str, int, str]]) -> list[dict]:
    rows = shard_rows(units)
    for row in rows:
        row["text"] = f"answer of run {run} to {row['instance_id']}"
        row["meta_json"] = "{}"
    return rows


@pytest.fixture
def served(tmp_path, request):
    request.getfixturevalue("toy")   # the toy benchmark installed (test_compare)
    rng = np.random.default_rng(4)
    units = [(f"p{p}-q{q}", 0, str(int(rng.random() < 0.5))) for p in range(6) for q in range(2)]
    first = write_run(tmp_path / "first", marked_rows("A", units))
    second = write_run(tmp_path / "second", marked_rows("B", units[1:] + [("p9-q9", 0, "1")]))
    rows = [pa.Table.from_pylist(marked_rows(run, u), schema=SHARD_SCHEMA)
            for run, u in (("A", units), ("B", units[1:] + [("p9-q9", 0, "1")]))]
    table, sharing = compare_rows(rows[0], rows[1], toy_scores, toy_scores, names=(str(first), str(second)))
    comparison = Comparison(adjusted(table), sharing, (str(first), str(second)), shared_answers(rows[0], rows[1]))
    return make_compare_app(comparison, RunData(RunDir(first), wait_s=30.0), RunData(RunDir(second), wait_s=30.0))


async def get(client: TestClient, path_qs: str, **kwargs) -> tuple[int, str]:
    async with client.session.get(URL(str(client.make_url("")).rstrip("/") + path_qs, encoded=True),
                                  **kwargs) as response:
        return response.status, await response.text(errors="replace")


def test_the_comparison_links_to_both_runs_and_to_the_shared_units(served):
    async def visit():
        async with TestClient(TestServer(served)) as client:
            code, page = await get(client, "/")
            assert code == 200
            assert "11 unit(s) shared; left out: 1 only in A, 1 only in B" in page
            assert 'href="/a/cell?benchmark=toy&amp;model=m&amp;condition=c"' in page
            assert 'href="/b/cell?benchmark=toy&amp;model=m&amp;condition=c"' in page
            code, pairs = await get(client, "/pair?benchmark=toy&model=m&condition=c&judge=")
            assert code == 200 and "11 answer(s) of the evaluated model both runs have" in pairs
            assert "p0-q0" not in pairs and "p9-q9" not in pairs      # each only in one run
            link_a = pairs.split('class="transcript-a" href="')[1].split('"')[0].replace("&amp;", "&")
            link_b = pairs.split('class="transcript-b" href="')[1].split('"')[0].replace("&amp;", "&")
            code, transcript_a = await get(client, link_a)
            assert code == 200 and "answer of run A to p0-q1" in transcript_a
            assert 'href="/a/"' in transcript_a                      # the run's own links stay under /a/
            code, transcript_b = await get(client, link_b)
            assert code == 200 and "answer of run B to p0-q1" in transcript_b
            code, overview_b = await get(client, "/b/")
            assert code == 200 and 'href="/b/cell?' in overview_b

    asyncio.run(visit())


def test_the_single_run_viewers_rules_hold(served):
    hostile = ["../" * 8 + "etc/passwd", "toy/../../second", "/etc/passwd", "toy\x00", "p9-q9"]

    async def visit():
        async with TestClient(TestServer(served)) as client:
            for path in ("/", "/pair?benchmark=toy&model=m&condition=c&judge=", "/a/", "/b/cell?benchmark=toy"):
                code, _ = await get(client, path, headers={"Host": "evil.example:80"})
                assert code == 403, path
            for param in ("benchmark", "model", "condition", "judge"):
                for value in hostile:
                    query = {"benchmark": "toy", "model": "m", "condition": "c", "judge": "", param: value}
                    code, body = await get(client, "/pair?" + "&".join(f"{k}={quote(v, safe='')}"
                                                                       for k, v in query.items()))
                    assert code == 404 and "answer of run" not in body, (param, value)
            assert (await get(client, "/pair?benchmark=toy&model=m&condition=c&judge=&page=x"))[0] == 400
            assert (await get(client, "/pair?benchmark=toy&benchmark=toy&model=m&condition=c"))[0] == 400
            assert (await get(client, "/pair?benchmark=toy&model=m&condition=c&file=x"))[0] == 400
            assert (await get(client, "/?x=1"))[0] == 400
            assert (await get(client, "/a/plots/" + quote("../manifest.json", safe="")))[0] == 404

    asyncio.run(visit())

