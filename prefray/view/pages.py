"""The viewer's pages: overview (metrics, cells, figures), a cell's units, a unit's transcript."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from prefray.view.data import PAGE_SIZE, Cell, CellQuery, RunData
from prefray.view.html import esc, interval, layout, link, number, select, status, table, url

MIME = {".svg": "image/svg+xml", ".png": "image/png"}
CELL_KEYS = ("benchmark", "model", "condition", "judge")
MAX_LINKED = 200  # linked rows shown on a unit's page (a page stays bounded however many judges ran)


def cell_url(cell: Cell, **filters: Any) -> str:
    return url("/cell", **{k: getattr(cell, k) for k in CELL_KEYS}, **filters)


def unit_url(cell: Cell, unit_id: str) -> str:
    return url("/unit", **{k: getattr(cell, k) for k in CELL_KEYS}, unit=unit_id)


def nav(cell: Cell | None = None) -> str:
    parts = [link(url("/"), "overview")]
    if cell is not None:
        parts.append(f'<a href="{cell_url(cell)}">{esc(" / ".join(p for p in _cell_parts(cell)))}</a>')
    return f"<nav>{''.join(parts)}</nav>"


def _cell_parts(cell: Cell) -> list[str]:
    return [cell.benchmark, cell.model, cell.condition] + ([f"judge {cell.judge}"] if cell.judge else [])


# -- overview -----------------------------------------------------------------------------------
def metric_table(rows: list[dict[str, Any]], links: bool) -> str:
    headers = ["model", "condition", "judge", "metric", "value", "95% CI", "n", "excluded", "complete"]
    if links:
        headers.append("units")
    body, classes = [], []
    for r in rows:
        complete = r.get("complete", True)
        cells = [esc(r["model"]), esc(r["condition"]), esc(r["judge"]), esc(r["metric"]), number(r["value"]),
                 interval(r.get("ci_low"), r.get("ci_high")), number(r["n"]), number(r["excluded"]),
                 "yes" if complete else f'<b>no</b> ({esc(r.get("incomplete_units", "?"))} unit(s) not ok)']
        if links:
            cell = Cell(r["benchmark"], r["model"], r["condition"], r["judge"] or "")
            cells.append(f'<a href="{cell_url(cell)}">units</a>')
        body.append(cells)
        classes.append("" if complete else "incomplete")
    return table(headers, body, classes, numeric={"value", "n", "excluded"})


def delta_table(rows: list[dict[str, Any]]) -> str:
    headers = ["benchmark", "model", "condition", "judge", "metric", "A − B", "delta", "95% CI", "clusters"]
    body = [[esc(r["benchmark"]), esc(r["model"]), esc(r["condition"]), esc(r["judge"]), esc(r["metric"]),
             esc(f'{r["compared"]}: {r["a"]} − {r["b"]}'), number(r["delta"]), interval(r["ci_low"], r["ci_high"]),
             number(r["clusters"])] for r in rows]
    return table(headers, body, numeric={"delta", "clusters"})


def _by_benchmark(metrics: pa.Table, headline: bool) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for row in metrics.to_pylist():
        if ("[" not in row["metric"]) == headline:
            out.setdefault(row["benchmark"], []).append(row)
    return out


def figure(path: Path, inline: bool) -> str:
    if inline:
        data = base64.b64encode(path.read_bytes()).decode()
        src = f"data:{MIME[path.suffix]};base64,{data}"
    else:
        src = url(f"/plots/{path.name}")
    return f'<figure><img src="{esc(src)}" alt="{esc(path.stem)}"><figcaption class="muted">{esc(path.stem)}' \
           f"</figcaption></figure>"


def overview_html(data: RunData, links: bool = True, inline_figures: bool = False) -> str:
    metrics = data.metrics()
    parts = [f'<p class="muted">run: {esc(data.run_dir)} — <code>n</code> scored units; <code>excluded</code> '
             "units whose call failed or whose answer stayed unreadable; 95% CI by bootstrap over the "
             "benchmark's independent unit where the benchmark provides per-unit scores; "
             "<span class=\"badge\">incomplete</span> rows have units that are not ok.</p>"]
    if metrics.num_rows == 0:
        parts.append("<p><b>No metrics.parquet</b>: this run has not been aggregated; its cells are listed below.</p>")
    for benchmark, rows in sorted(_by_benchmark(metrics, True).items()) if metrics.num_rows else []:
        parts += [f"<h2>{esc(benchmark)}: headline</h2>", metric_table(rows, links)]
    deltas = data.deltas()
    if deltas.num_rows:
        parts += ["<h2>Paired differences (A − B on the same clusters)</h2>", delta_table(deltas.to_pylist())]
    spent = data.cell_costs()
    if spent:
        parts += ["<h2>Spending and the prompt cache</h2>",
                  '<p class="muted">per cell, from calls.csv: dollars paid, the share of input tokens the '
                  "provider read from its prompt cache, and the dollars that saved (negative: cache writes "
                  "cost more than reads saved).</p>",
                  table(["benchmark", "model", "condition", "judge", "USD", "cache hit rate", "saved USD"],
                        [[esc(r["benchmark"]), esc(r["model"]), esc(r["condition"]), esc(r["judge"]),
                          f"{r['cost_usd']:.4f}", f"{r['cache_hit_rate']:.1%}", f"{r['cache_saved_usd']:.4f}"]
                         for r in spent])]
    plots = data.plots()
    if plots:
        figures = "".join(figure(p, inline_figures) for p in plots)
        parts += ["<h2>Figures</h2>", f'<div class="figures">{figures}</div>']
    if links:
        cells = data.cells()
        parts += ["<h2>Cells</h2>", table(["benchmark", "model", "condition", "judge", "units"],
                                          [[esc(c.benchmark), esc(c.model), esc(c.condition), esc(c.judge),
                                            f'<a href="{cell_url(c)}">units</a>'] for c in cells])]
    breakdowns = _by_benchmark(metrics, False) if metrics.num_rows else {}
    for benchmark, rows in sorted(breakdowns.items()):
        parts += [f"<details><summary><b>{esc(benchmark)}</b>: every breakdown ({len(rows)} rows)</summary>",
                  metric_table(rows, links), "</details>"]
    return layout(f"prefray run {data.run_dir.name}", "".join(parts))


# -- a cell's units -----------------------------------------------------------------------------
def filter_form(data: RunData, query: CellQuery) -> str:
    facets = data.facets(query.cell)
    hidden = "".join(f'<input type="hidden" name="{k}" value="{esc(getattr(query.cell, k))}">' for k in CELL_KEYS)
    fields = [select(name, getattr(query, name), facets.columns.get(name, []), name)
              for name in ("stage", "role", "status", "cause")]
    fields.append(select("verdict", query.verdict, facets.verdict, "verdict"))
    fields.append(select("meta", query.meta, facets.meta, "category / domain / type"))
    fields.append(f'<label>answer contains <input name="q" value="{esc(query.q)}"></label>')
    return (f'<form class="filters" method="get" action="{url("/cell")}">{hidden}{"".join(fields)}'
            f'<button type="submit">filter</button></form>')


def _verdict_cell(row: dict[str, Any]) -> str:
    return esc(row.get("verdict")) if row.get("verdict") else ""


def cell_html(data: RunData, query: CellQuery) -> str:
    page = data.cell_page(query)
    cell = query.cell
    start = query.page * PAGE_SIZE
    shown = f"{start + 1}–{start + len(page.rows)}" if page.rows else "0"
    filters = {k: getattr(query, k) for k in ("stage", "role", "status", "cause", "verdict", "meta", "q")}
    pager = []
    if query.page > 0:
        pager.append(f'<a id="prev" href="{cell_url(cell, **filters, page=query.page - 1)}">← previous</a>')
    if (start + PAGE_SIZE < page.total) if page.total is not None else len(page.rows) == PAGE_SIZE:
        pager.append(f'<a id="next" href="{cell_url(cell, **filters, page=query.page + 1)}">next →</a>')
    headers = ["unit", "stage", "role", "judge", "instance", "item", "sample", "attempt", "status", "cause",
               "finish", "verdict", "answer"]
    body = []
    for r in page.rows:
        body.append([f'<a class="unit" href="{unit_url(cell, r["unit_id"])}">{esc(r["unit_id"][:10])}</a>',
                     esc(r["stage"]), esc(r["role"]), esc(r["judge"]), esc(r["instance_id"]), esc(r["item"]),
                     esc(r["sample"]), esc(r["attempt"]), status(r["status"]), esc(r["cause"]),
                     esc(r["finish_reason"]) + (" <b>truncated</b>" if r["truncated"] else ""),
                     _verdict_cell(r), esc(r["preview"])])
    counted = f"of {page.total}" if page.total is not None else \
        "(this job's index is being built: totals and filter choices appear on reload)"
    parts = [filter_form(data, query), f'<p class="muted" id="count">rows {shown} {counted} '
             "(every stored row: each attempt of each unit; judge rows of this cell's judge)</p>",
             table(headers, body), f"<p>{' '.join(pager)}</p>"]
    return layout(" / ".join(_cell_parts(cell)), "".join(parts), nav(None))


# -- a unit's transcript ------------------------------------------------------------------------
def _messages_html(request: dict[str, Any] | None) -> str:
    if request is None:
        return '<p class="muted">request not stored (this run was made before requests were kept)</p>'
    parts = []
    if request.get("system"):
        parts.append(f'<div class="msg"><div class="role">system</div><pre>{esc(request["system"])}</pre></div>')
    try:
        messages = json.loads(request.get("messages_json") or "[]")
    except ValueError:
        messages = [{"role": "?", "content": request.get("messages_json")}]
    for message in messages:
        content = message.get("content")
        if not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False, indent=1)
        role = esc(message.get("role"))
        parts.append(f'<div class="msg"><div class="role">{role}</div><pre>{esc(content)}</pre></div>')
    extra = [("params", request.get("params_json")), ("answer schema", request.get("json_schema_json"))]
    for label, value in extra:
        if value:
            parts.append(f'<details><summary class="muted">{esc(label)}</summary><pre>{esc(value)}</pre></details>')
    return "".join(parts)


def _parsed(row: dict[str, Any]) -> tuple[Any, str | None]:
    try:
        value = json.loads(row["parsed_json"]) if row.get("parsed_json") else None
    except ValueError:
        return row["parsed_json"], None
    rationale = value.get("rationale") if isinstance(value, dict) else None
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k != "rationale"}
    return value, rationale


def _facts(row: dict[str, Any]) -> str:
    keys = ["stage", "role", "judge", "instance_id", "item", "sample", "attempt", "status", "cause", "error",
            "finish_reason", "truncated", "input_tokens", "output_tokens", "cost_usd", "latency_s", "tries",
            "cached", "provider", "model_id", "model_version", "seed", "request_hash", "meta_json"]
    return table(["field", "value"], [[esc(k), status(row[k]) if k == "status" else number(row.get(k), 6)
                                       if isinstance(row.get(k), float) else esc(row.get(k))] for k in keys])


def _row_block(cell: Cell, row: dict[str, Any], requests: dict[str, dict[str, Any]], current: bool) -> str:
    value, rationale = _parsed(row)
    title = f"{row['stage']} · {row['role']}" + (f" · judge {row['judge']}" if row["judge"] else "") \
        + (f" · item {row['item']}" if row["item"] else "") + f" · attempt {row['attempt']}"
    parts = [f'<section class="{"current" if current else ""}" id="row-{esc(row["unit_id"])}-{row["attempt"]}">',
             f'<h3>{link(unit_url(cell, row["unit_id"]), title)} {status(row["status"])}</h3>',
             "<details><summary class=\"muted\">messages sent</summary>" if not current else "<h4>messages sent</h4>",
             _messages_html(requests.get(row["request_hash"])), "</details>" if not current else "",
             "<h4>answer</h4>", f'<pre class="answer">{_marked_answer(row["text"], _spans(value))}</pre>']
    parts += _nickname_lines(value)
    if value is not None:
        shown = esc(json.dumps(value, ensure_ascii=False))
        parts.append(f'<div>verdict / parsed: <code class="verdict">{shown}</code></div>')
    if rationale:
        parts.append(f'<div class="rationale"><b>rationale:</b> {esc(rationale)}</div>')
    parts += ["<details><summary class=\"muted\">tokens, cost, latency, tries, cause …</summary>" if not current
              else "<h4>call</h4>", _facts(row), "</details>" if not current else "", "</section>"]
    return "".join(parts)


def _stored_nicknames(value: Any) -> list[dict[str, Any]]:
    """The nickname decisions a generation row stores ({"nicknames": {index: {...}}}), if any."""
    found = value.get("nicknames") if isinstance(value, dict) else None
    return [d for _, d in sorted(found.items()) if isinstance(d, dict)] if isinstance(found, dict) else []


def _spans(value: Any) -> list[tuple[int, int]]:
    return [(d["start"], d["start"] + len(d["span"])) for d in _stored_nicknames(value)
            if isinstance(d.get("start"), int) and isinstance(d.get("span"), str)]


def _marked_answer(text: str | None, spans: list[tuple[int, int]]) -> str:
    """The answer, escaped, with each stored span wrapped in <mark>."""
    text, out, at = text or "", [], 0
    for start, end in sorted(spans):
        if start < at or end > len(text):
            continue
        out += [esc(text[at:start]), f'<mark class="nickname">{esc(text[start:end])}</mark>']
        at = end
    return "".join(out) + esc(text[at:])


def _nickname_lines(value: Any) -> list[str]:
    lines = []
    for d in _stored_nicknames(value):
        name = esc(d.get("nickname"))
        if d.get("span") is None:
            lines.append(f'<div class="nickname">nickname <b>{name}</b>: not in the answer (not applied)</div>')
        else:
            lines.append(f'<div class="nickname">nickname <b>{name}</b>: matched <mark>{esc(d["span"])}</mark> '
                         f'at character {esc(d.get("start"))} (applied)</div>')
    return lines


def _about(row: dict[str, Any]) -> str:
    """What a judge row judged, from its meta: short scalar fields (e.g. category, statement)."""
    try:
        meta = json.loads(row.get("meta_json") or "{}")
    except ValueError:
        return ""
    if not isinstance(meta, dict):
        return ""
    return "; ".join(f"{k}: {v}" for k, v in meta.items() if isinstance(v, (str, int, float, bool)))[:200]


def unit_html(data: RunData, cell: Cell, unit_id: str) -> str | None:
    attempts = data.unit_rows(cell, unit_id)
    if not attempts:
        return None
    row = attempts[-1]
    linked = data.linked_rows(cell, row["instance_id"], row["sample"])
    others = [r for r in linked if r["unit_id"] != unit_id]
    shown = others[:MAX_LINKED]
    requests = data.requests([r["request_hash"] for r in shown + attempts])
    judged = [r for r in shown if r["role"] != "subject"]
    parts = [f'<p class="muted">instance {esc(row["instance_id"])}, sample {esc(row["sample"])}: '
             f"{len(attempts)} attempt(s) of this unit; {len(others)} linked row(s) of the same instance and sample "
             "(generation and judge rows)" + (f"; the first {MAX_LINKED} are shown" if len(others) > MAX_LINKED
                                             else "") + ".</p>"]
    parts += [_row_block(cell, a, requests, current=(a is row)) for a in attempts]
    if judged:
        verdicts = []
        for r in judged:
            value, rationale = _parsed(r)
            verdicts.append([link(unit_url(cell, r["unit_id"]), r["stage"]), esc(r["judge"]), esc(r["item"]),
                             esc(_about(r)), status(r["status"]),
                             esc(json.dumps(value, ensure_ascii=False) if value is not None else ""),
                             f'<span class="rationale-cell">{esc(rationale)}</span>' if rationale else ""])
        parts += ["<h2>Judge rows of this instance and sample</h2>",
                  table(["stage", "judge", "item", "about", "status", "verdict", "rationale"], verdicts)]
    if others:
        parts += ["<h2>Linked rows</h2>", "".join(_row_block(cell, r, requests, current=False) for r in shown)]
    return layout(f"unit {unit_id[:12]} · {row['stage']}", "".join(parts), nav(cell))
