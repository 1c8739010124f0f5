"""The two indexes over L0 units: lexical (BM25) and dense (FAISS).

Both are addressed by *row*: the position of a unit in the user's unit table. Rows are append-only;
forgetting a session marks its rows dead and the table is compacted on the next save.

Lexical backends share one interface (`add`, `copy`, `kept`, `scores`, `ceiling`, `idf`, `holding`, `rows`).
`RankBM25` is rank-bm25's BM25Okapi: the reference, rebuilt lazily after each change. It scores every document in
Python, ~1 s per query at 100k units, so above `SPARSE_THRESHOLD` units `SparseBM25` takes over: the same Okapi
formula over an inverted index, touching only the postings of the query terms.
"""

from __future__ import annotations

import json
import math
import re
import threading
from array import array
from collections import Counter, defaultdict
from collections.abc import Iterable
from itertools import chain

import faiss
import numpy as np
from nltk.stem.porter import PorterStemmer
from rank_bm25 import BM25Okapi

from apdmem.memory.records import Unit

SPARSE_THRESHOLD = 20_000
# Memory a loaded index holds per token of its units, besides its vectors: the token lists (words shared), the units'
# text and the lexical index (tracemalloc over LongMemEval users of raw units: 1,000 sessions, 4,225 units, 1.8M
# tokens with rank-bm25: 34 bytes per token; 5,000 sessions, 21,470 units, 8.9M tokens, sparse: 26).
BYTES_PER_TOKEN = 34
# Names what `tokenize` does; saved with each unit table so that tokens saved by another tokenizer are not reused.
TOKENIZER = "porter-stopwords-1"
# A search embeds one query: FAISS's OpenMP threads only add overhead (3x slower measured with 2 threads on 2 cores).
faiss.omp_set_num_threads(1)
K1, B, EPSILON = 1.5, 0.75, 0.25  # rank-bm25's BM25Okapi defaults, kept so the two backends agree
_HANDOVER = threading.Lock()  # see `UnitIndex._copy`
RARE_UNITS = 64  # words in at most this many units are rare: the index keeps the rows holding each (`UnitIndex.rare`)

_STOPWORDS = frozenset(
    "a an and are as at be been but by can could did do does for from had has have how i i'm if in into is it its "
    "me my of on or our so that the their them then there these they this to was we were what when where which who "
    "whom why will with would you your yours".split()
)
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_stemmer = PorterStemmer()


def tokenize(text: str) -> list[str]:
    """Lower-cased, stemmed word tokens without stopwords."""
    words = [w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS]
    try:
        return list(map(_stem_cache.__getitem__, words))  # every word stemmed before: the usual case, at C speed
    except KeyError:
        return [_stem(w) for w in words]


def spellings(texts: Iterable[str]) -> dict[str, str]:
    """For each token of `texts` (a stem), the word it stands for most often there (ties: the word seen first).

    >>> spellings(["I packed jewelry.", "More jewelry, and my sunglasses."])["jewelri"]
    'jewelry'
    """
    counts = Counter(w for text in texts for w in _WORD.findall(text.lower()) if w not in _STOPWORDS)
    words: dict[str, str] = {}
    for word, _ in counts.most_common():
        words.setdefault(_stem(word), word.split("'")[0])
    return words


_stem_cache: dict[str, str] = {}


def _stem(word: str) -> str:
    stem = _stem_cache.get(word)
    if stem is None:
        stem = _stem_cache[word] = _stemmer.stem(word.split("'")[0])
    return stem


class RankBM25:
    """rank-bm25's BM25Okapi over the token lists added so far."""

    def __init__(self) -> None:
        self._docs: list[list[str]] = []
        self._model = None

    def add(self, docs: list[list[str]]) -> None:
        # BM25Okapi precomputes corpus statistics over every document: it is built again on the first read after a
        # change, not at each addition (a commit adds to a copy of the index twice and reads it once).
        self._docs.extend(docs)
        self._model = None

    def copy(self) -> RankBM25:
        """A copy that adds on its own (the built model is shared: it is never changed, only built again)."""
        fresh = RankBM25()
        fresh._docs, fresh._model = list(self._docs), self._model
        return fresh

    def kept(self, renumbered: np.ndarray) -> RankBM25:
        """The documents whose new number `renumbered` gives (by old number; -1: dropped), in that order (see
        `SparseBM25.kept`)."""
        fresh = RankBM25()
        fresh._docs = [doc for doc, number in zip(self._docs, renumbered.tolist()) if number >= 0]
        return fresh

    def holding(self) -> dict[str, int]:
        """How many documents hold each term (see `SparseBM25.holding`)."""
        return dict(Counter(chain.from_iterable(map(set, self._docs))))

    def rows(self, terms: list[str]) -> dict[str, bytes]:
        """The documents holding each of these terms (see `SparseBM25.rows`), gathered from the documents."""
        wanted, holding = set(terms), defaultdict(list)
        for row, doc in enumerate(self._docs):
            for term in wanted.intersection(doc):
                holding[term].append(row)
        return {term: array("i", rows).tobytes() for term, rows in holding.items()}

    def _built(self):
        """BM25Okapi over the documents (None while every document is empty: rank-bm25 would divide by zero)."""
        if self._model is None and any(self._docs):
            self._model = BM25Okapi(self._docs, k1=K1, b=B, epsilon=EPSILON)
        return self._model

    def scores(self, query: list[str]) -> np.ndarray:
        model = self._built()
        if model is None:
            return np.zeros(len(self._docs))
        return np.asarray(model.get_scores(query), dtype=np.float64)

    def ceiling(self, query: list[str]) -> float:
        """The score a document would reach by holding every query term (see `score_ceiling`)."""
        return score_ceiling(query, self.idf(), len(self._docs))

    def idf(self) -> dict[str, float]:
        """Each indexed term's idf (with rank-bm25's floor for terms in more than half the documents)."""
        model = self._built()
        return model.idf if model else {}

    @staticmethod
    def term_idf(documents: int, holding: list[int]) -> list[float]:
        """The idf of terms held by these numbers of documents, before the floor, as rank-bm25 computes it (math.log:
        numpy's log differs in the last bit for a few numbers)."""
        return [math.log(documents - n + 0.5) - math.log(n + 0.5) for n in holding]


class SparseBM25:
    """BM25Okapi with rank-bm25's idf floor, over an inverted index; cost grows with the postings read.

    Each term's postings are C ints, the rows holding it each followed by how often, in bytes: 8 bytes a posting,
    where lists of Python ints took ~70 (a 5,000-session memory holds 5M postings). Bytes, not numpy's arrays: joining
    two is several times cheaper; nor Python's arrays or tuples: a dict holding only bytes is not tracked by Python's
    garbage collector, which then does not go over the 50,000 terms of a writer's copy (one at each commit) again and
    again. A copy (a writer's, at each commit) shares the postings, and adds a session without copying them: the
    postings added since the table of all of them (`_first`, shared, never changed) are in `_last`, copied with the
    index; when `_last` holds half as many terms as `_first`, both are joined into a new `_first`. A one-session commit
    in a memory of 5,000 sessions (50,000 terms) then copies a few thousand short postings rather than every term."""

    _JOIN = 2  # `_last` is joined to `_first` when it holds this many times fewer terms

    def __init__(self) -> None:
        self._first: dict[str, bytes] = {}  # the postings added up to a join (terms in the order first added)
        self._last: dict[str, bytes] = {}  # the postings added since, by term (a term new since then: only here)
        self._lengths = array("i")
        self._norm: np.ndarray | None = None  # each document's length term of the formula, made on first use
        self._idf: dict[str, float] | None = None

    def add(self, docs: list[list[str]]) -> None:
        added: dict[str, list[int]] = defaultdict(list)
        for doc in docs:
            row = len(self._lengths)
            self._lengths.append(len(doc))
            for term, count in Counter(doc).items():
                added[term] += (row, count)
        last = self._last
        for term, postings in added.items():
            last[term] = last.get(term, b"") + array("i", postings).tobytes()
        if self._JOIN * len(last) > len(self._first):
            first = dict(self._first)
            for term, postings in last.items():
                first[term] = first.get(term, b"") + postings
            self._first, self._last = first, {}
        self._idf, self._norm = None, None

    def copy(self) -> SparseBM25:
        """A copy that adds on its own (the postings are shared)."""
        fresh = SparseBM25()
        fresh._first, fresh._last, fresh._lengths = self._first, dict(self._last), self._lengths[:]
        fresh._norm, fresh._idf = self._norm, self._idf
        return fresh

    def kept(self, renumbered: np.ndarray) -> SparseBM25:
        """The index of the documents whose new number `renumbered` gives (by old number; -1: dropped), in that order, as
        adding them alone would make it: each term's postings renumbered, a term no document holds any more dropped.
        Forgetting a session renumbers the postings, at numpy's speed, rather than counting every document's terms
        again in Python (0.18 s instead of 1.4 s at 5,000 sessions)."""
        fresh = SparseBM25()
        fresh._lengths = array("i", np.frombuffer(self._lengths, np.intc)[renumbered >= 0].tobytes())
        terms = list(self.holding())
        parts = [b"".join(self._postings(term)) for term in terms]
        pairs = np.frombuffer(b"".join(parts), np.intc).reshape(-1, 2).copy()
        pairs[:, 0] = renumbered[pairs[:, 0]]
        held = pairs[:, 0] >= 0
        starts = np.cumsum([0] + [len(part) // POSTING for part in parts[:-1]])
        counts = np.add.reduceat(held.astype(np.int64), starts) if parts else []  # each term's postings kept
        data, ends = pairs[held].tobytes(), (POSTING * np.cumsum(counts)).tolist()
        fresh._first = {term: data[start:end] for term, start, end in zip(terms, [0] + ends, ends) if end > start}
        return fresh

    def holding(self) -> dict[str, int]:
        """How many documents hold each term, the terms in the order first added."""
        first, last = self._first, self._last
        terms = [*first, *(term for term in last if term not in first)]
        return {term: (len(first.get(term, b"")) + len(last.get(term, b""))) // POSTING for term in terms}

    def rows(self, terms: list[str]) -> dict[str, bytes]:
        """The documents holding each of these terms (each held by some), ascending, as C ints in bytes."""
        parts = [b"".join(self._postings(term)) for term in terms]
        data = np.frombuffer(b"".join(parts), np.intc)[0::2].tobytes()
        ends = (np.cumsum([len(part) for part in parts], dtype=np.int64) // 2).tolist()  # a row: half a posting
        return dict(zip(terms, map(data.__getitem__, map(slice, [0] + ends, ends))))

    def _postings(self, term: str) -> list[bytes]:
        """A term's postings, in the two parts that hold some."""
        return [part for part in (self._first.get(term), self._last.get(term)) if part]

    def _idf_table(self) -> dict[str, float]:
        if self._idf is None:
            holding = self.holding()
            idf = dict(zip(holding, self.term_idf(len(self._lengths), list(holding.values()))))
            floor = EPSILON * (math.fsum(idf.values()) / len(idf)) if idf else 0.0  # whatever the order of terms
            self._idf = {t: (v if v >= 0 else floor) for t, v in idf.items()}
        return self._idf

    @staticmethod
    def term_idf(documents: int, holding: list[int]) -> list[float]:
        """The idf of terms held by these numbers of documents, before the floor."""
        holding = np.asarray(holding, dtype=np.float64)
        return (np.log(documents - holding + 0.5) - np.log(holding + 0.5)).tolist()

    def scores(self, query: list[str]) -> np.ndarray:
        n = len(self._lengths)
        out = np.zeros(n)
        if not sum(self._lengths):
            return out
        if self._norm is None:
            lengths = np.asarray(self._lengths, dtype=np.float64)
            self._norm = K1 * (1 - B + B * lengths / lengths.mean())
        norm, idf = self._norm, self._idf_table()
        for term in query:
            for postings in self._postings(term):
                pairs = np.frombuffer(postings, dtype=np.intc).reshape(-1, 2)
                rows, tf = pairs[:, 0], pairs[:, 1].astype(np.float64)
                out[rows] += idf[term] * tf * (K1 + 1) / (tf + norm[rows])
        return out

    def ceiling(self, query: list[str]) -> float:
        """The score a document would reach by holding every query term (see `score_ceiling`)."""
        return score_ceiling(query, self.idf(), len(self._lengths))

    def idf(self) -> dict[str, float]:
        """Each indexed term's idf (with rank-bm25's floor for terms in more than half the documents)."""
        return self._idf_table() if self._lengths else {}


POSTING = array("i", [0, 0]).itemsize * 2  # the bytes of a posting of `SparseBM25`: a row and a count, C ints


def score_ceiling(query: list[str], idf: dict[str, float], n: int) -> float:
    """The BM25 score's upper bound for `query`: each term's idf times (K1 + 1), the limit of a term
    repeated without end. A term the memory has never seen counts with the idf of a term in no document,
    so a query about something the memory does not hold has a high ceiling that no unit comes near."""
    unseen = float(np.log(n + 0.5) - np.log(0.5))
    return sum(idf.get(t, unseen) for t in query) * (K1 + 1)


def make_lexical(kind: str, size: int):
    """A lexical backend: "rank-bm25", "sparse", or "auto" (by the number of units)."""
    if kind == "auto":
        kind = "sparse" if size > SPARSE_THRESHOLD else "rank-bm25"
    if kind == "rank-bm25":
        return RankBM25()
    if kind == "sparse":
        return SparseBM25()
    raise ValueError(f"unknown lexical backend {kind!r}: use 'auto', 'rank-bm25' or 'sparse'")


class DenseIndex:
    """Exact inner-product search (FAISS's, as its flat index does it) over normalized vectors; each vector carries the
    row of its unit.

    The vectors are rows of a matrix that copies share, with room after them: a copy holds how many rows it sees, and
    the first holder to add to a shared matrix writes after the rows that every holder sees (no holder reads there),
    so that a writer's copy of a large index (one at each commit) neither copies the vectors nor is copied to add
    some; a holder that finds the room taken, or too little, moves to a matrix twice as large."""

    def __init__(self, dimension: int):
        self.dimension = dimension
        self._matrix = _Matrix(np.empty((0, dimension), dtype=np.float32))
        self.count = 0  # the vectors this index holds: the first rows of the matrix
        self.rows = np.zeros(0, dtype=np.int64)

    def add(self, vectors: np.ndarray, rows: list[int]) -> None:
        if not len(rows):
            return
        vectors, end = np.asarray(vectors, dtype=np.float32), self.count + len(rows)
        if not self._matrix.claim(self.count, end):
            grown = np.empty((max(2 * end, 64), self.dimension), dtype=np.float32)
            grown[: self.count] = self.vectors()
            self._matrix = _Matrix(grown, self.count)
            self._matrix.claim(self.count, end)
        self._matrix.values[self.count : end] = vectors
        self.count = end
        self.rows = np.concatenate([self.rows, np.asarray(rows, dtype=np.int64)])

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows and similarities of the best `k` vectors (a row may repeat: several vectors per unit)."""
        k = min(k, self.count)
        if k == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        sims, ids = self.nearest(query.reshape(1, -1), k)
        keep = ids[0] >= 0
        return self.rows[ids[0][keep]], sims[0][keep]

    def nearest(self, queries: np.ndarray, k: int, within: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The similarities and positions of the `k` vectors nearest each query (position -1: fewer vectors), among
        the vectors at the positions `within` only (in ascending order) when given."""
        searched = self.vectors() if within is None else self.at(within)
        sims, found = faiss.knn(np.ascontiguousarray(queries, dtype=np.float32), searched, k,
                                metric=faiss.METRIC_INNER_PRODUCT)
        return (sims, found) if within is None else (sims, np.where(found >= 0, within[found], -1))

    def copy(self) -> DenseIndex:
        """A copy that adds on its own; it shares the vectors (see the class)."""
        fresh = DenseIndex(self.dimension)
        fresh._matrix, fresh.count, fresh.rows = self._matrix, self.count, self.rows
        return fresh

    def at(self, positions: np.ndarray) -> np.ndarray:
        """The vectors at these positions."""
        return self.vectors()[np.asarray(positions, dtype=np.int64)]

    def positions(self, rows: np.ndarray) -> np.ndarray:
        """Where the vectors of these units are, row by row (the vectors are kept in row order: `UnitIndex.load_parts`)."""
        first = np.searchsorted(self.rows, rows, "left")
        counts = np.searchsorted(self.rows, rows, "right") - first
        return np.repeat(first - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())

    def vectors(self) -> np.ndarray:
        """Every stored vector, in insertion order (read-only: copies share them)."""
        held = self._matrix.values[: self.count]
        held.flags.writeable = False
        return held


class _Matrix:
    """Vectors that `DenseIndex` copies share, and how many rows of it are written (`claim`)."""

    _lock = threading.Lock()  # claims are made by several threads' copies of one index

    def __init__(self, values: np.ndarray, written: int = 0):
        self.values, self.written = values, written

    def claim(self, start: int, end: int) -> bool:
        """Whether a holder of the first `start` rows may write rows `start` to `end`: no holder wrote past `start`,
        and they fit. Then they are its own."""
        with self._lock:
            if self.written != start or end > len(self.values):
                return False
            self.written = end
            return True


def _session_means(vectors: np.ndarray, sessions: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """The normalized mean of the vectors of each session (`sessions`: the session of each vector, by number; at least
    one), and those sessions' numbers, in ascending order."""
    if np.any(sessions[1:] < sessions[:-1]):  # not in the usual order (a session's units are added at once)
        order = np.argsort(sessions, kind="stable")
        sessions, vectors = sessions[order], vectors[order]
    starts = np.flatnonzero(np.concatenate([[True], sessions[1:] != sessions[:-1]])).tolist()
    # Slice by slice: np.add.reduceat over rows took 3 times as long (0.22 s for 5,000 sessions' vectors).
    sums = np.stack([vectors[start:end].sum(axis=0) for start, end in zip(starts, starts[1:] + [len(vectors)])])
    norms = np.linalg.norm(sums, axis=1, keepdims=True)
    return sums / np.maximum(norms, np.finfo(np.float32).tiny), sessions[starts].tolist()


def unit_tokens(unit) -> list[str]:
    """What BM25 indexes of a unit: its text, keywords and tags."""
    return tokenize(" ".join([unit.summary, *unit.keywords, *unit.tags]))


def _token_lists(tokens: object, n: int) -> bool:
    # The words themselves are not checked one by one (too slow for a cold open): anything hashable only fails
    # to match, and an unhashable word makes the lexical index refuse the lists (then they are tokenized again).
    return isinstance(tokens, list) and len(tokens) == n and all(isinstance(t, list) for t in tokens)


def _shared_words(token_lists: list[list[str]]) -> list[list[str]]:
    """The same lists holding one string per distinct word. JSON gives each occurrence its own string (~60 bytes
    each, 8.9M of them at 5,000 sessions); shared, a token costs its list slot (8 bytes). The words are copied, so
    that the parsed strings are all freed together and their memory goes back to the system."""
    words = {word: word.encode().decode() for word in set(chain.from_iterable(token_lists))}
    return [list(map(words.__getitem__, tokens)) for tokens in token_lists]


class Owners:
    """Which session holds each row of an index, and each session's rows (forgotten units included): what a commit and
    linking look up. The index keeps it up to date as units are added (a commit does not go over the whole index
    again) and makes it afresh when rows are renumbered (`UnitIndex.compact`). A writer's copy of the index takes it over
    (`UnitIndex._copy`)."""

    def __init__(self) -> None:
        self.sessions: list[str] = []  # numbered in the order of their first unit
        self.number: dict[str, int] = {}
        self.session_of = np.zeros(0, dtype=np.int64)  # each row's session, by number
        self.rows: dict[str, list[int]] = {}  # each session's rows

    def add(self, units: list, first: int) -> None:
        """Note the units added at rows `first` on."""
        numbers, added = [], defaultdict(list)
        for row, unit in enumerate(units, first):
            number = self.number.setdefault(unit.session_id, len(self.sessions))
            if number == len(self.sessions):
                self.sessions.append(unit.session_id)
            numbers.append(number)
            added[unit.session_id].append(row)
        self.session_of = np.concatenate([self.session_of, np.asarray(numbers, dtype=np.int64)])
        for sid, rows in added.items():
            self.rows[sid] = self.rows.get(sid, []) + rows


class UnitIndex:
    """The table of L0 units with both indexes over it. Forgotten units stay as dead rows until `compact`."""

    def __init__(self, dimension: int, lexical: str = "auto", expected_size: int = 0):
        self.dimension, self.lexical_kind = dimension, lexical
        self.units: list = []
        self.tokens: list[list[str]] = []  # what BM25 indexes of each unit, saved with the table (tokenizing is slow)
        self._units_with: dict[str, int] | None = None  # see `units_with`: counted on first use, then kept up to date
        self._owners: Owners | None = None  # see `owners`: likewise
        self._rare: dict[str, bytes] | None = None  # see `rare`: likewise
        self._means: DenseIndex | None = None  # see `means`: likewise
        self.alive = np.zeros(0, dtype=bool)
        self.lexical = make_lexical(lexical, expected_size)
        self.dense = DenseIndex(dimension)

    def __len__(self) -> int:
        return int(self.alive.sum())

    @property
    def units_with(self) -> dict[str, int]:
        """How many units hold each token, forgotten units included; a token no unit holds is absent (what linking weighs
        terms by; a writer's copies keep it up to date, so that a commit does not count the whole index again). A dict,
        not a Counter: like the postings of `SparseBM25`, a dict of strings and numbers is not tracked by Python's
        garbage collector."""
        if self._units_with is None:  # the lexical index's documents are the units' tokens
            self._units_with = self.lexical.holding()  # sparse: its postings count them (0.02 s at 5,000 sessions)
        return self._units_with

    @property
    def owners(self) -> Owners:
        """Which session holds each row (`Owners`): made on first use, then kept up to date like `units_with`."""
        if self._owners is None:
            self._owners = Owners()
            self._owners.add(self.units, 0)
        return self._owners

    @property
    def rare(self) -> dict[str, bytes]:
        """The rows holding each rare word (in at most `RARE_UNITS` units, forgotten units included), as C ints in bytes
        (untracked, like the postings of `SparseBM25`): the postings that linking looks up (`apdmem.memory.links`).
        Made on first use, then kept up to date like `units_with`."""
        if self._rare is None:  # sparse: read from its postings (0.05 s at 5,000 sessions, 0.3 s gathered)
            self._rare = self.lexical.rows([w for w, n in self.units_with.items() if n <= RARE_UNITS])
        return self._rare

    @property
    def means(self) -> DenseIndex:
        """Each session's vectors summed up in one, their mean (normalized), carrying the session's number in `owners`
        as its row: what linking searches first, to search the vectors of the sessions nearest a new one only
        (`apdmem.memory.links`). A session whose units were added in several additions has a mean per addition. Made on
        first use, then kept up to date like `units_with`."""
        if self._means is None:
            self._means = DenseIndex(self.dimension)
            if self.dense.count:
                self._means.add(*_session_means(self.dense.vectors(), self.owners.session_of[self.dense.rows]))
        return self._means

    def idf(self, words) -> dict[str, float]:
        """The idf of these indexed words, as the lexical index weighs them in a search, except the floor of words in
        half the units or more (which linking leaves out): what linking weighs terms by, computed for the words asked
        rather than for every word at each change."""
        words = list(words)
        return dict(zip(words, self.lexical.term_idf(len(self.units), [self.units_with[w] for w in words])))

    def nbytes(self) -> int:
        """About how much memory the index holds: its vectors, and `BYTES_PER_TOKEN` per token of its units."""
        return 4 * self.dimension * self.dense.count + BYTES_PER_TOKEN * sum(map(len, self.tokens))

    def add(self, units: list, vectors: np.ndarray, tokens: list[list[str]] | None = None) -> None:
        """Append units; `vectors` holds one row per text in each unit's `embed_texts`, in order; `tokens` are
        the units' BM25 tokens when already known."""
        first = len(self.units)
        tokens = tokens if tokens is not None else [unit_tokens(u) for u in units]
        self._append(units, tokens)
        self.alive = np.concatenate([self.alive, np.ones(len(units), dtype=bool)])
        picked = make_lexical(self.lexical_kind, len(self.units))
        if type(picked) is type(self.lexical):
            self.lexical.add(tokens)
        else:  # grown past the size that picks the other backend (a bulk ingest): made now, as a read would make it
            self.lexical = picked
            self.lexical.add(self.tokens)
        self._add_vectors(vectors, [first + i for i, u in enumerate(units) for _ in u.embed_texts])

    def dump(self) -> tuple[bytes, bytes]:
        """The live units as JSON and their vectors as raw little-endian float32 (see `part`)."""
        table, vectors = self.part()
        return json.dumps(table, ensure_ascii=False).encode(), vectors

    def part(self, rows: list[int] | None = None) -> tuple[dict, bytes]:
        """The units at these rows (default: every live unit), in row order, as a JSON-ready table, and their vectors as
        raw little-endian float32: what `load_parts` reads back (a memory's index is stored as several such parts, its
        segments: `apdmem.memory.generations`).

        No FAISS file is written: FAISS's generic reader accepts index types whose data lives in other files,
        so a planted file could make it read or write outside the store. `load` builds the index in memory.
        """
        rows = np.flatnonzero(self.alive) if rows is None else np.asarray(rows, dtype=np.int64)
        local = np.full(len(self.units), -1, dtype=np.int64)
        local[rows] = np.arange(len(rows))
        positions = np.flatnonzero(local[self.dense.rows] >= 0)  # their vectors, in insertion order (= row order)
        units = [{k: v for k, v in self.units[r].to_json().items() if k != "embed_texts"} for r in rows.tolist()]
        table = {"dimension": self.dimension, "units": units, "vector_units": local[self.dense.rows[positions]].tolist(),
                 "tokenizer": TOKENIZER, "tokens": [self.tokens[r] for r in rows.tolist()]}
        vectors = self.dense.at(positions)
        return table, np.ascontiguousarray(vectors, dtype="<f4").tobytes()

    @classmethod
    def load(cls, table: bytes, vectors: bytes, lexical: str = "auto") -> UnitIndex:
        """The index `dump` wrote; ValueError when the two parts are not one consistent index."""
        try:
            parts = [(json.loads(table), vectors)]
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"unreadable unit table ({exc})") from None
        return cls.load_parts(parts, lexical)

    @classmethod
    def load_parts(cls, parts: list[tuple[dict, bytes]], lexical: str = "auto") -> UnitIndex:
        """The index holding the units of the parts `part` made (the table as parsed JSON, and its vectors), one
        after the other; ValueError when a table and its vectors are not one consistent part of an index.

        Consumes `parts`: each is dropped from the list once read, so that the parsed tables (about three times the
        memory of the index they make) are freed one by one rather than all held until the index is built."""
        units, tokens, rows, vectors, dimension = [], [], [], [], None
        for i in range(len(parts)):
            (data, raw), parts[i] = parts[i], None
            try:
                dimension = int(data["dimension"]) if dimension is None else dimension
                if int(data["dimension"]) != dimension:
                    raise ValueError("parts of different dimensions")
                own_rows = [int(r) for r in data["vector_units"]]
                own = [Unit.from_json(u) for u in data["units"]]
            except (ValueError, TypeError, KeyError, RecursionError) as exc:
                raise ValueError(f"unreadable unit table ({exc})") from None
            if dimension < 1 or len(raw) != 4 * dimension * len(own_rows) or any(not 0 <= r < len(own) for r in own_rows):
                raise ValueError("unit table and vectors do not match")
            saved = data.get("tokens")
            if data.get("tokenizer") != TOKENIZER or not _token_lists(saved, len(own)):
                saved = [unit_tokens(u) for u in own]  # saved by another tokenizer, or damaged: tokenize again
            rows += [len(units) + r for r in own_rows]
            units += own
            tokens += saved
            vectors.append(np.frombuffer(raw, dtype="<f4").reshape(len(own_rows), dimension))
            del data, saved
        if dimension is None:
            raise ValueError("no unit table")
        index = cls(dimension, lexical, len(units))
        index.units, index.alive = units, np.ones(len(units), dtype=bool)
        try:
            tokens = _shared_words(tokens)
            index.lexical.add(tokens)
            index.lexical.idf()  # built now: an unhashable word fails here, not in a search
        except TypeError:  # an unhashable "word": damaged lists
            tokens = [unit_tokens(u) for u in units]
            index.lexical = make_lexical(lexical, len(units))
            index.lexical.add(tokens)
            index.lexical.idf()
        index.tokens = tokens
        rows, vectors = np.asarray(rows, dtype=np.int64), np.concatenate(vectors)
        if np.any(rows[1:] < rows[:-1]):  # parts keep them in row order, as `DenseIndex.positions` wants: else sorted
            order = np.argsort(rows, kind="stable")
            rows, vectors = rows[order], vectors[order]
        index.dense.add(vectors, rows.tolist())
        return index

    def extended(self, other: UnitIndex) -> UnitIndex:
        """This index with the units of `other` added after its own (with their tokens and vectors), as `load_parts`
        would make it of both at once."""
        rows = other.dense.rows + len(self.units)
        self._append(other.units, other.tokens)
        self.alive = np.concatenate([self.alive, other.alive])
        self.lexical.add(other.tokens)
        self._add_vectors(other.dense.vectors(), rows.tolist())
        return self

    def _add_vectors(self, vectors: np.ndarray, rows: list[int]) -> None:
        """Add the vectors of units appended (`_append`) to the dense index, and to `means` once made."""
        self.dense.add(vectors, rows)
        if self._means is not None and rows:
            self._means.add(*_session_means(np.asarray(vectors, dtype=np.float32), self.owners.session_of[rows]))

    def _append(self, units: list, tokens: list[list[str]]) -> None:
        """Append units and their tokens to the table, and count them in `units_with` and `owners` once made."""
        first = len(self.units)
        self.units.extend(units)
        self.tokens.extend(tokens)
        counts = self._units_with
        if counts is not None:
            for word in chain.from_iterable(map(set, tokens)):
                counts[word] = counts.get(word, 0) + 1
        if self._owners is not None:
            self._owners.add(units, first)
        if self._rare is not None:  # a word held by more units than a rare one is no longer listed (until `compact`)
            for row, own in enumerate(tokens, first):
                for word in set(own):
                    if counts[word] <= RARE_UNITS:
                        self._rare[word] = self._rare.get(word, b"") + array("i", [row]).tobytes()
                    else:
                        self._rare.pop(word, None)

    def remove(self, session_id: str) -> None:
        for row, unit in enumerate(self.units):
            if unit.session_id == session_id:
                self.alive[row] = False

    def compact(self) -> UnitIndex:
        """A new index holding only live units; vectors are taken from FAISS, not recomputed. With none forgotten, a
        copy of this one, the lexical index copied too (not built again) when the size picks the same backend."""
        if self.alive.all():
            return self._copy()
        live = np.flatnonzero(self.alive)
        renumbered = np.full(len(self.units), -1, dtype=np.int64)
        renumbered[live] = np.arange(len(live))
        fresh = UnitIndex(self.dimension, self.lexical_kind, len(live))
        fresh.units, fresh.alive = [self.units[r] for r in live], np.ones(len(live), dtype=bool)
        fresh.tokens = [self.tokens[r] for r in live]
        if self._units_with is not None:  # less the forgotten units' tokens: cheaper than counting again
            fresh._units_with = counts = dict(self._units_with)
            for term in chain.from_iterable(set(self.tokens[r]) for r in np.flatnonzero(~self.alive)):
                counts[term] -= 1
                if not counts[term]:
                    del counts[term]
        if type(fresh.lexical) is type(self.lexical):
            fresh.lexical = self.lexical.kept(renumbered)
        else:  # the size picks the other backend
            fresh.lexical.add(fresh.tokens)
        keep = self.alive[self.dense.rows]
        fresh.dense.add(self.dense.vectors()[keep], renumbered[self.dense.rows[keep]].tolist())
        return fresh

    def _copy(self) -> UnitIndex:
        """A copy to change: a writer's, at each commit. What only writers read (`owners`, `rare`) is handed over to it
        rather than copied (a few milliseconds at 5,000 sessions): this index makes them again if ever asked."""
        fresh = UnitIndex(self.dimension, self.lexical_kind, len(self.units))
        fresh.units, fresh.tokens, fresh.alive = list(self.units), list(self.tokens), self.alive.copy()
        fresh._units_with = dict(self._units_with) if self._units_with is not None else None  # answers read it too
        with _HANDOVER:  # two writers' copies of one index (threads preparing commits) do not both take them
            fresh._owners, fresh._rare, self._owners, self._rare = self._owners, self._rare, None, None
        fresh._means = self._means.copy() if self._means is not None else None
        if type(fresh.lexical) is type(self.lexical):
            fresh.lexical = self.lexical.copy()
        else:
            fresh.lexical.add(fresh.tokens)
        fresh.dense = self.dense.copy()
        return fresh
