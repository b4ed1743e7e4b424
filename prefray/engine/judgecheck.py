"""How a benchmark lets people check its judge: a file of human labels → the judge's stages → verdicts.

A benchmark that supports `prefray judge-check` has an attribute `judge_check` with the shape of
`JudgeCheck` below. The labels file is CSV or JSONL, one row per labelled item: the benchmark's input
columns (`columns`) and one column per annotator (every other column). An annotator's cell is a
label name (`labels`, case-insensitive) or a number among the labels' values; an empty cell (or a
JSON null) is no label. Rows that share `group_column` are judged by one call (e.g. CUPID's matcher
rates a whole checklist at once); an item's id is its group and its position in the group.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from prefray.engine.benchmark import DataError, Job, Stage, parsed


@dataclass(frozen=True)
class Labelled:
    """One labelled item: its id, its inputs (the benchmark's columns) and each annotator's value."""

    item: str
    inputs: dict[str, str]
    labels: dict[str, float | None]


@dataclass(frozen=True)
class CheckGroup:
    """The items one judge call rates; `instance_id` is the group's name (the unit's instance)."""

    instance_id: str
    items: tuple[Labelled, ...] = field(default_factory=tuple)


class JudgeCheck(Protocol):
    """What a benchmark declares so that a judge option can be checked against people."""

    judged: str          # what is checked, for the report (e.g. "matcher: checklist entry coverage")
    role: str            # the role whose model answers (e.g. "matcher", "judge")
    level: str           # the labels' level of measurement: nominal, ordinal or interval
    columns: tuple[str, ...]   # the input columns, in the file's terms (documented in the README)
    optional: tuple[str, ...]  # the input columns that may be empty (none: ())
    group_column: str    # the column whose equal values share one judge call
    labels: dict[str, float]   # label name → value (names are matched case-insensitively)

    def problems(self, groups: Sequence[CheckGroup]) -> list[str]:
        """What the file's groups break beyond its columns (e.g. rows of one group that disagree), one line each."""

    def stages(self, job: Job) -> list[Stage]:
        """The judge stages that rate the groups (`StageContext.instances` are `CheckGroup`s)."""

    def verdicts(self, rows: pa.Table, groups: Sequence[CheckGroup]) -> dict[str, float]:
        """The judge's value per item id, from the stored rows of those stages (best attempt per
        unit); an item without a usable verdict has no entry."""


def one_row_per_group(groups: Sequence[CheckGroup], column: str) -> list[str]:
    """The problems of a check whose every group is one item: each group of more rows, by `column`."""
    return [f"{column} {group.instance_id}: {len(group.items)} rows (one row per {column})"
            for group in groups if len(group.items) != 1]


def one_item_verdicts(rows: pa.Table, groups: Sequence[CheckGroup], stage: str, key: str) -> dict[str, float]:
    """Item → the judge's value, for a check whose every group is one item: `key` of the parsed
    answer of `stage` for the group's unit, for each answered group (an unanswered item has none)."""
    ok = rows.filter(pc.and_(pc.equal(rows["stage"], stage), pc.equal(rows["status"], "ok"))).to_pylist()
    values = {row["instance_id"]: float(parsed(row)[key]) for row in ok}
    return {group.items[0].item: values[group.instance_id] for group in groups if group.instance_id in values}


def label_value(cell: Any, labels: dict[str, float]) -> float | None:
    """An annotator's cell as a value: None when empty; ValueError when it is no label."""
    if cell is None or (isinstance(cell, str) and not cell.strip()):
        return None
    if isinstance(cell, bool):
        raise ValueError(f"{cell!r} is not a label")
    values = {name.lower(): value for name, value in labels.items()}
    if isinstance(cell, str) and cell.strip().lower() in values:
        return values[cell.strip().lower()]
    try:
        number = float(cell)
    except (TypeError, ValueError):
        number = math.nan
    if number in values.values():
        return number
    raise ValueError(f"{cell!r} is not a label (one of {', '.join(labels)} or {sorted(set(values.values()))})")


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a CSV (with a header) or JSONL file; DataError naming the file and line."""
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    if path.suffix.lower() == ".csv":
        with path.open(newline="", encoding="utf-8") as handle:
            return list(csv.DictReader(handle))
    if path.suffix.lower() not in (".jsonl", ".ndjson"):
        raise DataError(f"{path}: a labels file is .csv or .jsonl")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise DataError(f"{path}:{number}: not JSON ({exc})") from None
            if not isinstance(row, dict):
                raise DataError(f"{path}:{number}: a row is a JSON object")
            rows.append(row)
    return rows


def read_labels(path: Path, check: JudgeCheck) -> tuple[list[CheckGroup], list[str]]:
    """The file's groups of labelled items, and its annotator columns; DataError naming file, row, column."""
    rows = read_rows(path)
    if not rows:
        raise DataError(f"{path}: no labelled rows")
    header = list(rows[0])
    missing = [c for c in check.columns if c not in header]
    annotators = [c for c in header if c not in check.columns]
    if missing:
        raise DataError(f"{path}: missing input column(s) {', '.join(missing)} (the columns are "
                        f"{', '.join(check.columns)}, then one column per annotator)")
    if not annotators:
        raise DataError(f"{path}: no annotator column (every column besides {', '.join(check.columns)})")
    groups: dict[str, list[Labelled]] = {}
    for number, row in enumerate(rows, 2 if path.suffix.lower() == ".csv" else 1):
        where = f"{path}:{number}"
        if set(row) != set(header):
            raise DataError(f"{where}: columns {sorted(row)} differ from the first row's {sorted(header)}")
        inputs = {c: str(row[c]).strip() if row[c] is not None else "" for c in check.columns}
        empty = [c for c in check.columns if not inputs[c] and c not in check.optional]
        if empty:
            raise DataError(f"{where}: empty input column(s) {', '.join(empty)}")
        labels = {}
        for annotator in annotators:
            try:
                labels[annotator] = label_value(row[annotator], check.labels)
            except ValueError as exc:
                raise DataError(f"{where}: column {annotator}: {exc}") from None
        group = inputs[check.group_column]
        members = groups.setdefault(group, [])
        members.append(Labelled(f"{group}#{len(members) + 1}", inputs, labels))
    return [CheckGroup(name, tuple(items)) for name, items in groups.items()], annotators
