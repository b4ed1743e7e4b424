"""Reading dataset files for any benchmark: Parquet, JSON (a list of rows) or JSONL, or a hub split.

Errors are DataError with the file (and row) named, so a launch stops before any call.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prefray.engine.benchmark import DataError


def read_records(path: Path) -> list[dict[str, Any]]:
    """Rows of a Parquet, JSON (a list) or JSONL file, as dicts."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: dataset file not found")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path).to_pylist()
        except (OSError, ValueError) as exc:   # pyarrow's ArrowInvalid is a ValueError
            raise DataError(f"{path}: not a readable Parquet file ({exc})") from None
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason}); "
                        "a JSON or JSONL dataset must be UTF-8") from None
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}: not valid JSON ({exc})") from None
        if not isinstance(data, list):
            raise DataError(f"{path}: expected a JSON list of rows")
        return data
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}: row {number}: not valid JSON ({exc.msg})") from None
    return rows


def read_hub_split(dataset_id: str, split: str, setting: str) -> list[dict[str, Any]]:
    """Rows of a hub dataset through the `datasets` library (optional; needs it installed and online).

    `setting` names the config key that asked for it, for the error message."""
    try:
        import datasets  # type: ignore[import-not-found]
    except ImportError:
        raise DataError(f"{setting}={dataset_id}: the `datasets` library is not installed; pip install datasets, "
                        "or download the split as Parquet/JSONL and point the benchmark at the file") from None
    try:
        return [dict(row) for row in datasets.load_dataset(dataset_id, split=split)]
    except Exception as exc:  # noqa: BLE001 - any hub failure is a dataset the run cannot use
        raise DataError(f"{setting}={dataset_id}: cannot load split '{split}': {exc}") from None
