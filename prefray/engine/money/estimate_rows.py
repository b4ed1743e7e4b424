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
    ("cost_usd", pa.float64()),      # with the prompt cache's expected reads and writes at the cached prices
    ("max_cost_usd", pa.float64()),  # at the full output budget, without the prompt cache
    ("sampled", pa.int64()),         # units whose rendered prompts the input estimate was measured on
    # The prompt cache's expectation (calls/cache_order.py: PrefixGroups, calls/pricing.py:
    # expected_cache): input tokens read from and written to it (parts of input_tokens), what that
    # saves and the cost without it; the counting plan fills them, the simulation leaves them 0.
    ("cache_read_tokens", pa.int64()),
    ("cache_write_tokens", pa.int64()),
    ("cache_saved_usd", pa.float64()),
    ("uncached_cost_usd", pa.float64()),
])
