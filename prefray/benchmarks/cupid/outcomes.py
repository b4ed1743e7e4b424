"""CUPID per-instance outcomes, computed once per table of stored rows (SHARD_SCHEMA) and read by
both the metrics and the per-unit scores. The rules are those of `prefray.benchmarks.cupid.metrics`.

A cell is one model × condition × sweep judge (the `meta.judge` of scorer rows; "" when a model ×
condition has no scorer row). An instance's chain reads the stored row of each of its calls, keyed
by (stage, instance, item) within its model × condition; when a key repeats, the last row counts.
Each meta or parsed text is parsed once per distinct text, and parsed texts only for the answered
scorer rows whose values the chains read.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prefray.sdk.data import per_table
from prefray.sdk.failures import FAILURE_CLASSES, failure_classes

SUBJECT_STAGES = ("summarize", "infer", "generate")
STAGES = ("summarize", "infer", "decompose", "match", "rematch", "generate", "judge")
# Outcome codes: the position of the row's failure class in FAILURE_CLASSES ("answered" is scored).
OUTCOMES = tuple("scored" if kind == "answered" else kind for kind in FAILURE_CLASSES)
SCORED, NO_ANSWER, MODEL_FAILURE, JUDGE_FAILURE = (OUTCOMES.index(k) for k in
                                                   ("scored", "no_answer", "model_failure", "judge_failure"))
# The columns the outcomes read (answers' text is not among them: the judges' parsed verdicts are).
READ_COLUMNS = ("model", "condition", "stage", "role", "judge", "instance_id", "item", "status", "cause",
                "meta_json", "parsed_json")
_SEPARATOR = "\x1f"


@dataclass(frozen=True)
class Outcomes:
    """Every cell's instance outcomes. `inference` and `generation` hold one row per cell and
    instance of the task's universe, in cell then instance order, with the cell's position in
    `cells`; `parse_failures` holds per cell and stage the rows read and those that failed to parse."""

    cells: pa.Table           # model, condition, judge: in order
    inference: pa.Table       # cell, instance_type, persona, outcome, hit_inferred, n_inferred, hit_true, n_true,
                              # mismatched (sums 0 unless scored or a model failure)
    generation: pa.Table      # cell, instance_type, persona, outcome, score (null unless scored)
    parse_failures: pa.Table  # cell, stage, failed, n


@dataclass(frozen=True)
class _Rows:
    """Per stored row, what the chains read; numeric arrays carry one extra entry at the end for
    a missing row (position -1): no answer, no values."""

    table: pa.Table    # model, condition, stage, role, instance_id, item, scorer_judge, inference, generation,
                       # parse_failed
    outcome: np.ndarray
    n_true: np.ndarray
    size: np.ndarray   # entries of the parsed checklist or ratings
    total: np.ndarray  # Σ ratings, or the judge's score
    instances: pa.Array  # key of model, condition, instance_id
    keys: pa.Array       # key of model, condition, instance_id, item


def _key(*parts: Any) -> pa.Array:
    return pc.binary_join_element_wise(*parts, _SEPARATOR)


def _distinct_parsed(texts: pa.ChunkedArray) -> tuple[list[dict[str, Any]], pa.Array]:
    """Each distinct JSON text parsed once (null or empty as {}), and every entry's index into them."""
    encoded = pc.fill_null(texts, "").combine_chunks().dictionary_encode()
    return [json.loads(text or "{}") for text in encoded.dictionary.to_pylist()], encoded.indices


def _read(parsed: tuple[list[dict[str, Any]], pa.Array], read: Callable[[dict[str, Any]], Any],
          kind: pa.DataType) -> pa.Array:
    """`read` of every entry's parsed text."""
    values, indices = parsed
    return pa.array([read(value) for value in values], kind).take(indices)


def _with_missing(values: pa.Array | np.ndarray, missing: Any, dtype: Any) -> np.ndarray:
    """The values as numpy, with the entry read for a missing row (position -1) appended."""
    array = values if isinstance(values, np.ndarray) else np.asarray(values.to_numpy(zero_copy_only=False))
    return np.append(array.astype(dtype), np.array([missing], dtype))


def _matcher_sums(value: dict[str, Any]) -> tuple[int, float]:
    return len(value["scores"]), float(sum(value["scores"]))


# (entries, Σ) of an answered scorer row's parsed value, by stage.
_PARSED_READERS: dict[str, Callable[[dict[str, Any]], tuple[int, float]]] = {
    "decompose": lambda value: (len(value["checklist"]), 0.0), "match": _matcher_sums, "rematch": _matcher_sums,
    "judge": lambda value: (0, float(value["score"]))}


def _parsed_values(rows: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(entries, Σ) of each answered scorer row's parsed value: a checklist's length, a matcher's
    ratings count and sum, a judge's score; 0 elsewhere."""
    size, total = np.zeros(rows.num_rows, np.int64), np.zeros(rows.num_rows, np.float64)
    if "parsed_json" not in rows.column_names:
        return size, total
    answered = pc.and_(pc.equal(rows["status"], "ok"), pc.fill_null(pc.not_equal(rows["parsed_json"], ""), False))
    for stage, read in _PARSED_READERS.items():
        positions = _positions(pc.and_(answered, pc.equal(rows["stage"], stage)))
        if len(positions):
            pairs = _read(_distinct_parsed(rows["parsed_json"].take(positions)), lambda v, read=read: list(read(v)),
                          pa.list_(pa.float64()))
            flat = pairs.flatten().to_numpy().reshape(-1, 2)
            size[positions], total[positions] = flat[:, 0].astype(np.int64), flat[:, 1]
    return size, total


def _rows(table: pa.Table) -> _Rows:
    rows = table.select([c for c in READ_COLUMNS if c in table.column_names])
    meta = _distinct_parsed(rows["meta_json"])
    scorer_judge = pc.if_else(_read(meta, lambda m: "judge" in m, pa.bool_()),
                              _read(meta, lambda m: m.get("judge"), pa.string()), rows["judge"])
    tasks = {task: _read(meta, lambda m, task=task: task in m.get("tasks", []), pa.bool_())
             for task in ("inference", "generation")}
    parse_failed = pc.and_kleene(pc.equal(rows["status"], "failed"), pc.equal(rows["cause"], "parse_error"))
    facts = pa.table({"model": rows["model"], "condition": rows["condition"], "stage": rows["stage"],
                      "role": rows["role"], "instance_id": rows["instance_id"], "item": rows["item"],
                      "scorer_judge": scorer_judge, **tasks, "parse_failed": pc.fill_null(parse_failed, False)})
    outcome = pc.index_in(failure_classes(rows), value_set=pa.array(FAILURE_CLASSES))
    size, total = _parsed_values(rows)
    return _Rows(facts, _with_missing(outcome, NO_ANSWER, np.int8),
                 _with_missing(_read(meta, lambda m: m.get("n_true", 0), pa.int64()), 0, np.int64),
                 _with_missing(size, 0, np.int64), _with_missing(total, 0.0, np.float64),
                 _key(rows["model"], rows["condition"], rows["instance_id"]),
                 _key(rows["model"], rows["condition"], rows["instance_id"], rows["item"]))


def _positions(mask: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.flatnonzero(np.asarray(mask.to_numpy(zero_copy_only=False), bool))


def _last_position(candidates: np.ndarray, candidate_keys: pa.Array, keys: pa.Array) -> np.ndarray:
    """For each key, the position of the last candidate row with that key, or -1."""
    if not len(candidates):
        return np.full(len(keys), -1)
    reversed_positions = candidates[::-1]
    found = pc.index_in(keys, value_set=candidate_keys.take(pa.array(reversed_positions)))
    found = np.asarray(pc.fill_null(found, -1).to_numpy(zero_copy_only=False))
    return np.where(found >= 0, reversed_positions[np.maximum(found, 0)], -1)


def _cells(rows: _Rows) -> pa.Table:
    """Every model × condition with each sweep judge of its scorer rows, or "" without any; sorted."""
    t = rows.table
    pairs = t.group_by(["model", "condition"]).aggregate([])
    scorer = t.filter(pc.not_equal(t["role"], "subject"))
    judged = (scorer.select(["model", "condition", "scorer_judge"]).rename_columns(["model", "condition", "judge"])
              .group_by(["model", "condition", "judge"]).aggregate([]))
    unjudged = pairs.join(judged.group_by(["model", "condition"]).aggregate([]), ["model", "condition"],
                          join_type="left anti")
    unjudged = unjudged.append_column("judge", pa.array([""] * unjudged.num_rows, pa.string()))
    names = ["model", "condition", "judge"]
    cells = pa.concat_tables([judged.select(names), unjudged.select(names)])
    cells = cells.sort_by([("model", "ascending"), ("condition", "ascending"), ("judge", "ascending")])
    return cells.append_column("cell", pa.array(np.arange(cells.num_rows, dtype=np.int64)))


def _universe(rows: _Rows, cells: pa.Table, stage: str, task: str) -> pa.Table:
    """Per cell, the instances a task was attempted for: its first subject stage, or a summary
    before it; in cell then instance order."""
    t = rows.table
    attempted = pc.or_(pc.equal(t["stage"], stage), pc.and_(pc.equal(t["stage"], "summarize"), t[task]))
    ids = t.filter(attempted).group_by(["model", "condition", "instance_id"]).aggregate([])
    universe = ids.join(cells, ["model", "condition"], join_type="inner")
    return universe.sort_by([("cell", "ascending"), ("instance_id", "ascending")])


def _stage_positions(rows: _Rows, stage: str, keys: pa.Array) -> np.ndarray:
    return _last_position(_positions(pc.equal(rows.table["stage"], stage)), rows.keys, keys)


def _instance_keys(universe: pa.Table) -> pa.Array:
    return _key(universe["model"], universe["condition"], universe["instance_id"])


def _n_true(rows: _Rows, universe: pa.Table) -> np.ndarray:
    """Each instance's number of true checklist items: the meta of its last subject row (0 without)."""
    subject = _positions(pc.is_in(rows.table["stage"], pa.array(SUBJECT_STAGES)))
    return rows.n_true[_last_position(subject, rows.instances, _instance_keys(universe))]


def _summaries_done(rows: _Rows, universe: pa.Table) -> np.ndarray:
    """No summary of the instance is still without an answer (a model failure leaves it empty)."""
    summaries = _positions(pc.equal(rows.table["stage"], "summarize"))
    waiting = summaries[rows.outcome[summaries] == NO_ANSWER]
    unanswered = pc.is_in(_instance_keys(universe), value_set=rows.instances.take(pa.array(waiting, pa.int64())))
    return ~np.asarray(unanswered.to_numpy(zero_copy_only=False), bool)


def _item_keys(universe: pa.Table, item: Any) -> pa.Array:
    return _key(universe["model"], universe["condition"], universe["instance_id"], item)


def _matcher(rows: _Rows, universe: pa.Table, direction: str,
             expected: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(outcome, Σ ratings, rated another number of entries) of one matcher call per instance: its
    answer, or when that rated another number of entries, the answer to the one re-ask."""
    keys = _item_keys(universe, pc.binary_join_element_wise(universe["judge"], direction, "|"))
    first, again = (_stage_positions(rows, stage, keys) for stage in ("match", "rematch"))
    first_outcome, again_outcome = rows.outcome[first], rows.outcome[again]
    first_fits = (first_outcome == SCORED) & (rows.size[first] == expected)
    asked_again = (first_outcome == SCORED) & ~first_fits
    again_fits = asked_again & (again_outcome == SCORED) & (rows.size[again] == expected)
    outcome = np.select([first_outcome != SCORED, first_fits, again_outcome != SCORED, again_fits],
                        [first_outcome, SCORED, again_outcome, SCORED], JUDGE_FAILURE)
    hits = np.select([first_fits, again_fits], [rows.total[first], rows.total[again]], 0.0)
    return outcome, hits, asked_again & (again_outcome == SCORED) & ~again_fits


def _inference(rows: _Rows, universe: pa.Table) -> dict[str, np.ndarray]:
    """Outcome and sums (Σ rated inferred, k, Σ rated true, t) of each instance's inference chain."""
    n_true, summaries_done = _n_true(rows, universe), _summaries_done(rows, universe)
    infer = rows.outcome[_stage_positions(rows, "infer", _item_keys(universe, ""))]
    decompose_at = _stage_positions(rows, "decompose", _item_keys(universe, universe["judge"]))
    decompose, k = rows.outcome[decompose_at], rows.size[decompose_at]
    unanswered = ~summaries_done | (infer == NO_ANSWER)
    model_failed = ~unanswered & (infer == MODEL_FAILURE)
    decomposed = ~unanswered & ~model_failed & (decompose == SCORED)
    matched = decomposed & (k > 0)
    precision, hit_inferred, wrong_p = _matcher(rows, universe, "precision", k)
    recall, hit_true, wrong_r = _matcher(rows, universe, "recall", n_true)
    worst = np.where((precision == NO_ANSWER) | (recall == NO_ANSWER), NO_ANSWER,
                     np.where((precision == JUDGE_FAILURE) | (recall == JUDGE_FAILURE), JUDGE_FAILURE, SCORED))
    outcome = np.select([unanswered, model_failed, ~decomposed, ~matched],
                        [NO_ANSWER, MODEL_FAILURE, decompose, SCORED], worst)
    rated = matched & (outcome == SCORED)
    counted = (outcome == SCORED) | (outcome == MODEL_FAILURE)
    return {"outcome": outcome.astype(np.int8),
            "hit_inferred": np.where(rated, hit_inferred, 0.0), "n_inferred": np.where(rated, k, 0),
            "hit_true": np.where(rated, hit_true, 0.0), "n_true": np.where(counted, n_true, 0),
            "mismatched": matched & (outcome == JUDGE_FAILURE) & (wrong_p | wrong_r)}


def _generation(rows: _Rows, universe: pa.Table) -> dict[str, Any]:
    """Outcome and judge score (null unless scored; 0 for a model failure) of each generation chain."""
    summaries_done = _summaries_done(rows, universe)
    generated = rows.outcome[_stage_positions(rows, "generate", _item_keys(universe, ""))]
    verdict_at = _stage_positions(rows, "judge", _item_keys(universe, universe["judge"]))
    verdict = rows.outcome[verdict_at]
    unanswered = ~summaries_done | (generated == NO_ANSWER)
    model_failed = ~unanswered & (generated == MODEL_FAILURE)
    outcome = np.select([unanswered, model_failed], [NO_ANSWER, MODEL_FAILURE], verdict)
    has_score = model_failed | (~unanswered & (verdict == SCORED))
    score = np.where(model_failed, 0.0, rows.total[verdict_at])
    return {"outcome": outcome.astype(np.int8), "score": pa.array(score, mask=~has_score)}


def _labelled(universe: pa.Table, columns: dict[str, Any]) -> pa.Table:
    ids = universe["instance_id"]
    instance_type = pc.struct_field(pc.extract_regex(ids, r"^(?:.*\|)?(?P<t>[^|]*)$"), "t")
    persona = pc.struct_field(pc.extract_regex(ids, r"^(?P<p>[^|]*)"), "p")
    return pa.table({"cell": universe["cell"], "instance_type": instance_type, "persona": persona, **columns})


def _parse_failures(rows: _Rows, cells: pa.Table) -> pa.Table:
    """Per cell and stage with rows: the subject rows and the cell judge's scorer rows (n), and
    those of them that failed as parse errors."""
    t = rows.table
    subject = pc.equal(t["role"], "subject")
    counted = pa.table({"model": t["model"], "condition": t["condition"], "stage": t["stage"],
                        "judge": t["scorer_judge"], "failed": t["parse_failed"].cast(pa.int64())})
    totals = [("failed", "sum"), ("failed", "count")]
    by_subject = (counted.filter(subject).group_by(["model", "condition", "stage"]).aggregate(totals)
                  .rename_columns({"failed_sum": "failed_subject", "failed_count": "n_subject"}))
    by_scorer = (counted.filter(pc.invert(subject)).group_by(["model", "condition", "judge", "stage"])
                 .aggregate(totals).rename_columns({"failed_sum": "failed_scorer", "failed_count": "n_scorer"}))
    stages = pa.table({"stage": pa.array(STAGES), "stage_order": pa.array(range(len(STAGES)), pa.int64())})
    grid = _cross(cells, stages)
    grid = grid.join(by_subject, ["model", "condition", "stage"], join_type="left outer")
    grid = grid.join(by_scorer, ["model", "condition", "judge", "stage"], join_type="left outer")

    def total(name: str) -> pa.Array:
        return pc.add(pc.fill_null(grid[f"{name}_subject"], 0), pc.fill_null(grid[f"{name}_scorer"], 0))

    out = pa.table({"cell": grid["cell"], "stage_order": grid["stage_order"], "stage": grid["stage"],
                    "failed": total("failed"), "n": total("n")})
    out = out.filter(pc.greater(out["n"], 0)).sort_by([("cell", "ascending"), ("stage_order", "ascending")])
    return out.drop_columns(["stage_order"])


def _cross(left: pa.Table, right: pa.Table) -> pa.Table:
    """Every row of `left` with every row of `right`, in `left` then `right` order."""
    outer = np.repeat(np.arange(left.num_rows), right.num_rows)
    inner = np.tile(np.arange(right.num_rows), left.num_rows)
    picked = left.take(pa.array(outer, pa.int64()))
    for name in right.column_names:
        picked = picked.append_column(name, right[name].take(pa.array(inner, pa.int64())))
    return picked


@per_table
def instance_outcomes(table: pa.Table) -> Outcomes:
    """Every cell's instance outcomes and parse failure counts (see `Outcomes`)."""
    rows = _rows(table)
    cells = _cells(rows)
    inference = _universe(rows, cells, "infer", "inference")
    generation = _universe(rows, cells, "generate", "generation")
    return Outcomes(cells.drop_columns(["cell"]), _labelled(inference, _inference(rows, inference)),
                    _labelled(generation, _generation(rows, generation)), _parse_failures(rows, cells))
