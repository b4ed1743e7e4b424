"""The run's request store: each distinct request written once, its seen-set packed, not per object."""

from __future__ import annotations

import random

import pyarrow.compute as pc

from prefray.engine.results.request_store import RequestStore, SeenDigests, read_requests
from prefray.engine.rundir import RunDir
from prefray.engine.types import ChatRequest


def test_seen_digests_answer_like_a_set_across_merges_and_trailing_zero_bytes(monkeypatch):
    monkeypatch.setattr(SeenDigests, "MERGE_AT", 7)
    rng = random.Random(3)
    digests = [rng.randbytes(32) for _ in range(200)]
    digests += [d[:30] + b"\0\0" for d in digests[:20]] + [d[:31] + b"\0" for d in digests[20:40]]
    reference: set[bytes] = set(digests[:50])
    seen = SeenDigests(32, digests[:50])
    for start in range(50, len(digests), 5):
        batch = digests[start:start + 5] + [rng.choice(digests[:start])]     # one already seen
        probes = batch + [rng.choice(digests) for _ in range(5)]
        assert [p in seen for p in probes] == [p in reference for p in probes]
        seen.update(batch)
        reference.update(batch)
        assert len(seen) == len(reference)
    assert len(seen.recent) < 7 and len(seen.sorted) > 200      # most of them merged into the packed array
    assert all(d in seen for d in digests)
    assert not any(rng.randbytes(32) in seen for _ in range(100))


def test_each_distinct_request_is_stored_once_across_shards_and_a_reopened_store(tmp_path):
    def request(n: int) -> ChatRequest:
        return ChatRequest(messages=({"role": "user", "content": f"question {n}"},), params={"max_tokens": 8})

    store = RequestStore(RunDir(tmp_path))
    store.add("m", [request(n) for n in range(10)])
    store.add("m", [request(n) for n in range(5, 15)])           # 5 new
    RequestStore(RunDir(tmp_path)).add("m", [request(n) for n in range(12, 20)])   # a resumed run: 5 new
    stored = read_requests(RunDir(tmp_path))
    assert stored.num_rows == 20
    assert pc.count_distinct(stored["request_hash"]).as_py() == 20
    assert len(list((tmp_path / "requests").glob("*.parquet"))) == 3
