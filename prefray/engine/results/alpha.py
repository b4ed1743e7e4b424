"""Krippendorff's α: agreement among any number of coders, with missing values, at a level of measurement.

Reliability data is a coders × units matrix of values, NaN where a coder gave no value. From it
(Krippendorff, "Computing Krippendorff's Alpha-Reliability", 2011):

- only units with two or more values are pairable; n is the number of their values;
- the coincidence matrix o[c, k] = Σ_u (number of ordered pairs (c, k) of values of u from different
  coders) / (m_u − 1), with m_u the number of values in unit u; n_c = Σ_k o[c, k];
- α = 1 − D_o / D_e = 1 − (n − 1) · Σ o[c, k] δ²(c, k) / Σ n_c n_k δ²(c, k), with δ² the difference
  function of the level of measurement:
  nominal: 0 if c == k else 1; interval: (c − k)²;
  ordinal: (Σ_{g between c and k} n_g − (n_c + n_k) / 2)², over the values ranked in order.

α is undefined (None) when no unit is pairable or when every pairable value is the same (D_e = 0).
`alpha_ci` adds a percentile bootstrap interval: the units are drawn with replacement (the unit is
what was sampled; the coders stay fixed), α is recomputed per draw, draws where it is undefined are
counted and left out of the percentiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

Level = Literal["nominal", "ordinal", "interval"]
LEVELS: tuple[Level, ...] = ("nominal", "ordinal", "interval")


@dataclass(frozen=True)
class Alpha:
    """α with its bootstrap interval; `units` pairable units, `values` pairable values."""

    alpha: float | None
    ci_low: float | None
    ci_high: float | None
    units: int
    values: int
    resamples: int = 0  # bootstrap draws asked for
    undefined_resamples: int = 0  # draws where α was undefined (left out of the interval)


def _value_counts(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct values in order, units × values counts) of a coders × units matrix."""
    present = ~np.isnan(data)
    values = np.unique(data[present])
    counts = np.zeros((data.shape[1], len(values)))
    coder, unit = np.nonzero(present)
    np.add.at(counts, (unit, np.searchsorted(values, data[coder, unit])), 1)
    return values, counts


def _delta(values: np.ndarray, totals: np.ndarray, level: Level) -> np.ndarray:
    """δ²(c, k) for the given distinct values; `totals` are the n_c (used by ordinal)."""
    if level == "nominal":
        return 1.0 - np.eye(len(values))
    if level == "interval":
        return np.subtract.outer(values, values) ** 2
    if level == "ordinal":
        cumulative = np.cumsum(totals)
        ranks = np.arange(len(values))
        low, high = np.minimum.outer(ranks, ranks), np.maximum.outer(ranks, ranks)
        between = cumulative[high] - cumulative[low] + totals[low]  # Σ n_g for g from c to k
        return (between - np.add.outer(totals, totals) / 2) ** 2
    raise ValueError(f"unknown level of measurement {level!r}; one of {', '.join(LEVELS)}")


def _alpha_from_counts(values: np.ndarray, counts: np.ndarray, level: Level) -> float | None:
    per_unit = counts.sum(axis=1)
    pairable = counts[per_unit >= 2]
    if len(pairable) == 0:
        return None
    weights = 1.0 / (pairable.sum(axis=1) - 1)
    coincidence = (pairable * weights[:, None]).T @ pairable - np.diag((pairable * weights[:, None]).sum(axis=0))
    totals = coincidence.sum(axis=1)
    n = totals.sum()
    delta = _delta(values, totals, level)
    expected = (np.outer(totals, totals) * delta).sum()
    if expected == 0:
        return None
    return float(1.0 - (n - 1) * (coincidence * delta).sum() / expected)


def _matrix(data) -> np.ndarray:
    matrix = np.array(data, dtype=float)
    if matrix.ndim != 2:
        raise ValueError("reliability data must be a coders × units matrix")
    return matrix


def krippendorff_alpha(data, level: Level = "nominal") -> float | None:
    """α of a coders × units matrix (NaN or None = no value); None when undefined (see module docstring)."""
    values, counts = _value_counts(_matrix(data))
    return _alpha_from_counts(values, counts, level)


def alpha_ci(data, level: Level = "nominal", resamples: int = 1000, confidence: float = 0.95,
             seed: int = 0) -> Alpha:
    """α with a percentile bootstrap CI over units (see module docstring); deterministic for a seed."""
    values, counts = _value_counts(_matrix(data))
    pairable = counts[counts.sum(axis=1) >= 2]
    point = _alpha_from_counts(values, pairable, level)
    if point is None or resamples <= 0:
        return Alpha(point, None, None, len(pairable), int(pairable.sum()))
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(resamples):
        drawn = pairable[rng.integers(0, len(pairable), len(pairable))]
        kept = drawn.sum(axis=0) > 0  # values absent from the draw drop out (ordinal ranks follow the draw)
        value = _alpha_from_counts(values[kept], drawn[:, kept], level)
        if value is not None:
            draws.append(value)
    tail = (1 - confidence) / 2 * 100
    low, high = (float(q) for q in np.percentile(draws, [tail, 100 - tail])) if draws else (None, None)
    return Alpha(point, low, high, len(pairable), int(pairable.sum()), resamples, resamples - len(draws))
