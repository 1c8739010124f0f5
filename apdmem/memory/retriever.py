"""Hybrid retrieval over L0 units: BM25 and dense rankings fused by Reciprocal Rank Fusion (equal weights),
plus an exact-match boost on the keyword field; each session is scored by its best unit over all queries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from apdmem.memory.index import UnitIndex, tokenize

RRF_K = 60  # the usual RRF constant: ranks beyond a few dozen contribute little
CANDIDATES = 100  # units taken from each ranking before fusion
KEYWORD_BOOST = 0.5 / (RRF_K + 1)  # one exact keyword match is worth half a first place in one ranking


@dataclass
class SessionHit:
    """A retrieved session: its fused score and the row of its best-matching unit."""

    session_id: str
    score: float
    row: int


def fuse(index: UnitIndex, query: str, query_vector: np.ndarray) -> dict[int, float]:
    """Fused score per candidate unit row for one query."""
    scores: dict[int, float] = {}
    lexical = np.where(index.alive, index.lexical.scores(tokenize(query)), 0.0)
    top = np.argpartition(-lexical, min(CANDIDATES, len(lexical) - 1))[:CANDIDATES] if len(lexical) else []
    ranked = sorted((r for r in top if lexical[r] > 0), key=lambda r: (-lexical[r], r))  # ties: lower row first, as FAISS
    for rank, row in enumerate(ranked):
        scores[int(row)] = 1.0 / (RRF_K + rank + 1)
    rows, _ = index.dense.search(query_vector, CANDIDATES * 3)
    dense_ranked = [r for r in dict.fromkeys(rows.tolist()) if index.alive[r]][:CANDIDATES]
    for rank, row in enumerate(dense_ranked):
        scores[row] = scores.get(row, 0.0) + 1.0 / (RRF_K + rank + 1)
    lowered = query.lower()
    for row in scores:
        matches = sum(1 for k in index.units[row].keywords if len(k) > 2 and k.lower() in lowered)
        scores[row] += KEYWORD_BOOST * matches
    return scores


def rank_sessions(index: UnitIndex, queries: list[str], query_vectors: np.ndarray, k: int) -> list[SessionHit]:
    """Top-k sessions by their best unit across all (sub)queries."""
    best: dict[str, SessionHit] = {}
    for query, vector in zip(queries, query_vectors):
        for row, score in fuse(index, query, vector).items():
            sid = index.units[row].session_id
            if sid not in best or score > best[sid].score:
                best[sid] = SessionHit(sid, score, row)
    return sorted(best.values(), key=lambda h: (-h.score, h.session_id))[:k]


class HybridRetriever(BaseRetriever):
    """A LangChain retriever over one user's memory: top-k sessions with their best L0 summary.

    Example:
        >>> retriever = memory.as_retriever(k=5)          # doctest: +SKIP
        >>> retriever.invoke("where did I go hiking?")    # doctest: +SKIP
        [Document(page_content="...", metadata={"session_id": ..., "date": ..., "span": [0, 4], "score": ...}), ...]
    """

    memory: Any
    k: int = 10

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return self.memory.search(query, k=self.k)
