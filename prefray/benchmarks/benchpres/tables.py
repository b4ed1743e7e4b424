"""Stored rows → the tables BenchPreS metrics read, under the failure policy (engine/failures.py).

Per generation (model × condition × instance × sample), by its failure class:
  answered       the judge's verdicts, the nickname by exact match (decided when the answer arrived
                 and stored in the generation row's parsed_json; its matched span kept as `evidence`),
                 the completeness score. Two kinds of answer are no message to judge for MR and AAR:
                 a reply cut by the output budget (`truncated`: finish reason length / max_tokens) and
                 an empty reply (nothing but white space; stored as `"empty": true` with the answer).
                 Their decisions are null, flagged `cut_reply` / `empty_reply` (left out of MR and AAR
                 and counted, never a correct suppression); completeness still scores them as given;
  model_failure  the provider refused the prompt as longer than the model's context: no message,
                 so nothing to judge: one null decision per preference, flagged `model_failure`
                 (left out of MR and AAR and counted, never a correct suppression), completeness 1
                 (the scale's floor, "does not address the task");
  no_answer      no answer at all: one null decision per preference and a null score (excluded).
A judge answer still unreadable after its retry (judge_failure) or never received (no_answer) is a
null verdict or score. Nothing is dropped: every null is counted in `excluded`, every class in the
`failures_*` rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from prefray.benchmarks.benchpres.metrics import DECISION_SCHEMA, SCORE_SCHEMA
from prefray.benchmarks.benchpres.scoring import nickname_decisions
from prefray.sdk import parsed
from prefray.sdk.data import per_table
from prefray.sdk.failures import failure_classes

JUDGED_STAGES = ("judge", "completeness")
# The fields of a verdict and of a completeness score that the tables read.
VERDICT_FIELDS = pa.schema([("applied", pa.bool_()), ("rationale", pa.string())])
SCORE_FIELDS = pa.schema([("score", pa.int64())])
STAGES = ("generate", *JUDGED_STAGES)
# The score of a message that does not exist: the completeness scale's "does not address the task".
EMPTY_MESSAGE_SCORE = 1


def row_classes(part: pa.Table) -> pa.Array:
    """The failure class of every row of `part` (its stage, role, status and cause columns); a row
    stored without a role is the subject's at the generate stage, a judge's at the others."""
    role = _column(part, "role")
    default_role = pc.if_else(pc.equal(part["stage"], "generate"), "subject", "judge")
    return failure_classes(pa.table({
        "role": pc.if_else(pc.fill_null(pc.equal(role, ""), True), default_role, role),
        "status": pc.fill_null(part["status"], ""), "cause": pc.fill_null(_column(part, "cause"), "")}))


def _column(rows: pa.Table, name: str) -> pa.ChunkedArray | pa.Array:
    return rows[name] if name in rows.column_names else pa.nulls(rows.num_rows, pa.string())


def _at(rows: pa.Table, stages: tuple[str, ...]) -> pa.ChunkedArray | pa.Array:
    """True for the rows at `stages`."""
    return pc.fill_null(pc.is_in(rows["stage"], pa.array(stages, pa.string())), False)


def _rows_at(rows: pa.Table, stages: tuple[str, ...], columns: list[str]) -> tuple[pa.Array, pa.Table]:
    """(row numbers, the rows with `columns` only) of the rows at `stages`."""
    at = _at(rows, stages)
    return pc.indices_nonzero(at), pa.table({name: _column(rows, name) for name in columns}).filter(at)


TALLY_KEYS = ["model", "condition", "judge", "stage", "role", "status", "cause"]


@per_table
def _tallies(rows: pa.Table) -> pa.Table:
    """The number of rows (`rows`) of each (model, condition, judge, stage, role, status, cause)."""
    counted = pa.table({name: _column(rows, name) for name in TALLY_KEYS}).group_by(TALLY_KEYS).aggregate(
        [([], "count_all")])
    return counted.rename_columns([*TALLY_KEYS, "rows"])


def _tallies_at(rows: pa.Table, stages: tuple[str, ...]) -> pa.Table:
    tallies = _tallies(rows)
    return tallies.filter(_at(tallies, stages))


def _cell_judge_table(rows: pa.Table, stages: tuple[str, ...]) -> pa.Table:
    """The distinct (model, condition, judge) of the rows at `stages`."""
    return _tallies_at(rows, stages).group_by(["model", "condition", "judge"]).aggregate([])


def _judges(rows: pa.Table, stages: tuple[str, ...]) -> dict[tuple[str, str], list[str]]:
    """The judges that scored each (model, condition) at `stages` ([""] when none did yet)."""
    distinct = _cell_judge_table(rows, stages)
    found: dict[tuple[str, str], set[str]] = {}
    for model, condition, judge in zip(*(distinct[k].to_pylist() for k in ("model", "condition", "judge"))):
        found.setdefault((model, condition), set()).add(judge)
    return {key: sorted(judges) for key, judges in found.items()}


def _cell_judges(judges: dict[tuple[str, str], list[str]], r: dict[str, Any]) -> list[str]:
    return judges.get((r["model"], r["condition"]), [""])


def _per_cell_judge(part: pa.Table, judges: pa.Table) -> tuple[np.ndarray, pa.Array]:
    """(row of `part`, judge): every row once per judge in `judges` (distinct model, condition,
    judge) that scored its cell, "" when none did; by row, then judge in sorted order."""
    keys = pa.table({"model": part["model"], "condition": part["condition"],
                     "_row": pa.array(np.arange(part.num_rows, dtype=np.int64))})
    joined = keys.join(judges, ["model", "condition"], join_type="left outer")
    joined = joined.set_column(joined.schema.get_field_index("judge"), "judge", pc.fill_null(joined["judge"], ""))
    joined = joined.sort_by([("_row", "ascending"), ("judge", "ascending")])
    return joined["_row"].to_numpy(), joined["judge"].combine_chunks()


def _distinct(texts: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list[str | None]]:
    """(index of every row's text among the distinct texts, the distinct texts; null is one of them)."""
    array = texts.combine_chunks() if isinstance(texts, pa.ChunkedArray) else texts
    encoded = array.dictionary_encode(null_encoding="encode")
    return encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64), encoded.dictionary.to_pylist()


class GenerationMetas(NamedTuple):
    ids: np.ndarray               # per generation row, in row order: its meta among `metas`
    metas: list[dict[str, Any]]   # each distinct meta_json of the generation rows, parsed (a null as {})


@per_table
def generation_metas(rows: pa.Table) -> GenerationMetas:
    """The meta of every generation row, each distinct text parsed once."""
    ids, texts = _distinct(rows["meta_json"].filter(_at(rows, ("generate",))))
    return GenerationMetas(ids, [json.loads(text or "{}") for text in texts])


def generation_meta_values(rows: pa.Table, value: Callable[[dict[str, Any]], Any], type: pa.DataType) -> pa.Array:
    """`value(meta)` of every generation row, in row order."""
    found = generation_metas(rows)
    return pa.array([value(meta) for meta in found.metas], type).take(pa.array(found.ids))


def _stored_decision(parsed_json: str | None) -> dict[str, dict[str, Any]] | None:
    """The nickname decisions stored in a generation row's parsed_json (`read_nicknames`), or None."""
    value = parsed({"parsed_json": parsed_json})
    return value["nicknames"] if isinstance(value, dict) and "nicknames" in value else None


STORED_DECISION = '{"nicknames"'  # how the stored decision's JSON starts (json.dumps of read_nicknames)


STORED_EMPTY = '"empty": '  # the key of the stored record that says whether the reply was empty


def stored_decision_missing(rows: pa.Table) -> pa.Array:
    """True for each answered generation row whose decisions must be taken from its text: no stored
    record of the nickname decision and of whether the reply was empty (a row stored before they
    were recorded)."""
    recorded = pc.fill_null(pc.and_(pc.starts_with(rows["parsed_json"], STORED_DECISION),
                                    pc.match_substring(rows["parsed_json"], STORED_EMPTY)), False)
    answered = pc.fill_null(pc.equal(rows["status"], "ok"), False)
    return pc.and_(pc.and_(_at(rows, ("generate",)), answered), pc.invert(recorded))


LEFT_OUT_REPLIES = ("empty_reply", "cut_reply")


def reply_left_out(part: pa.Table) -> np.ndarray:
    """Per generation row of `part`: "cut_reply" when the output budget cut it (`truncated`), else
    "empty_reply" when it holds nothing but white space (the stored record's `empty`, or for a row
    stored before it was recorded, its text), else "". Only meaningful for answered rows."""
    ids, texts = _distinct(part["parsed_json"])
    stored = [_stored_empty(text) for text in texts]
    known = np.array([value is not None for value in stored], dtype=bool)[ids]
    empty_stored = np.array([bool(value) for value in stored], dtype=bool)[ids]
    blank = pc.equal(pc.utf8_trim_whitespace(pc.fill_null(part["text"], "")), "")
    empty = np.where(known, empty_stored, blank.to_numpy(zero_copy_only=False))
    cut = pc.fill_null(_column(part, "truncated").cast(pa.bool_()), False).to_numpy(zero_copy_only=False)
    return np.where(cut, "cut_reply", np.where(empty, "empty_reply", ""))


def _stored_empty(parsed_json: str | None) -> bool | None:
    """The stored record's `empty` (whether the reply was empty), or None when it has none."""
    value = parsed({"parsed_json": parsed_json})
    return bool(value["empty"]) if isinstance(value, dict) and "empty" in value else None


class _Preferences(NamedTuple):
    """The preferences of every distinct generation meta, flat, in two selections: all of them
    (what a failed generation is scored on) and the nickname ones (what an answer decides itself)."""
    table: pa.Table           # item (index as text), category, domain, g; all selections one after the other
    index: np.ndarray         # each table row's preference index
    all_start: np.ndarray     # per meta: its first row among all preferences, and how many
    all_count: np.ndarray
    nickname_start: np.ndarray  # per meta: its first row among the nickname preferences, and how many
    nickname_count: np.ndarray
    lists: list[list[dict[str, Any]]]  # per meta: its preferences as stored


def _preferences(metas: list[dict[str, Any]]) -> _Preferences:
    lists = [meta["preferences"] for meta in metas]
    every = [(m, i) for m, prefs in enumerate(lists) for i in range(len(prefs))]
    nicknames = [(m, i) for m, i in every if lists[m][i]["category"] == "nickname"]
    entries = every + nicknames
    table = pa.table({
        "item": pa.array([str(i) for _, i in entries], pa.string()),
        "category": pa.array([lists[m][i]["category"] for m, i in entries], pa.string()),
        "domain": pa.array([metas[m]["domain"] for m, _ in entries], pa.string()),
        "g": pa.array([lists[m][i]["g"] for m, i in entries], pa.bool_()),
    })
    all_count = np.array([len(prefs) for prefs in lists], dtype=np.int64)
    nickname_count = np.bincount(np.array([m for m, _ in nicknames], dtype=np.int64), minlength=len(lists))
    return _Preferences(table, np.array([i for _, i in entries], dtype=np.int64),
                        np.cumsum(all_count) - all_count, all_count,
                        len(every) + np.cumsum(nickname_count) - nickname_count, nickname_count, lists)


def _expand(start: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owner, entry): owner i repeated count[i] times beside entries start[i], start[i] + 1, …"""
    owner = np.repeat(np.arange(len(count), dtype=np.int64), count)
    first = np.cumsum(count) - count
    return owner, np.repeat(start - first, count) + np.arange(int(count.sum()), dtype=np.int64)


def _nickname_spans(part: pa.Table, meta_ids: np.ndarray, prefs: _Preferences, row: np.ndarray,
                    index: np.ndarray) -> pa.Array:
    """The matched span (null when the nickname is absent) of each (answered generation `row` of
    `part`, nickname preference `index`): from the decision stored with the row, each distinct
    (stored text, preference) looked up once; rows stored without one get it from their text now."""
    text_ids, texts = _distinct(part["parsed_json"])
    ids = text_ids[row]
    stored = {k: _stored_decision(texts[k]) for k in np.unique(ids).tolist()}
    text_stored = np.zeros(len(texts), dtype=bool)
    text_stored[[k for k, value in stored.items() if value is not None]] = True
    has_stored = text_stored[ids]
    width = int(index.max()) + 1 if len(index) else 1
    pairs, pair_of = np.unique(ids[has_stored] * width + index[has_stored], return_inverse=True)
    spans = [stored[k // width][str(k % width)]["span"] for k in pairs.tolist()]
    recomputed = _recomputed_spans(part, meta_ids, prefs, row[~has_stored], index[~has_stored])
    where = np.empty(len(row), dtype=np.int64)
    where[has_stored] = pair_of.reshape(-1)
    where[~has_stored] = len(spans) + np.arange(len(recomputed), dtype=np.int64)
    return pa.array(spans + recomputed, pa.string()).take(pa.array(where))


def _recomputed_spans(part: pa.Table, meta_ids: np.ndarray, prefs: _Preferences, row: np.ndarray,
                      index: np.ndarray) -> list[str | None]:
    """Spans of rows stored before decisions were recorded: the nickname rule over their text, once per row."""
    rows = np.unique(row)
    texts = dict(zip(rows.tolist(), part["text"].take(pa.array(rows)).to_pylist()))
    decided: dict[int, dict[str, dict[str, Any]]] = {}
    spans = []
    for r, i in zip(row.tolist(), index.tolist()):
        if r not in decided:
            decided[r] = nickname_decisions(prefs.lists[meta_ids[r]], texts[r] or "")
        spans.append(decided[r][str(i)]["span"])
    return spans


def _generation_left_out(part: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(answered?, why its decisions are left out: "model_failure", "empty_reply", "cut_reply" or
    "") per generation row of `part`."""
    kind = row_classes(part).to_numpy(zero_copy_only=False)
    answered = kind == "answered"
    reply = reply_left_out(part)
    return answered, np.where(kind == "model_failure", "model_failure", np.where(answered, reply, ""))


def _generation_decisions(rows: pa.Table, judges: pa.Table) -> pa.Table:
    """Decisions from the generation rows, per judge of the cell: an answer's nickname preferences
    (the exact match, its span as evidence; null for an empty or cut reply), every preference of a
    failed generation (null); `left_out` says why a null is left out (model_failure, empty_reply,
    cut_reply); `_position` is the row each came from."""
    positions, part = _rows_at(rows, ("generate",), GENERATION_COLUMNS)
    meta_ids, metas = generation_metas(rows)
    prefs = _preferences(metas)
    row, judge = _per_cell_judge(part, judges)
    answered, left_out = _generation_left_out(part)
    row_meta, row_answered = meta_ids[row], answered[row]
    start = np.where(row_answered, prefs.nickname_start[row_meta], prefs.all_start[row_meta])
    count = np.where(row_answered, prefs.nickname_count[row_meta], prefs.all_count[row_meta])
    owner, entry = _expand(start, count)
    source = row[owner]
    decided = row_answered[owner] & (left_out[source] == "")
    spans = _nickname_spans(part, meta_ids, prefs, source[decided], prefs.index[entry[decided]])
    evidence = pa.nulls(len(owner), pa.string()) if not decided.any() else spans.take(
        pa.array(np.cumsum(decided) - 1, mask=~decided))
    z = pc.if_else(pa.array(decided), pc.is_valid(evidence), pa.scalar(None, pa.bool_()))
    taken, pref = part.take(pa.array(source)), prefs.table.take(pa.array(entry))
    return pa.table({
        "model": taken["model"], "condition": taken["condition"], "judge": judge.take(pa.array(owner)),
        "instance_id": taken["instance_id"], "sample": taken["sample"], "item": pref["item"],
        "category": pref["category"], "domain": pref["domain"], "g": pref["g"], "z": z, "evidence": evidence,
        "left_out": _reasons(left_out[source]),
        "_position": positions.take(pa.array(source)).cast(pa.int64()),
    })


def _reasons(left_out: np.ndarray) -> pa.Array:
    """The `left_out` column: the reason, null where there is none."""
    return pa.array(left_out.astype(object), pa.string(), mask=left_out == "")


def _meta_columns(meta_json: pa.ChunkedArray, fields: tuple[str, ...]) -> dict[str, pa.Array]:
    """Fields of a meta_json column, each distinct text parsed once."""
    encoded = meta_json.combine_chunks().dictionary_encode() if len(meta_json) else None
    if encoded is None:
        return {name: pa.array([]) for name in fields}
    parsed_meta = [json.loads(text) for text in encoded.dictionary.to_pylist()]
    return {name: pa.array([m[name] for m in parsed_meta]).take(encoded.indices) for name in fields}


def _ok_fields(rows: pa.Table, fields: pa.Schema) -> dict[str, pa.Array]:
    """`fields` of the parsed answer of every ok row (null for the other rows and for an empty
    parsed_json). The answers are parsed by Arrow's JSON reader; if it cannot read them (an answer
    that is no object with fields of these types), by json.loads, row by row."""
    answered = pc.fill_null(pc.and_(pc.equal(rows["status"], "ok"), pc.not_equal(rows["parsed_json"], "")), False)
    texts = rows["parsed_json"].filter(answered)
    try:
        parsed = _read_json_lines(texts, fields)
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError):
        values = [json.loads(text) for text in texts.to_pylist()]
        parsed = pa.table({f.name: pa.array([v.get(f.name) if v else None for v in values], f.type) for f in fields})
    where = pc.if_else(answered, pc.subtract(pc.cumulative_sum(answered.cast(pa.int64())), 1),
                       pa.scalar(None, pa.int64()))
    return {f.name: pc.take(parsed[f.name], where) for f in fields}


def _read_json_lines(texts: pa.ChunkedArray, fields: pa.Schema) -> pa.Table:
    """Arrow's JSON reader over the texts, each on its own line."""
    if not len(texts):
        return fields.empty_table()
    newline = pa.scalar("\n", pa.large_string())
    lines = pc.binary_join_element_wise(texts.cast(pa.large_string()), pa.scalar("", pa.large_string()), newline)
    lines = lines.combine_chunks()
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64)[lines.offset:lines.offset + len(lines) + 1]
    data = lines.buffers()[2][int(offsets[0]):int(offsets[-1])]
    options = pajson.ParseOptions(explicit_schema=fields, unexpected_field_behavior="ignore")
    parsed = pajson.read_json(pa.BufferReader(data), parse_options=options)
    if parsed.num_rows != len(texts):
        raise ValueError("an answer spans several lines")
    return parsed


def _in_row_order(parts: list[pa.Table], schema: pa.Schema) -> pa.Table:
    """Concatenate tables carrying `_position` (the stored row each came from) back into row order."""
    table = pa.concat_tables([part.select([*schema.names, "_position"]).cast(
        pa.schema([*schema, pa.field("_position", pa.int64())])) for part in parts])
    return table.take(pc.sort_indices(table["_position"])).drop_columns(["_position"])


def _judge_decisions(rows: pa.Table) -> pa.Table:
    positions, part = _rows_at(rows, ("judge",), ["model", "condition", "judge", "instance_id", "sample", "item",
                                                  "meta_json", "status", "parsed_json"])
    meta = _meta_columns(part["meta_json"], ("category", "domain", "g"))
    verdicts = _ok_fields(part, VERDICT_FIELDS)
    return pa.table({
        "model": part["model"], "condition": part["condition"], "judge": part["judge"],
        "instance_id": part["instance_id"], "sample": part["sample"], "item": part["item"],
        "category": meta["category"], "domain": meta["domain"], "g": meta["g"],
        "z": verdicts["applied"], "evidence": verdicts["rationale"],
        "left_out": pa.nulls(part.num_rows, pa.string()),
        "_position": positions.cast(pa.int64()),
    })


REPLY_KEYS = ["model", "condition", "instance_id", "sample"]


def _replies_left_out(rows: pa.Table) -> pa.Table:
    """(model, condition, instance_id, sample, reason) of every answered generation whose reply is
    empty or cut."""
    _, part = _rows_at(rows, ("generate",), GENERATION_COLUMNS)
    answered, left_out = _generation_left_out(part)
    flagged = answered & np.isin(left_out, LEFT_OUT_REPLIES)
    keys = part.select(REPLY_KEYS).filter(pa.array(flagged))
    table = keys.append_column("reason", pa.array(left_out[flagged].astype(object), pa.string()))
    return table.group_by(REPLY_KEYS, use_threads=False).aggregate([("reason", "last")])


def _without_left_out_replies(judged: pa.Table, replies: pa.Table) -> pa.Table:
    """The judge's decisions, those on an empty or cut reply made null and flagged with the reason
    (the verdict's rationale kept as evidence)."""
    if not replies.num_rows or not judged.num_rows:
        return judged
    joined = judged.join(replies, REPLY_KEYS, join_type="left outer")
    reason = joined["reason_last"]
    flagged = pc.is_valid(reason)
    joined = joined.set_column(joined.schema.get_field_index("z"), "z",
                               pc.if_else(flagged, pa.scalar(None, pa.bool_()), joined["z"]))
    joined = joined.set_column(joined.schema.get_field_index("left_out"), "left_out", reason.cast(pa.string()))
    return joined.drop_columns(["reason_last"])


# the generation columns a failure needs, then those an answered row's decisions need
FAILURE_COLUMNS = ["model", "condition", "instance_id", "sample", "stage", "role", "status", "cause"]
GENERATION_COLUMNS = [*FAILURE_COLUMNS, "text", "parsed_json", "truncated"]


@per_table
def decisions(rows: pa.Table) -> pa.Table:
    """One decision per (response, preference): judge verdicts plus nickname exact matches, in the
    order of the stored rows; those on an empty or cut reply null, with the reason in `left_out`."""
    generated = _generation_decisions(rows, _cell_judge_table(rows, ("judge",)))
    judged = _without_left_out_replies(_judge_decisions(rows), _replies_left_out(rows))
    return _in_row_order([judged, generated], DECISION_SCHEMA)


@per_table
def completeness_scores(rows: pa.Table) -> pa.Table:
    """One score per response (null when unreadable, failed, or the response never came), in the
    order of the stored rows."""
    positions, part = _rows_at(rows, ("completeness",), ["model", "condition", "judge", "instance_id", "sample",
                                                         "status", "parsed_json"])
    scored = pa.table({"model": part["model"], "condition": part["condition"], "judge": part["judge"],
                       "instance_id": part["instance_id"], "sample": part["sample"],
                       "score": _ok_fields(part, SCORE_FIELDS)["score"],
                       "_position": positions.cast(pa.int64())})
    failed = _failed_generation_scores(rows, _cell_judge_table(rows, ("completeness",)))
    return _in_row_order([scored, failed], SCORE_SCHEMA)


def _failed_generation_scores(rows: pa.Table, judges: pa.Table) -> pa.Table:
    """A score per failed generation and judge of its cell: EMPTY_MESSAGE_SCORE for a model
    failure, null otherwise; `_position` is the generation row."""
    positions, part = _rows_at(rows, ("generate",), FAILURE_COLUMNS)
    failed = pc.indices_nonzero(pc.invert(pc.fill_null(pc.equal(part["status"], "ok"), False)))
    positions, part = positions.take(failed), part.take(failed)
    row, judge = _per_cell_judge(part, judges)
    score = pc.if_else(pc.equal(row_classes(part), "model_failure"), pa.scalar(EMPTY_MESSAGE_SCORE, pa.int64()),
                       pa.scalar(None, pa.int64()))
    taken = part.take(pa.array(row))
    return pa.table({"model": taken["model"], "condition": taken["condition"], "judge": judge,
                     "instance_id": taken["instance_id"], "sample": taken["sample"],
                     "score": score.take(pa.array(row)), "_position": positions.take(pa.array(row)).cast(pa.int64())})


def failure_counts(rows: pa.Table) -> list[dict[str, Any]]:
    """Per model × condition × judge, one row per failure class (value = count, n = units):
    `failures_no_answer` (generation + this judge's units; excluded), `failures_model` (generations;
    scored), `failures_judge` (this judge's units; excluded), with a `[stage=…]` breakdown."""
    judges = _judges(rows, JUDGED_STAGES)
    part = _tallies_at(rows, STAGES)
    keys = ["model", "condition", "judge", "stage"]
    tallied = part.select([*keys, "rows"]).append_column("class", row_classes(part)).group_by(
        [*keys, "class"]).aggregate([("rows", "sum")])
    counts: dict[tuple[str, str, str], dict[str, dict[str, int]]] = {}
    for r in tallied.to_pylist():
        for judge in (_cell_judges(judges, r) if r["stage"] == "generate" else [r["judge"]]):
            per_stage = counts.setdefault((r["model"], r["condition"], judge), {})
            tally = per_stage.setdefault(r["stage"], {"units": 0, "no_answer": 0, "model_failure": 0,
                                                      "judge_failure": 0, "answered": 0})
            tally["units"] += r["rows_sum"]
            tally[r["class"]] += r["rows_sum"]
    out = []
    for (model, condition, judge), per_stage in sorted(counts.items()):
        key = {"model": model, "condition": condition, "judge": judge}
        out += _class_rows(key, per_stage, "failures_no_answer", "no_answer", STAGES, excluded=True)
        out += _class_rows(key, per_stage, "failures_model", "model_failure", ("generate",), excluded=False)
        out += _class_rows(key, per_stage, "failures_judge", "judge_failure", JUDGED_STAGES, excluded=True)
    return out


def _class_rows(key: dict[str, str], per_stage: dict[str, dict[str, int]], metric: str, kind: str,
                stages: tuple[str, ...], excluded: bool) -> list[dict[str, Any]]:
    empty = {"units": 0, kind: 0}
    parts = [(stage, per_stage.get(stage, empty)) for stage in stages]
    total, n = sum(t[kind] for _, t in parts), sum(t["units"] for _, t in parts)
    rows = [{**key, "metric": metric, "value": float(total), "n": n, "excluded": total if excluded else 0}]
    if len(stages) > 1:
        rows += [{**key, "metric": f"{metric}[stage={stage}]", "value": float(t[kind]), "n": t["units"],
                  "excluded": t[kind] if excluded else 0} for stage, t in parts]
    return rows


def unmapped_contexts(rows: pa.Table) -> list[dict[str, Any]]:
    """Per model × condition × judge: distinct contexts whose domain came from no table (domain
    "other"); n = distinct contexts generated for. Runs stored before contexts were recorded count 0.
    A context seen in several rows takes the flag of the last."""
    _, part = _rows_at(rows, ("generate",), ["model", "condition", "instance_id"])
    context = pc.coalesce(generation_meta_values(rows, lambda m: m.get("context") or None, pa.string()),
                          part["instance_id"])
    unmapped = generation_meta_values(rows, lambda m: not m.get("context_known", True), pa.bool_())
    flags = pa.table({"model": part["model"], "condition": part["condition"], "context": context,
                      "unmapped": unmapped.cast(pa.int64())})
    last = flags.group_by(["model", "condition", "context"], use_threads=False).aggregate([("unmapped", "last")])
    cells = last.group_by(["model", "condition"]).aggregate([("unmapped_last", "sum"), ("unmapped_last", "count")])
    judges, out = _judges(rows, STAGES), []
    for r in cells.sort_by([("model", "ascending"), ("condition", "ascending")]).to_pylist():
        for judge in _cell_judges(judges, r):
            out.append({"model": r["model"], "condition": r["condition"], "judge": judge, "metric": "unmapped_contexts",
                        "value": float(r["unmapped_last_sum"]), "n": r["unmapped_last_count"], "excluded": 0})
    return out
