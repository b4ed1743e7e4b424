"""Readable tables: metrics.md and the table printed at the end of a run."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow as pa


def _fmt(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "n/a" if math.isnan(value) else f"{value:.3f}"
    return str(value)


def markdown_table(table: pa.Table, columns: list[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in table.select(columns).to_pylist():
        lines.append("| " + " | ".join(_fmt(row[c]) for c in columns) + " |")
    return "\n".join(lines)


def headline(metrics: pa.Table) -> pa.Table:
    """Overall metrics only (breakdowns carry a [slice] suffix)."""
    names = metrics["metric"].to_pylist()
    return metrics.take(pa.array([i for i, name in enumerate(names) if "[" not in name], pa.int64()))


def found_line(metrics: pa.Table, where: Path | str, shown: int = 2, per_cell: int = 4) -> str:
    """One line saying what a run found: the first `per_cell` headline metrics of each of the first
    `shown` cells that have one (bookkeeping such as failure counts left to the tables), the number
    of the other cells, and where every metric is."""
    from prefray.engine.results.plots import DIAGNOSTIC

    cells: dict[tuple[str, str, str, str], list[str]] = {}
    for row in headline(metrics).to_pylist():
        name = row["metric"]
        if DIAGNOSTIC.search(name):
            continue
        cell = (row["benchmark"], row["model"], row["condition"], row["judge"])
        cells.setdefault(cell, []).append(f"{name} {_fmt(row['value'])} (n={row['n']})")
    parts = [f"{b}/{m}/{c}" + (f" judged by {j}" if j else "") + ": " + ", ".join(found[:per_cell])
             for (b, m, c, j), found in list(cells.items())[:shown]]
    more = f"; {len(cells) - shown} more cells" if len(cells) > shown else ""
    said = "; ".join(parts) if parts else "no metric (no answer was stored)"
    return f"prefray: found: {said}{more}; every metric in {where}/metrics.md"


def incomplete_cells(metrics: pa.Table) -> list[str]:
    seen = {}
    for row in metrics.to_pylist():
        if not row["complete"]:
            seen[(row["benchmark"], row["model"], row["condition"])] = row["incomplete_units"]
    return [f"{b}/{m}/{c}: {n} unit(s) got no answer" for (b, m, c), n in sorted(seen.items())]


def truncated_cells(metrics: pa.Table) -> list[str]:
    """Cells where some answers were cut by the output budget (scored as given, flagged)."""
    out = []
    for row in metrics.to_pylist():
        value = row["value"]
        if row["metric"] == "truncated_share" and value is not None and not math.isnan(value) and value > 0:
            who = f"judge {row['judge']}" if row["judge"] else "evaluated model"
            out.append(f"{row['benchmark']}/{row['model']}/{row['condition']} ({who}): "
                       f"{value:.1%} of {row['n']} answers truncated")
    return out


def render_markdown(metrics: pa.Table, calls: pa.Table, costs: pa.Table | None = None,
                    agreement: pa.Table | None = None, budget_usd: float | None = None,
                    notes: list[str] | None = None) -> str:
    metric_cols = ["benchmark", "model", "condition", "judge", "metric", "value", "n", "excluded", "complete"]
    if "ci_low" in metrics.column_names:
        metric_cols[6:6] = ["ci_low", "ci_high"]
    call_cols = ["benchmark", "model", "condition", "stage", "judge", "ok", "failed", "skipped",
                 "input_tokens", "output_tokens", "cost_usd", "cache_hit_rate", "cache_saved_usd"]
    call_cols = [c for c in call_cols if c in calls.column_names]
    parts = [
        "# prefray metrics", "",
        "`n` = scored units; `excluded` = units left out of a metric, each counted: units with no answer "
        "(`failures_no_answer`, rerun them) and judge answers that stayed unreadable (`failures_judge`). "
        "The evaluated model's own failures (`failures_model`: unparsable or over its context) are "
        "scored, never dropped.", "",
        "## Headline", "", markdown_table(headline(metrics), metric_cols), "",
        "## Calls", "", markdown_table(calls, call_cols), "",
        "## All metrics (with breakdowns)", "", markdown_table(metrics, metric_cols), "",
    ]
    if notes:
        parts[2:2] = ["**Notes**:", "", *[f"- {n}" for n in notes], ""]
    cut = truncated_cells(metrics)
    if cut:
        parts[2:2] = ["**Truncated answers** (cut by the output budget; scored as given, flagged on each row):",
                      "", *[f"- {c}" for c in cut], ""]
    cells = incomplete_cells(metrics)
    if cells:
        parts[2:2] = ["**Incomplete cells** (metrics cover only the units that ran; "
                      "`prefray rerun RUN_DIR` runs the rest):", "", *[f"- {c}" for c in cells], ""]
    if costs is not None and costs.num_rows:
        spent = sum(costs["cost_usd"].to_pylist())
        limit = f" of a {budget_usd:.2f} USD budget" if budget_usd is not None else ""
        parts += ["## Cost ledger", "", f"Total: {spent:.4f} USD{limit}.{cache_line(costs)}", "",
                  markdown_table(costs, costs.column_names), ""]
    if agreement is not None and agreement.num_rows:
        parts += ["## Judge agreement", "", markdown_table(agreement, agreement.column_names), ""]
    return "\n".join(parts)


def cache_line(costs: pa.Table) -> str:
    """" Prompt cache: ..." for a ledger whose calls read from or wrote to the provider's cache."""
    if "cache_read_tokens" not in costs.column_names:
        return ""
    reads, writes = sum(costs["cache_read_tokens"].to_pylist()), sum(costs["cache_write_tokens"].to_pylist())
    if not reads and not writes:
        return ""
    inputs = sum(costs["input_tokens"].to_pylist())
    saved = sum(costs["cache_saved_usd"].to_pylist())
    return (f" Prompt cache: {reads:,} of {inputs:,} input tokens read from it ({reads / max(inputs, 1):.1%}), "
            f"{writes:,} written; it saved {saved:.4f} USD.")


def print_summary(metrics: pa.Table, calls: pa.Table, costs: pa.Table | None = None,
                  budget_usd: float | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title="prefray metrics (headline; breakdowns in metrics.md)")
    cols = ["benchmark", "model", "condition", "judge", "metric", "value", "n", "excluded"]
    with_ci = "ci_low" in metrics.column_names
    for col in cols[:6] + (["95% CI"] if with_ci else []) + cols[6:]:
        table.add_column(col, justify="right" if col in ("value", "n", "excluded") else "left")
    for row in headline(metrics).to_pylist():
        cells = [_fmt(row[c]) for c in cols]
        if with_ci:
            ci = "" if row["ci_low"] is None else f"[{_fmt(row['ci_low'])}, {_fmt(row['ci_high'])}]"
            cells.insert(6, ci)
        table.add_row(*cells)
    console.print(table)
    failed = sum(calls["failed"].to_pylist()) if calls.num_rows else 0
    skipped = sum(calls["skipped"].to_pylist()) if calls.num_rows else 0
    if failed or skipped:
        console.print(f"[yellow]{failed} unit(s) failed, {skipped} skipped; see calls.csv and metrics.md[/]")
    if costs is not None and costs.num_rows:
        spent = sum(costs["cost_usd"].to_pylist())
        limit = f" (budget {budget_usd:.2f} USD)" if budget_usd is not None else ""
        console.print(f"spent {spent:.4f} USD{limit}; by provider, model and stage in costs.csv{cache_line(costs)}")
