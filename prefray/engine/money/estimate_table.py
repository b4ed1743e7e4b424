"""The estimate as a table: full values on a terminal (wrapped, never cut) and when piped (plain
aligned columns), and as CSV. Rows first, then the time bound per rate-limit lane, then totals."""

from __future__ import annotations

import csv
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prefray.engine.benchmark import Job


@dataclass
class EstimateLine:
    """One plan row: a benchmark's stage for one evaluated model option (all its conditions)."""

    benchmark: str
    model: str            # the evaluated model option (not its model id)
    stage: str
    answered_by: str      # the option answering the stage: the evaluated model, the judge or a role model
    role: str             # subject (the evaluated model) or the scoring role (judge, matcher, ...)
    judge: str            # the job's judge
    conditions: str = ""  # the conditions whose calls this row counts, comma-separated
    calls: int = 0
    cached: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    output_budget: int = 0  # max output tokens sent per call (the runner's final_request); stage's largest
    cost_usd: float = 0.0
    max_cost_usd: float = 0.0
    # the prompt cache's expectation: the cost without it, what it saves, input tokens read from and
    # written to it (parts of input_tokens) and the share of input read
    uncached_cost_usd: float = 0.0
    cache_saved_usd: float = 0.0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cache_hit_rate: float = 0.0
    tier: str = "interactive"  # the answering model's tier (batch-tier calls wait for no rate limit)
    lane: str = ""        # where rate limits apply: provider endpoint and model id
    lane_rpm: float | None = None
    lane_tpm: float | None = None
    min_minutes: float = 0.0  # the lane's time bound (every row on that lane together)


ROW_COLUMNS = ["benchmark", "model", "stage", "answered_by", "judge", "calls", "cached", "input_tokens",
               "output_tokens", "output_budget", "cost_usd", "max_cost_usd"]
LANE_COLUMNS = ["lane", "answered_by", "calls", "input_tokens", "rpm", "tpm", "min_minutes"]
TEXT_COLUMNS = {"benchmark", "model", "stage", "answered_by", "judge", "lane", "tier", "expected_latency"}
# Short headers for the terminal table, so the room goes to the values (which wrap, never get cut).
SHORT = {"answered_by": "by", "input_tokens": "in_tok", "output_tokens": "out_tok", "output_budget": "budget",
         "cost_usd": "usd", "max_cost_usd": "max_usd", "min_minutes": "min_minutes"}


def _cell(value: Any, column: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if column in ("rpm", "tpm"):
            return f"{value:g}"
        return f"{value:.2f}" if column == "min_minutes" else f"{value:.4f}"
    return str(value)


def lane_rows(lines: list[EstimateLine]) -> list[dict[str, Any]]:
    """One row per rate-limit lane: who uses it, its calls and tokens, limits and time bound."""
    by_lane: dict[str, list[EstimateLine]] = {}
    for line in lines:
        by_lane.setdefault(line.lane, []).append(line)
    rows = []
    for lane, mine in by_lane.items():
        rows.append({"lane": lane, "answered_by": ",".join(sorted({x.answered_by for x in mine})),
                     "calls": sum(x.calls for x in mine), "input_tokens": sum(x.input_tokens for x in mine),
                     "rpm": mine[0].lane_rpm, "tpm": mine[0].lane_tpm, "min_minutes": mine[0].min_minutes})
    return sorted(rows, key=lambda r: (-r["min_minutes"], r["lane"]))


def jobs_line(jobs: Sequence[Job]) -> str:
    """How many jobs the plan covers, per benchmark: conditions × models, and the judges."""
    parts = []
    for benchmark in sorted({j.benchmark for j in jobs}):
        mine = [j for j in jobs if j.benchmark == benchmark]
        judges = ",".join(sorted({j.roles["judge"].name for j in mine}))
        conditions, models = len({j.condition for j in mine}), len({j.model.name for j in mine})
        parts.append(f"{benchmark} {conditions} condition{'s' * (conditions != 1)} × "
                     f"{models} model{'s' * (models != 1)}, judge {judges}")
    return f"{len(jobs)} jobs (benchmark × condition × model): " + "; ".join(parts)


def totals(lines: list[EstimateLine]) -> str:
    cost = sum(x.cost_usd for x in lines)
    ceiling = sum(x.max_cost_usd for x in lines)
    scoring = [x for x in lines if x.role != "subject"]
    bound = max((x.min_minutes for x in lines), default=0.0)
    batch = " (batch-tier calls are answered within the batch window instead)" if any(
        x.tier == "batch" for x in lines) else ""
    return (f"total: {sum(x.calls for x in lines)} calls, ~{cost:.4f} USD (at most {ceiling:.4f} USD), of which "
            f"scoring (judge and role models) {sum(x.calls for x in scoring)} calls, "
            f"~{sum(x.cost_usd for x in scoring):.4f} USD; rate limits allow no less than {bound:.2f} min "
            f"(the slowest lane){batch}")


def cache_line(lines: list[EstimateLine], expected: bool = True) -> str:
    """What the prompt cache is expected to save: share of sent input read from it, dollars saved
    (`expected` False: the rows carry no expectation, the simulation's)."""
    if not expected:
        return "prompt cache: not estimated with --simulate (the simulated answers read no cache)"
    tokens_in = sum(x.input_tokens for x in lines)
    reads = sum(x.cache_read_tokens for x in lines)
    saved, uncached = sum(x.cache_saved_usd for x in lines), sum(x.uncached_cost_usd for x in lines)
    share = reads / tokens_in if tokens_in else 0.0
    return (f"prompt cache: expected {share:.1%} of input read from the cache, saves ~{saved:.4f} USD "
            f"(~{uncached:.4f} USD without it, {saved / uncached if uncached else 0.0:.1%}); models with "
            "cached prices only, each job's own prefixes")


def _plain(title: str, columns: list[str], rows: list[dict[str, Any]]) -> str:
    cells = [[_cell(r[c], c) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]

    def fmt(values: list[str]) -> str:
        return "  ".join(v.ljust(w) if c in TEXT_COLUMNS else v.rjust(w)
                         for v, w, c in zip(values, widths, columns)).rstrip()

    return "\n".join([title, fmt(columns), *(fmt(row) for row in cells)])


def _rich(console: Any, title: str, columns: list[str], rows: list[dict[str, Any]]) -> None:
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True)
    for column in columns:
        table.add_column(SHORT.get(column, column), justify="left" if column in TEXT_COLUMNS else "right",
                         overflow="fold", no_wrap=column not in TEXT_COLUMNS)
    for row in rows:
        table.add_row(*(_cell(row[c], c) for c in columns))
    console.print(table)


def print_tables(parts: list[tuple[str, list[str], list[dict[str, Any]]]], footer: str, out: Any = None) -> None:
    """(title, columns, rows) tables and a footer line; on a terminal as tables, otherwise plain text."""
    out = out or sys.stdout
    if out.isatty():
        from rich.console import Console

        console = Console(file=out)
        for title, columns, table in parts:
            _rich(console, title, columns, table)
        console.print(footer)
        return
    for title, columns, table in parts:
        out.write(_plain(title, columns, table) + "\n\n")
    out.write(footer + "\n")


def print_estimate(lines: list[EstimateLine], out: Any = None, cache_expected: bool = True) -> None:
    """Print the rows, the lanes, the totals and the prompt cache's expected saving."""
    rows = [asdict(line) for line in lines]
    print_tables([("prefray estimate (nothing sent): per benchmark, evaluated model option and stage", ROW_COLUMNS,
                   rows),
                  ("time bound per provider lane (endpoint and model id, where rate limits apply)", LANE_COLUMNS,
                   lane_rows(lines))], totals(lines) + "\n" + cache_line(lines, cache_expected), out)


def print_tier_lines(tier_lines: list[Any], out: Any = None) -> None:
    """The batch tier's view (engine/calls/batch/plan.tier_lines): each model's cost in both tiers."""
    columns = ["model", "tier", "calls", "interactive_usd", "batch_usd", "expected_latency"]
    rows = [{**asdict(line), "batch_usd": "no batch API" if line.batch_usd is None else line.batch_usd}
            for line in tier_lines]
    chosen = sum(x.batch_usd if x.tier == "batch" and x.batch_usd is not None else x.interactive_usd
                 for x in tier_lines)
    print_tables([("cost by tier (estimated; the model's tier is the one a launch uses)", columns, rows)],
                 f"in the configured tiers: ~{chosen:.4f} USD", out)


def write_estimate_csv(lines: list[EstimateLine], path: str | Path) -> None:
    """Every field of every row, lane limits and bounds included."""
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[f.name for f in fields(EstimateLine)])
        writer.writeheader()
        writer.writerows(asdict(line) for line in lines)
