"""Stored rows → the tables BenchPreS metrics read, under the failure policy (engine/failures.py).

Per generation (model × condition × instance × sample), by its failure class:
  answered       judged as given (empty or truncated text included): the judge's verdicts, the
                 nickname by exact match (decided when the answer arrived and stored in the generation
                 row's parsed_json; its matched span kept as `evidence`), the completeness score;
  model_failure  the provider refused the prompt as longer than the model's context: scored as an
                 empty message (README, "Failure policy"): every preference z=0, completeness 1;
  no_answer      no answer at all: one null decision per preference and a null score (excluded).
A judge answer still unreadable after its retry (judge_failure) or never received (no_answer) is a
null verdict or score. Nothing is dropped: every null is counted in `excluded`, every class in the
`failures_*` rows.
"""

from __future__ import annotations

import io
import json
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from prefray.benchmarks.benchpres.metrics import DECISION_SCHEMA, SCORE_SCHEMA
from prefray.benchmarks.benchpres.scoring import nickname_decisions
from prefray.engine.benchmark import parsed
from prefray.engine.memo import per_table
from prefray.engine.failures import failure_class, failure_classes

JUDGED_STAGES = ("judge", "completeness")
# The fields of a verdict and of a completeness score that the tables read.
VERDICT_FIELDS = pa.schema([("applied", pa.bool_()), ("rationale", pa.string())])
SCORE_FIELDS = pa.schema([("score", pa.int64())])
STAGES = ("generate", *JUDGED_STAGES)
# The score of a message that does not exist: the completeness scale's "does not address the task".
EMPTY_MESSAGE_SCORE = 1


def row_class(r: dict[str, Any]) -> str:
    role = r.get("role") or ("subject" if r["stage"] == "generate" else "judge")
    return failure_class(role, r["status"], r.get("cause") or "")


def _column(rows: pa.Table, name: str) -> pa.ChunkedArray | pa.Array:
    return rows[name] if name in rows.column_names else pa.nulls(rows.num_rows, pa.string())


def _positions(rows: pa.Table, stages: tuple[str, ...]) -> pa.Array:
    """Row numbers of the rows at `stages`, in order."""
    return pc.indices_nonzero(pc.fill_null(pc.is_in(rows["stage"], pa.array(stages, pa.string())), False))


def _records(rows: pa.Table, stages: tuple[str, ...], columns: list[str]) -> tuple[pa.Array, list[dict[str, Any]]]:
    """(row numbers, rows as dicts with `columns` only) of the rows at `stages`."""
    positions = _positions(rows, stages)
    table = pa.table({name: _column(rows, name) for name in columns}).take(positions)
    return positions, table.to_pylist()


def _judges(rows: pa.Table, stages: tuple[str, ...]) -> dict[tuple[str, str], list[str]]:
    """The judges that scored each (model, condition) at `stages` ([""] when none did yet)."""
    part = rows.select(["model", "condition", "judge"]).take(_positions(rows, stages))
    found: dict[tuple[str, str], set[str]] = {}
    distinct = part.group_by(["model", "condition", "judge"]).aggregate([])
    for model, condition, judge in zip(*(distinct[k].to_pylist() for k in ("model", "condition", "judge"))):
        found.setdefault((model, condition), set()).add(judge)
    return {key: sorted(judges) for key, judges in found.items()}


def _cell_judges(judges: dict[tuple[str, str], list[str]], r: dict[str, Any]) -> list[str]:
    return judges.get((r["model"], r["condition"]), [""])


def _base(r: dict[str, Any], judge: str) -> dict[str, Any]:
    return {"model": r["model"], "condition": r["condition"], "judge": judge,
            "instance_id": r["instance_id"], "sample": r["sample"]}


def _meta_reader() -> Callable[[str | None], dict[str, Any]]:
    """json.loads of meta_json, once per distinct text (instances repeat across samples and judges)."""
    cache: dict[str | None, dict[str, Any]] = {}

    def read(text: str | None) -> dict[str, Any]:
        if text not in cache:
            cache[text] = json.loads(text or "{}")
        return cache[text]

    return read


def stored_nicknames(r: dict[str, Any], preferences: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The nickname decisions stored with an answered generation row (`read_nicknames`); rows
    stored before decisions were recorded get them from the same rule now."""
    value = parsed(r)
    if isinstance(value, dict) and "nicknames" in value:
        return value["nicknames"]
    return nickname_decisions(preferences, r["text"] or "")


STORED_DECISION = '{"nicknames"'  # how the stored decision's JSON starts (json.dumps of read_nicknames)


def stored_decision_missing(rows: pa.Table) -> pa.Array:
    """True for each generation row whose nickname decision `stored_nicknames` takes from its text:
    a nickname preference in its meta, no stored decision (a superset of the answered ones)."""
    generated = pc.equal(rows["stage"], "generate")
    nickname = pc.match_substring(rows["meta_json"], '"nickname"')
    stored = pc.starts_with(rows["parsed_json"], STORED_DECISION)
    return pc.fill_null(pc.and_(pc.and_(generated, nickname), pc.invert(pc.fill_null(stored, False))), False)


def _generation_decisions(r: dict[str, Any], judge: str, meta: dict[str, Any]) -> list[dict[str, Any]]:
    kind, out = row_class(r), []
    nicknames = stored_nicknames(r, meta["preferences"]) if kind == "answered" else {}
    for index, pref in enumerate(meta["preferences"]):
        evidence = None
        if kind == "answered":
            if pref["category"] != "nickname":
                continue  # its verdict is a judge row
            evidence = nicknames[str(index)]["span"]
            z = evidence is not None
        else:
            z = False if kind == "model_failure" else None
        out.append({**_base(r, judge), "item": str(index), "category": pref["category"],
                    "domain": meta["domain"], "g": pref["g"], "z": z, "evidence": evidence})
    return out


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
    texts = rows["parsed_json"].filter(answered).to_pylist()
    try:
        parsed = _read_json_lines(texts, fields)
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError):
        values = [json.loads(text) for text in texts]
        parsed = pa.table({f.name: pa.array([v.get(f.name) if v else None for v in values], f.type) for f in fields})
    where = pc.if_else(answered, pc.subtract(pc.cumulative_sum(answered.cast(pa.int64())), 1), pa.scalar(None, pa.int64()))
    return {f.name: pc.take(parsed[f.name], where) for f in fields}


def _read_json_lines(texts: list[str], fields: pa.Schema) -> pa.Table:
    if not texts:
        return fields.empty_table()
    options = pajson.ParseOptions(explicit_schema=fields, unexpected_field_behavior="ignore")
    parsed = pajson.read_json(io.BytesIO("\n".join(texts).encode()), parse_options=options)
    if parsed.num_rows != len(texts):
        raise ValueError("an answer spans several lines")
    return parsed


def _in_row_order(parts: list[pa.Table], schema: pa.Schema) -> pa.Table:
    """Concatenate tables carrying `_position` (the stored row each came from) back into row order."""
    table = pa.concat_tables([part.select([*schema.names, "_position"]).cast(
        pa.schema([*schema, pa.field("_position", pa.int64())])) for part in parts])
    return table.take(pc.sort_indices(table["_position"])).drop_columns(["_position"])


def _judge_decisions(rows: pa.Table) -> pa.Table:
    positions = _positions(rows, ("judge",))
    part = rows.select(["model", "condition", "judge", "instance_id", "sample", "item", "meta_json", "status",
                        "parsed_json"]).take(positions)
    meta = _meta_columns(part["meta_json"], ("category", "domain", "g"))
    verdicts = _ok_fields(part, VERDICT_FIELDS)
    return pa.table({
        "model": part["model"], "condition": part["condition"], "judge": part["judge"],
        "instance_id": part["instance_id"], "sample": part["sample"], "item": part["item"],
        "category": meta["category"], "domain": meta["domain"], "g": meta["g"],
        "z": verdicts["applied"], "evidence": verdicts["rationale"],
        "_position": positions.cast(pa.int64()),
    })


# the generation columns a failure needs, then those an answered row's decisions need
FAILURE_COLUMNS = ["model", "condition", "instance_id", "sample", "stage", "role", "status", "cause"]
GENERATION_COLUMNS = [*FAILURE_COLUMNS, "meta_json", "text", "parsed_json"]


@per_table
def decisions(rows: pa.Table) -> pa.Table:
    """One decision per (response, preference): judge verdicts plus nickname exact matches, in the
    order of the stored rows."""
    judges = _judges(rows, ("judge",))
    positions, generated = _records(rows, ("generate",), GENERATION_COLUMNS)
    read_meta, out = _meta_reader(), []
    for position, r in zip(positions.to_pylist(), generated):
        for judge in _cell_judges(judges, r):
            out += [{**d, "_position": position} for d in _generation_decisions(r, judge, read_meta(r["meta_json"]))]
    schema = pa.schema([*DECISION_SCHEMA, pa.field("_position", pa.int64())])
    return _in_row_order([_judge_decisions(rows), pa.Table.from_pylist(out, schema=schema)], DECISION_SCHEMA)


@per_table
def completeness_scores(rows: pa.Table) -> pa.Table:
    """One score per response (null when unreadable, failed, or the response never came), in the
    order of the stored rows."""
    judges = _judges(rows, ("completeness",))
    positions = _positions(rows, ("completeness",))
    part = rows.select(["model", "condition", "judge", "instance_id", "sample", "status", "parsed_json"]).take(positions)
    scored = pa.table({"model": part["model"], "condition": part["condition"], "judge": part["judge"],
                       "instance_id": part["instance_id"], "sample": part["sample"],
                       "score": _ok_fields(part, SCORE_FIELDS)["score"],
                       "_position": positions.cast(pa.int64())})
    failed_positions, failed = _records(rows, ("generate",), FAILURE_COLUMNS)
    out = []
    for position, r in zip(failed_positions.to_pylist(), failed):
        if r["status"] != "ok":
            score = EMPTY_MESSAGE_SCORE if row_class(r) == "model_failure" else None
            out += [{**_base(r, judge), "score": score, "_position": position} for judge in _cell_judges(judges, r)]
    schema = pa.schema([*SCORE_SCHEMA, pa.field("_position", pa.int64())])
    return _in_row_order([scored, pa.Table.from_pylist(out, schema=schema)], SCORE_SCHEMA)


def failure_counts(rows: pa.Table) -> list[dict[str, Any]]:
    """Per model × condition × judge, one row per failure class (value = count, n = units):
    `failures_no_answer` (generation + this judge's units; excluded), `failures_model` (generations;
    scored), `failures_judge` (this judge's units; excluded), with a `[stage=…]` breakdown."""
    judges = _judges(rows, JUDGED_STAGES)
    part = pa.table({name: _column(rows, name) for name in ("model", "condition", "judge", "stage", "role", "status",
                                                            "cause")}).take(_positions(rows, STAGES))
    role = part["role"]
    default_role = pc.if_else(pc.equal(part["stage"], "generate"), "subject", "judge")
    classes = failure_classes(pa.table({
        "role": pc.if_else(pc.fill_null(pc.equal(role, ""), True), default_role, role),
        "status": part["status"], "cause": part["cause"]}))
    keys = ["model", "condition", "judge", "stage"]
    tallied = part.select(keys).append_column("class", classes).group_by([*keys, "class"]).aggregate(
        [("class", "count")])
    counts: dict[tuple[str, str, str], dict[str, dict[str, int]]] = {}
    for r in tallied.to_pylist():
        for judge in (_cell_judges(judges, r) if r["stage"] == "generate" else [r["judge"]]):
            per_stage = counts.setdefault((r["model"], r["condition"], judge), {})
            tally = per_stage.setdefault(r["stage"], {"units": 0, "no_answer": 0, "model_failure": 0,
                                                      "judge_failure": 0, "answered": 0})
            tally["units"] += r["class_count"]
            tally[r["class"]] += r["class_count"]
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
    "other"); n = distinct contexts generated for. Runs stored before contexts were recorded count 0."""
    _, records = _records(rows, ("generate",), ["model", "condition", "instance_id", "meta_json"])
    judges = _judges(rows, STAGES)
    read_meta, seen = _meta_reader(), {}
    for r in records:
        meta = read_meta(r["meta_json"])
        context = meta.get("context") or r["instance_id"]
        seen.setdefault((r["model"], r["condition"]), {})[context] = not meta.get("context_known", True)
    out = []
    for (model, condition), contexts in sorted(seen.items()):
        for judge in judges.get((model, condition), [""]):
            out.append({"model": model, "condition": condition, "judge": judge, "metric": "unmapped_contexts",
                        "value": float(sum(contexts.values())), "n": len(contexts), "excluded": 0})
    return out
