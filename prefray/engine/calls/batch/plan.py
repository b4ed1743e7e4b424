"""The plan's view of tiers: what each model's calls cost in both tiers, and when they are answered.

Interactive: the lower bound the model's rate limits set (the estimate's min_minutes). Batch: the
provider's completion window (24 h at most; often far less), independent of rate limits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prefray.engine.calls.batch.tier import COMPLETION_WINDOW_H, tier_cost
from prefray.engine.calls.limits import min_minutes


@dataclass
class TierLine:
    model: str
    tier: str
    calls: int
    interactive_usd: float
    batch_usd: float | None      # None: the model's endpoint has no batch API
    expected_latency: str


def tier_lines(rows: Any, jobs: Sequence[Any]) -> list[TierLine]:
    """One line per model (provider and model id) from the plan's rows (money/estimate_rows.py)."""
    specs = {(s.provider, s.model_id): s for j in jobs for s in (j.model, *j.roles.values())}
    totals: dict[tuple[str, str], list[int]] = {}
    columns = [c for c in ("provider", "model_id", "cached", "calls", "input_tokens", "output_tokens",
                           "cache_read_tokens", "cache_write_tokens") if c in rows.column_names]
    for row in rows.select(columns).to_pylist():
        if not row["cached"]:
            total = totals.setdefault((row["provider"], row["model_id"]), [0, 0, 0, 0, 0])
            total[0] += row.get("calls", 1)   # a row per call, or the plan's rows (calls summed)
            total[1] += row["input_tokens"]
            total[2] += row["output_tokens"]
            total[3] += row.get("cache_read_tokens") or 0   # the prompt cache's (expected) reads and writes
            total[4] += row.get("cache_write_tokens") or 0
    out = []
    for ident, (calls, tokens_in, tokens_out, reads, writes) in sorted(totals.items()):
        spec = specs[ident]
        latency = (f"<= {COMPLETION_WINDOW_H:.0f} h (batch window)" if spec.tier == "batch"
                   else f">= {min_minutes(spec, calls, tokens_in):.1f} min (rate limits)")
        batch = None if spec.batch_discount is None else tier_cost(spec, tokens_in, tokens_out, "batch", reads, writes)
        out.append(TierLine(f"{spec.name} ({spec.model_id})", spec.tier, calls,
                            tier_cost(spec, tokens_in, tokens_out, "interactive", reads, writes), batch, latency))
    return out
