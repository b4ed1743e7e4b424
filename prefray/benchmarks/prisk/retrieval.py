"""BM25 retrieval over one user's memory conversations (bm25s), and the routing query per condition.

A passage is one whole memory conversation (its topic line plus every turn): PRISK's memory
conversations are short (2-6 turns) and each is about one topic, so a turn window would split one
exchange into fragments that no longer say what the user asked. The index covers only the
profile's own memory. Scores are ranked by (score desc, memory order); passages with score 0 (no
shared term with the routing query) are never returned, so fewer than top_k may come back.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import bm25s
import numpy as np

from prefray.benchmarks.prisk.data import Profile


@dataclass(frozen=True)
class Passage:
    passage_id: str
    text: str


def passages(profile: Profile) -> tuple[Passage, ...]:
    out = []
    for conv in profile.memory:
        lines = [f"Topic: {conv.topic}"]
        lines += [f"{'User' if t.role == 'user' else 'Assistant'}: {t.content}" for t in conv.turns]
        out.append(Passage(conv.conversation_id, "\n".join(lines)))
    return tuple(out)


@lru_cache(maxsize=256)
def _index(texts: tuple[str, ...]) -> bm25s.BM25:
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(list(texts), stopwords="en", show_progress=False), show_progress=False)
    return retriever


def scores(texts: tuple[str, ...], query: str) -> list[float]:
    """BM25 score of every text for the query (bm25s tokenizer, English stopwords, no stemming)."""
    tokens = bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)[0]
    if not tokens:
        return [0.0] * len(texts)
    return [float(s) for s in np.asarray(_index(texts).get_scores(tokens))]


def retrieve(profile: Profile, query: str, top_k: int) -> list[Passage]:
    """The top_k passages of the profile's memory for the routing query."""
    corpus = passages(profile)
    ranked = sorted(zip(scores(tuple(p.text for p in corpus), query), range(len(corpus))),
                    key=lambda pair: (-pair[0], pair[1]))
    return [corpus[i] for score, i in ranked[:top_k] if score > 0]


def routing_query(mode: str | None, profile_text: str, query: str) -> str:
    """`query`: the query alone (retrieval); `profile_query`: `[profile; query]` (profile+retrieval)."""
    if mode == "query":
        return query
    if mode == "profile_query":
        return f"{profile_text}\n{query}"
    raise ValueError(f"condition.routing_query must be 'query' or 'profile_query', got {mode!r}")
