"""The run viewer: `prefray view RUN_DIR [--port P] [--export FILE.html]`.

Reads a run directory lazily (metrics.parquet, plots/, shards/, requests/) and serves an overview,
each cell's units with filters and paging, and each unit's transcript on 127.0.0.1.
"""

from prefray.view.data import Cell, CellQuery, RunData
from prefray.view.export import export_html

__all__ = ["Cell", "CellQuery", "RunData", "export_html"]
