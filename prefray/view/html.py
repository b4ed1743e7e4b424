"""HTML building blocks. Every piece of run data goes through `esc` (model text is untrusted)."""

from __future__ import annotations

import html
import math
from collections.abc import Iterable
from contextvars import ContextVar
from typing import Any
from urllib.parse import urlencode

STYLE = """
body{font-family:system-ui,sans-serif;margin:1.2rem 2rem;color:#222;max-width:1400px}
h1{font-size:1.3rem} h2{font-size:1.1rem;margin-top:1.6rem} h3{font-size:1rem}
table{border-collapse:collapse;margin:.4rem 0;font-size:.85rem}
th,td{border:1px solid #ccc;padding:.2rem .45rem;text-align:left;vertical-align:top}
th{background:#f3f3f3} td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.incomplete td{background:#fff4e0} .badge{font-size:.75rem;padding:0 .3rem;border-radius:3px;background:#eee}
.failed{color:#a00} .skipped{color:#a60} .ok{color:#070}
pre{white-space:pre-wrap;word-break:break-word;background:#f8f8f8;border:1px solid #ddd;padding:.5rem;
margin:.2rem 0;font-size:.82rem}
.msg{margin:.5rem 0} .role{font-weight:600;font-size:.8rem;color:#555}
.rationale{background:#eef6ff;border-left:3px solid #69c;padding:.3rem .5rem;margin:.2rem 0}
form.filters label{margin-right:.6rem;font-size:.85rem} .muted{color:#777;font-size:.85rem}
.figures{display:flex;flex-wrap:wrap;gap:.6rem} figure{margin:0} figure img{width:420px;border:1px solid #ddd}
nav a{margin-right:.8rem} .current{outline:2px solid #69c}
"""


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


# The path a viewer is served under ("" at the root; "/a" for the first run of a comparison):
# every local link is made below it. Set per page by the server (server.make_app's `base`).
BASE: ContextVar[str] = ContextVar("BASE", default="")


def url(path: str, **params: Any) -> str:
    """A local link below BASE with its query string (already escaped for an attribute)."""
    clean = {k: v for k, v in params.items() if v not in (None, "")}
    path = BASE.get() + path if path.startswith("/") else path
    return esc(f"{path}?{urlencode(clean)}" if clean else path)


def link(href: str, text: Any) -> str:
    return f'<a href="{href}">{esc(text)}</a>'


def number(value: Any, digits: int = 3) -> str:
    """A value for a table: "no data" for a missing value, never a silent 0."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return '<span class="muted">no data</span>'
    if isinstance(value, float):
        return esc(f"{value:.{digits}f}")
    return esc(value)


def interval(low: Any, high: Any) -> str:
    if low is None or high is None or (isinstance(low, float) and math.isnan(low)):
        return '<span class="muted">—</span>'
    return esc(f"[{low:.3f}, {high:.3f}]")


def table(headers: Iterable[str], rows: Iterable[Iterable[str]], row_classes: Iterable[str] | None = None,
          numeric: Iterable[str] = ()) -> str:
    """Cells are HTML already (built with esc/number/link)."""
    headers = list(headers)
    numeric = set(numeric)
    classes = list(row_classes) if row_classes is not None else None
    out = ["<table><thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr></thead><tbody>"]
    for i, row in enumerate(rows):
        cls = f' class="{esc(classes[i])}"' if classes and classes[i] else ""
        cells = "".join(f'<td class="num">{c}</td>' if h in numeric else f"<td>{c}</td>" for h, c in zip(headers, row))
        out.append(f"<tr{cls}>{cells}</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def status(value: Any) -> str:
    return f'<span class="{esc(value)}">{esc(value)}</span>'


def layout(title: str, body: str, nav: str = "") -> str:
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<style>{STYLE}</style></head><body>{nav}<h1>{esc(title)}</h1>{body}</body></html>")


def select(name: str, current: str, options: list[tuple[str, int]], label: str) -> str:
    choices = ['<option value="">all</option>']
    for value, count in options:
        chosen = " selected" if value == current else ""
        choices.append(f'<option value="{esc(value)}"{chosen}>{esc(value)} ({count})</option>')
    if current and current not in {v for v, _ in options}:
        choices.append(f'<option value="{esc(current)}" selected>{esc(current)}</option>')
    return f'<label>{esc(label)} <select name="{esc(name)}">{"".join(choices)}</select></label>'
