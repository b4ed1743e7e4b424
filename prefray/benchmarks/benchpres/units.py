"""BenchPreS per-unit scores for confidence intervals: the profile (user) is the independent unit.

Every decision of a cell (one answer × one preference) is a unit of MR (gold "do not apply") or of
AAR (gold "apply"), with value 1 when the preference was applied; every completeness score is a
unit of `completeness`. The mean over a cell's units is the metric (MR and AAR average per-sample
rates, which equal the pooled rate when every sample has the same decisions). Intervals resample
whole profiles: all contexts, samples and preferences of one user move together.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prefray.benchmarks.benchpres.tables import generation_meta_values
from prefray.sdk import UNIT_SCORE_SCHEMA


def profiles_by_instance(rows: pa.Table) -> dict[str, str]:
    """instance id → the profile it belongs to (from the generation rows' meta, the last row of the
    instance deciding; else the instance), in the order the instances first appear."""
    instance = rows["instance_id"].filter(pc.fill_null(pc.equal(rows["stage"], "generate"), False))
    profile = generation_meta_values(rows, lambda meta: meta.get("profile") or None, pa.string())
    named = pa.table({"instance_id": instance, "profile": pc.coalesce(profile, instance),
                      "row": pa.array(np.arange(len(instance), dtype=np.int64))})
    last = named.group_by("instance_id", use_threads=False).aggregate(
        [("profile", "last", pc.ScalarAggregateOptions(skip_nulls=False)), ("row", "min")]).sort_by("row_min")
    return dict(zip(last["instance_id"].to_pylist(), last["profile_last"].to_pylist()))


def _units(table: pa.Table, metric: pa.Array | str, value: pa.Array, profiles: dict[str, str]) -> pa.Table:
    """Unit-score rows of `table` (decisions or scores), clustered by the profile of their instance."""
    instances = pa.array(list(profiles), pa.string())
    found = pc.index_in(table["instance_id"], value_set=instances)
    cluster = pc.coalesce(pc.take(pa.array(list(profiles.values()), pa.string()), found), table["instance_id"])
    if isinstance(metric, str):
        metric = pa.repeat(pa.scalar(metric, pa.string()), table.num_rows)
    return pa.table({"benchmark": pa.repeat(pa.scalar("benchpres", pa.string()), table.num_rows),
                     "model": table["model"],
                     "condition": table["condition"], "judge": table["judge"], "metric": metric,
                     "cluster": cluster, "value": value}).cast(UNIT_SCORE_SCHEMA)


def unit_score_table(decisions: pa.Table, scores: pa.Table, profiles: dict[str, str]) -> pa.Table:
    """Every decision with a verdict (MR for gold "do not apply", AAR for "apply"; value 1 when
    applied), then every completeness score, in their tables' order."""
    decided = decisions.filter(pc.and_(pc.is_valid(decisions["z"]), pc.is_valid(decisions["g"])))
    scored = scores.filter(pc.is_valid(scores["score"]))
    return pa.concat_tables([
        _units(decided, pc.if_else(decided["g"], "AAR", "MR"), decided["z"].cast(pa.float64()), profiles),
        _units(scored, "completeness", scored["score"].cast(pa.float64()), profiles),
    ])
