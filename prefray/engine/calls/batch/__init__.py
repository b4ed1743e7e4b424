"""Provider batch APIs as a run tier: half price for calls that can wait (see dispatcher.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prefray.engine.calls.batch.tier import BatchSettings, TierError, apply_run_tier, batch_priced, tier_cost

if TYPE_CHECKING:
    from prefray.engine.rundir.layout import RunDir


def with_batch_tier(inner: Any, run_dir: RunDir, run: Any) -> Any:
    """Wrap a dispatcher so models in tier batch answer through their provider's batch API (`run`: the
    typed RunConfig, or a run config dict)."""
    from prefray.engine.calls.batch.dispatcher import BatchTier

    return BatchTier(inner, run_dir, BatchSettings.from_config(run))


__all__ = ["BatchSettings", "TierError", "apply_run_tier", "batch_priced", "tier_cost", "with_batch_tier"]
