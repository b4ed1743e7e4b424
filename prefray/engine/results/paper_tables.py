"""A paper's headline table from a run's metrics, as LaTeX or Markdown.

A benchmark declares the tables of its paper (`PaperTable`): rows are the run's models (one row per
model × judge when several judges scored it), columns name a metric under a condition, grouped
under spanning headers the way the paper groups them. Every cell shows the value, its 95%
cluster-bootstrap interval where the metric has one, and n (the units scored); a cell the run does
not have is a dash, never a zero, and a cell with units left without an answer is marked †. Bold
marks the best value of a column where the paper marks it (`best="max"` or `"min"`). A table may
mark rows by what the model's config says (`RowMark`, e.g. BenchPreS Table 1's * on non-reasoning
models), with the mark's meaning under the table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from prefray.engine.hooks import PaperTable, RowMark


@dataclass(frozen=True)
class Cell:
    value: float | None
    low: float | None
    high: float | None
    n: int | None
    complete: bool = True
    best: bool = False


def _number(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def _delta_rows(deltas: pa.Table | None) -> list[dict[str, Any]]:
    """Paired condition differences (deltas.parquet) as cells: value = delta, its interval, n = the
    paired clusters; `condition` = a, `versus` = b."""
    if deltas is None:
        return []
    return [{**row, "condition": row["a"], "versus": row["b"], "value": row["delta"], "n": row["clusters"]}
            for row in deltas.to_pylist() if row["compared"] == "condition"]


def fill(table: PaperTable, metrics: pa.Table, deltas: pa.Table | None = None,
         models: Mapping[str, Mapping[str, Any]] | None = None) -> list[tuple[str, list[Cell]]]:
    """The table's rows: (row label, one Cell per column), from long-format metrics (with ci_low,
    ci_high and complete where the run has them) and, for a column with `versus`, the paired
    differences of `deltas`. Rows are the models that have any of the table's cells, in name order;
    one row per model × judge when several judges scored the run (a metric no judge scored, judge "",
    appears in each of its model's rows). `models` (model name → its config) decides the table's
    `row_mark`: the symbol follows the name where the config holds the value."""
    wanted = {(c.benchmark or table.benchmark, c.metric, c.condition, c.versus) for c in table.columns}
    found: dict[tuple[str, ...], dict[str, Any]] = {}
    for row in [*metrics.to_pylist(), *_delta_rows(deltas)]:
        where = (row["benchmark"], row["metric"], row["condition"], row.get("versus"))
        if where in wanted:
            found[(row["model"], row["judge"] or "", *where)] = row
    judges = sorted({judge for _, judge, *_ in found if judge})
    several = len(judges) > 1
    out = []
    for model in sorted({model for model, *_ in found}):
        for judge in judges if several else judges[:1] or [""]:
            cells = []
            for column in table.columns:
                where = (column.benchmark or table.benchmark, column.metric, column.condition, column.versus)
                row = found.get((model, judge, *where)) or found.get((model, "", *where))
                if row is None:
                    cells.append(Cell(None, None, None, None))
                    continue
                scaled = [None if v is None else v * table.scale for v in
                          (_number(row["value"]), _number(row.get("ci_low")), _number(row.get("ci_high")))]
                cells.append(Cell(*scaled, n=row["n"], complete=bool(row.get("complete", True))))
            if any(cell.n is not None for cell in cells):
                name = model + _mark(table.row_mark, (models or {}).get(model))
                out.append((f"{name} ({judge})" if several else name, cells))
    return _with_best(table, out)


def _mark(mark: RowMark | None, config: Mapping[str, Any] | None) -> str:
    """The row mark's symbol when the model's config holds its value (a key not stated: no mark)."""
    if mark is None or config is None or mark.key not in config or config[mark.key] is None:
        return ""
    return mark.symbol if config[mark.key] == mark.value else ""


def _with_best(table: PaperTable, rows: list[tuple[str, list[Cell]]]) -> list[tuple[str, list[Cell]]]:
    for position, column in enumerate(table.columns):
        values = [cells[position].value for _, cells in rows if cells[position].value is not None]
        if column.best is None or len(values) < 2:
            continue
        target = max(values) if column.best == "max" else min(values)
        for _, cells in rows:
            cell = cells[position]
            if cell.value is not None and cell.value == target:
                cells[position] = Cell(cell.value, cell.low, cell.high, cell.n, cell.complete, best=True)
    return rows


def _groups(table: PaperTable) -> list[tuple[str, int]]:
    """Consecutive columns under one spanning header: (header, width)."""
    spans: list[tuple[str, int]] = []
    for column in table.columns:
        if spans and spans[-1][0] == column.group:
            spans[-1] = (column.group, spans[-1][1] + 1)
        else:
            spans.append((column.group, 1))
    return spans


NOTE = ("Each cell: value [95% cluster-bootstrap CI] (n scored units); – the run has no such cell; "
        "† units of the cell got no answer (see metrics.md).")
LATEX_NOTE = (r"Each cell: value [95\% cluster-bootstrap CI] (n scored units); -- the run has no such cell; "
              r"$^\dagger$ units of the cell got no answer (see metrics.md).")


def markdown(table: PaperTable, rows: list[tuple[str, list[Cell]]]) -> str:
    headers = ["Model"] + [f"{c.group} {c.header}".strip() for c in table.columns]
    lines = [f"### {table.title}", "", table.caption, "",
             "| " + " | ".join(headers) + " |", "|---|" + "---:|" * len(table.columns)]
    for label, cells in rows:
        lines.append("| " + " | ".join([_markdown_text(label)] + [_markdown_cell(c, table.digits) for c in cells])
                     + " |")
    marks = [f"{_markdown_text(table.row_mark.symbol)} {table.row_mark.note}"] if table.row_mark else []
    return "\n".join([*lines, "", NOTE, *marks, ""])


def _markdown_text(text: str) -> str:
    """`text` shown as written in Markdown (an asterisk is no emphasis)."""
    return text.replace("*", r"\*")


def _markdown_cell(cell: Cell, digits: int) -> str:
    if cell.value is None:
        return "–"
    text = f"{cell.value:.{digits}f}"
    if cell.best:
        text = f"**{text}**"
    if cell.low is not None and cell.high is not None:
        text += f" [{cell.low:.{digits}f}, {cell.high:.{digits}f}]"
    text += f" ({cell.n})" + ("" if cell.complete else " †")
    return text


_LATEX_SPECIALS = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                   "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                   "Δ": r"$\Delta$", "−": r"$-$"}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIALS.get(ch, ch) for ch in text)


def latex(table: PaperTable, rows: list[tuple[str, list[Cell]]]) -> str:
    """A `table*` environment (booktabs rules); needs \\usepackage{booktabs} in the preamble."""
    spans = _groups(table)
    lines = [r"\begin{table*}[t]", r"\centering", r"\small",
             r"\begin{tabular}{l" + "r" * len(table.columns) + "}", r"\toprule"]
    if any(group for group, _ in spans):
        lines.append(" & ".join([""] + [rf"\multicolumn{{{width}}}{{c}}{{{latex_escape(group)}}}"
                                        for group, width in spans]) + r" \\")
        start, rules = 2, []
        for group, width in spans:
            if group:
                rules.append(rf"\cmidrule(lr){{{start}-{start + width - 1}}}")
            start += width
        lines.append(" ".join(rules))
    lines.append(" & ".join(["Model"] + [latex_escape(c.header) for c in table.columns]) + r" \\")
    lines.append(r"\midrule")
    for label, cells in rows:
        lines.append(" & ".join([latex_escape(label)] + [_latex_cell(c, table.digits) for c in cells]) + r" \\")
    mark = f" {latex_escape(table.row_mark.symbol)} {latex_escape(table.row_mark.note)}" if table.row_mark else ""
    lines += [r"\bottomrule", r"\end{tabular}",
              rf"\caption{{{latex_escape(table.caption)} {LATEX_NOTE}{mark}}}",
              rf"\label{{tab:{table.name}}}", r"\end{table*}", ""]
    return "\n".join(lines)


def _latex_cell(cell: Cell, digits: int) -> str:
    if cell.value is None:
        return "--"
    value = f"{cell.value:.{digits}f}"
    text = rf"\textbf{{{value}}}" if cell.best else value
    detail = []
    if cell.low is not None and cell.high is not None:
        detail.append(f"[{cell.low:.{digits}f}, {cell.high:.{digits}f}]")
    detail.append(f"({cell.n})" + ("" if cell.complete else r"$^\dagger$"))
    return text + r"\,{\scriptsize " + " ".join(detail) + "}"
