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

import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from prefray.benchmarks.benchpres.metrics import DECISION_SCHEMA, SCORE_SCHEMA
from prefray.benchmarks.benchpres.scoring import nickname_decisions
from prefray.engine.benchmark import parsed
from prefray.engine.failures import failure_class

JUDGED_STAGES = ("judge", "completeness")
STAGES = ("generate", *JUDGED_STAGES)
# The score of a message that does not exist: the completeness scale's "does not address the task".
EMPTY_MESSAGE_SCORE = 1


def row_class(r: dict[str, Any]) -> str:
    role = r.get("role") or ("subject" if r["stage"] == "generate" else "judge")
    return failure_class(role, r["status"], r.get("cause") or "")


def _judges(records: list[dict[str, Any]], stages: tuple[str, ...]) -> dict[tuple[str, str], list[str]]:
    """The judges that scored each (model, condition) at `stages` ([""] when none did yet)."""
    found: dict[tuple[str, str], set[str]] = {}
    for r in records:
        if r["stage"] in stages:
            found.setdefault((r["model"], r["condition"]), set()).add(r["judge"])
    return {key: sorted(judges) for key, judges in found.items()}


def _cell_judges(judges: dict[tuple[str, str], list[str]], r: dict[str, Any]) -> list[str]:
    return judges.get((r["model"], r["condition"]), [""])


def _base(r: dict[str, Any], judge: str) -> dict[str, Any]:
    return {"model": r["model"], "condition": r["condition"], "judge": judge,
            "instance_id": r["instance_id"], "sample": r["sample"]}


def stored_nicknames(r: dict[str, Any], preferences: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The nickname decisions stored with an answered generation row (`read_nicknames`); rows
    stored before decisions were recorded get them from the same rule now."""
    value = parsed(r)
    if isinstance(value, dict) and "nicknames" in value:
        return value["nicknames"]
    return nickname_decisions(preferences, r["text"] or "")


def _generation_decisions(r: dict[str, Any], judge: str) -> list[dict[str, Any]]:
    meta, kind, out = json.loads(r["meta_json"]), row_class(r), []
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


def decisions(rows: pa.Table) -> pa.Table:
    """One decision per (response, preference): judge verdicts plus nickname exact matches."""
    records = rows.to_pylist()
    judges = _judges(records, ("judge",))
    out = []
    for r in records:
        if r["stage"] == "judge":
            meta, verdict = json.loads(r["meta_json"]), parsed(r)
            out.append({**_base(r, r["judge"]), "item": r["item"], "category": meta["category"],
                        "domain": meta["domain"], "g": meta["g"],
                        "z": verdict["applied"] if r["status"] == "ok" and verdict else None,
                        "evidence": (verdict or {}).get("rationale") if r["status"] == "ok" else None})
        elif r["stage"] == "generate":
            for judge in _cell_judges(judges, r):
                out += _generation_decisions(r, judge)
    return pa.Table.from_pylist(out, schema=DECISION_SCHEMA)


def completeness_scores(rows: pa.Table) -> pa.Table:
    """One score per response (null when unreadable, failed, or the response never came)."""
    records = rows.to_pylist()
    judges = _judges(records, ("completeness",))
    out = []
    for r in records:
        if r["stage"] == "completeness":
            value = parsed(r) if r["status"] == "ok" else None
            out.append({**_base(r, r["judge"]), "score": value["score"] if value else None})
        elif r["stage"] == "generate" and r["status"] != "ok":
            score = EMPTY_MESSAGE_SCORE if row_class(r) == "model_failure" else None
            out += [{**_base(r, judge), "score": score} for judge in _cell_judges(judges, r)]
    return pa.Table.from_pylist(out, schema=SCORE_SCHEMA)


def failure_counts(rows: pa.Table) -> list[dict[str, Any]]:
    """Per model × condition × judge, one row per failure class (value = count, n = units):
    `failures_no_answer` (generation + this judge's units; excluded), `failures_model` (generations;
    scored), `failures_judge` (this judge's units; excluded), with a `[stage=…]` breakdown."""
    records = rows.select([c for c in ("model", "condition", "judge", "stage", "role", "status", "cause")
                           if c in rows.column_names]).to_pylist()
    judges = _judges(records, JUDGED_STAGES)
    counts: dict[tuple[str, str, str], dict[str, dict[str, int]]] = {}
    for r in records:
        if r["stage"] not in STAGES:
            continue
        for judge in (_cell_judges(judges, r) if r["stage"] == "generate" else [r["judge"]]):
            per_stage = counts.setdefault((r["model"], r["condition"], judge), {})
            tally = per_stage.setdefault(r["stage"], {"units": 0, "no_answer": 0, "model_failure": 0,
                                                      "judge_failure": 0, "answered": 0})
            tally["units"] += 1
            tally[row_class(r)] += 1
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
    records = rows.filter(pc.equal(rows["stage"], "generate")).to_pylist()
    judges = _judges(rows.select(["model", "condition", "judge", "stage"]).to_pylist(), STAGES)
    seen: dict[tuple[str, str], dict[str, bool]] = {}
    for r in records:
        meta = json.loads(r["meta_json"] or "{}")
        context = meta.get("context") or r["instance_id"]
        seen.setdefault((r["model"], r["condition"]), {})[context] = not meta.get("context_known", True)
    out = []
    for (model, condition), contexts in sorted(seen.items()):
        for judge in judges.get((model, condition), [""]):
            out.append({"model": model, "condition": condition, "judge": judge, "metric": "unmapped_contexts",
                        "value": float(sum(contexts.values())), "n": len(contexts), "excluded": 0})
    return out
