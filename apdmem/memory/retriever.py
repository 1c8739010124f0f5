"""Hybrid retrieval over L0 units: dense and BM25 evidence fused per unit, each session scored by its best unit
over all queries, with an optional soft preference for sessions inside a date range.

Fusion is score-aware: a unit's score is a weighted sum of its cosine similarity to the query and its BM25
*coverage*, the BM25 score divided by the query's ceiling (`score_ceiling`). Both are absolute, so a signal
that finds nothing (a question whose words the memory never uses) contributes little instead of promoting
weak matches by rank, as Reciprocal Rank Fusion does. RRF is kept as `fusion="rrf"` for ablations.

`rerank` rescores what a search returned with a cross-encoder, which reads the query and a unit together; the
controller does this once per query, outside the millisecond budget of `Memory.search`.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import numpy as np
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from apdmem.errors import InputError, QueryError, shown
from apdmem.memory.index import UnitIndex, tokenize

CANDIDATES = 100  # units taken from each signal before fusion
# Cosine vs BM25 coverage (0-1). Set with MiniLM (cosines ~0.1-0.7) and kept for bge-small, whose cosines run higher
# (unrelated sessions ~0.4-0.5): the ablation's first-pass rows measured it with both.
DENSE_WEIGHT = 0.8
RRF_K = 60  # the usual RRF constant, for fusion="rrf"
PERFECT = {"score": 1.0, "rrf": 2 / (RRF_K + 1)}  # a unit that both signals score best; boosts are shares of it
KEYWORD_BOOST = 0.25  # per exact keyword match of an llm-mode unit (in RRF: half a first place in one ranking)
DATE_BOOST = 0.1  # a session inside the date range gains a tenth of a perfect score
DATE_SLACK_DAYS = 3  # dates in questions are loose: the boost halves about 2 days (or a quarter of the range) outside

PASSAGE_WORDS = 90  # what the cross-encoder reads of a unit (`passage`): ~130 tokens with the query
RERANK_DEPTH = 10  # hits the cross-encoder reads (None: all): one model call each, ~30 ms on two cores
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")

DateRange = tuple[date | str, date | str]


@dataclass
class SessionHit:
    """A retrieved session: its fused score and the row of its best-matching unit."""

    session_id: str
    score: float
    row: int


def fuse(index: UnitIndex, query: str, query_vector: np.ndarray, *, fusion: str = "score",
         rows_allowed: np.ndarray | None = None) -> dict[int, float]:
    """Fused score per candidate unit row for one query (among `rows_allowed` only, a mask of the units' rows,
    when given: every allowed unit is a candidate of the dense signal, however few they are)."""
    if fusion not in PERFECT:
        raise ValueError(f"unknown fusion {fusion!r}: use one of {', '.join(PERFECT)}")
    terms = tokenize(query)
    alive = index.alive if rows_allowed is None else index.alive & rows_allowed
    lexical = np.where(alive, index.lexical.scores(terms), 0.0)
    top = np.argpartition(-lexical, min(CANDIDATES, len(lexical) - 1))[:CANDIDATES] if len(lexical) else []
    lexical_ranked = sorted((int(r) for r in top if lexical[r] > 0), key=lambda r: (-lexical[r], r))  # ties: lower row first
    rows, sims = index.dense.search(query_vector, CANDIDATES * 3 if rows_allowed is None else len(index.dense.rows))
    cosine: dict[int, float] = {}
    for row, sim in zip(rows.tolist(), sims.tolist()):  # best vector first: a unit's score is its best text's
        if alive[row]:
            cosine.setdefault(row, sim)
    dense_ranked = list(cosine)[:CANDIDATES]
    if fusion == "rrf":
        scores: dict[int, float] = {}
        for ranked in (lexical_ranked, dense_ranked):
            for rank, row in enumerate(ranked):
                scores[row] = scores.get(row, 0.0) + 1.0 / (RRF_K + rank + 1)
    else:
        ceiling = index.lexical.ceiling(terms)
        # A lexical candidate beyond the dense cut-off is no closer than the last vector returned.
        floor = float(sims[-1]) if len(sims) else 0.0
        scores = {
            row: DENSE_WEIGHT * cosine.get(row, floor) + (1 - DENSE_WEIGHT) * (lexical[row] / ceiling if ceiling else 0.0)
            for row in dict.fromkeys(dense_ranked + lexical_ranked)
        }
    lowered = query.lower()
    for row in scores:
        matches = sum(1 for k in index.units[row].keywords if len(k) > 2 and k.lower() in lowered)
        scores[row] += KEYWORD_BOOST * PERFECT[fusion] * matches
    return scores


def date_closeness(day: date, ranges: Sequence[tuple[date, date]]) -> float:
    """1.0 inside any of the ranges, decaying with the distance in days outside them (loose, never 0 abruptly).

    >>> round(date_closeness(date(2023, 1, 15), [(date(2023, 1, 18), date(2023, 1, 18))]), 2)
    0.37
    """
    best = 0.0
    for start, end in ranges:
        outside = max((start - day).days, (day - end).days, 0)
        best = max(best, math.exp(-outside / max(DATE_SLACK_DAYS, (end - start).days / 4)))
    return best


def date_ranges(date_range: DateRange | Sequence[DateRange] | None) -> list[tuple[date, date]]:
    """A (start, end) pair or a list of them, as dates; an end before its start is swapped. Anything else is an
    `InputError` naming the expected form.

    >>> date_ranges(("2023-05-31", "2023-05-01"))
    [(datetime.date(2023, 5, 1), datetime.date(2023, 5, 31))]
    """
    if date_range is None or (isinstance(date_range, (list, tuple)) and not date_range):
        return []
    try:
        if isinstance(date_range, (str, bytes)):
            raise TypeError("a string is not a pair")
        pairs = [date_range] if len(date_range) == 2 and not isinstance(date_range[0], (list, tuple)) else date_range
        return [(min(a, b), max(a, b)) for a, b in ((as_date(start), as_date(end)) for start, end in pairs)]
    except (TypeError, ValueError):
        raise InputError(f"expected a (start, end) pair of ISO dates, e.g. ('2023-05-01', '2023-05-31'), or a list of "
                         f"such pairs; got {shown(date_range)}", source="date_range") from None


DATE_RANGE_TEXT = "START..END as ISO dates, e.g. 2023-05-01..2023-05-31 (one day: 2023-05-01)"


def parse_date_range(text: str) -> tuple[date, date]:
    """A date range as the command line and the search tool take it (`DATE_RANGE_TEXT`); an `InputError` naming
    that form for anything else.

    >>> parse_date_range("2023-05-01..2023-05-31"), parse_date_range("2023-05-01")
    ((datetime.date(2023, 5, 1), datetime.date(2023, 5, 31)), (datetime.date(2023, 5, 1), datetime.date(2023, 5, 1)))
    """
    start, dots, end = text.strip().partition("..")
    end = end if dots else start
    try:
        if not all(re.fullmatch(r"\d{4}-\d\d-\d\d", day) for day in (start, end)):
            raise ValueError(text)
        return date_ranges((start, end))[0]
    except ValueError:  # malformed, or no such day
        raise InputError(f"expected {DATE_RANGE_TEXT}; got {text!r}", source="date range") from None


def as_date(value: date | str) -> date:
    """A date, a datetime or an ISO 8601 string (date or date-time) as a date; ValueError (TypeError for other
    types) for anything else."""
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    if not isinstance(value, str):
        raise TypeError(f"not a date: {value!r}")
    return date.fromisoformat(value[:10])


# --- filters: which sessions a search may return --------------------------------------------------------------

FILTER_FORM = ('an object of metadata names to a value, to {"$in": [values]} or to {"$eq"|"$ne"|"$gt"|"$gte"|"$lt"|'
               '"$lte": value}, values being strings, numbers or booleans; "date" is the session\'s date, e.g. '
               '{"channel": "email", "date": {"$gte": "2023-05-01", "$lt": "2023-06-01"}}')
_COMPARE = {"$eq": operator.eq, "$ne": operator.ne, "$gt": operator.gt, "$gte": operator.ge, "$lt": operator.lt,
            "$lte": operator.le}
_SCALAR = (str, int, float, bool)


def session_filter(spec: Mapping) -> Callable[[Mapping], bool]:
    """A test of a session's listing (its ``date`` and ``metadata``) for a search filter: each name's condition must
    hold, a value is equality, ``{"$in": [...]}`` any of them, ``{"$gte": ...}`` etc. a comparison (a session without
    that metadata passes ``$ne`` only). The name ``"date"`` is the session's date, compared by day with dates or ISO
    8601 strings. Anything else is a QueryError naming the form.

    >>> test = session_filter({"channel": "email", "date": {"$gte": "2023-05-01"}})
    >>> test({"date": "2023-05-02T10:00:00", "metadata": {"channel": "email"}}), test({"date": "2023-05-02T10:00:00"})
    (True, False)
    """
    conditions = []
    try:
        if not isinstance(spec, Mapping):
            raise TypeError
        for name, condition in spec.items():
            tests = dict(condition) if isinstance(condition, Mapping) else {"$eq": condition}
            if not isinstance(name, str) or not tests:
                raise TypeError
            for op, value in tests.items():
                if op == "$in" and not isinstance(value, (list, tuple)):
                    raise TypeError
                values = list(value) if op == "$in" else [value]
                if (op != "$in" and op not in _COMPARE) or not all(isinstance(v, _SCALAR) for v in values):
                    raise TypeError
                conditions.append((name, op, [as_date(v) for v in values] if name == "date" else values))
    except (TypeError, ValueError):
        raise QueryError(f"filter must be {FILTER_FORM}; got {shown(spec)}") from None

    def test(listing: Mapping) -> bool:
        for name, op, values in conditions:
            have = as_date(listing["date"]) if name == "date" else listing.get("metadata", {}).get(name)
            if have is None:
                if op != "$ne":
                    return False
            elif op == "$in":
                if have not in values:
                    return False
            elif not _compares(op, have, values[0]):
                return False
        return True

    return test


def _compares(op: str, have, value) -> bool:
    """`have op value`; values of kinds that do not compare (a string and a number) do not match."""
    try:
        return bool(_COMPARE[op](have, value))
    except TypeError:
        return op == "$ne"


# Results a search returns unless told otherwise: `Memory.search`, its retriever, `apdmem search` and the
# search_memory tool. (The controller's searches take `Context.top_k`, 20: the pool its disclosure policy reads.)
SEARCH_K = 5
# Sessions a reranked `Memory.search` ranks before it keeps its k: the pool the controller's searches rank and lift
# (`Context.top_k`'s default), so that both rank alike.
RERANK_POOL = 20


def rank_sessions(
    index: UnitIndex,
    queries: list[str],
    query_vectors: np.ndarray,
    k: int,
    *,
    date_range: DateRange | Sequence[DateRange] | None = None,
    session_dates: Mapping[str, date | str] | None = None,
    fusion: str = "score",
    allowed: set[str] | None = None,
) -> list[SessionHit]:
    """Top-k sessions by their best unit across all (sub)queries, among the `allowed` sessions only when given (a
    filter's); with `date_range` (and the sessions' dates), sessions in or near the range gain up to DATE_BOOST: a
    soft preference, no session is dropped."""
    best: dict[str, SessionHit] = {}
    rows_allowed = None if allowed is None else np.fromiter((u.session_id in allowed for u in index.units), bool, len(index.units))
    for query, vector in zip(queries, query_vectors):
        for row, score in fuse(index, query, vector, fusion=fusion, rows_allowed=rows_allowed).items():
            sid = index.units[row].session_id
            if sid not in best or score > best[sid].score:
                best[sid] = SessionHit(sid, score, row)
    ranges = date_ranges(date_range)
    if ranges and session_dates:
        for hit in best.values():
            if hit.session_id in session_dates:
                hit.score += DATE_BOOST * PERFECT[fusion] * date_closeness(as_date(session_dates[hit.session_id]), ranges)
    return sorted(best.values(), key=lambda h: (-h.score, h.session_id))[:k]


def rerank(query: str, docs: list[Document], reranker, *, passage_words: int | None = PASSAGE_WORDS,
           depth: int | None = RERANK_DEPTH) -> list[Document]:
    """The search documents `docs` rescored and re-sorted: each score becomes the mean of its standard score
    among the hits and the standard score of the cross-encoder's logit for the query and the unit's `passage`
    (at most `passage_words` words; None: the whole unit). The search keeps half the say: it carries what the
    cross-encoder cannot see (dates, the session's other units).

    The cross-encoder reads the first `depth` hits (None: all); a hit below them takes the lowest logit of those
    read (the search ranked it lower, and it is not read to find out otherwise).

    The original scores stay in the metadata as ``search_score`` and ``rerank_score``.
    """
    if not docs:
        return []
    read = docs[:depth] if depth else docs
    texts = [doc.page_content if passage_words is None else passage(query, doc.page_content, passage_words) for doc in read]
    logits = np.asarray(reranker.score([(query, text) for text in texts]), dtype=np.float64)
    logits = np.concatenate([logits, np.full(len(docs) - len(read), logits.min())])
    searched = np.asarray([doc.metadata["score"] for doc in docs], dtype=np.float64)
    fused = (standardized(searched) + standardized(logits)) / 2
    rescored = [Document(page_content=doc.page_content, metadata={**doc.metadata, "score": float(score),
                                                                  "search_score": doc.metadata["score"], "rerank_score": float(logit)})
                for doc, score, logit in zip(docs, fused, logits)]
    return sorted(rescored, key=lambda d: (-d.metadata["score"], d.metadata["session_id"]))


def passage(query: str, text: str, words: int = PASSAGE_WORDS) -> str:
    """What the cross-encoder reads of a unit: the whole text when it has at most `words` words, else its
    sentences that share the most query terms, in their original order, up to `words` words. The cross-encoder's
    cost grows with its input; a unit's few matching sentences decide its relevance.

    >>> passage("where did I park the car?", "We talked. I parked the car on Elm Street. Then lunch.", words=8)
    'I parked the car on Elm Street.'
    """
    if len(text.split()) <= words:
        return text
    sentences = [s for s in _SENTENCE_END.split(text) if s.strip()]
    terms = set(tokenize(query))
    by_overlap = sorted(range(len(sentences)), key=lambda i: (-len(terms & set(tokenize(sentences[i]))), i))
    kept, count = [], 0
    for i in by_overlap:
        size = len(sentences[i].split())
        if count + size > words:
            if kept:
                continue
            sentences[i], size = " ".join(sentences[i].split()[:words]), words  # one long sentence: its head
        kept.append(i)
        count += size
        if count >= words:
            break
    return " ".join(sentences[i].strip() for i in sorted(kept))


def standardized(values: np.ndarray) -> np.ndarray:
    """Values as standard scores (zeros when they do not vary)."""
    spread = values.std()
    return (values - values.mean()) / spread if spread > 0 else np.zeros_like(values)


class HybridRetriever(BaseRetriever):
    """A LangChain retriever over one user's memory: top-k sessions with their best L0 summary.

    Example:
        >>> retriever = memory.as_retriever(k=5)          # doctest: +SKIP
        >>> retriever.invoke("where did I go hiking?")    # doctest: +SKIP
        [Document(page_content="...", metadata={"session_id": ..., "date": ..., "span": [0, 4], "score": ...}), ...]
    """

    memory: Any
    k: int = SEARCH_K
    min_score: float | None = None
    rerank: bool = False
    filter: dict | None = None

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return self.memory.search(query, k=self.k, filter=self.filter, min_score=self.min_score, rerank=self.rerank)
