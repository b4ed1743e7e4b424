"""Two runs side by side (`prefray compare RUN_A RUN_B --view`): the comparison, and both runs.

- `/`: what the runs share, and the comparison table (delta, CI, p, adjusted p per cell × metric),
  each row linking to both runs' units of that cell and to the cell's pairs;
- `/pair?benchmark=&model=&condition=&judge=&page=`: the evaluated model's units both runs have
  in that cell (instance, item, sample), each with a link to its transcript in either run;
- `/a/…` and `/b/…`: each run's own viewer (prefray.view.server.make_app mounted there).

The security rules of the single-run viewer hold here: bound to 127.0.0.1, Host checked, query
parameters known and given once, a cell looked up among the comparison's own cells (404 otherwise),
and no path built from a request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from aiohttp import web

from prefray.view.data import RunData
from prefray.view.html import esc, interval, layout, number, status, table, url
from prefray.view.server import HOST, Limits, make_app, request_guard

PAIR_PAGE = 100
PAIR_PARAMS = {"benchmark", "model", "condition", "judge", "page"}
CellKey = tuple[str, str, str, str]   # benchmark, model, condition, judge of the first run


@dataclass
class Pair:
    stage: str
    instance_id: str
    item: str
    sample: Any
    a: dict[str, Any]     # unit_id, status, model, condition of the first run's row
    b: dict[str, Any]


@dataclass
class Comparison:
    """What the compare pages show: the comparison and sharing tables, and the shared units."""

    table: pa.Table
    sharing: pa.Table
    names: tuple[str, str]
    pairs: dict[tuple[str, str, str], list[Pair]] = field(default_factory=dict)   # by (benchmark, model, condition)

    def cells(self) -> set[CellKey]:
        return {(r["benchmark"], r["model"], r["condition"], r["judge"]) for r in self.table.to_pylist()}


def shared_answers(rows_a: pa.Table, rows_b: pa.Table, across: tuple[str, ...] = ()) -> dict[tuple, list[Pair]]:
    """The evaluated model's units both runs have, by the first run's (benchmark, model, condition)."""
    from prefray.engine.results.compare import unit_key

    def subject(rows: pa.Table) -> list[dict[str, Any]]:
        import pyarrow.compute as pc

        mine = rows.filter(pc.equal(rows["role"], "subject"))
        keys = unit_key(mine, across).to_pylist()
        columns = ("benchmark", "model", "condition", "stage", "instance_id", "item", "sample", "unit_id", "status")
        return [{**dict(zip(columns, values)), "key": key}
                for values, key in zip(zip(*(mine[c].to_pylist() for c in columns)), keys)]

    by_key = {r["key"]: r for r in subject(rows_b)}
    out: dict[tuple, list[Pair]] = {}
    for a in subject(rows_a):
        b = by_key.get(a["key"])
        if b is not None:
            out.setdefault((a["benchmark"], a["model"], a["condition"]), []).append(
                Pair(a["stage"], a["instance_id"], a["item"] or "", a["sample"], a, b))
    for pairs in out.values():
        pairs.sort(key=lambda p: (p.stage, p.instance_id, p.item, -1 if p.sample is None else p.sample))
    return out


def _side_cell(row: dict[str, Any], side: str) -> dict[str, str]:
    """A comparison row's cell in one run: the second run's own model/condition/judge where
    `versus` names them (a comparison across those keys)."""
    cell = {k: row[k] for k in ("benchmark", "model", "condition", "judge")}
    if side == "b" and row.get("versus"):
        for part in row["versus"].split(", "):
            key, _, value = part.partition("=")
            if key in cell:
                cell[key] = value
    return cell


def _p(value: Any) -> str:
    if value is None:
        return '<span class="muted">no data</span>'
    return esc(f"{value:.2g}" if value < 0.001 else f"{value:.3f}")


def compare_html(comparison: Comparison, alpha: float = 0.05) -> str:
    name_a, name_b = comparison.names
    parts = [f'<p class="muted">first run (A): <a href="/a/">{esc(name_a)}</a> — other run (B): '
             f'<a href="/b/">{esc(name_b)}</a>. Delta = B − A on the units both runs have, over the clusters '
             "both scored; 95% cluster-bootstrap CI; p of a paired permutation test; p adjusted across every "
             f"row (bold: adjusted p &lt; {alpha:g}).</p>"]
    shared = comparison.sharing.to_pylist()
    parts.append(f"<p>{sum(r['shared'] for r in shared)} unit(s) shared; left out: "
                 f"{sum(r['only_a'] for r in shared)} only in A, {sum(r['only_b'] for r in shared)} only in B.</p>")
    partial = [r for r in shared if r["only_a"] or r["only_b"]]
    if partial:
        parts.append("<details><summary>cells and stages not both runs have in full</summary>" + table(
            ["benchmark", "model", "condition", "judge", "stage", "shared", "only in A", "only in B"],
            [[esc(r["benchmark"]), esc(r["model"]), esc(r["condition"]), esc(r["judge"]), esc(r["stage"]),
              number(r["shared"]), number(r["only_a"]), number(r["only_b"])] for r in partial],
            numeric={"shared", "only in A", "only in B"}) + "</details>")
    headers = ["benchmark", "model", "condition", "judge", "metric", "A", "B", "delta", "95% CI", "p", "p adj.",
               "clusters", "units"]
    body = []
    for r in comparison.table.to_pylist():
        significant = r["p_adjusted"] is not None and r["p_adjusted"] < alpha
        delta = number(r["delta"])
        pair_link = url("/pair", benchmark=r["benchmark"], model=r["model"], condition=r["condition"],
                        judge=r["judge"])
        links = (f'<a href="{url("/a/cell", **_side_cell(r, "a"))}">A</a> · '
                 f'<a href="{url("/b/cell", **_side_cell(r, "b"))}">B</a> · '
                 f'<a class="pairs" href="{pair_link}">pairs</a>')
        model = esc(r["model"]) + (f' <span class="muted">vs {esc(r["versus"])}</span>' if r["versus"] else "")
        body.append([esc(r["benchmark"]), model, esc(r["condition"]), esc(r["judge"]), esc(r["metric"]),
                     number(r["value_a"]), number(r["value_b"]), f"<b>{delta}</b>" if significant else delta,
                     interval(r["ci_low"], r["ci_high"]), _p(r["p"]), _p(r["p_adjusted"]), number(r["n_clusters"]),
                     links])
    parts += ["<h2>Paired comparison</h2>",
              table(headers, body, numeric={"A", "B", "delta", "p", "p adj.", "clusters"})]
    return layout("prefray: two runs compared", "".join(parts))


def pair_html(comparison: Comparison, cell: CellKey, page: int) -> str:
    pairs = comparison.pairs.get(cell[:3], [])
    shown = pairs[page * PAIR_PAGE:(page + 1) * PAIR_PAGE]
    body = []
    for p in shown:
        links = []
        for side, row in (("a", p.a), ("b", p.b)):
            href = url(f"/{side}/unit", benchmark=row["benchmark"], model=row["model"], condition=row["condition"],
                       unit=row["unit_id"])
            links.append(f'<a class="transcript-{side}" href="{href}">{side.upper()}</a> {status(row["status"])}')
        body.append([esc(p.stage), esc(p.instance_id), esc(p.item), esc(p.sample), *links])
    pager = []
    if page > 0:
        pager.append(f'<a href="{url("/pair", **_cell_params(cell), page=page - 1)}">← previous</a>')
    if (page + 1) * PAIR_PAGE < len(pairs):
        pager.append(f'<a href="{url("/pair", **_cell_params(cell), page=page + 1)}">next →</a>')
    start = page * PAIR_PAGE
    parts = [f'<nav><a href="/">comparison</a></nav><p class="muted">{len(pairs)} answer(s) of the evaluated model '
             f"both runs have in this cell; rows {start + 1 if shown else 0}–{start + len(shown)}. Each links to "
             "its transcript (and judge rows) in run A and in run B.</p>",
             table(["stage", "instance", "item", "sample", "run A", "run B"], body), f"<p>{' '.join(pager)}</p>"]
    return layout(" / ".join(v for v in cell if v) + ": shared units", "".join(parts))


def _cell_params(cell: CellKey) -> dict[str, str]:
    return dict(zip(("benchmark", "model", "condition", "judge"), cell))


def make_compare_app(comparison: Comparison, data_a: RunData, data_b: RunData, allow_hosts: tuple[str, ...] = (),
                     limits: Limits | None = None, alpha: float = 0.05) -> web.Application:
    limits = limits or Limits()
    cells = comparison.cells()

    guard = request_guard(allow_hosts, limits)

    async def overview(request: web.Request) -> web.Response:
        if request.query:
            raise web.HTTPBadRequest(text="this page takes no parameters")
        return web.Response(text=compare_html(comparison, alpha), content_type="text/html")

    async def pair(request: web.Request) -> web.Response:
        names = [name for name, _ in request.query.items()]
        if set(names) - PAIR_PARAMS or len(names) != len(set(names)):
            raise web.HTTPBadRequest(text=f"parameters: {', '.join(sorted(PAIR_PARAMS))}, each at most once")
        key = tuple(request.query.get(k, "") for k in ("benchmark", "model", "condition", "judge"))
        if key not in cells:
            raise web.HTTPNotFound(text="no such cell in this comparison")
        text = request.query.get("page", "0")
        if not text.isdigit() or len(text) > 7:
            raise web.HTTPBadRequest(text="page must be a whole number")
        return web.Response(text=pair_html(comparison, key, int(text)), content_type="text/html")

    app = web.Application(middlewares=[guard])
    app.router.add_get("/", overview)
    app.router.add_get("/pair", pair)
    app.add_subapp("/a/", make_app(data_a, allow_hosts, limits, base="/a"))
    app.add_subapp("/b/", make_app(data_b, allow_hosts, limits, base="/b"))
    return app


def serve_comparison(comparison: Comparison, data_a: RunData, data_b: RunData, port: int,
                     allow_hosts: tuple[str, ...] = (), alpha: float = 0.05) -> None:
    print(f"prefray compare viewer: http://{HOST}:{port}/  (Ctrl-C stops it)", flush=True)
    web.run_app(make_compare_app(comparison, data_a, data_b, allow_hosts, alpha=alpha), host=HOST, port=port,
                print=None)
