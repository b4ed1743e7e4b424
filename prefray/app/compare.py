"""`prefray compare RUN_A RUN_B [RUN_C ...] [--csv FILE] [--plot FILE] [--adjust holm|bh]`

Compares runs on the units they share: the same benchmark, model, condition, judge, instance,
judged item and sample (`--across model` pairs two runs of different models on the same units, and
likewise for condition or judge). With three or more runs, each run is compared with the first.

For every cell and headline metric with per-unit scores (`--breakdowns` adds the breakdowns) it
prints the first run's and the other run's value on the paired clusters, the delta (other − first),
a 95% cluster-bootstrap interval over the benchmark's independent unit (profile, persona,
persona–query pair), the p of a paired permutation test over the same clusters, and p adjusted
across every row printed (Holm; Benjamini–Hochberg with `--adjust bh`). Units that only one run
has are counted, per cell and stage, and left out.

--csv FILE writes the table (and FILE's name with `-units.csv` the shared and unshared unit counts);
--plot FILE draws the forest plot (default: FILE of --csv with .png, when --csv is given);
--view then serves both runs side by side on 127.0.0.1 (the comparison, each cell's shared units,
both transcripts of a unit).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from prefray.app.commands import Parser, run_dir_argument
from prefray.engine.flow.exits import EXIT_CONFIG, EXIT_OK
from prefray.engine.rundir.layout import RunDir

PROG_NAME = "prefray compare"


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text}")
    return value


def parser(prog: str) -> argparse.ArgumentParser:
    from prefray.engine.results.compare import ACROSS_KEYS

    parser = Parser(prog, __doc__)
    parser.add_argument("runs", nargs="+", metavar="RUN", type=run_dir_argument,
                        help="run directories; the first is the reference the others are compared with")
    parser.add_argument("--csv", type=Path, metavar="FILE", help="write the comparison table as CSV")
    parser.add_argument("--plot", type=Path, metavar="FILE", help="write the forest plot (png, svg or pdf)")
    parser.add_argument("--adjust", choices=("holm", "bh"), default="holm",
                        help="family-wise (holm, default) or false-discovery-rate (bh) adjustment of p")
    parser.add_argument("--across", action="append", default=[], choices=ACROSS_KEYS, metavar="KEY",
                        help=f"pair units across different values of KEY ({', '.join(ACROSS_KEYS)}); each run "
                             "must then have one value of it per benchmark; repeatable")
    parser.add_argument("--breakdowns", action="store_true",
                        help="also compare the breakdown metrics (NAME[slice]); they join the family adjusted")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and the permutations")
    parser.add_argument("--resamples", type=positive, default=2000, help="bootstrap resamples (default 2000)")
    parser.add_argument("--permutations", type=positive, default=9999,
                        help="random swaps of the permutation test when there are too many clusters to "
                             "enumerate them all (default 9999)")
    parser.add_argument("--alpha", type=float, default=0.05, help="level marked in the table and plot")
    parser.add_argument("--view", action="store_true",
                        help="then serve both runs side by side on 127.0.0.1 (two runs only): the comparison, "
                             "each cell's shared units, and links to both transcripts of a unit")
    parser.add_argument("--port", type=int, default=8771, help="the --view port on 127.0.0.1 (default 8771)")
    parser.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                        help="with --view: also answer requests whose Host header is NAME (as prefray view)")
    return parser


@dataclass
class LoadedRun:
    name: str
    run_dir: RunDir
    rows: pa.Table
    benchmarks: dict[str, Any]
    settings: dict[str, Any]   # each benchmark's settings (its settings_type)

    def scores(self, rows: pa.Table) -> pa.Table:
        from prefray.engine.results.stats import unit_scores

        return unit_scores(rows, self.benchmarks, self.settings)


class BadRun(Exception):
    """A run that cannot be read; the message is one line."""


def load_run(paths: RunDir) -> LoadedRun:
    """A run's best rows (with the text its metrics read), its benchmarks and their settings."""
    from prefray.app.compose import load_benchmarks
    from prefray.app.sweep import SweepError
    from prefray.engine.results.aggregate import NARROW_COLUMNS, text_needed, with_text
    from prefray.engine.results.manifest import recorded_configs
    from prefray.engine.rundir.shards import latest_attempts, read_rows

    location = paths.root
    if not location.is_dir():
        raise BadRun(f"{location}: no such run directory")
    if not paths.manifest.exists() or not paths.shards.is_dir():
        raise BadRun(f"{location}: not a prefray run directory (it needs manifest.json and shards/)")
    try:
        configs = recorded_configs(paths)
        benchmarks = load_benchmarks(configs)
        settings = {cfg["benchmark"]["name"]: benchmarks[cfg["benchmark"]["name"]].settings_of(cfg["benchmark"])
                    for cfg in configs}
    except (SweepError, ValueError, KeyError, TypeError) as exc:
        raise BadRun(f"{location}: cannot read its manifest: {str(exc).splitlines()[0]}") from None
    best = latest_attempts(read_rows(paths, columns=NARROW_COLUMNS))
    return LoadedRun(str(location), paths, with_text(paths, best, text_needed(best, benchmarks)), benchmarks, settings)


def run(args: argparse.Namespace) -> int:
    from prefray.engine.results.compare import NotComparable

    if len(args.runs) < 2:
        print(f"{PROG_NAME}: name at least two runs (the first is the reference)", file=sys.stderr)
        return EXIT_CONFIG
    if args.view and len(args.runs) != 2:
        print(f"{PROG_NAME}: --view shows two runs side by side; name exactly two", file=sys.stderr)
        return EXIT_CONFIG
    try:
        runs = [load_run(path) for path in args.runs]
        table, sharing = compare_all(runs, args)
    except (BadRun, NotComparable) as exc:
        print(f"{PROG_NAME}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    print_sharing(sharing)
    print_table(table, args.alpha)
    write_outputs(table, sharing, args)
    if args.view:
        view(runs, table, sharing, args)
    return EXIT_OK


def view(runs: list[LoadedRun], table: pa.Table, sharing: pa.Table, args: argparse.Namespace) -> None:
    from prefray.view.compare import Comparison, serve_comparison, shared_answers
    from prefray.view.data import RunData

    first, other = runs
    comparison = Comparison(table, sharing, (first.name, other.name),
                            shared_answers(first.rows, other.rows, tuple(args.across)))
    serve_comparison(comparison, RunData(first.run_dir), RunData(other.run_dir), args.port,
                     tuple(args.allow_host), args.alpha)


def compare_all(runs: list[LoadedRun], args: argparse.Namespace) -> tuple[pa.Table, pa.Table]:
    """Every run against the first; p adjusted across all their rows together."""
    from prefray.engine.results.compare import CompareSettings, adjusted, compare_rows
    from prefray.engine.results.stats import BootstrapSettings

    settings = CompareSettings(boot=BootstrapSettings(n_resamples=args.resamples, seed=args.seed),
                               n_permutations=args.permutations, adjust=args.adjust)
    first, *others = runs
    tables, sharings = [], []
    for other in others:
        combined = {name: b.combined_metrics for name, b in first.benchmarks.items()}
        table, sharing = compare_rows(first.rows, other.rows, first.scores, other.scores, args.across, settings,
                                      (first.name, other.name), args.breakdowns, combined)
        tables.append(table)
        sharings.append(sharing)
    return adjusted(pa.concat_tables(tables), args.adjust), pa.concat_tables(sharings)


def print_sharing(sharing: pa.Table) -> None:
    """One line per compared pair, and one per cell and stage that not both runs have in full."""
    by_pair: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in sharing.to_pylist():
        by_pair.setdefault((row["run_a"], row["run_b"]), []).append(row)
    for (a, b), rows in by_pair.items():
        shared = sum(r["shared"] for r in rows)
        only_a, only_b = sum(r["only_a"] for r in rows), sum(r["only_b"] for r in rows)
        print(f"{b} vs {a}: {shared} unit(s) shared; left out: {only_a} only in {a}, {only_b} only in {b}")
        whole = [r for r in rows if r["whole"]]
        if whole:
            print(f"  kept whole in each run: {len(whole)} set-level judging stage(s) named by their content "
                  "(no unit can be in both runs), e.g. " + _cell_name(whole[0]))
        partial = [r for r in rows if (r["only_a"] or r["only_b"]) and not r["whole"]]
        for r in partial[:20]:
            print(f"  {_cell_name(r)}: {r['shared']} shared, {r['only_a']} only in the first, {r['only_b']} only in "
                  "the other")
        if len(partial) > 20:
            print(f"  ... and {len(partial) - 20} more cell(s) (all in the --csv FILE's -units.csv)")


def _cell_name(row: dict[str, Any]) -> str:
    return "/".join(v for v in (row["benchmark"], row["model"], row["condition"], row["judge"], row["stage"]) if v)


def _fmt(value: float | None, digits: int = 3) -> str:
    import math

    if value is None or math.isnan(value):
        return "n/a"
    return f"{value:.{digits}f}"


def _p(value: float | None) -> str:
    import math

    if value is None or math.isnan(value):
        return "n/a"
    return f"{value:.2g}" if value < 0.001 else f"{value:.3f}"


def print_table(table: pa.Table, alpha: float) -> None:
    from rich.console import Console
    from rich.table import Table

    rows = table.to_pylist()
    several = len({r["run_b"] for r in rows}) > 1
    view = Table(title=f"paired comparison (delta = run − {rows[0]['run_a'] if rows else 'first run'}; "
                       f"* adjusted p < {alpha:g})")
    columns = (["run"] if several else []) + ["benchmark", "model", "condition", "judge", "metric", "first",
                                              "other", "delta", "95% CI", "p", "p adj.", "clusters"]
    for column in columns:
        view.add_column(column, justify="right" if column in ("first", "other", "delta", "p", "p adj.",
                                                               "clusters") else "left")
    for r in rows:
        mark = "*" if r["p_adjusted"] is not None and r["p_adjusted"] < alpha else ""
        model = r["model"] + (f" (vs {r['versus']})" if r["versus"] else "")
        cells = ([r["run_b"]] if several else []) + [
            r["benchmark"], model, r["condition"], r["judge"], r["metric"], _fmt(r["value_a"]), _fmt(r["value_b"]),
            _fmt(r["delta"]), f"[{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}]", _p(r["p"]),
            _p(r["p_adjusted"]) + mark, str(r["n_clusters"])]
        view.add_row(*cells)
    Console(width=200).print(view)
    if not rows:
        print("no metric with per-unit scores in the shared cells: nothing to compare")


def write_outputs(table: pa.Table, sharing: pa.Table, args: argparse.Namespace) -> None:
    import pyarrow.csv as pacsv

    from prefray.engine.results.aggregate import write_atomic
    from prefray.engine.results.forest import forest_plot

    if args.csv is not None:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(args.csv, lambda p: pacsv.write_csv(table, p))
        units = units_path(args.csv)
        write_atomic(units, lambda p: pacsv.write_csv(sharing, p))
        print(f"wrote {args.csv} and {units}")
    plot = args.plot or (args.csv.with_suffix(".png") if args.csv is not None else None)
    if plot is not None and table.num_rows:
        plot.parent.mkdir(parents=True, exist_ok=True)
        print(f"wrote {forest_plot(table, plot, args.alpha)}")


def units_path(csv: Path) -> Path:
    return csv.with_name(f"{csv.stem}-units.csv")
