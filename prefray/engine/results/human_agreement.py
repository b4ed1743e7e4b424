"""A judge against people: α with the human majority and among the humans, confusion and bias per label.

Input: per labelled item, each annotator's value (None: no label) and the judge's value (None: no
usable verdict), at one level of measurement.

- The human majority of an item: for nominal and ordinal labels the label most annotators gave, when
  exactly one label has the most votes (2 of 3, 2 of 4 against 1 + 1); a tie (1 + 1 + 1, 2 + 2) is no
  majority. For interval labels, the mean of the labels given. An item with no majority is left out
  of every judge comparison and counted (`no_majority`), as the CUPID paper removed them.
- `humans`: α among the annotators over every item (an annotator who skipped an item is a missing
  value; an item with fewer than two labels is not pairable and counted out by α itself).
- `judge_vs_majority`: α between the judge and the majority over the items with a majority; an item
  the judge gave no verdict for is counted in `no_verdict` (α cannot pair it).
- `confusion` (nominal and ordinal): items per (majority label, judge label) over the paired items.
- per label: `human_n` items with that majority, `judge_n` items where the judge gave it, `agree`
  items where both gave it; `bias` = (judge_n − human_n) / n, the share of paired items the judge
  moves into (positive) or out of (negative) that label; `recall` = agree / human_n.
- `mean_difference` (ordinal, interval): mean of judge − majority over the paired items (a judge
  rating higher than people on average is positive).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from prefray.engine.results.alpha import Alpha, Level, alpha_ci


@dataclass(frozen=True)
class Rated:
    item: str
    humans: Sequence[float | None]   # one value per annotator, in the annotators' order
    judge: float | None


@dataclass(frozen=True)
class LabelBias:
    label: float
    human_n: int
    judge_n: int
    agree: int
    bias: float | None
    recall: float | None


@dataclass(frozen=True)
class HumanCheck:
    level: Level
    items: int
    no_majority: int
    no_verdict: int
    paired: int
    humans: Alpha
    judge_vs_majority: Alpha
    mean_difference: float | None
    confusion: dict[tuple[float, float], int] = field(default_factory=dict)
    labels: list[LabelBias] = field(default_factory=list)


def majority(values: Sequence[float | None], level: Level) -> float | None:
    """The human majority of one item (see the module docstring); None when there is none."""
    given = [v for v in values if v is not None]
    if not given:
        return None
    if level == "interval":
        return float(np.mean(given))
    counts = Counter(given).most_common()
    if len(counts) > 1 and counts[0][1] == counts[1][1]:
        return None
    return counts[0][0]


def _matrix(rows: Sequence[Sequence[float | None]]) -> np.ndarray:
    return np.array([[np.nan if v is None else v for v in row] for row in rows], dtype=float)


def check_judge(rated: Sequence[Rated], level: Level, resamples: int = 1000, seed: int = 0) -> HumanCheck:
    """The whole comparison of a judge with people (see the module docstring)."""
    humans = alpha_ci(_matrix([r.humans for r in rated]).T, level, resamples, seed=seed) if rated else \
        Alpha(None, None, None, 0, 0)
    majorities = [majority(r.humans, level) for r in rated]
    with_majority = [(r, m) for r, m in zip(rated, majorities) if m is not None]
    paired = [(r.judge, m) for r, m in with_majority if r.judge is not None]
    pair_matrix = _matrix([[r.judge for r, _ in with_majority], [m for _, m in with_majority]])
    vs_majority = alpha_ci(pair_matrix, level, resamples, seed=seed) if with_majority else Alpha(None, None, None, 0, 0)
    mean_difference = (float(np.mean([j - m for j, m in paired]))
                       if paired and level in ("ordinal", "interval") else None)
    confusion: dict[tuple[float, float], int] = {}
    labels: list[LabelBias] = []
    if level != "interval":
        confusion = dict(sorted(Counter((m, j) for j, m in paired).items()))
        for label in sorted({m for _, m in paired} | {j for j, _ in paired}):
            human_n = sum(m == label for _, m in paired)
            judge_n = sum(j == label for j, _ in paired)
            agree = confusion.get((label, label), 0)
            labels.append(LabelBias(label, human_n, judge_n, agree, (judge_n - human_n) / len(paired),
                                    agree / human_n if human_n else None))
    return HumanCheck(level, len(rated), len(rated) - len(with_majority), len(with_majority) - len(paired),
                      len(paired), humans, vs_majority, mean_difference, confusion, labels)
