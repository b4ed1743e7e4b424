"""Results computed once per Arrow table: the aggregate step hands one benchmark's rows to its
metrics and to its per-unit scores, which derive the same tables from them."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

Result = TypeVar("Result")


def per_table(func: Callable[[Any], Result]) -> Callable[[Any], Result]:
    """`func(table)` remembered while `table` (the same object) is alive."""
    results: dict[int, tuple[weakref.ref, Result]] = {}

    @functools.wraps(func)
    def remembered(table: Any) -> Result:
        key = id(table)
        hit = results.get(key)
        if hit is not None and hit[0]() is table:
            return hit[1]
        result = func(table)
        results[key] = (weakref.ref(table, lambda _: results.pop(key, None)), result)
        return result

    return remembered
