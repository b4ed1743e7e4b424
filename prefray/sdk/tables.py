"""A paper's headline tables for `prefray report`, declared as `Benchmark.paper_tables`: a
`PaperTable` of `Column`s (a metric under a condition, or a paired difference with `versus`), with an
optional `RowMark` on the rows whose model config holds a value (docs/compare.md)."""

from prefray.engine.hooks import Column, PaperTable, RowMark

__all__ = ["Column", "PaperTable", "RowMark"]
