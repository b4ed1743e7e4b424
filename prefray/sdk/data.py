"""Reading a dataset and deriving from stored rows: `read_records` (a Parquet, JSON or JSONL file),
`read_hub_split` (a hub dataset's split through the `datasets` library), and `per_table` (a result
computed once per Arrow table, e.g. shared by a benchmark's `metrics` and `unit_scores`)."""

from prefray.engine.datafiles import read_hub_split, read_records
from prefray.engine.memo import per_table

__all__ = ["per_table", "read_hub_split", "read_records"]
