"""Aggregation at scale: wall time and peak RSS of a run's aggregation at 100k and 1M shard rows
(target at 1M: metrics ≤ 5 s, the default figures ≤ 5 s, ≤ 2 GB).

Real rows first: one small BenchPreS sweep (default, defense, no_preferences) and one CUPID sweep
(full, oracle) on the fake provider, through `python -m prefray.launch`. Their rows are then
replicated into a synthetic run: copy k goes to one of `--models` model names and gets its own
instance ids (c<k>-instance), so every copy is a distinct set of units with the texts, meta and
verdicts of real rows. About 1% of the units get a failed first attempt (a timeout) before their
ok row, so the best-attempt dedupe has work to do. The gateways' paid record (ledger/*.jsonl, two
lines per try) is copied alongside and rolled into Parquet, as a run does when its calls are over.
Rows are split 80/20 between BenchPreS and CUPID and written as `--files` Parquet files.

Each size is then aggregated by `aggregate_run` (what `prefray.launch` ends with: metrics.*,
deltas.*, calls.csv, costs.csv, judge_agreement.csv, plots/ with `--figures`: headline, the default
of run.figures, or all) in a fresh subprocess; its wall time (split into metrics and plots) and peak
RSS (the child's own ru_maxrss) are printed, median of `--repeats`.

With `--before DIR` (a checkout of earlier code), each size is aggregated with that code and with
this checkout alternately, and the medians' ratios (after ÷ before) are printed: one run's ratio
means something on a machine whose load changes.

Usage: python bench/aggregate_scale.py [--sizes 100000,1000000] [--files 300] [--repeats 3] [--before DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from _common import ROOT, launch

sys.path.insert(0, str(ROOT))
from prefray.engine.rundir import RunDir  # noqa: E402
from prefray.engine.rundir.paid import compact_paid, read_paid  # noqa: E402
from prefray.engine.rundir.shards import SHARD_SCHEMA, read_rows  # noqa: E402

TEMPLATES = {
    "benchpres": ("condition=default,defense,no_preferences", "limit=20"),
    "cupid": ("condition=full,oracle",),
}
SHARE = {"benchpres": 0.8, "cupid": 0.2}
RETRIED_EVERY = 100  # one unit in this many gets a failed first attempt

# aggregate_run as prefray.launch calls it (figures included: a drawing process may start while the
# metrics are computed); the time spent in write_plots is reported apart, as its time grows with the
# number of cells, not rows.
CHILD = """
import resource, sys, time
from pathlib import Path
from prefray.app import catalog
from prefray.engine.results import plots
from prefray.engine.rundir import RunDir
from prefray.engine.results.aggregate import aggregate_run
from prefray.engine.flow.session import use_system_allocator
use_system_allocator()   # as prefray.launch does before its run
names = sys.argv[2].split(",")
benchmarks = {n: catalog.load(n) for n in names}
settings = {n: benchmarks[n].settings_of(catalog.benchmark_config(n)) for n in names}   # typed, as a launch has them
write_plots, drawing = plots.write_plots, []

def timed(*args, **kwargs):
    start = time.perf_counter()
    try:
        return write_plots(*args, **kwargs)
    finally:
        drawing.append(time.perf_counter() - start)

plots.write_plots = timed   # aggregate_run imports it when it draws
start = time.perf_counter()
aggregate_run(RunDir(sys.argv[1]), benchmarks, settings, quiet=True, figures=sys.argv[3])
elapsed = time.perf_counter() - start
print(elapsed - sum(drawing), sum(drawing), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def template_runs(root: Path) -> dict[str, tuple[pa.Table, pa.Table]]:
    """Real stored rows and the gateways' paid record of a small sweep per benchmark, on the fake provider."""
    out = {}
    for name, overrides in TEMPLATES.items():
        run_dir = root / f"template-{name}"
        if not (run_dir / "metrics.csv").exists():
            shutil.rmtree(run_dir, ignore_errors=True)
            launch("-m", f"benchmark={name}", *overrides, "model=fake", "judge=fake", f"run.dir={run_dir}",
                   "run.cache=false", "run.progress=false")
        out[name] = (read_rows(RunDir(run_dir)), read_paid(RunDir(run_dir)))
    return out


def prefixed(prefix: str, column: pa.ChunkedArray) -> pa.Array:
    return pc.binary_join_element_wise(pa.scalar(prefix), column, "")


def replicate(template: pa.Table, copies: int, models: int) -> pa.Table:
    """`copies` copies of `template`, copy k on model k % models with instance ids prefixed c<k // models>-
    (a CUPID instance id starts with its persona: each copy has personas of its own)."""
    parts = []
    for k in range(copies):
        copy = template.set_column(template.schema.get_field_index("model"), "model",
                                   pa.array([f"model-{k % models:02d}"] * template.num_rows, pa.string()))
        for name, prefix in (("instance_id", f"c{k // models}-"), ("unit_id", f"c{k}-"), ("request_hash", f"c{k}-")):
            copy = copy.set_column(copy.schema.get_field_index(name), name, prefixed(prefix, copy[name]))
        parts.append(copy)
    return pa.concat_tables(parts)


def with_retries(table: pa.Table) -> pa.Table:
    """Every RETRIED_EVERY-th row becomes attempt 2, preceded by a failed attempt 1 (timeout)."""
    positions = pa.array([i % RETRIED_EVERY == 0 for i in range(table.num_rows)], pa.bool_())
    retried = table.filter(positions)
    failed = retried
    for name, value in (("status", "failed"), ("cause", "timeout"), ("error", "Request timed out.")):
        failed = failed.set_column(failed.schema.get_field_index(name), name,
                                   pa.array([value] * failed.num_rows, pa.string()))
    for name in ("text", "parsed_json"):
        failed = failed.set_column(failed.schema.get_field_index(name), name, pa.nulls(failed.num_rows, pa.string()))
    attempt = table.schema.get_field_index("attempt")
    second = pc.if_else(positions, pa.scalar(2, pa.int32()), table["attempt"])
    return pa.concat_tables([table.set_column(attempt, "attempt", second), failed])


def paid_copies(paid: pa.Table, copies: int) -> pa.Table:
    """The paid record of `copies` copies of a run: request hashes prefixed as `replicate` does."""
    column = paid.schema.get_field_index("request_hash")
    return pa.concat_tables([paid.set_column(column, "request_hash", prefixed(f"c{k}-", paid["request_hash"]))
                             for k in range(copies)])


def write_paid(run_dir: Path, paid: pa.Table, name: str, files: int = 8) -> None:
    """The paid record as gateways write it: JSON lines, one file per gateway process."""
    folder = RunDir(run_dir).ledger
    folder.mkdir(parents=True, exist_ok=True)
    per_file = -(-paid.num_rows // files)
    for index, start in enumerate(range(0, paid.num_rows, per_file)):
        lines = (json.dumps(record) for record in paid.slice(start, per_file).to_pylist())
        (folder / f"gateway-{name}-{index}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_run(run_dir: Path, templates: dict[str, tuple[pa.Table, pa.Table]], rows: int, files: int,
              models: int) -> int:
    """A synthetic run of about `rows` rows in `files` Parquet files, with its paid record; returns
    the rows written."""
    written = 0
    for name, (template, paid) in templates.items():
        copies = max(1, round(rows * SHARE[name] / (template.num_rows * (1 + 1 / RETRIED_EVERY))))
        write_paid(run_dir, paid_copies(paid, copies), name)
        table = with_retries(replicate(template, copies, models))
        per_file = -(-table.num_rows // max(1, round(files * SHARE[name])))
        for index, start in enumerate(range(0, table.num_rows, per_file)):
            part = table.slice(start, per_file)
            folder = RunDir(run_dir).job(name, "many", "many")
            folder.mkdir(parents=True, exist_ok=True)
            pq.write_table(part.cast(SHARD_SCHEMA), folder / f"mixed-{index:05d}.parquet")
        written += table.num_rows
    compact_paid(RunDir(run_dir))   # as a run does once its calls are over
    return written


def aggregate_once(run_dir: Path, names: list[str], fresh: bool = True, figures: str = "headline",
                   code: Path = ROOT) -> tuple[float, float, float, float]:
    """(wall seconds, of which metrics and of which plots, peak RSS in GB) of aggregating `run_dir`
    in a fresh subprocess with the prefray of `code` (a checkout); `fresh` deletes the figures first
    (else unchanged ones are not redrawn)."""
    if fresh:
        shutil.rmtree(run_dir / "plots", ignore_errors=True)
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(run_dir), ",".join(names), figures], cwd=code,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env={**os.environ, "PYTHONPATH": str(code)})
    out, err = child.communicate()
    elapsed = time.perf_counter() - start
    if child.returncode != 0:
        raise SystemExit(f"aggregation failed:\n{err.decode()}")
    metrics, plots, peak_kib = (float(x) for x in out.split()[-3:])
    return elapsed, metrics, plots, peak_kib / 1024 ** 2


def compare(run_dir: Path, names: list[str], figures: str, before: Path, repeats: int) -> None:
    """Aggregate `run_dir` with `before`'s code and this checkout's, alternately `repeats` times each;
    print each run with the load average at its start, the medians and after ÷ before; the two
    runs' metrics.csv and deltas.csv must be byte-identical."""
    runs: dict[str, list[tuple[float, float, float, float]]] = {"before": [], "after": []}
    outputs: dict[str, dict[str, bytes]] = {}
    for _ in range(repeats):
        for label, code in (("before", before), ("after", ROOT)):
            load = os.getloadavg()[0]
            run = aggregate_once(run_dir, names, figures=figures, code=code)
            runs[label].append(run)
            outputs[label] = {name: (run_dir / name).read_bytes() for name in ("metrics.csv", "deltas.csv")}
            print(f"  {label:>6}: {run[0]:6.1f} s (metrics {run[1]:.1f} s, plots {run[2]:.1f} s), "
                  f"peak RSS {run[3]:.2f} GB, load average {load:.1f}", flush=True)
    medians = {label: [statistics.median(r[i] for r in done) for i in range(4)] for label, done in runs.items()}
    for label, (wall, metrics, plots, rss) in medians.items():
        print(f"{label:>6} (median of {repeats}): {wall:6.1f} s (metrics {metrics:.2f} s, plots {plots:.2f} s), "
              f"peak RSS {rss:.2f} GB")
    (w0, m0, p0, r0), (w1, m1, p1, r1) = medians["before"], medians["after"]
    print(f"after / before: in all {w1 / w0:.2f}, metrics {m1 / m0:.2f}, plots {p1 / p0:.2f}, peak RSS {r1 / r0:.2f}; "
          f"metrics.csv and deltas.csv {'identical' if outputs['before'] == outputs['after'] else 'DIFFER'}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100000,1000000", help="shard rows per synthetic run")
    parser.add_argument("--files", type=int, default=300, help="Parquet files per synthetic run")
    parser.add_argument("--models", type=int, default=10, help="evaluated model names the copies spread over")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="build the synthetic runs here and keep them (reused if present)")
    parser.add_argument("--figures", default="headline", choices=("headline", "all"),
                        help="which figures (run.figures): the papers' and headline ones, or also the breakdowns")
    parser.add_argument("--before", type=Path,
                        help="a checkout of earlier code (e.g. `git worktree add --detach DIR COMMIT`): each repeat "
                             "aggregates with it, then with this checkout, back to back, and the ratios are printed")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp())
    root.mkdir(parents=True, exist_ok=True)
    templates = template_runs(root)
    print(f"load average: {os.getloadavg()[0]:.1f}")
    results = {}
    for size in (int(s) for s in args.sizes.split(",")):
        run_dir = root / f"run-{size}"
        if (run_dir / "written").exists():
            written = int((run_dir / "written").read_text())
        else:
            shutil.rmtree(run_dir, ignore_errors=True)
            written = write_run(run_dir, templates, size, args.files, args.models)
            (run_dir / "written").write_text(str(written))
        if args.before:
            compare(run_dir, list(templates), args.figures, args.before, args.repeats)
            continue
        runs = [aggregate_once(run_dir, list(templates), figures=args.figures) for _ in range(args.repeats)]
        wall, metrics, plots, rss = (statistics.median(r[i] for r in runs) for i in range(4))
        results[size] = (wall, rss, metrics)
        again = aggregate_once(run_dir, list(templates), fresh=False, figures=args.figures)
        print(f"{written:>9,} rows in {args.files} files: {wall:6.1f} s "
              f"(metrics {metrics:.1f} s, plots {plots:.1f} s)  "
              f"peak RSS {rss:5.2f} GB   (runs: {', '.join(f'{r[0]:.1f} s/{r[3]:.2f} GB' for r in runs)}); "
              f"again with the figures drawn: {again[0]:.1f} s (plots {again[2]:.1f} s)", flush=True)
    if len(results) > 1:
        (small, (w0, r0, m0)), (large, (w1, r1, m1)) = min(results.items()), max(results.items())
        print(f"ratio {large:,} / {small:,} rows: time {w1 / w0:.2f}x (metrics {m1 / m0:.2f}x), "
              f"peak RSS {r1 / r0:.2f}x")
    print(f"load average: {os.getloadavg()[0]:.1f}   (target at 1M rows: metrics <= 5 s, figures <= 5 s, <= 2 GB)")
    if not args.keep:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
