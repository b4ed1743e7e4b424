"""Figures a benchmark draws beside the default ones, declared as `Benchmark.figures`: a metric
against another (`ScatterSpec`), several metrics per slice of a dimension (`MetricsSpec`), metrics of
chosen model × condition cells side by side (`CellsSpec`); `FigureSpec` is any of them."""

from prefray.engine.hooks import CellsSpec, FigureSpec, MetricsSpec, ScatterSpec

__all__ = ["CellsSpec", "FigureSpec", "MetricsSpec", "ScatterSpec"]
