"""Results computed once per Arrow table: the aggregate step hands one benchmark's rows to its
metrics and to its per-unit scores, which derive the same tables from them."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

Result = TypeVar("Result")


def per_table(func: Callable[[Any], Result]) -> Callable[[Any], Result]:
    """`func(table)` remembered while `table` (the same object) is alive; `.remember(table, result)`
    records a result known without calling `func` (e.g. derived from a larger table's)."""
    results: dict[int, tuple[weakref.ref, Result]] = {}

    def remember(table: Any, result: Result) -> None:
        key = id(table)
        results[key] = (weakref.ref(table, lambda _: results.pop(key, None)), result)

    @functools.wraps(func)
    def remembered(table: Any) -> Result:
        hit = results.get(id(table))
        if hit is not None and hit[0]() is table:
            return hit[1]
        result = func(table)
        remember(table, result)
        return result

    remembered.remember = remember  # type: ignore[attr-defined]  # what `func(table)` is known to return
    return remembered
