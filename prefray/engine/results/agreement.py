"""Inter-judge agreement: how closely several judges agree when they scored the same units.

`judge_values` reduces every ok judge row (role != "subject", status == "ok", judge set) to one
scalar: the first value, in the key order of its parsed JSON object, that is a bool, int or float
(bool is checked first, since bool is an int in Python; non-finite numbers, strings, lists and
nested objects are skipped). Bools become 0.0/1.0 with kind "binary", numbers keep their value with
kind "scored". Rows without such a value, or whose parsed_json is not a JSON object, are dropped.
Pass one row per unit and judge (e.g. `store.latest_attempts(rows)`); duplicates: the last wins.

`judge_agreement` compares, per benchmark × stage, every unordered pair of distinct judges
(judge_a < judge_b) on the units both judged, i.e. identical (model, condition, instance_id, item,
sample); a unit judged by only one of the two is left out. A pair is "binary" when every paired
value of both judges came from a bool, else "scored". Per pair:

- n: paired units (pairs with n == 0 are omitted);
- percent_agreement: share of units with exactly equal values (for both kinds);
- cohen_kappa (binary only): (po - pe) / (1 - pe), with po the observed agreement and
  pe = pa1*pb1 + pa0*pb0 the chance agreement from each judge's share of 1s (pa1, pb1) and 0s.
  When pe == 1 (both judges gave one and the same label throughout) kappa is undefined; it is
  defined here as 1.0 if po == 1 else 0.0;
- pearson, spearman (scored only): scipy.stats.pearsonr / spearmanr; null when n < 3 or one
  judge's values are constant.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from itertools import combinations
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from scipy import stats

KEYS = ("model", "condition", "instance_id", "item", "sample")

VALUES_SCHEMA = pa.schema([
    ("benchmark", pa.string()), ("stage", pa.string()), ("model", pa.string()), ("condition", pa.string()),
    ("instance_id", pa.string()), ("item", pa.string()), ("sample", pa.int32()), ("judge", pa.string()),
    ("field", pa.string()), ("value", pa.float64()), ("kind", pa.string()),
])

AGREEMENT_SCHEMA = pa.schema([
    ("benchmark", pa.string()), ("stage", pa.string()), ("judge_a", pa.string()), ("judge_b", pa.string()),
    ("kind", pa.string()), ("n", pa.int64()), ("percent_agreement", pa.float64()),
    ("cohen_kappa", pa.float64()), ("pearson", pa.float64()), ("spearman", pa.float64()),
])

Unit = tuple[Any, ...]


def first_scalar(parsed_json: str | None) -> tuple[str, float, str] | None:
    """(field, value, kind) of the first bool/int/float value in a JSON object, or None."""
    try:
        parsed = json.loads(parsed_json) if parsed_json else None
    except ValueError:
        return None
    if not isinstance(parsed, dict):
        return None
    for field, value in parsed.items():
        if isinstance(value, bool):
            return field, float(value), "binary"
        if isinstance(value, (int, float)) and math.isfinite(value):
            return field, float(value), "scored"
    return None


def _judged(rows: pa.Table) -> pa.Array:
    """Mask of the ok judge rows: role != "subject", status ok, judge set."""
    judged = pc.and_(pc.fill_null(pc.not_equal(rows["role"], "subject"), True),
                     pc.and_(pc.equal(rows["status"], "ok"), pc.is_valid(rows["judge"])))
    return pc.fill_null(judged, False)


def judged_by_several(rows: pa.Table) -> pa.Table:
    """The ok judge rows of every benchmark × stage that two or more judges scored: the only rows
    `judge_agreement` can pair (the others need not be parsed)."""
    judged = rows.filter(_judged(rows))
    counts = judged.group_by(["benchmark", "stage"]).aggregate([("judge", "count_distinct")])
    several = counts.filter(pc.greater_equal(counts["judge_count_distinct"], 2))
    group = pc.binary_join_element_wise(judged["benchmark"], judged["stage"], "\x1f")
    wanted = pc.binary_join_element_wise(several["benchmark"], several["stage"], "\x1f")
    return judged.filter(pc.fill_null(pc.is_in(group, wanted), False))


def judge_values(rows: pa.Table) -> pa.Table:
    """One scalar per ok judge row; see the module docstring."""
    judged = rows.filter(_judged(rows)).select([*VALUES_SCHEMA.names[:8], "parsed_json"])
    found = [first_scalar(value) for value in judged["parsed_json"].to_pylist()]
    kept = [i for i, scalar in enumerate(found) if scalar is not None]
    scalars = [found[i] for i in kept]
    table = judged.take(pa.array(kept, pa.int64())).select(VALUES_SCHEMA.names[:8])
    for position, name in enumerate(("field", "value", "kind")):
        table = table.append_column(name, pa.array([s[position] for s in scalars], VALUES_SCHEMA.field(name).type))
    return table.cast(VALUES_SCHEMA)


def cohen_kappa(a: list[float], b: list[float]) -> float:
    """Cohen's kappa of two 0/1 sequences; 1.0 or 0.0 when chance agreement is 1 (see docstring)."""
    n = len(a)
    po = sum(x == y for x, y in zip(a, b)) / n
    pa1, pb1 = sum(a) / n, sum(b) / n
    pe = pa1 * pb1 + (1 - pa1) * (1 - pb1)
    if math.isclose(pe, 1.0):
        return 1.0 if po == 1.0 else 0.0
    return (po - pe) / (1 - pe)


def correlation(func: Any, a: list[float], b: list[float]) -> float | None:
    if len(a) < 3 or len(set(a)) < 2 or len(set(b)) < 2:
        return None
    result = float(func(a, b)[0])
    return None if math.isnan(result) else result


def compare(judged_a: dict[Unit, tuple[float, str]], judged_b: dict[Unit, tuple[float, str]]) -> dict[str, Any]:
    """Agreement statistics of two judges over the units both judged (empty dict if none)."""
    shared = sorted(set(judged_a) & set(judged_b), key=repr)
    if not shared:
        return {}
    a = [judged_a[unit][0] for unit in shared]
    b = [judged_b[unit][0] for unit in shared]
    binary = all(judged_a[u][1] == "binary" and judged_b[u][1] == "binary" for u in shared)
    return {
        "kind": "binary" if binary else "scored", "n": len(shared),
        "percent_agreement": sum(x == y for x, y in zip(a, b)) / len(shared),
        "cohen_kappa": cohen_kappa(a, b) if binary else None,
        "pearson": None if binary else correlation(stats.pearsonr, a, b),
        "spearman": None if binary else correlation(stats.spearmanr, a, b),
    }


def judge_agreement(values: pa.Table) -> pa.Table:
    """Pairwise judge agreement per benchmark × stage; see the module docstring."""
    groups: dict[tuple[str, str], dict[str, dict[Unit, tuple[float, str]]]] = defaultdict(lambda: defaultdict(dict))
    for row in values.to_pylist():
        unit = tuple(row[key] for key in KEYS)
        groups[(row["benchmark"], row["stage"])][row["judge"]][unit] = (row["value"], row["kind"])
    out = []
    for (benchmark, stage), judges in groups.items():
        for judge_a, judge_b in combinations(sorted(judges), 2):
            result = compare(judges[judge_a], judges[judge_b])
            if result:
                out.append({"benchmark": benchmark, "stage": stage, "judge_a": judge_a, "judge_b": judge_b, **result})
    table = pa.Table.from_pylist(out, schema=AGREEMENT_SCHEMA)
    return table.sort_by([(name, "ascending") for name in ("benchmark", "stage", "judge_a", "judge_b")])
