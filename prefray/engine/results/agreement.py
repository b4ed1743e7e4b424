"""Inter-judge agreement: how closely several judges agree when they scored the same units.

`judge_values` reduces every ok judge row (role != "subject", status == "ok", judge set) to one
scalar: the first value, in the key order of its parsed JSON object, that is a bool, int or float
(bool is checked first, since bool is an int in Python; non-finite numbers, strings, lists and
nested objects are skipped). Bools become 0.0/1.0 with kind "binary", numbers keep their value with
kind "scored". Rows without such a value, or whose parsed_json is not a JSON object, are dropped.
Pass one row per unit and judge (e.g. `store.latest_attempts(rows)`); duplicates: the last wins.

`judge_agreement` compares, per benchmark × stage, every unordered pair of distinct judges
(judge_a < judge_b) on the units both judged, i.e. identical (model, condition, instance_id, item,
sample), where an item naming its judge (CUPID's scorer units) is read without that name; a unit
judged by only one of the two is left out. A pair is "binary" when every paired
value of both judges came from a bool, else "scored". Per pair:

- n: paired units (pairs with n == 0 are omitted);
- percent_agreement: share of units with exactly equal values (for both kinds);
- cohen_kappa (binary only): (po - pe) / (1 - pe), with po the observed agreement and
  pe = pa1*pb1 + pa0*pb0 the chance agreement from each judge's share of 1s (pa1, pb1) and 0s.
  When pe == 1 (both judges gave one and the same label throughout) kappa is undefined; it is
  defined here as 1.0 if po == 1 else 0.0;
- pearson, spearman (scored only): scipy.stats.pearsonr / spearmanr; null when n < 3 or one
  judge's values are constant.

When a benchmark × stage has two or more judges, the table gains four columns and one more row:
- alpha, alpha_ci_low, alpha_ci_high: Krippendorff's α of the pair (nominal for binary, interval for
  scored values) with a 95% bootstrap interval over units (engine/results/alpha.py);
- a panel row (judge_a = "panel", judge_b = the judges joined by ","): α among all the stage's judges
  over every unit two or more of them judged (n), the share of those units where all agree, and
  n_eff = k / (1 + (k − 1) ρ̄), the effective number of independent judges (the Kish design effect),
  with ρ̄ the mean pairwise Pearson correlation of the judges' values (phi for binary ones), clipped
  to [1, k] (k when ρ̄ ≤ 0). Without a reference the judges' errors cannot be told from the truth they share, so ρ̄
  is the correlation of their verdicts: an upper bound on their error correlation wherever the units
  truly differ, and n_eff a lower bound. A run with one judge per stage writes only the header of
  the pairwise columns (nothing to compare), as before.

`panel_rows` makes a panel's verdict rows (judge = the panel's name) from its members' rows of the
same unit, see its docstring; `without_panels` drops them again where only real judges count.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from itertools import combinations
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from prefray.engine.results.alpha import alpha_ci
from prefray.engine.types import stable_id

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

PANEL_AGREEMENT_SCHEMA = pa.schema([*AGREEMENT_SCHEMA, ("alpha", pa.float64()), ("alpha_ci_low", pa.float64()),
                                    ("alpha_ci_high", pa.float64()), ("n_eff", pa.float64())])
PANEL = "panel"   # judge_a of the row that compares a stage's judges all together
RESAMPLES = 1000  # bootstrap draws for the α intervals

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
    judged = _judged(rows)
    keys = rows.select(["benchmark", "stage", "judge"]).filter(judged)   # counted on three columns, not all
    counts = keys.group_by(["benchmark", "stage"]).aggregate([("judge", "count_distinct")])
    several = counts.filter(pc.greater_equal(counts["judge_count_distinct"], 2))
    if several.num_rows == 0:
        return rows.slice(0, 0)
    group = pc.binary_join_element_wise(rows["benchmark"], rows["stage"], "\x1f")
    wanted = pc.binary_join_element_wise(several["benchmark"], several["stage"], "\x1f")
    return rows.filter(pc.and_(judged, pc.fill_null(pc.is_in(group, wanted), False)))


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


def pearson(a: list[float], b: list[float]) -> Any:
    from scipy import stats  # imported when a correlation is computed: ~1 s that most runs never need

    return stats.pearsonr(a, b)


def spearman(a: list[float], b: list[float]) -> Any:
    from scipy import stats

    return stats.spearmanr(a, b)


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
        "pearson": None if binary else correlation(pearson, a, b),
        "spearman": None if binary else correlation(spearman, a, b),
    }


def unit_item(row: dict[str, Any]) -> str:
    """A judged unit's item with its judge's name taken out (CUPID's scorer items name their judge)."""
    return (row["item"] or "").replace(row["judge"], "{judge}") if row["judge"] else (row["item"] or "")


def judge_agreement(values: pa.Table, resamples: int = RESAMPLES, seed: int = 0) -> pa.Table:
    """Pairwise and panel judge agreement per benchmark × stage; see the module docstring."""
    groups: dict[tuple[str, str], dict[str, dict[Unit, tuple[float, str]]]] = defaultdict(lambda: defaultdict(dict))
    for row in values.to_pylist():
        unit = tuple(unit_item(row) if key == "item" else row[key] for key in KEYS)
        groups[(row["benchmark"], row["stage"])][row["judge"]][unit] = (row["value"], row["kind"])
    out = []
    for (benchmark, stage), judges in groups.items():
        where = {"benchmark": benchmark, "stage": stage}
        pairs = []
        for judge_a, judge_b in combinations(sorted(judges), 2):
            result = compare(judges[judge_a], judges[judge_b])
            if result:
                pairs.append((judge_a, judge_b, result))
                pair = {judge_a: judges[judge_a], judge_b: judges[judge_b]}
                out.append({**where, "judge_a": judge_a, "judge_b": judge_b, **result,
                            **panel_alpha(pair, result["kind"], resamples, seed)})
        if pairs:   # the panel: every judge that shares a unit with another
            paired = {judge for judge_a, judge_b, _ in pairs for judge in (judge_a, judge_b)}
            out.append({**where, **panel_row({j: judges[j] for j in sorted(paired)}, pairs, resamples, seed)})
    if not out:
        return AGREEMENT_SCHEMA.empty_table()
    table = pa.Table.from_pylist(out, schema=PANEL_AGREEMENT_SCHEMA)
    return table.sort_by([(name, "ascending") for name in ("benchmark", "stage", "judge_a", "judge_b")])


def panel_alpha(judges: dict[str, dict[Unit, tuple[float, str]]], kind: str, resamples: int,
                seed: int) -> dict[str, float | None]:
    """α among `judges` over every unit any of them judged, with its bootstrap interval."""
    units = sorted({unit for judged in judges.values() for unit in judged}, key=repr)
    matrix = [[judged[unit][0] if unit in judged else math.nan for unit in units] for judged in judges.values()]
    result = alpha_ci(matrix, "nominal" if kind == "binary" else "interval", resamples, seed=seed)
    return {"alpha": result.alpha, "alpha_ci_low": result.ci_low, "alpha_ci_high": result.ci_high}


def effective_judges(k: int, correlations: list[float]) -> float | None:
    """k / (1 + (k − 1) ρ̄) for the mean ρ̄ of the pairwise correlations, within [1, k]; None without any."""
    if not correlations:
        return None
    mean = sum(correlations) / len(correlations)
    if mean <= 0:
        return float(k)   # uncorrelated (or opposed) judges: worth no fewer than k independent ones
    return min(float(k), max(1.0, k / (1 + (k - 1) * mean)))


def panel_row(judges: dict[str, dict[Unit, tuple[float, str]]], pairs: list[tuple[str, str, dict[str, Any]]],
              resamples: int, seed: int) -> dict[str, Any]:
    """The row comparing all of a stage's judges at once (see the module docstring)."""
    kind = "binary" if all(result["kind"] == "binary" for *_, result in pairs) else "scored"
    counts: dict[Unit, list[float]] = defaultdict(list)
    for judged in judges.values():
        for unit, (value, _) in judged.items():
            counts[unit].append(value)
    shared = [values for values in counts.values() if len(values) >= 2]
    correlations = []
    for judge_a, judge_b, _ in pairs:
        common = sorted(set(judges[judge_a]) & set(judges[judge_b]), key=repr)
        found = correlation(pearson, [judges[judge_a][u][0] for u in common],
                            [judges[judge_b][u][0] for u in common])
        if found is not None:
            correlations.append(found)
    return {"judge_a": PANEL, "judge_b": ",".join(sorted(judges)), "kind": kind, "n": len(shared),
            "percent_agreement": sum(len(set(v)) == 1 for v in shared) / len(shared),
            **panel_alpha(judges, kind, resamples, seed), "n_eff": effective_judges(len(judges), correlations)}


# -- a panel's verdicts ------------------------------------------------------------------------------

class Uncombinable(ValueError):
    """Members' verdicts with no common shape (e.g. lists of different lengths)."""


def combine(values: list[Any]) -> Any:
    """A panel's verdict from its members' parsed verdicts, in the panel's order: bools by majority
    (a tie: the first member's, the panel's chair), numbers by their mean, lists of one length and
    objects key by key, anything else (text) the first member's."""
    first = values[0]
    if all(isinstance(v, bool) for v in values):
        ayes = sum(values)
        return first if 2 * ayes == len(values) else 2 * ayes > len(values)
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return sum(values) / len(values)
    if all(isinstance(v, list) for v in values):
        if len({len(v) for v in values}) != 1:
            raise Uncombinable(f"lists of {sorted({len(v) for v in values})} items")
        return [combine(list(column)) for column in zip(*values)]
    if all(isinstance(v, dict) for v in values):
        return {key: combine([v[key] for v in values if key in v]) for key in first}
    return first


def panel_name(members: list[str]) -> str:
    return f"panel({','.join(members)})"


def without_panels(rows: pa.Table) -> pa.Table:
    """The rows of real judges (and subjects): a panel's rows are made from them, not judged."""
    judges = pc.unique(rows["judge"]).drop_null()
    if not pc.any(pc.starts_with(judges, "panel(")).as_py():
        return rows   # no panel's rows: nothing to leave out (and no copy of every row)
    judge = pc.fill_null(rows["judge"], "")
    return rows.filter(pc.invert(pc.starts_with(judge, "panel(")))


def panel_rows(best: pa.Table, panels: dict[str, list[str]]) -> pa.Table:
    """The verdict rows of each benchmark's panel (benchmark → its member judges, two or more).

    Members' rows are the same unit when they share model, condition, stage, instance, sample and
    item (an item naming its judge, as CUPID's scorer units do, is read with the member's name in
    the panel's place). For every unit that every member judged, one row with judge = the panel's
    name: if all members' rows are ok, `parsed_json` is `combine` of their verdicts (a verdict that
    cannot be combined makes the row failed, cause parse_error); otherwise it is the first failed
    member's row (its status and cause), so the panel's metrics count the failure. A unit some
    member never judged gets no panel row. A panel row costs nothing: its members' rows carry the calls.
    """
    out = []
    for benchmark, members in panels.items():
        if len(members) < 2:
            continue
        name = panel_name(members)
        mine = best.filter(pc.and_(pc.equal(best["benchmark"], benchmark), pc.is_in(best["judge"], pa.array(members))))
        units: dict[Unit, dict[str, dict[str, Any]]] = defaultdict(dict)
        for row in mine.to_pylist():
            if row["role"] == "subject":
                continue
            item = (row["item"] or "").replace(row["judge"], name)
            key = (row["model"], row["condition"], row["stage"], row["instance_id"], item, row["sample"])
            units[key][row["judge"]] = {**row, "item": item}
        for judged in units.values():
            if len(judged) == len(members):
                out.append(_panel_row(name, [judged[m] for m in members]))
    schema = best.schema
    return pa.Table.from_pylist(out, schema=schema) if out else schema.empty_table()


def _panel_row(name: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    first = rows[0]
    row = {**first, "judge": name, "meta_json": (first["meta_json"] or "").replace(first["judge"], name) or None,
           "unit_id": stable_id("panel", name, *(first[k] for k in ("benchmark", "model", "condition", "stage",
                                                                    "instance_id", "item", "sample"))),
           "attempt": 0, "provider": "panel", "model_id": name, "request_hash": None,
           "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0, "cached": False, "tries": 0}
    failed = next((r for r in rows if r["status"] != "ok"), None)
    if failed is not None:
        return {**row, **{k: failed[k] for k in ("status", "cause", "error", "parsed_json")}}
    try:
        verdict = combine([json.loads(r["parsed_json"]) if r["parsed_json"] else None for r in rows])
    except Uncombinable as exc:
        return {**row, "status": "failed", "cause": "parse_error", "parsed_json": None,
                "error": f"the panel's verdicts cannot be combined: {exc}"}
    text = json.dumps(verdict)
    return {**row, "parsed_json": text, **({"text": text} if "text" in row else {})}
