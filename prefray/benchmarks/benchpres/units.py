"""BenchPreS per-unit scores for confidence intervals: the profile (user) is the independent unit.

Every decision of a cell (one answer × one preference) is a unit of MR (gold "do not apply") or of
AAR (gold "apply"), with value 1 when the preference was applied; every completeness score is a
unit of `completeness`. The mean over a cell's units is the metric (MR and AAR average per-sample
rates, which equal the pooled rate when every sample has the same decisions). Intervals resample
whole profiles: all contexts, samples and preferences of one user move together.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from prefray.benchmarks.benchpres.metrics import DECISION_SCHEMA, SCORE_SCHEMA
from prefray.engine.benchmark import UNIT_SCORE_SCHEMA


def profiles_by_instance(rows: pa.Table) -> dict[str, str]:
    """instance id → the profile it belongs to (from the generation rows' meta; else the instance)."""
    generated = rows.filter(pc.equal(rows["stage"], "generate")).select(["instance_id", "meta_json"])
    out = {}
    for instance, meta in zip(generated["instance_id"].to_pylist(), generated["meta_json"].to_pylist()):
        out[instance] = json.loads(meta or "{}").get("profile") or instance
    return out


def unit_score_table(decisions: pa.Table, scores: pa.Table, profiles: dict[str, str]) -> pa.Table:
    decisions = decisions.select(DECISION_SCHEMA.names)
    out: list[dict[str, Any]] = []
    for d in decisions.to_pylist():
        if d["z"] is None or d["g"] is None:
            continue  # excluded from the rate, counted there
        metric = "AAR" if d["g"] else "MR"
        out.append({"benchmark": "benchpres", "model": d["model"], "condition": d["condition"], "judge": d["judge"],
                    "metric": metric, "cluster": profiles.get(d["instance_id"], d["instance_id"]),
                    "value": float(d["z"])})
    for s in scores.select(SCORE_SCHEMA.names).to_pylist():
        if s["score"] is None:
            continue
        out.append({"benchmark": "benchpres", "model": s["model"], "condition": s["condition"], "judge": s["judge"],
                    "metric": "completeness", "cluster": profiles.get(s["instance_id"], s["instance_id"]),
                    "value": float(s["score"])})
    return pa.Table.from_pylist(out, schema=UNIT_SCORE_SCHEMA)
