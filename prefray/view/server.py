"""The local viewer server (aiohttp, 127.0.0.1 only). Pages are built in a worker thread so a slow
scan never blocks the event loop."""

from __future__ import annotations

import asyncio
from functools import partial

from aiohttp import web

from prefray.view.data import Cell, CellQuery, RunData
from prefray.view.pages import MIME, cell_html, overview_html, unit_html

HOST = "127.0.0.1"


def _cell(request: web.Request) -> Cell:
    q = request.query
    if not q.get("benchmark") or not q.get("model") or not q.get("condition"):
        raise web.HTTPBadRequest(text="a cell needs benchmark, model and condition")
    return Cell(q["benchmark"], q["model"], q["condition"], q.get("judge", ""))


def _page_number(request: web.Request) -> int:
    try:
        return max(0, int(request.query.get("page", "0")))
    except ValueError:
        raise web.HTTPBadRequest(text="page must be a number") from None


async def _in_thread(fn, *args) -> str | None:
    return await asyncio.get_running_loop().run_in_executor(None, partial(fn, *args))


def make_app(data: RunData) -> web.Application:
    async def overview(request: web.Request) -> web.Response:
        return web.Response(text=await _in_thread(overview_html, data), content_type="text/html")

    async def cell(request: web.Request) -> web.Response:
        q = request.query
        query = CellQuery(_cell(request), **{k: q.get(k, "") for k in
                                              ("stage", "role", "status", "cause", "verdict", "meta", "q")},
                          page=_page_number(request))
        return web.Response(text=await _in_thread(cell_html, data, query), content_type="text/html")

    async def unit(request: web.Request) -> web.Response:
        unit_id = request.query.get("unit", "")
        body = await _in_thread(unit_html, data, _cell(request), unit_id)
        if body is None:
            raise web.HTTPNotFound(text=f"no stored row with unit id {unit_id!r} in this cell")
        return web.Response(text=body, content_type="text/html")

    async def plot(request: web.Request) -> web.Response:
        path = data.plot_file(request.match_info["name"])
        if path is None:
            raise web.HTTPNotFound(text="no such figure")
        return web.Response(body=path.read_bytes(), content_type=MIME[path.suffix])

    app = web.Application()
    app.router.add_get("/", overview)
    app.router.add_get("/cell", cell)
    app.router.add_get("/unit", unit)
    app.router.add_get("/plots/{name}", plot)
    return app


def serve(data: RunData, port: int) -> None:
    print(f"prefray viewer: http://{HOST}:{port}/  (Ctrl-C stops it)", flush=True)
    web.run_app(make_app(data), host=HOST, port=port, print=None)
