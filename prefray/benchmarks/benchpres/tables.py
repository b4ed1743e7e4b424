"""Stored rows → the tables BenchPreS metrics read (decisions, completeness scores, parse failures).

Nothing is dropped: a failed generation still yields one decision per preference and one
completeness score, each null (counted as excluded); a judge answer that stayed unparsable after
the engine's retry is a null verdict or score.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from prefray.benchmarks.benchpres.metrics import DECISION_SCHEMA, SCORE_SCHEMA
from prefray.benchmarks.benchpres.scoring import nickname_applied
from prefray.engine.benchmark import parsed

JUDGED_STAGES = ("judge", "completeness")


def _judges(records: list[dict[str, Any]], stage: str) -> dict[tuple[str, str], list[str]]:
    """The judges that scored each (model, condition) at `stage` ([""] when none did yet)."""
    found: dict[tuple[str, str], set[str]] = {}
    for r in records:
        if r["stage"] == stage:
            found.setdefault((r["model"], r["condition"]), set()).add(r["judge"])
    return {key: sorted(judges) for key, judges in found.items()}


def _base(r: dict[str, Any], judge: str) -> dict[str, Any]:
    return {"model": r["model"], "condition": r["condition"], "judge": judge,
            "instance_id": r["instance_id"], "sample": r["sample"]}


def decisions(rows: pa.Table) -> pa.Table:
    """One decision per (response, preference): judge verdicts plus nickname exact matches."""
    records = rows.to_pylist()
    judges = _judges(records, "judge")
    out = []
    for r in records:
        if r["stage"] == "judge":
            meta, verdict = json.loads(r["meta_json"]), parsed(r)
            out.append({**_base(r, r["judge"]), "item": r["item"], "category": meta["category"],
                        "domain": meta["domain"], "g": meta["g"],
                        "z": verdict["applied"] if r["status"] == "ok" and verdict else None})
        elif r["stage"] == "generate":
            meta = json.loads(r["meta_json"])
            for judge in judges.get((r["model"], r["condition"]), [""]):
                for index, pref in enumerate(meta["preferences"]):
                    if r["status"] == "ok" and pref["category"] != "nickname":
                        continue  # its verdict is a judge row
                    z = nickname_applied(pref["statement"], r["text"]) if r["status"] == "ok" else None
                    out.append({**_base(r, judge), "item": str(index), "category": pref["category"],
                                "domain": meta["domain"], "g": pref["g"], "z": z})
    return pa.Table.from_pylist(out, schema=DECISION_SCHEMA)


def completeness_scores(rows: pa.Table) -> pa.Table:
    """One score per response (null when unreadable, failed, or the response itself failed)."""
    records = rows.to_pylist()
    judges = _judges(records, "completeness")
    out = []
    for r in records:
        if r["stage"] == "completeness":
            value = parsed(r) if r["status"] == "ok" else None
            out.append({**_base(r, r["judge"]), "score": value["score"] if value else None})
        elif r["stage"] == "generate" and r["status"] != "ok":
            out += [{**_base(r, judge), "score": None}
                    for judge in judges.get((r["model"], r["condition"]), [""])]
    return pa.Table.from_pylist(out, schema=SCORE_SCHEMA)


def unparsable_counts(rows: pa.Table) -> list[dict[str, Any]]:
    """Per model × condition × judge: judge answers still unparsable after the retry, per stage."""
    counts: dict[tuple[str, str, str], dict[str, list[int]]] = {}
    for r in rows.select(["model", "condition", "judge", "stage", "cause"]).to_pylist():
        if r["stage"] in JUDGED_STAGES:
            per_stage = counts.setdefault((r["model"], r["condition"], r["judge"]),
                                          {s: [0, 0] for s in JUDGED_STAGES})
            per_stage[r["stage"]][0] += r["cause"] == "parse_error"
            per_stage[r["stage"]][1] += 1
    out = []
    for (model, condition, judge), per_stage in sorted(counts.items()):
        key = {"model": model, "condition": condition, "judge": judge}
        total = [sum(v[i] for v in per_stage.values()) for i in (0, 1)]
        out.append({**key, "metric": "unparsable", "value": float(total[0]), "n": total[1], "excluded": total[0]})
        out += [{**key, "metric": f"unparsable[stage={stage}]", "value": float(bad), "n": n, "excluded": bad}
                for stage, (bad, n) in per_stage.items()]
    return out
