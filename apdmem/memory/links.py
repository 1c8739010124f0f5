"""Cross-session links: sessions of one user that talk about the same things, found at ingestion without a model.

The paper leaves cross-session linking as future work. Here two sessions are linked when they share rare terms
or hold units that say nearly the same thing, and each link says why:

- **shared terms**: the BM25 tokens of their L0 units (`index.tokenize`: content words and names, stemmed) and
  number-noun pairs ("3 shirt"), weighted by the index's idf (`UnitIndex.idf`, as BM25 weighs them), so that a word every
  session uses counts for little; `overlap` is the cosine of the two sessions' idf-weighted term sets (0 to 1);
- **dense similarity**: the best cosine between a unit of one and a unit of the other (the vectors the index
  already holds).

`strength` is their mean. Each session keeps its `LINKS_PER_SESSION` strongest links at or above the threshold of
the memory's embedding space (`threshold`: cosines run higher in some spaces than in others), lowered in a memory
of fewer than `FULL_SIZE` sessions (`small_discount`: there every word is rare, so the overlap of two sessions about
one subject comes out lower); a link stands when either of its sessions keeps it. The table is derived data saved with the index, in parts
(`LinkTable.part`: each commit writes the lists it changed into its index segment, `apdmem.memory.generations`), and
rebuilt from the index when missing, damaged or built at another threshold.

A new session is compared with its *candidates*, the sessions the index finds near it, not with every session:
those owning one of the `NEAREST` vectors nearest each of its unit vectors (an exact FAISS search: among every
vector, or, when few sessions are linked in a memory of more than `NEAR_SESSIONS`, among the vectors of the
`NEAR_SESSIONS` sessions whose mean vector is nearest its own), and the `SHARING` sessions that share the most of
its rare words (words in at most `RARE_UNITS` units), both ways within one call.
A link needs strength at or above the threshold, which a pair reaches by close units or by rare shared terms; a
pair that is neither near nor sharing rare words may be missed. Measured against comparing every pair: the same
table for each of the 151 LongMemEval dev users (~50 sessions each) and for 500 of their sessions pooled in one
memory; at 1,000 pooled sessions 3 of 1,503 links differ (the weakest: strength 0.46-0.47 at threshold 0.45).
Searching the nearest sessions' vectors only, in a memory of 5,000 LongMemEval sessions: of the 1,670 links that 80
of its sessions find above the threshold with the search among every vector, 34 are not found (2%, the strongest
0.53), none of each session's three strongest; ten one-session commits and a forget after a bulk ingest of 5,000
sessions make the same table as with every vector searched.

Each `add` looks up what the index keeps up to date as units are added (each session's rows, the rows holding each
rare word, how many units hold each word: `UnitIndex.owners`, `rare`, `units_with`), weighs only the words of the
sessions it compares (`UnitIndex.idf`), and searches the nearest vectors of the new sessions' vectors; then it works
per new session in proportion to its candidates (~50-150). A one-session commit links in a time that barely grows
with the history (its search reads the mean vectors of all the sessions, 1.5 KB each, and the vectors of
`NEAR_SESSIONS` sessions: ~6 ms at 5,000 sessions on two loaded cores where reading every vector took ~25 ms), and a table is
built in a time linear in the sessions. Forgetting
a session drops its links (the sessions that lose one are not re-linked to others: a later rebuild would); a
session replaced (extended) is linked again as a new one. The table's format is unchanged: tables saved by older
versions (which compared every pair) are read as they are.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections import Counter
from dataclasses import dataclass
from itertools import chain

import numpy as np

from apdmem.memory.index import RARE_UNITS, UnitIndex

FORMAT = 1
LINKS_PER_SESSION = 3
# Strength at which two sessions are linked, per embedding space: about the 99th percentile of all pairs of sessions
# in the LongMemEval history shipped with the package (1225 pairs). all-MiniLM-L6-v2: median 0.10, 90th percentile
# 0.19, 99th 0.30, best 0.56; bge-small-en-v1.5, whose cosines run higher (the median pair's best cosine between
# units is 0.60 against MiniLM's 0.16): median 0.32, 90th 0.40, 99th 0.45, best 0.61. Both are above every pair of
# the tests' history of seven unrelated sessions. Other spaces (providers' models) take MiniLM's. See
# docs/controller.md.
THRESHOLDS = {"local:minilm": 0.30, "local:bge-small": 0.45}
# In a memory of n < FULL_SIZE sessions a link needs SMALL_DISCOUNT * (1/n - 1/FULL_SIZE) less. Idf weighs a word by
# how few of the memory's units hold it; with few units every word is rare and the words two sessions share weigh
# no more than the others. Measured with bge-small on the evolving-memory suite (apdmem/eval/data/evolving.json:
# 48 scenarios of 1-15 sessions): the 83 pairs of sessions about a scenario's subject score 0.35 (median) alone and
# 0.42 inside the 50-session history shipped with the package, the 242 pairs with a session about something else
# 0.26 in both; the shortfall shrinks about as 1/n and is gone by about 30 sessions (0.005 at 34). With this
# discount 36% of the subject pairs link alone (4% without it) and 33% inside the history; 2 of the 242 other pairs
# (none inside the history). Every LongMemEval haystack has more than FULL_SIZE sessions: their links are unchanged.
SMALL_DISCOUNT = 0.35
FULL_SIZE = 30
DEFAULT_THRESHOLD = THRESHOLDS["local:minilm"]
TERMS_SHOWN = 6  # shared terms a link keeps as its reason, rarest first
NEAREST = 32  # vectors found per vector of a session being linked: their sessions are its candidates
SHARING = 32  # sessions sharing the most rare words with a session being linked, candidates
NEAR_SESSIONS = 500  # sessions whose vectors are searched for those of a session being linked, when few are (`_nearest`)
SEARCH_BATCH = 2048  # vectors per nearest-neighbour search (FAISS multiplies batches as matrices)
_UNNAMED = ("…",)  # the terms of a link found but not named yet (`LinkTable.add` names those it keeps)


@dataclass(frozen=True)
class Link:
    """A link from `session_id` to `other`: `strength` (0-1, the mean of `similarity` and `overlap`), the best
    cosine between their units, the idf-weighted overlap of their terms, and the rarest terms they share."""

    session_id: str
    other: str
    strength: float
    similarity: float
    overlap: float
    terms: tuple[str, ...]

    def reversed(self) -> Link:
        """The same link seen from `other`."""
        return Link(self.other, self.session_id, self.strength, self.similarity, self.overlap, self.terms)

    def to_json(self) -> list:
        return [self.other, self.strength, self.similarity, self.overlap, list(self.terms)]

    @classmethod
    def from_json(cls, session_id: str, data: list) -> Link:
        """The link `to_json` wrote; ValueError for anything else, such as a strength that is no number in 0-1
        (NaN, infinite, negative) or a cosine outside -1 to 1."""
        other, strength, similarity, overlap, terms = data
        if not isinstance(other, str) or not all(isinstance(t, str) for t in terms):
            raise ValueError("not a link")
        if not (_within(strength, 0, 1) and _within(similarity, -1, 1) and _within(overlap, 0, 1)):
            raise ValueError(f"a link of {session_id!r} has a strength, similarity or overlap out of range")
        return cls(session_id, other, float(strength), float(similarity), float(overlap), tuple(terms))


def _within(value: object, low: float, high: float) -> bool:
    """Whether a stored value is a number from `low` to `high` (NaN is not: it compares false)."""
    return type(value) in (int, float) and low <= value <= high


def threshold(space: object) -> float:
    """The strength at which two sessions of a memory in this embedding space (`apdmem.models.embeddings_id`) link."""
    return THRESHOLDS.get(space, DEFAULT_THRESHOLD) if isinstance(space, str) else DEFAULT_THRESHOLD


def small_discount(sessions: int) -> float:
    """How much less strength two sessions need to link in a memory of this many sessions (see SMALL_DISCOUNT).

    >>> round(small_discount(4), 3), small_discount(30), small_discount(200)
    (0.076, 0.0, 0.0)
    """
    return SMALL_DISCOUNT * max(0.0, 1 / max(sessions, 1) - 1 / FULL_SIZE)


class LinkTable:
    """The links of a user's sessions at a threshold: each session's strongest links, strongest first."""

    def __init__(self, threshold: float, kept: dict[str, list[Link]] | None = None):
        self.threshold = threshold
        # Lists and sets are replaced, never changed: a copy (a writer's, at each commit) shares them.
        self.kept: dict[str, list[Link]] = {}
        self._holders: dict[str, frozenset[str]] = {}  # session -> the sessions keeping a link to it
        # The sessions whose list this table set since it was copied (`copy`), what a commit of it compares with the
        # lists stored; None for a table not copied (built or read), whose every list is to compare.
        self.changed: set[str] | None = None
        for sid, links in (kept or {}).items():
            self._keep(sid, links)

    def _keep(self, session_id: str, links: list[Link]) -> None:
        """Set the links a session keeps (none: it keeps no entry), and who holds links to whom."""
        if self.changed is not None:
            self.changed.add(session_id)
        for link in self.kept.pop(session_id, []):
            if link.other in self._holders:
                self._holders[link.other] -= {session_id}
        if links:
            self.kept[session_id] = links
            for link in links:
                self._holders[link.other] = self._holders.get(link.other, frozenset()) | {session_id}

    def links(self, session_id: str | None = None) -> list[Link]:
        """Every link (each pair once, from the session whose id sorts first), or those of one session (from it);
        strongest first."""
        if session_id is not None:
            mine = {l.other: l for l in self.kept.get(session_id, [])}
            for sid in self._holders.get(session_id, ()):
                for l in self.kept[sid]:
                    if l.other == session_id and sid not in mine:
                        mine[sid] = l.reversed()
            return sorted(mine.values(), key=lambda l: (-l.strength, l.other))
        pairs = {(l.session_id, l.other) if l.session_id < l.other else (l.other, l.session_id): l
                 for links in self.kept.values() for l in links}
        pairs = {ends: (l if l.session_id == ends[0] else l.reversed()) for ends, l in pairs.items()}
        return sorted(pairs.values(), key=lambda l: (-l.strength, l.session_id, l.other))

    def copy(self) -> LinkTable:
        fresh = LinkTable(self.threshold)
        fresh.kept, fresh._holders, fresh.changed = dict(self.kept), dict(self._holders), set()
        return fresh

    def add(self, index: UnitIndex, session_ids: list[str]) -> None:
        """Link these sessions (already in `index`) to the sessions the index finds near them (`_Profiles.candidates`),
        and let those keep a link to them when it is among their strongest."""
        if not index.alive.all():  # forgotten units are not linked (and `_Profiles` reads every unit's tokens)
            index = index.compact()
        profiles = _Profiles(index, session_ids)
        for sid in session_ids:
            self.remove(sid)
            if sid not in profiles.rows:
                continue
            found = profiles.links(sid, self.threshold - small_discount(len(profiles.sessions)))
            found.sort(key=lambda l: (-l.strength, l.other))
            self._keep(sid, found[:LINKS_PER_SESSION])
            for link in found:
                theirs = [l for l in self.kept.get(link.other, []) if l.other != sid] + [link.reversed()]
                theirs.sort(key=lambda l: (-l.strength, l.other))
                self._keep(link.other, theirs[:LINKS_PER_SESSION])
        # The terms that say why are named for the links kept only (most links found are not among the strongest).
        for sid in {sid for sid in session_ids if sid in self.kept} | {l.other for sid in session_ids for l in self.kept.get(sid, [])}:
            if any(l.terms is _UNNAMED for l in self.kept.get(sid, [])):
                self._keep(sid, [dataclasses.replace(l, terms=profiles.shared_terms(sid, l.other)) if l.terms is _UNNAMED
                                  else l for l in self.kept[sid]])

    def remove(self, session_id: str) -> None:
        """Drop every link of a session (forgotten, or about to be linked again)."""
        self._keep(session_id, [])
        for holder in list(self._holders.pop(session_id, ())):
            self._keep(holder, [l for l in self.kept[holder] if l.other != session_id])

    def dump(self) -> bytes:
        return json.dumps(self.part(sorted(self.kept)), ensure_ascii=False).encode()

    def part(self, session_ids) -> dict:
        """The links these sessions keep (an empty list for one that keeps none), JSON-ready, as `load` reads them: a
        memory stores its table in parts, each in the index segment of the commit that changed them."""
        return {"format": FORMAT, "threshold": self.threshold,
                "links": {sid: [l.to_json() for l in self.kept.get(sid, [])] for sid in session_ids}}

    @classmethod
    def load(cls, raw: bytes | dict, sessions, threshold: float) -> LinkTable:
        """The table `dump` wrote, or parts of it (`part`, parsed) merged; ValueError when it is unreadable, was built at
        another threshold or names sessions not in `sessions`."""
        try:
            data = json.loads(raw) if isinstance(raw, bytes) else raw
            if data["format"] != FORMAT:
                raise ValueError(f"link table format {data['format']!r}")
            if data["threshold"] != threshold:
                raise ValueError(f"links of strength {data['threshold']!r} and more, not {threshold}")
            kept = {sid: [Link.from_json(sid, l) for l in links] for sid, links in data["links"].items()}
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            raise ValueError(f"unreadable link table ({exc})") from None
        if any(sid not in sessions or l.other not in sessions for sid, links in kept.items() for l in links):
            raise ValueError("link table names sessions that are not listed")
        return cls(threshold, kept)

    @classmethod
    def build(cls, index: UnitIndex, threshold: float) -> LinkTable:
        """The links of every session of `index`, built from scratch (a missing or damaged table)."""
        table = cls(threshold)
        table.add(index, list(dict.fromkeys(u.session_id for u, alive in zip(index.units, index.alive) if alive)))
        return table


class _Profiles:
    """What linking compares, for the sessions of an index: their terms (with their idf) and unit vectors, and the
    sessions the index finds near the sessions being linked (`candidates`).

    Made once per `LinkTable.add` from what the index keeps up to date as units are added (`UnitIndex.owners`: each
    session's rows; `rare`: the rows holding each rare word; `units_with`: how many units hold each word), and one
    nearest-neighbour search of the new sessions' vectors; then the work grows with the sessions being linked and
    their candidates, not with the sessions of the index.
    """

    def __init__(self, index: UnitIndex, linked: list[str]):
        self.index, owners = index, index.owners
        self.rows, self.sessions = owners.rows, owners.sessions  # each session's units; the sessions, numbered
        self.idf: dict[str, float] = {}  # the idf of each word weighed so far (`_weigh`), the words of these sessions
        self._weighed: set[str] = set()
        # Words in half the units or more (BM25 floors their idf; the role names of raw units are such words) are no
        # reason to link anything: `_weigh` notes those it meets.
        self.common: set[str] = set()
        self._terms: dict[str, tuple[dict[str, float], float]] = {}
        self._vocabulary: dict[str, int] = {}  # every term met, numbered (`_term_ids`)
        self._ids: dict[str, np.ndarray] = {}
        self._squared = np.zeros(0)  # the squared weights of one session's terms by number (`links`), else 0
        self._places: dict[str, np.ndarray] = {}  # where each session's vectors are in the dense index (`_positions`)
        linked = [sid for sid in linked if sid in self.rows]
        near, sharing = self._nearest(linked), self._sharing(linked)
        self.candidates = {sid: near[sid] | sharing[sid] for sid in linked}
        for sid in linked:  # both ways: a session linked later in the same call drops, then finds again, its links
            for other in self.candidates[sid] & self.candidates.keys():
                self.candidates[other].add(sid)
        self._weigh(set(chain(linked, *self.candidates.values())))

    def _weigh(self, session_ids) -> None:
        """Compute the idf of the words of these sessions not weighed yet (all at once: numpy's log is per array)."""
        tokens, session_ids = self.index.tokens, set(session_ids) - self._weighed
        self._weighed |= session_ids
        new = set(chain.from_iterable(tokens[i] for sid in session_ids for i in self.rows[sid])) - self.idf.keys()
        self.idf.update(self.index.idf(new))
        units_with, units = self.index.units_with, len(self.index.units)
        self.common.update(t for t in new if 2 * units_with[t] >= units)

    def terms(self, session_id: str) -> tuple[dict[str, float], float]:
        """A session's terms, each with its idf, and the norm of these weights."""
        found = self._terms.get(session_id)
        if found is None:
            if session_id not in self._weighed:
                self._weigh([session_id])
            mine = {}
            for i in self.rows[session_id]:
                mine.update(_terms(self.index.tokens[i], self.common, self.idf))
            found = self._terms[session_id] = mine, math.sqrt(sum(w * w for w in mine.values()))
        return found

    def _vectors(self, positions: np.ndarray) -> np.ndarray:
        """The vectors at these positions of the dense index."""
        return self.index.dense.at(positions)

    def _positions(self, session_id: str) -> np.ndarray:
        """Where the vectors of a session are in the dense index."""
        found = self._places.get(session_id)
        if found is None:
            found = self._places[session_id] = self.index.dense.positions(np.asarray(self.rows[session_id], np.int64))
        return found

    def _nearest(self, linked: list[str]) -> dict[str, set[str]]:
        """Per session being linked, the sessions owning one of the `NEAREST` vectors nearest each of its vectors: an
        exact search among the vectors of every session or, when the sessions being linked are few, among those of
        the `NEAR_SESSIONS` sessions nearest each one (`_near`), so that linking one session costs the same in a
        memory of 5,000 sessions (42,000 vectors) as in one of 1,000."""
        if len(linked) * NEAR_SESSIONS >= len(self.sessions):
            return self._nearest_among(linked, None)
        return {sid: self._nearest_among([sid], self._near(sid))[sid] for sid in linked}

    def _near(self, session_id: str) -> np.ndarray:
        """The positions in the dense index of the vectors of the `NEAR_SESSIONS` sessions whose mean vector
        (`UnitIndex.means`) is nearest this session's, in ascending order."""
        means, mine = self.index.means, self._vectors(self._positions(session_id))
        if not len(mine):
            return np.zeros(0, dtype=np.int64)
        mean = mine.sum(axis=0, keepdims=True)
        _, found = means.nearest(mean / np.linalg.norm(mean), min(NEAR_SESSIONS, means.count))
        picked = np.zeros(len(self.sessions), dtype=bool)
        picked[means.rows[found[found >= 0]]] = True
        return np.flatnonzero(picked[self.index.owners.session_of[self.index.dense.rows]])

    def _nearest_among(self, linked: list[str], within: np.ndarray | None) -> dict[str, set[str]]:
        """Per session being linked, the sessions owning one of the `NEAREST` vectors nearest each of its vectors
        among those at the positions `within` of the dense index (None: all of them): an exact search, in batches.
        Identical vectors (a turn said word for word in several sessions: 40% of the vectors of 5,000 LongMemEval
        sessions) have the same nearest: each is searched once."""
        mine = [self._positions(sid) for sid in linked]
        positions = np.concatenate(mine or [np.zeros(0, np.int64)])
        distinct: dict[bytes, int] = {}  # a vector's digest -> its number among the distinct vectors
        first, number = [], np.zeros(len(positions), np.int64)  # each distinct vector's first position; each position's
        for at in range(0, len(positions), SEARCH_BATCH):
            for i, vector in enumerate(self._vectors(positions[at : at + SEARCH_BATCH]), at):
                n = number[i] = distinct.setdefault(hashlib.blake2b(vector.tobytes(), digest_size=16).digest(), len(first))
                if n == len(first):
                    first.append(positions[i])
        owning: list[set[str]] = []  # per distinct vector, the sessions owning its nearest vectors
        dense, session_of = self.index.dense, self.index.owners.session_of
        k = min(NEAREST, dense.count if within is None else len(within))
        for at in range(0, len(first), SEARCH_BATCH):
            _, found = dense.nearest(self._vectors(np.asarray(first[at : at + SEARCH_BATCH])), k, within)
            owners = np.where(found >= 0, session_of[dense.rows[found]], -1)
            owning += [{self.sessions[h] for h in hits if h >= 0} for hits in owners.tolist()]
        near: dict[str, set[str]] = {sid: set() for sid in linked}
        owner = np.repeat(np.arange(len(linked)), [len(m) for m in mine])
        for n_linked, n in zip(owner.tolist(), number.tolist()):
            near[linked[n_linked]] |= owning[n]
        return near

    def _sharing(self, linked: list[str]) -> dict[str, set[str]]:
        """Per session being linked, the `SHARING` sessions sharing the most of its rare words (in at most `RARE_UNITS`
        units, not common, not a bare number), each word weighing its squared idf as in a link's `overlap`."""
        units_with, units, tokens = self.index.units_with, len(self.index.units), self.index.tokens
        rare = {sid: {t for i in self.rows[sid] for t in tokens[i]
                      if units_with[t] <= RARE_UNITS and 2 * units_with[t] < units and not t.isdigit()} for sid in linked}
        wanted = set().union(*rare.values())
        idf, owners, postings = self.index.idf(wanted), self.index.owners, self.index.rare
        holding = {word: list(dict.fromkeys(owners.sessions[n] for n in owners.session_of[np.frombuffer(postings[word], np.intc)].tolist()))
                   for word in wanted}  # rare word -> the sessions holding it
        sharing = {}
        for sid, words in rare.items():
            shared: Counter[str] = Counter()
            for word in words:
                weight = idf[word] ** 2
                for other in holding[word]:
                    shared[other] += weight
            del shared[sid]
            sharing[sid] = {other for other, _ in shared.most_common(SHARING)}
        return sharing

    def similarities(self, session_id: str) -> dict[str, float]:
        """The best cosine between a unit of this session and a unit of each of its candidates: the sessions near it
        in the dense index or sharing a rare word with it."""
        mine = self._positions(session_id)
        others = [sid for sid in sorted(self.candidates[session_id] - {session_id}) if len(self._positions(sid))]
        if not len(mine) or not others:
            return {}
        theirs = [self._positions(sid) for sid in others]
        starts = np.cumsum([0] + [len(p) for p in theirs[:-1]])  # where each candidate's vectors start among theirs
        # einsum, not BLAS: OpenBLAS's threads spin against each other on a busy machine (40x slower measured on
        # two loaded cores for a session of 8 vectors against 400).
        best = np.einsum("id,jd->ij", self._vectors(mine), self._vectors(np.concatenate(theirs))).max(axis=0)
        return dict(zip(others, np.maximum.reduceat(best, starts).tolist()))

    def _term_ids(self, session_id: str) -> np.ndarray:
        """A session's terms (`terms`) as numbers, for `links` to weigh many sessions' shared terms at once."""
        found = self._ids.get(session_id)
        if found is None:
            terms, vocabulary = self.terms(session_id)[0], self._vocabulary
            new = [t for t in terms if t not in vocabulary]
            vocabulary.update(zip(new, range(len(vocabulary), len(vocabulary) + len(new))))
            found = self._ids[session_id] = np.fromiter(map(vocabulary.__getitem__, terms), dtype=np.int64, count=len(terms))
        return found

    def links(self, session_id: str, threshold: float) -> list[Link]:
        """The links of a session with its candidates at `threshold` or stronger (strength, similarity and overlap
        rounded to 4 places; terms `_UNNAMED`: see `shared_terms`). A pair's overlap is the sum of the squared
        weights of the terms they share over the product of their norms: each weight is the idf of the term's word,
        the same in both sessions, so the shared weight of every candidate is summed at once from a table of this
        session's squared weights by term number."""
        similarities = self.similarities(session_id)
        if not similarities:
            return []
        (mine, my_norm), my_ids = self.terms(session_id), self._term_ids(session_id)
        others = list(similarities)
        theirs = [self._term_ids(other) for other in others]
        if len(self._squared) < len(self._vocabulary):
            self._squared = np.zeros(2 * len(self._vocabulary))
        self._squared[my_ids] = np.fromiter(mine.values(), dtype=np.float64, count=len(my_ids)) ** 2
        owner = np.repeat(np.arange(len(others)), [len(t) for t in theirs])
        shared = np.bincount(owner, weights=self._squared[np.concatenate(theirs)], minlength=len(others))
        self._squared[my_ids] = 0.0
        norms = my_norm * np.array([self.terms(other)[1] for other in others])
        overlaps = np.divide(shared, norms, out=np.zeros(len(others)), where=norms > 0)
        cosines = np.fromiter(similarities.values(), dtype=np.float64, count=len(others))
        strengths = (np.maximum(cosines, 0.0) + overlaps) / 2
        kept = strengths >= threshold
        return [Link(session_id, others[j], round(strength, 4), round(similarity, 4), round(overlap, 4), _UNNAMED)
                for j, strength, similarity, overlap in zip(np.flatnonzero(kept).tolist(), strengths[kept].tolist(),
                                                            cosines[kept].tolist(), overlaps[kept].tolist())]

    def shared_terms(self, session_id: str, other: str) -> tuple[str, ...]:
        """The `TERMS_SHOWN` terms two sessions share that weigh most (the rarest), heaviest first, ties by the term."""
        (mine, _), (theirs, _) = self.terms(session_id), self.terms(other)
        return tuple(sorted(mine.keys() & theirs.keys(), key=lambda t: (-mine[t], t))[:TERMS_SHOWN])


def _terms(tokens: list[str], common: set[str], idf: dict[str, float]) -> dict[str, float]:
    """A unit's terms, each weighing the idf of its word: its distinct tokens except bare numbers (dates, times, prices
    say little alone) and `common` words, and each number with the word after it ("3 shirt", weighing "shirt")."""
    distinct = set(tokens)
    numbers = set(filter(str.isdigit, distinct))
    terms = {word: idf.get(word, 0.0) for word in distinct - common - numbers}
    if numbers:
        for number, word in zip(tokens, tokens[1:]):
            if number in numbers and word not in numbers and word not in common:
                terms[f"{number} {word}"] = idf.get(word, 0.0)
    return terms
