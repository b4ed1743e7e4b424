"""PRISK preference narrowing, set level: V_q (the universal answer set of a query, merged by
meaning) and A(u, q) ⊆ V_q (the items useful to persona u), both judged once per model run and
shared by every condition; V_q across models (`pool_merges`: the paper aggregates "all model answers
across personas into a universal answer set V_q for each query"); and the formulas CR, UIR, RelCR
over them. Pure functions.

Merging: every extracted option is first reduced to its string key (`canonical_option`); the
distinct keys of a query, sorted, are listed to the judge, which answers for option i the number of
an option with the same meaning (its own number if none). These links are read as an undirected
graph; its connected components are V_q's items, each named by its smallest key.
"""

from __future__ import annotations

import hashlib

from prefray.benchmarks.prisk.scoring import canonical_option


def digest(keys: list[str]) -> str:
    """A short id of one option-key list (names the merge and usefulness units built on it)."""
    return hashlib.sha256("\n".join(keys).encode()).hexdigest()[:12]


def option_keys(options: list[str]) -> set[str]:
    return {canonical_option(o) for o in options} - {""}


def key_listing(option_lists: list[list[str]]) -> list[tuple[str, str]]:
    """(key, first wording in the given order) of every distinct option key, sorted by key."""
    pool: dict[str, str] = {}
    for options in option_lists:
        for option in options:
            key = canonical_option(option)
            if key:
                pool.setdefault(key, option)
    return sorted(pool.items())


def merge_groups(keys: list[str], same_as: list[int]) -> dict[str, str]:
    """key → item (the smallest key of its group); `same_as[i]` is 1-based, out-of-range links ignored."""
    parent = list(range(len(keys)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, target in enumerate(same_as[:len(keys)]):
        if 1 <= target <= len(keys):
            a, b = find(i), find(target - 1)
            parent[max(a, b)] = min(a, b)
    return {key: keys[find(i)] for i, key in enumerate(keys)}


def pool_merges(merges: list[tuple[list[str], list[int]]]) -> dict[str, str]:
    """key → item of V_q across models: the union of every model's merge graph of one query (its
    keys, and each `same_as` link read as in `merge_groups`); keys that several models share join
    their groups. Each item is named by its smallest key, so one model's pool equals its own merge."""
    parent: dict[str, str] = {}

    def find(key: str) -> str:
        while parent[key] != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    for keys, _ in merges:
        for key in keys:
            parent.setdefault(key, key)
    for keys, same_as in merges:
        for i, target in enumerate(same_as[:len(keys)]):
            if 1 <= target <= len(keys):
                a, b = find(keys[i]), find(keys[target - 1])
                parent[max(a, b)] = min(a, b)
    return {key: find(key) for key in sorted(parent)}


def items_of(options: list[str], item_of: dict[str, str]) -> set[str] | None:
    """C(r): the V_q items a response's options fall in; None if the merge never saw one of them."""
    keys = option_keys(options)
    return {item_of[k] for k in keys} if keys <= item_of.keys() else None


def useful_items(items: list[str], flags: list[bool]) -> set[str] | None:
    """A(u, q) from one flag per listed item; None when the count does not match."""
    return {i for i, f in zip(items, flags) if f} if len(flags) == len(items) else None


def coverage_ratio(c: set[str], v: set[str]) -> float:
    return len(c & v) / len(v) if v else float("nan")


def useful_recall(c: set[str], a: set[str]) -> float:
    return len(c & a) / len(a) if a else float("nan")


def relative_coverage(sizes: list[int], base_sizes: list[int]) -> float:
    if not sizes or not base_sizes or sum(base_sizes) == 0:
        return float("nan")
    return (sum(sizes) / len(sizes)) / (sum(base_sizes) / len(base_sizes))


def universe(item_of: dict[str, str]) -> set[str]:
    return set(item_of.values())


def item_listing(item_of: dict[str, str], wording: dict[str, str]) -> list[tuple[str, str]]:
    """(item, wording) of V_q's items, sorted by item key: the order the usefulness judge sees."""
    return [(item, wording.get(item, item)) for item in sorted(universe(item_of))]

