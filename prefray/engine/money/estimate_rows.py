"""The plan's rows: one per job, stage, judge and kind (sent or cached), summed over its units.

The counting plan (flow/counting.py) makes them directly; the simulation's rows, one per unit
(flow/dryrun.py), are summed into them (money/estimate.py: plan_rows). The estimate and the tier
view read only these.
"""

from __future__ import annotations

import pyarrow as pa

PLAN_KEYS = ["benchmark", "model", "condition", "stage", "role", "judge", "provider", "model_id", "cached"]
PLAN_SCHEMA = pa.schema([
    ("benchmark", pa.string()), ("model", pa.string()), ("condition", pa.string()), ("stage", pa.string()),
    ("role", pa.string()), ("judge", pa.string()), ("provider", pa.string()), ("model_id", pa.string()),
    ("cached", pa.bool_()),
    ("calls", pa.int64()),           # units (a unit asked twice because its answer did not parse is one call)
    ("input_tokens", pa.int64()),
    ("output_tokens", pa.int64()),
    ("output_budget", pa.int64()),   # the largest max output tokens sent per call
    ("cost_usd", pa.float64()),
    ("max_cost_usd", pa.float64()),  # at the full output budget
    ("sampled", pa.int64()),         # units whose rendered prompts the input estimate was measured on
])
