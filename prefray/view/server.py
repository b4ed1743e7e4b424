"""The local viewer server (aiohttp, 127.0.0.1 only). Pages are built in worker threads so a slow
scan never blocks the event loop.

What a request may do is bounded:
- its Host header must name the address the server is bound to (127.0.0.1, localhost or [::1] and
  the bound port) or a name the user allowed with `--allow-host`: anything else is a 403, so a page
  on another site cannot reach the viewer by rebinding its own name to 127.0.0.1;
- its query string is at most `Limits.query_chars` characters and names each known parameter once;
- every cell key, filter value, unit id and figure name is looked up in the run's own listing and
  index (data.py): anything the run does not have is a 404, and no path is built from its text;
- a page gets `Limits.page_s` seconds, and at most `Limits.busy` pages are built at once (503
  beyond either, with a line saying so).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

from aiohttp import web

from prefray.view.data import CellQuery, RunData, UnknownCell
from prefray.view.html import BASE
from prefray.view.pages import MIME, cell_html, overview_html, unit_html

HOST = "127.0.0.1"
LOCAL_NAMES = ("127.0.0.1", "localhost", "[::1]")
CELL_PARAMS = ("benchmark", "model", "condition", "judge")
FILTER_PARAMS = ("stage", "role", "status", "cause", "verdict", "meta", "q")
PARAMS = {"overview": set(), "plot": set(), "cell": {*CELL_PARAMS, *FILTER_PARAMS, "page"},
          "unit": {*CELL_PARAMS, "unit"}}
MAX_PAGE = 1_000_000


@dataclass(frozen=True)
class Limits:
    query_chars: int = 2048   # longer query strings get 414
    page_s: float = 30.0      # a page not built in this time gets 503
    busy: int = 4             # pages built at once; more get 503 at once


def allowed_host(host: str | None, port: int, allowed: tuple[str, ...] = ()) -> bool:
    """Whether a Host header names this server: a local name with the bound port, or an allowed
    name (`NAME` matches `NAME` with any port or none; `NAME:PORT` matches only that)."""
    if not host:
        return False
    host = host.strip().lower()
    if host in {f"{name}:{port}" for name in LOCAL_NAMES} or (port == 80 and host in LOCAL_NAMES):
        return True
    name, colon, number = host.rpartition(":")
    bare = name if colon and number.isdigit() else host  # "[::1]" has colons but no port
    return any(host == allow.lower() or bare == allow.lower() for allow in allowed)


def _checked_query(request: web.Request, route: str) -> None:
    names = [name for name, _ in request.query.items()]
    unknown = sorted(set(names) - PARAMS[route])
    if unknown:
        raise web.HTTPBadRequest(text=f"unknown parameter(s): {', '.join(map(repr, unknown))}")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise web.HTTPBadRequest(text=f"parameter(s) given more than once: {', '.join(repeated)}")


def _cell_keys(request: web.Request) -> tuple[str, str, str, str]:
    q = request.query
    if not q.get("benchmark") or not q.get("model") or not q.get("condition"):
        raise web.HTTPBadRequest(text="a cell needs benchmark, model and condition")
    return q["benchmark"], q["model"], q["condition"], q.get("judge", "")


def _page_number(request: web.Request) -> int:
    text = request.query.get("page", "0")
    if not text.isdigit() or len(text) > 7 or int(text) > MAX_PAGE:
        raise web.HTTPBadRequest(text=f"page must be a whole number from 0 to {MAX_PAGE}")
    return int(text)


def _cell_page(data: RunData, keys: tuple[str, str, str, str], filters: dict[str, str], page: int) -> str:
    query = CellQuery(data.lookup(*keys), **filters, page=page)
    data.check_filters(query)
    return cell_html(data, query)


def _unit_page(data: RunData, keys: tuple[str, str, str, str], unit_id: str) -> str | None:
    return unit_html(data, data.lookup(*keys), unit_id)


def _figure(data: RunData, name: str) -> tuple[bytes, str]:
    path = data.plot_file(name)
    if path is None:
        raise UnknownCell("no such figure")
    return path.read_bytes(), path.suffix


def _under(base: str, fn, *args):
    """`fn(*args)` with the pages' links below `base` (in the worker thread that builds the page)."""
    token = BASE.set(base)
    try:
        return fn(*args)
    finally:
        BASE.reset(token)


def request_guard(allow_hosts: tuple[str, ...], limits: Limits, hint: str = ""):
    """The middleware every viewer page passes: a Host of this viewer's address and a bounded query."""

    @web.middleware
    async def guard(request: web.Request, handler):
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        port = sockname[1] if sockname else 0
        host = request.headers.get("Host")
        if not allowed_host(host, port, allow_hosts):
            raise web.HTTPForbidden(text=f"Host {host!r} is not this viewer's address (127.0.0.1:{port}){hint}")
        if len(request.rel_url.raw_query_string) > limits.query_chars:
            raise web.HTTPRequestURITooLong(text=f"query string over {limits.query_chars} characters")
        return await handler(request)

    return guard


def make_app(data: RunData, allow_hosts: tuple[str, ...] = (), limits: Limits = Limits(),
             base: str = "") -> web.Application:
    """The viewer's routes over one run. `allow_hosts`: Host names accepted besides the bound
    address (a proxy's name); `base`: the path the app is mounted under (its pages link below it)."""
    pool = ThreadPoolExecutor(max_workers=limits.busy, thread_name_prefix="view-page")
    building = 0  # pages whose thread has not finished (a page past its time limit still counts)

    def finished(future: asyncio.Future) -> None:
        nonlocal building
        building -= 1
        if not future.cancelled():
            future.exception()  # retrieved: a page that failed after its request gave up is not logged twice

    async def in_thread(fn, *args):
        nonlocal building
        if building >= limits.busy:
            raise web.HTTPServiceUnavailable(text=f"the viewer is building {building} page(s); retry in a moment",
                                             headers={"Retry-After": "2"})
        building += 1
        future = asyncio.get_running_loop().run_in_executor(pool, partial(_under, base, fn, *args))
        future.add_done_callback(finished)
        try:
            return await asyncio.wait_for(asyncio.shield(future), limits.page_s)
        except TimeoutError:
            raise web.HTTPServiceUnavailable(
                text=f"this page took longer than {limits.page_s:g} s; narrow the filters or retry "
                     "(a job's first visit builds its index)") from None
        except UnknownCell as problem:
            raise web.HTTPNotFound(text=str(problem)) from None

    guard = request_guard(allow_hosts, limits, "; start it with --allow-host NAME to allow a name")

    async def overview(request: web.Request) -> web.Response:
        _checked_query(request, "overview")
        return web.Response(text=await in_thread(overview_html, data), content_type="text/html")

    async def cell(request: web.Request) -> web.Response:
        _checked_query(request, "cell")
        filters = {k: request.query.get(k, "") for k in FILTER_PARAMS}
        body = await in_thread(_cell_page, data, _cell_keys(request), filters, _page_number(request))
        return web.Response(text=body, content_type="text/html")

    async def unit(request: web.Request) -> web.Response:
        _checked_query(request, "unit")
        unit_id = request.query.get("unit", "")
        body = await in_thread(_unit_page, data, _cell_keys(request), unit_id)
        if body is None:
            raise web.HTTPNotFound(text=f"no stored row with unit id {unit_id!r} in this cell")
        return web.Response(text=body, content_type="text/html")

    async def plot(request: web.Request) -> web.Response:
        _checked_query(request, "plot")
        body, suffix = await in_thread(_figure, data, request.match_info["name"])
        return web.Response(body=body, content_type=MIME[suffix])

    async def stop_pool(app: web.Application) -> None:
        pool.shutdown(wait=False, cancel_futures=True)

    app = web.Application(middlewares=[guard])
    app.router.add_get("/", overview)
    app.router.add_get("/cell", cell)
    app.router.add_get("/unit", unit)
    app.router.add_get("/plots/{name}", plot)
    app.on_cleanup.append(stop_pool)
    return app


def serve(data: RunData, port: int, allow_hosts: tuple[str, ...] = ()) -> None:
    print(f"prefray viewer: http://{HOST}:{port}/  (Ctrl-C stops it)", flush=True)
    web.run_app(make_app(data, allow_hosts), host=HOST, port=port, print=None)
