"""What aggregation costs: intervals without importing scipy.stats (yet equal to its bootstrap to
the last bit), no copy of every row where nothing is left out, the best attempts reordered one
column at a time (columns of repeated values as dictionary indices), and figures drawn by processes
started while the metrics are computed."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pytest

from prefray.engine.results.agreement import judged_by_several, without_panels

# Intervals of every kind the aggregate step computes (a mean, a paired delta, a combined F1 and its
# delta), in a fresh process: which of them equal scipy.stats.bootstrap's bounds exactly, and whether
# scipy.stats was imported while computing them.
CHILD = r"""
import json, sys
import numpy as np
from prefray.engine.results.stats import BootstrapSettings, _ratio, cluster_mean_ci, paired_delta_ci
from prefray.engine.results.combined import combined_ci, combined_delta_ci
from prefray.engine.results.stats import cluster_totals

rng = np.random.default_rng(7)
settings = BootstrapSettings(n_resamples=500, seed=3)
def f1(p, r):
    return 2 * p * r / (p + r)
cases = []
for n in (2, 3, 9, 40, 300):
    clusters = [f"c{i % n}" for i in range(4 * n)]
    a, b, c = rng.integers(0, 2, 4 * n).astype(float), rng.random(4 * n), rng.random(4 * n)
    cases.append(("mean", cluster_mean_ci(list(a), clusters, settings), (a, clusters)))
    cases.append(("delta", paired_delta_ci(list(a), clusters, list(b), clusters, settings), (a, b, clusters)))
    parts = [cluster_totals(list(x), clusters) for x in (a, b, c)]
    cases.append(("f1", combined_ci(parts[:2], f1, settings), parts[:2]))
    cases.append(("f1 delta", combined_delta_ci(parts[:2], parts[1:], f1, settings), parts))
imported = "scipy.stats" in sys.modules

from scipy import stats
def scipy_bounds(kind, data):
    if kind == "mean":
        _, sums, sizes = cluster_totals(*data)
        sample, statistic = (sums, sizes), _ratio
    elif kind == "delta":
        _, sa, na = cluster_totals(data[0], data[2])
        _, sb, nb = cluster_totals(data[1], data[2])
        sample = (sa, na, sb, nb)
        statistic = lambda w, x, y, z, axis=-1: _ratio(w, x, axis) - _ratio(y, z, axis)
    else:
        flat = [array for _, sums, sizes in data for array in (sums, sizes)]
        of = lambda s1, n1, s2, n2, axis: f1(np.sum(s1, axis=axis) / np.sum(n1, axis=axis),
                                             np.sum(s2, axis=axis) / np.sum(n2, axis=axis))
        if kind == "f1":
            sample, statistic = tuple(flat), lambda *x, axis=-1: of(*x, axis)
        else:   # (a, b) against (b, c)
            sample = (*flat[:4], *flat[2:6])
            statistic = lambda *x, axis=-1: of(*x[:4], axis) - of(*x[4:], axis)
    result = stats.bootstrap(sample, statistic, paired=True, vectorized=True, n_resamples=500,
                             confidence_level=0.95, method="percentile", rng=np.random.default_rng(3))
    return [float(result.confidence_interval.low), float(result.confidence_interval.high)]

out = [[kind, [interval.low, interval.high], scipy_bounds(kind, data)] for kind, interval, data in cases
       if not np.isnan(interval.low) and interval.low != interval.high]
print(json.dumps({"imported": imported, "cases": out}))
"""


def test_intervals_equal_scipys_bootstrap_to_the_bit_without_importing_scipy_stats():
    found = json.loads(subprocess.run([sys.executable, "-c", CHILD], check=True, capture_output=True,
                                      text=True).stdout)
    assert found["imported"] is False   # ~1 s of an aggregation when nothing needs a test statistic
    kinds = {kind for kind, _, _ in found["cases"]}
    assert kinds == {"mean", "delta", "f1", "f1 delta"} and len(found["cases"]) >= 12
    for kind, ours, theirs in found["cases"]:
        assert ours == theirs, kind   # exact equality: the same resamples, the same arithmetic


def _rows(judges: list[str | None]) -> pa.Table:
    n = len(judges)
    return pa.table({
        "benchmark": ["b"] * n, "stage": ["judge"] * n, "role": ["judge"] * n, "status": ["ok"] * n,
        "judge": pa.array(judges, pa.string()), "unit_id": [f"u{i}" for i in range(n)],
    })


def test_without_panels_returns_the_rows_themselves_when_no_panel_judged():
    rows = _rows(["j1", "j2", None])
    assert without_panels(rows) is rows   # no copy of every row for nothing
    with_panel = _rows(["j1", "panel(j1,j2)", None])
    assert without_panels(with_panel)["judge"].to_pylist() == ["j1", None]


def test_judged_by_several_keeps_only_stages_two_judges_scored():
    one = _rows(["j1", "j1"])
    assert judged_by_several(one).num_rows == 0 and judged_by_several(one).schema == one.schema
    two = pa.concat_tables([_rows(["j1", "j2", None]),
                            _rows(["j1"]).set_column(1, "stage", pa.array(["other"]))])
    # the stage "judge" has j1 and j2 (the row without a judge is not a judge row); "other" only j1
    assert judged_by_several(two)["unit_id"].to_pylist() == ["u0", "u1"]


def test_best_attempts_taken_column_by_column_equal_the_whole_table_taken():
    from prefray.engine.rundir.shards import best_attempts_order, latest_attempts, take_columns

    rows = pa.concat_tables([
        pa.table({"benchmark": ["b", "a", "b"], "unit_id": ["b2", "a1", "b1"], "status": ["ok", "failed", "ok"],
                  "attempt": pa.array([1, 1, 2], pa.int32()), "text": ["x", None, "y"]}),
        pa.table({"benchmark": ["a", "b"], "unit_id": ["a1", "b1"], "status": ["ok", "failed"],
                  "attempt": pa.array([2, 1], pa.int32()), "text": ["z", None]}),
    ])
    columns = dict(zip(rows.column_names, rows.columns))
    taken = take_columns(columns, best_attempts_order(rows), rows.schema)
    assert columns == {}   # every read column let go
    assert taken.equals(latest_attempts(rows))
    # by benchmark, then unit; the ok row of a unit over a failed later or earlier one
    assert list(zip(*(taken[k].to_pylist() for k in ("benchmark", "unit_id", "attempt")))) == [
        ("a", "a1", 2), ("b", "b1", 2), ("b", "b2", 1)]


def test_rows_read_dictionary_encoded_and_decoded_equal_the_rows_read_as_strings(tmp_path):
    import pyarrow.parquet as pq

    from prefray.engine.results.aggregate import ENCODED_COLUMNS, NARROW_COLUMNS, best_rows_and_ledger
    from prefray.engine.rundir import RunDir
    from prefray.engine.rundir.shards import SHARD_SCHEMA, decoded, latest_attempts, read_rows

    def row(unit, attempt, status, meta, parsed):
        base = {name: None for name in SHARD_SCHEMA.names}
        return {**base, "benchmark": "b", "model": "m", "condition": "c", "stage": "judge", "unit_id": unit,
                "instance_id": unit.split("/")[0], "attempt": attempt, "status": status, "meta_json": meta,
                "parsed_json": parsed, "request_hash": f"{unit}-{attempt}", "provider": "p", "model_id": "m"}

    run = RunDir(tmp_path)
    folder = run.job("b", "m", "c")
    folder.mkdir(parents=True)
    # two files, each with values repeated in it and values of its own (each file its own dictionary)
    files = [[row("i1/0", 1, "failed", '{"g": 1}', None), row("i2/0", 1, "ok", '{"g": 1}', '{"a": true}'),
              row("i1/1", 1, "ok", '{"g": 2}', '{"a": true}')],
             [row("i1/0", 2, "ok", '{"g": 3}', '{"a": false}'), row("i3/0", 1, "ok", '{"g": 1}', None)]]
    for index, rows in enumerate(files):
        pq.write_table(pa.Table.from_pylist(rows, schema=SHARD_SCHEMA), folder / f"part-{index}.parquet")

    plain = read_rows(run, columns=NARROW_COLUMNS)
    encoded = read_rows(run, columns=NARROW_COLUMNS, encoded=ENCODED_COLUMNS)
    assert all(pa.types.is_dictionary(encoded.schema.field(name).type) for name in ENCODED_COLUMNS)
    assert decoded(encoded).equals(plain)
    best, _ = best_rows_and_ledger(run)
    assert best.equals(latest_attempts(plain))
    # by hand: unit i1/0's ok retry (its own file's meta), then i1/1, i2/0, i3/0
    assert list(zip(*(best[k].to_pylist() for k in ("unit_id", "attempt", "meta_json", "parsed_json")))) == [
        ("i1/0", 2, '{"g": 3}', '{"a": false}'), ("i1/1", 1, '{"g": 2}', '{"a": true}'),
        ("i2/0", 1, '{"g": 1}', '{"a": true}'), ("i3/0", 1, '{"g": 1}', None)]


def test_processes_started_early_draw_the_figures_as_processes_started_late(tmp_path):
    from prefray.engine.results import plots

    rows = [{"benchmark": "b", "model": f"m{i}", "condition": "c", "judge": "", "slice": "", "value": 0.5,
             "n": 3, "ci_low": 0.4, "ci_high": 0.6, "complete": True} for i in range(2)]
    files = {}
    for early in (False, True):
        folder = tmp_path / str(early)
        folder.mkdir()
        figures = [(plots.draw, (rows, f"figure {k}", folder / f"f{k}", (0.0, 1.0)), {}) for k in range(4)]
        pool = plots.drawing_pool() if early else None   # as aggregate_run starts it for a large run
        try:
            files[early] = plots.draw_all(figures, workers=2, pool=pool)
        finally:
            if pool is not None:
                pool.shutdown()
    assert [f.name for f in files[True]] == [f.name for f in files[False]] == [
        f"f{k}.{fmt}" for k in range(4) for fmt in plots.FORMATS]
    pngs = [[f.read_bytes() for f in files[early] if f.suffix == ".png"] for early in (False, True)]
    assert pngs[0] == pngs[1] and all(png.startswith(b"\x89PNG") for png in pngs[0])


GIVE_BACK_CHILD = """
import sys
from prefray.engine.results.heap import give_back, heap_reused

def rss_mb():
    return next(int(line.split()[1]) // 1024 for line in open("/proc/self/status") if line.startswith("VmRSS"))

with heap_reused():   # as the aggregation runs: buffers of 1 MiB come from the heap, not from mmap
    blocks, pins = [], []
    for _ in range(300):   # each block followed by a small one that stays: freed, they cannot merge into the top
        blocks.append(bytearray(1 << 20))
        pins.append(bytearray(8 << 10))
    del blocks
    freed = rss_mb()
    if sys.argv[1] == "give":
        give_back()
    print(freed, rss_mb())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's heap and /proc are Linux's")
def test_give_back_hands_the_heaps_free_pages_to_the_system():
    """300 MiB freed between blocks still in use stay resident until give_back (malloc_trim) returns them."""
    def after(mode: str) -> tuple[int, int]:
        out = subprocess.run([sys.executable, "-c", GIVE_BACK_CHILD, mode], capture_output=True, text=True, check=True)
        freed, now = map(int, out.stdout.split())
        return freed, now

    kept_freed, kept_now = after("keep")
    given_freed, given_now = after("give")
    assert kept_now >= kept_freed - 20            # freed, yet resident: glibc keeps the pages
    assert given_freed - given_now >= 250         # handed back: at least 250 of the 300 MiB
