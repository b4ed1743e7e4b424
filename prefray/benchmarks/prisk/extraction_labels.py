"""The labelled answer set of PRISK's answer extraction (`sample/extraction_labels.jsonl`) and how an
extractor is scored on it.

One row per answer text, written for this project: `id`, `kind` (`numeric` | `choice`), `class` (the
shape it tests), `options` (the choices, or null), `gold` (the answer a careful reader takes: a
number as a string, a letter, or null when no single answer can be read: a range, two candidates,
only rejections, no answer), `rejected` (the options the text names and rejects) and `text`.

Scores: a **hit** is a reading equal to gold (null = null included); a **misread** is a reading that
differs from a non-null gold, or any reading of a null-gold row (a guess); **unparsed** is a null
reading where gold exists. `rejected_misreads` counts misreads on rows that reject an option.

Usage: python -m prefray.benchmarks.prisk.extraction_labels [--rows]
(bench/prisk_extraction.py also scores the extractor of an earlier git revision.)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

LABELS_PATH = Path(__file__).resolve().parent / "sample" / "extraction_labels.jsonl"

NumberReader = Callable[[str], Decimal | None]
ChoiceReader = Callable[[str, tuple[str, ...]], str | None]


def load_labels(path: Path = LABELS_PATH) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@dataclass
class LabelScore:
    """How one extractor reads the labelled set."""
    total: int = 0
    hits: int = 0
    misreads: list[str] = field(default_factory=list)          # ids
    unparsed: list[str] = field(default_factory=list)          # ids: gold exists, nothing read
    rejected_rows: int = 0
    rejected_misreads: list[str] = field(default_factory=list)  # ids

    @property
    def hit_rate(self) -> float:
        return self.hits / self.total if self.total else float("nan")


def reading(row: dict[str, Any], read_number: NumberReader, read_choice: ChoiceReader) -> str | None:
    """The extractor's answer for a row, as a string comparable with its gold."""
    if row["kind"] == "choice":
        return read_choice(row["text"], tuple(row["options"]))
    value = read_number(row["text"])
    return None if value is None else str(value)


def _same(row: dict[str, Any], got: str | None) -> bool:
    if got is None or row["gold"] is None:
        return got is None and row["gold"] is None
    if row["kind"] == "choice":
        return got == row["gold"]
    return Decimal(got) == Decimal(row["gold"])


def score_labels(rows: list[dict[str, Any]], read_number: NumberReader, read_choice: ChoiceReader) -> LabelScore:
    score = LabelScore(total=len(rows))
    for row in rows:
        got = reading(row, read_number, read_choice)
        score.rejected_rows += bool(row["rejected"])
        if _same(row, got):
            score.hits += 1
        elif got is None:
            score.unparsed.append(row["id"])
        else:
            score.misreads.append(row["id"])
            if row["rejected"]:
                score.rejected_misreads.append(row["id"])
    return score


def report(name: str, score: LabelScore, rows: list[dict[str, Any]], read_number: NumberReader,
           read_choice: ChoiceReader, detail: bool = False) -> list[str]:
    """The score as printed lines: the totals, the misses by class and (`detail`) every missed row."""
    lines = [f"{name}: hits {score.hits}/{score.total} = {100 * score.hit_rate:.1f}%, misreads "
             f"{len(score.misreads)}, unparsed with a gold {len(score.unparsed)}, rejected-option misreads "
             f"{len(score.rejected_misreads)}/{score.rejected_rows}"]
    missed_ids = set(score.misreads) | set(score.unparsed)
    classes = Counter(r["class"] for r in rows)
    missed = Counter(r["class"] for r in rows if r["id"] in missed_ids)
    lines.append("  misses by class: " + (", ".join(f"{c} {missed[c]}/{classes[c]}" for c in sorted(missed))
                                          or "none"))
    for r in rows if detail else []:
        if r["id"] in missed_ids:
            got = reading(r, read_number, read_choice)
            lines.append(f"  {r['id']} ({r['class']}): gold {r['gold']!r}, read {got!r}: {r['text']!r}")
    return lines


def summary(rows: list[dict[str, Any]]) -> str:
    kinds = Counter(r["kind"] for r in rows)
    return (f"{len(rows)} labelled answers ({kinds['numeric']} numeric, {kinds['choice']} choice; "
            f"{sum(r['gold'] is None for r in rows)} with no single answer)")


def main(argv: list[str] | None = None) -> int:
    from prefray.benchmarks.prisk.extraction import extract_choice, extract_number
    parser = argparse.ArgumentParser(description="PRISK's answer extraction on its labelled set")
    parser.add_argument("--rows", action="store_true", help="print every missed row")
    args = parser.parse_args(argv)
    rows = load_labels()
    score = score_labels(rows, extract_number, extract_choice)
    print("\n".join([summary(rows), *report("current", score, rows, extract_number, extract_choice, args.rows)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
