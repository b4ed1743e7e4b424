"""The viewer reads only its own run: every route and parameter against the traversal family, the
Host check (DNS rebinding), and the bounds on a request (query length, time, pages at once).

The viewed run sits next to a second run whose rows, transcripts and figures carry a recognisable
marker; no answer may show it, and nothing may be indexed into the viewed run's `.view/` for it.
In-process tests serve the real aiohttp app on a free loopback port; the e2e test starts
`python -m prefray.view` and talks raw HTTP to it.
"""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from aiohttp.test_utils import TestClient, TestServer
from test_view import _row, build_run
from yarl import URL

from prefray.engine.rundir import RunDir
from prefray.engine.rundir.shards import write_shard
from prefray.view.data import PAGE_SIZE, RunData
from prefray.view.server import Limits, allowed_host, make_app
from tests.conftest import ROOT, _port_open, free_port

SECRET = "OTHER-RUN-CONTENT"  # in the other run's texts, never in a request (error lines echo requests)
CELL = {"benchmark": "bench", "model": "m", "condition": "c", "judge": "fj"}
FILTERS = ("stage", "role", "status", "cause", "verdict", "meta", "q", "page")


def build_other_run(run_dir: Path) -> None:
    """A second run with the same cell keys (and one more condition), every text marked SECRET."""
    for condition in ("c", "leak"):
        folder = RunDir(run_dir).job("bench", "m", condition)
        write_shard(folder, "generate", [_row(unit_id=f"secret-gen-{condition}", stage="generate", role="subject",
                                              judge="", instance_id="p0", sample=0, condition=condition,
                                              text=f"{SECRET} answer", request_hash="rq-secret",
                                              meta_json=json.dumps({"category": SECRET}))])
        write_shard(folder, "judge", [_row(unit_id=f"secret-jud-{condition}", stage="judge-secret", role="judge",
                                           judge="fj", instance_id="p0", sample=0, item="0", condition=condition,
                                           text=SECRET, parsed_json=json.dumps({"secret": SECRET}),
                                           status=SECRET, cause=SECRET)])
    (run_dir / "plots").mkdir()
    (run_dir / "plots" / "secret.svg").write_text(f'<svg xmlns="http://www.w3.org/2000/svg"><!--{SECRET}--></svg>')


@pytest.fixture
def runs(tmp_path) -> tuple[Path, Path]:
    viewed, other = tmp_path / "runs" / "viewed", tmp_path / "runs" / "other"
    build_run(viewed)
    (viewed / "plots").mkdir()
    (viewed / "plots" / "bench__MR.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"/>')
    build_other_run(other)
    return viewed, other


def own_index_files(run_dir: Path) -> set[str]:
    relative = str(RunDir(run_dir).job("bench", "m", "c").relative_to(run_dir))
    return {hashlib.sha1(relative.encode()).hexdigest()[:16] + ".parquet"}


def raw_values(param: str, other: Path) -> list[str]:
    """What a hostile request puts in `param`: a relative path from the viewed job folder to the
    other run's (each key starts where the engine's path would), the whole file system, absolute
    paths, and the other run's ids."""
    to_other = {"benchmark": "bench/../../../other/shards/benchmark=bench",
                "model": "m/../../../../other/shards/benchmark=bench/model=m",
                "condition": "c/../../../../../other/shards/benchmark=bench/model=m/condition=c"}
    values = [to_other.get(param, "../../../../../other/shards/benchmark=bench/model=m/condition=c"),
              "c/" + "../" * 30, "../" * 30 + "etc/passwd", str(RunDir(other).job("bench", "m", "c")), "/etc/passwd",
              "secret-gen-c", "leak" if param == "condition" else "judge-secret"]
    return values


def encodings(value: str) -> list[str]:
    """One value as a query-string component: raw slashes, %2F, double-encoded (%252F), backslashes,
    a NUL before and after."""
    return [quote(value, safe="/"), quote(value, safe=""), quote(quote(value, safe=""), safe=""),
            quote(value.replace("/", "\\"), safe=""), quote(value + "\x00", safe=""),
            quote("c\x00" + value, safe="/")]


def hostile_requests(other: Path) -> list[tuple[str, str]]:
    """(param, path and query) for every route and parameter."""
    out = []
    for route, params, base in (("/cell", [*CELL, *FILTERS], CELL), ("/unit", [*CELL, "unit"],
                                                                     {**CELL, "unit": "gen1"})):
        for param in params:
            for value in raw_values(param, other):
                for encoded in encodings(value):
                    query = [f"{k}={quote(v, safe='')}" for k, v in base.items() if k != param]
                    out.append((param, f"{route}?{'&'.join(query + [f'{param}={encoded}'])}"))
    for value in raw_values("plot", other) + ["../../other/plots/secret.svg", "../metrics.parquet"]:
        for encoded in encodings(value):
            out.append(("plot", f"/plots/{encoded}"))
            out.append(("overview", f"/?x={encoded}"))
    return out


async def fetch(client: TestClient, path_qs: str, **kwargs) -> tuple[int, str, float]:
    """GET exactly these bytes (no normalising of `..` or %-escapes by the client)."""
    started = time.monotonic()
    async with client.session.get(URL(str(client.make_url("")).rstrip("/") + path_qs, encoded=True),
                                  **kwargs) as response:
        return response.status, await response.text(errors="replace"), time.monotonic() - started


def test_the_traversal_family_on_every_route_and_parameter_finds_nothing_of_the_other_run(runs):
    viewed, other = runs
    requests = hostile_requests(other)
    assert len(requests) > 500

    async def visit() -> list[tuple[str, str, int, float]]:
        async with TestClient(TestServer(make_app(RunData(RunDir(viewed), wait_s=30.0)))) as client:
            assert (await fetch(client, "/cell?benchmark=bench&model=m&condition=c&judge=fj"))[0] == 200
            found = []
            for param, path_qs in requests:
                code, body, took = await fetch(client, path_qs)
                assert SECRET not in body and "secret-jud" not in body, (path_qs, code, body[:300])
                found.append((param, path_qs, code, took))
            return found

    answers = asyncio.run(visit())
    for param, path_qs, code, took in answers:
        # a free-text search matches nothing of this run; every other parameter is a lookup
        expected = {200} if param == "q" else {400, 404}
        assert code in expected, (path_qs, code)
        assert took < 5, (path_qs, took)
    assert {code for param, _, code, _ in answers if param in (*CELL, "unit", "plot")} == {404}  # looked up
    assert {p.name for p in (viewed / ".view").iterdir()} == own_index_files(viewed)  # nothing indexed for it
    assert not (other / ".view").exists()


def test_what_a_user_is_told_for_an_unknown_cell_filter_unit_and_figure(runs):
    viewed, _ = runs

    async def visit() -> None:
        async with TestClient(TestServer(make_app(RunData(RunDir(viewed), wait_s=30.0)))) as client:
            cell = "benchmark=bench&model=m&condition=c&judge=fj"
            code, body, _ = await fetch(client, "/cell?benchmark=bench&model=m&condition=leak")
            assert code == 404 and "this run has no stored rows for benchmark 'bench', model 'm', " \
                                   "condition 'leak'" in body
            code, body, _ = await fetch(client, "/cell?benchmark=bench&model=m&condition=c&judge=nobody")
            assert code == 404 and "no judge 'nobody'" in body
            code, body, _ = await fetch(client, f"/cell?{cell}&stage=..%2F..")
            assert code == 404 and "no row of this cell has stage '../..'" in body
            code, body, _ = await fetch(client, f"/cell?{cell}&meta=category%3D%22nope%22")
            assert code == 404 and "not one of this cell's filter choices" in body
            code, body, _ = await fetch(client, f"/unit?{cell}&unit=secret-gen-c")
            assert code == 404 and "no stored row with unit id 'secret-gen-c' in this cell" in body
            code, body, _ = await fetch(client, "/plots/..%2F..%2Fother%2Fplots%2Fsecret.svg")
            assert code == 404 and body == "no such figure"
            code, body, _ = await fetch(client, f"/cell?{cell}&condtion=c")
            assert code == 400 and "unknown parameter(s): 'condtion'" in body
            code, body, _ = await fetch(client, f"/cell?{cell}&condition=..")
            assert code == 400 and "more than once: condition" in body
            code, body, _ = await fetch(client, f"/cell?{cell}&page=99999999999")
            assert code == 400 and "page must be a whole number" in body
            # what the run has still answers: a filter choice, the whole job, a figure, a transcript
            assert (await fetch(client, f"/cell?{cell}&stage=judge&meta=category%3D%22tone%22"))[0] == 200
            assert (await fetch(client, "/cell?benchmark=bench&model=m&condition=c&judge="))[0] == 200
            assert (await fetch(client, "/plots/bench__MR.svg"))[0] == 200
            code, body, _ = await fetch(client, f"/unit?{cell}&unit=gen1")
            assert code == 200 and "answer number 1" in body

    asyncio.run(visit())


@pytest.mark.parametrize("host, allowed", [
    ("127.0.0.1:{port}", True), ("localhost:{port}", True), ("[::1]:{port}", True), ("LOCALHOST:{port}", True),
    ("evil.example:{port}", False), ("evil.example", False), ("127.0.0.1:1", False), ("localhost", False),
    ("127.0.0.1.evil.example:{port}", False), ("", False)])
def test_a_foreign_host_header_is_refused(runs, host, allowed):
    viewed, _ = runs

    async def visit() -> tuple[int, str]:
        async with TestClient(TestServer(make_app(RunData(RunDir(viewed))))) as client:
            return (await fetch(client, "/", headers={"Host": host.format(port=client.port)}))[:2]

    code, body = asyncio.run(visit())
    assert code == (200 if allowed else 403), body[:200]
    if not allowed:
        assert "is not this viewer's address" in body and "--allow-host" in body


def test_allow_host_lets_a_proxy_name_through_and_nothing_else(runs):
    viewed, _ = runs
    hosts = {"viewer.example": 200, "viewer.example:443": 200, "VIEWER.example": 200, "other.example:8443": 200,
             "other.example": 403, "other.example:9": 403, "evil.example": 403, "viewer.example.evil.example": 403,
             "127.0.0.1:{port}": 200}

    async def visit() -> dict[str, int]:
        app = make_app(RunData(RunDir(viewed)), allow_hosts=("viewer.example", "other.example:8443"))
        async with TestClient(TestServer(app)) as client:
            return {host: (await fetch(client, "/", headers={"Host": host.format(port=client.port)}))[0]
                    for host in hosts}

    assert asyncio.run(visit()) == hosts


def test_allowed_host_rules():
    assert allowed_host("127.0.0.1:8770", 8770) and allowed_host("[::1]:8770", 8770)
    assert not allowed_host("127.0.0.1:8771", 8770) and not allowed_host(None, 8770)
    assert allowed_host("127.0.0.1", 80) and not allowed_host("127.0.0.1", 8770)
    assert allowed_host("[::1]", 80) and not allowed_host("[::1]", 8770, ("::1",))


def test_a_huge_query_string_is_refused_quickly(runs):
    viewed, _ = runs

    async def visit() -> list[tuple[int, float]]:
        async with TestClient(TestServer(make_app(RunData(RunDir(viewed))))) as client:
            cell = "benchmark=bench&model=m&condition=c&judge=fj"
            return [(code, took) for code, _, took in
                    [await fetch(client, f"/cell?{cell}&q={'a' * 3000}"),
                     await fetch(client, f"/cell?{cell}&q={'%2F..' * 20000}")]]

    (long_code, long_took), (huge_code, huge_took) = asyncio.run(visit())
    assert long_code == 414 and long_took < 1
    assert huge_code in (400, 414) and huge_took < 1


def test_a_page_past_its_time_limit_or_beyond_the_pages_at_once_gets_503(tmp_path):
    build_run(tmp_path, instances=20 * PAGE_SIZE)

    async def visit() -> tuple[tuple[int, str], tuple[int, str], int]:
        app = make_app(RunData(RunDir(tmp_path)), limits=Limits(page_s=0.001, busy=1))
        async with TestClient(TestServer(app)) as client:
            cell = "/cell?benchmark=bench&model=m&condition=c&judge=fj&q=number"
            slow = (await fetch(client, cell))[:2]     # its thread builds the job's index, past the limit
            busy = (await fetch(client, cell))[:2]     # while that thread still runs
            for _ in range(200):
                await asyncio.sleep(0.05)
                if (await fetch(client, "/plots/none.svg"))[0] == 404:  # the thread is free again
                    break
            return slow, busy, (await fetch(client, "/plots/none.svg"))[0]

    slow, busy, after = asyncio.run(visit())
    assert slow[0] == 503 and "took longer than 0.001 s" in slow[1]
    assert busy[0] == 503 and "building 1 page(s)" in busy[1]
    assert after == 404


def listening_addresses(port: int) -> set[str]:
    """Local addresses of the listening TCP sockets on `port` (from /proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if int(hex_port, 16) == port and state == "0A":
                found.add(address)
    return found


def raw_get(port: int, path_qs: str, host: str | None) -> tuple[int, str, float]:
    started = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.putrequest("GET", path_qs, skip_host=True, skip_accept_encoding=True)
    if host is not None:
        connection.putheader("Host", host)
    connection.endheaders()
    response = connection.getresponse()
    body = response.read().decode(errors="replace")
    connection.close()
    return response.status, body, time.monotonic() - started


@pytest.mark.e2e
def test_the_viewer_process_binds_loopback_checks_hosts_and_refuses_traversal(runs):
    viewed, other = runs
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "prefray.view", str(viewed), "--port", str(port),
                                "--allow-host", "viewer.example"], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 30
        while not _port_open(port):
            assert time.time() < deadline and process.poll() is None, "the viewer did not start"
            time.sleep(0.1)
        assert listening_addresses(port) == {"0100007F"}  # 127.0.0.1, nothing else
        local = f"127.0.0.1:{port}"
        assert raw_get(port, "/", local)[0] == 200
        assert raw_get(port, "/", "viewer.example")[0] == 200
        code, body, _ = raw_get(port, "/", f"rebound.example:{port}")
        assert code == 403 and "--allow-host" in body
        assert raw_get(port, "/", None)[0] in (400, 403)
        cell = "benchmark=bench&model=m&judge=fj&condition="
        for condition in ("c/../../../../../other/shards/benchmark=bench/model=m/condition=c",
                          "c%2F..%2F..%2F..%2F..%2F..%2Fother%2Fshards%2Fbenchmark%3Dbench%2Fmodel%3Dm%2Fcondition%3Dc",
                          "default/" + "../" * 12, "c%252F..%252F..", "c%5C..%5C..", "c%00"):
            for route in ("/cell?", "/unit?unit=secret-gen-c&"):
                code, body, took = raw_get(port, route + cell + condition, local)
                assert code == 404 and SECRET not in body and took < 5, (route, condition, code, took)
        code, _, took = raw_get(port, "/cell?q=" + "a" * 1_000_000, local)
        assert code in (400, 414) and took < 2
        assert raw_get(port, "/plots/../../other/plots/secret.svg", local)[0] == 404
        assert SECRET not in raw_get(port, "/", local)[1]
        assert raw_get(port, "/cell?benchmark=bench&model=m&condition=c&judge=fj", local)[0] == 200
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
    assert {p.name for p in (viewed / ".view").iterdir()} == own_index_files(viewed)
