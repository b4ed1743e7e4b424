"""Which tier a model answers in, what a call costs there, and the batch settings of a run.

A model config says `tier: interactive | batch` and `batch_discount` (the share of the price saved
at the batch tier; null = its endpoint has no batch API). `run.tier` sets the tier of every model
and role of a sweep at once. Batch prices are the interactive prices × (1 − batch_discount), the
prompt cache's prices included.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from prefray.engine.calls.pricing import cache_read_price, cache_saving, cache_write_price, call_cost
from prefray.engine.config.schema import BatchConfig, RunConfig
from prefray.engine.types import ModelSpec

TIERS = ("interactive", "batch")
# What a batch API promises: every request answered within this window (OpenAI and Anthropic: 24 h).
COMPLETION_WINDOW_H = 24.0


class TierError(ValueError):
    """A tier setting that cannot be used; the message names the model and the setting."""


@dataclass(frozen=True)
class BatchSettings(BatchConfig):
    """The `run.batch` config group (its keys and defaults: engine/config/schema.py BatchConfig)."""

    @classmethod
    def from_config(cls, run: dict[str, Any] | RunConfig) -> BatchSettings:
        if isinstance(run, RunConfig):   # typed, hence checked: its batch section as it is
            return cls(**asdict(run.batch))
        given = dict(run.get("batch") or {})
        # `prefray.rerun RUN_DIR run.batch.poll_s=...` sets dotted keys on the recorded run config
        given.update({k.removeprefix("batch."): v for k, v in run.items() if k.startswith("batch.")})
        unknown = sorted(set(given) - set(cls.__dataclass_fields__))
        if unknown:
            raise TierError(f"run.batch: unknown setting(s) {unknown}")
        settings = cls(**{k: type(getattr(cls, k))(v) for k, v in given.items() if v is not None})
        if settings.max_requests < 1 or settings.max_age_s < 0 or settings.poll_s <= 0:
            raise TierError("run.batch: max_requests must be >= 1, max_age_s >= 0 and poll_s > 0")
        return settings


def batch_priced(spec: ModelSpec) -> ModelSpec:
    """The spec with the batch tier's prices (what a batch answer is billed at)."""
    keep = 1.0 - float(spec.batch_discount or 0.0)
    return replace(spec, price_input_per_mtok=spec.price_input_per_mtok * keep,
                   price_output_per_mtok=spec.price_output_per_mtok * keep,
                   price_cache_read_per_mtok=cache_read_price(spec) * keep,
                   price_cache_write_per_mtok=cache_write_price(spec) * keep)


def tier_cost(spec: ModelSpec, input_tokens: int, output_tokens: int, tier: str | None = None,
              cache_read_tokens: int = 0, cache_write_tokens: int = 0) -> float:
    """Cost of one call in `tier` (default: the spec's own tier); the prompt cache's prices and the
    batch discount apply together (Anthropic: "pricing multipliers stack")."""
    priced = batch_priced(spec) if (tier or spec.tier) == "batch" else spec
    return call_cost(priced, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens)


def tier_saving(spec: ModelSpec, cache_read_tokens: int, cache_write_tokens: int, tier: str | None = None) -> float:
    """What the prompt cache saved on one call in `tier`."""
    priced = batch_priced(spec) if (tier or spec.tier) == "batch" else spec
    return cache_saving(priced, cache_read_tokens, cache_write_tokens)


def check_tier(spec: ModelSpec, where: str) -> None:
    if spec.tier not in TIERS:
        raise TierError(f"{where}: tier '{spec.tier}' is not one of {list(TIERS)}")
    if spec.tier != "batch":
        return
    if spec.batch_discount is None:
        raise TierError(f"{where}: tier batch needs an endpoint with a batch API (batch_discount is null "
                        f"for model '{spec.name}')")
    if not 0.0 <= float(spec.batch_discount) < 1.0:
        raise TierError(f"{where}: batch_discount must be in [0, 1), got {spec.batch_discount}")
    if spec.serve == "embedded":
        raise TierError(f"{where}: a locally served model has no batch API; use tier interactive")


def with_run_tier(spec: ModelSpec, run: dict[str, Any], where: str) -> ModelSpec:
    """The spec under the sweep-wide `run.tier` (if set), checked."""
    tier = run.get("tier")
    if tier is not None and tier not in TIERS:
        raise TierError(f"run.tier: '{tier}' is not one of {list(TIERS)} (or null)")
    if tier is not None and tier != spec.tier:
        spec = replace(spec, tier=tier)
    check_tier(spec, where)
    return spec


def apply_run_tier(job: Any, run: dict[str, Any]) -> Any:
    """The job with `run.tier` applied to its evaluated model and every role (each checked)."""
    BatchSettings.from_config(run)
    model = with_run_tier(job.model, run, f"model={job.model.name}")
    roles = {role: with_run_tier(spec, run, f"{role}={spec.name}") for role, spec in job.roles.items()}
    return replace(job, model=model, roles=roles)
