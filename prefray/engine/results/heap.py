"""The C library's heap while a run is aggregated: Arrow's large buffers reused, not mapped anew.

With Arrow on the C library's allocator (as `prefray.launch` runs it), glibc maps every buffer
larger than its mmap threshold (128 KiB, rising to at most 32 MiB as such buffers are freed) from
the system as fresh pages and unmaps it when it is freed: each reorder of a column of a million rows
pays for its pages being zeroed and faulted in again. While a run is aggregated the threshold is
raised, so freed buffers stay in the heap for the next ones; the pages still go back to the system
whenever Arrow's pool is trimmed (`release_unused`, glibc's malloc_trim). At 1M rows this took
~0.3 s off the metrics' ~5.2 s and added ~0.1 GB to the peak (bench/aggregate_scale.py).

Between its steps the aggregation hands the heap's free pages back (`give_back`, glibc's
malloc_trim): each step (reading the rows and their text, the metrics, the intervals) frees most
of what it allocated, Arrow's buffers, numpy's arrays and Python's large objects alike, and without
a trim glibc keeps those pages, so the next step's allocations landed beside them and the process's
RSS climbed with each step's high-water mark instead of staying near the largest. Re-aggregating a whole-suite
run (433k rows) in a fresh process peaked at 1,212 MB without the trims and 994 MB with them, the
trims taking ~0.05 s in all (bench/reaggregate.py). Elsewhere than on glibc both do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Iterator
from contextlib import contextmanager

M_MMAP_THRESHOLD = -3   # mallopt's parameter number (malloc.h)
AGGREGATING_THRESHOLD = 1 << 30
DEFAULT_THRESHOLD = 128 << 10   # glibc's own default


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """glibc, or None where the C library is another (malloc_trim is glibc's own)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def _mallopt():
    """glibc's mallopt, or None where the C library is another."""
    libc = _glibc()
    return None if libc is None else libc.mallopt


def give_back() -> None:
    """Hand every free page of the C library's heap back to the system (glibc's malloc_trim)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


@contextmanager
def heap_reused() -> Iterator[None]:
    """Within: buffers up to 1 GiB come from the heap (and return to it when freed); after: glibc's
    default threshold."""
    mallopt = _mallopt()
    if mallopt is None:
        yield
        return
    mallopt(M_MMAP_THRESHOLD, AGGREGATING_THRESHOLD)
    try:
        yield
    finally:
        mallopt(M_MMAP_THRESHOLD, DEFAULT_THRESHOLD)
