"""Cross-session links: sessions of one user that talk about the same things, found at ingestion without a model.

The paper leaves cross-session linking as future work. Here two sessions are linked when they share rare terms
or hold units that say nearly the same thing, and each link says why:

- **shared terms**: the BM25 tokens of their L0 units (`index.tokenize`: content words and names, stemmed) and
  number-noun pairs ("3 shirt"), weighted by the index's idf (`UnitIndex.lexical.idf()`), so that a word every
  session uses counts for little; `overlap` is the cosine of the two sessions' idf-weighted term sets (0 to 1);
- **dense similarity**: the best cosine between a unit of one and a unit of the other (the vectors the index
  already holds).

`strength` is their mean. Each session keeps its `LINKS_PER_SESSION` strongest links at or above the threshold of
the memory's embedding space (`threshold`: cosines run higher in some spaces than in others), lowered in a memory
of fewer than `FULL_SIZE` sessions (`small_discount`: there every word is rare, so the overlap of two sessions about
one subject comes out lower); a link stands when either of its sessions keeps it. The table is derived data saved beside the index of each
generation (``index/<generation>/links.json``: old generations' tables are debris like their index files) and
rebuilt from the index when missing, damaged or built at another threshold.

Linking a new session compares it with every session of the index (O(sessions)); forgetting a session drops its
links (the sessions that lose one are not re-linked to others: a later rebuild would); a session replaced
(extended) is linked again as a new one. Each commit first reads the terms and vectors of the whole index (linear
in its units: 0.03 s for the 200 raw units of the 50-session history shipped with the package, whose whole table
is built in 0.2 s, on a quiet core).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from apdmem.memory.index import UnitIndex

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
        self.kept: dict[str, list[Link]] = kept or {}

    def links(self, session_id: str | None = None) -> list[Link]:
        """Every link (each pair once, from the session whose id sorts first), or those of one session (from it);
        strongest first."""
        if session_id is not None:
            mine = {l.other: l for l in self.kept.get(session_id, [])}
            for sid, links in self.kept.items():
                for l in links:
                    if l.other == session_id and sid not in mine:
                        mine[sid] = l.reversed()
            return sorted(mine.values(), key=lambda l: (-l.strength, l.other))
        pairs = {(l.session_id, l.other) if l.session_id < l.other else (l.other, l.session_id): l
                 for links in self.kept.values() for l in links}
        pairs = {ends: (l if l.session_id == ends[0] else l.reversed()) for ends, l in pairs.items()}
        return sorted(pairs.values(), key=lambda l: (-l.strength, l.session_id, l.other))

    def copy(self) -> LinkTable:
        return LinkTable(self.threshold, {sid: list(links) for sid, links in self.kept.items()})

    def add(self, index: UnitIndex, session_ids: list[str]) -> None:
        """Link these sessions (already in `index`) to every other session of it, and let the others keep a
        link to them when it is among their strongest."""
        profiles = _profiles(index)
        for sid in session_ids:
            self.remove(sid)
            if sid not in profiles.terms or sid not in profiles.sessions:
                continue
            similarities = profiles.similarities(sid)
            needed = self.threshold - small_discount(len(profiles.sessions))
            found = [link for other in profiles.terms if other != sid and other in similarities
                     if (link := _link(sid, other, profiles, similarities[other], needed)) is not None]
            found.sort(key=lambda l: (-l.strength, l.other))
            self.kept[sid] = found[:LINKS_PER_SESSION]
            for link in found:
                theirs = [l for l in self.kept.get(link.other, []) if l.other != sid] + [link.reversed()]
                theirs.sort(key=lambda l: (-l.strength, l.other))
                self.kept[link.other] = theirs[:LINKS_PER_SESSION]
        self.kept = {sid: links for sid, links in self.kept.items() if links}

    def remove(self, session_id: str) -> None:
        """Drop every link of a session (forgotten, or about to be linked again)."""
        self.kept.pop(session_id, None)
        for sid in list(self.kept):
            self.kept[sid] = [l for l in self.kept[sid] if l.other != session_id]
            if not self.kept[sid]:
                del self.kept[sid]

    def dump(self) -> bytes:
        table = {"format": FORMAT, "threshold": self.threshold,
                 "links": {sid: [l.to_json() for l in links] for sid, links in sorted(self.kept.items())}}
        return json.dumps(table, ensure_ascii=False).encode()

    @classmethod
    def load(cls, raw: bytes, sessions, threshold: float) -> LinkTable:
        """The table `dump` wrote; ValueError when it is unreadable, was built at another threshold or names sessions
        not in `sessions`."""
        try:
            data = json.loads(raw)
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


@dataclass
class _Profiles:
    """What linking compares, per live session of an index: its terms (with their idf) and its unit vectors."""

    terms: dict[str, dict[str, float]]
    norms: dict[str, float]
    vectors: np.ndarray  # every live unit vector, grouped by session
    sessions: list[str]  # the sessions in the order of `vectors`
    starts: np.ndarray  # where each session's vectors begin in `vectors`

    def similarities(self, session_id: str) -> dict[str, float]:
        """The best cosine between a unit of this session and a unit of each session (one product, O(units))."""
        at = self.sessions.index(session_id)
        end = self.starts[at + 1] if at + 1 < len(self.sessions) else len(self.vectors)
        # einsum, not BLAS: OpenBLAS's threads spin against each other on a busy machine (40x slower measured on
        # two loaded cores for a session of 8 vectors against 400).
        best = np.einsum("id,jd->ij", self.vectors[self.starts[at]:end], self.vectors).max(axis=0)
        return dict(zip(self.sessions, np.maximum.reduceat(best, self.starts).tolist()))


def _profiles(index: UnitIndex) -> _Profiles:
    idf, live = index.lexical.idf(), [i for i, alive in enumerate(index.alive) if alive]
    # Words in half the units or more (BM25 floors their idf; the role names of raw units are such words) are no
    # reason to link anything.
    units_with = Counter(t for i in live for t in set(index.tokens[i]))
    common = {t for t, n in units_with.items() if 2 * n >= len(live)}
    terms: dict[str, dict[str, float]] = {}
    for i in live:
        mine = terms.setdefault(index.units[i].session_id, {})
        for term, word in _terms(index.tokens[i], common):
            mine[term] = idf.get(word, 0.0)
    norms = {sid: math.sqrt(sum(w * w for w in t.values())) for sid, t in terms.items()}
    owners = [index.units[r].session_id if index.alive[r] else None for r in index.dense.rows]
    sessions = [sid for sid in dict.fromkeys(owners) if sid is not None]
    order = {sid: i for i, sid in enumerate(sessions)}
    keep = [i for i in sorted(range(len(owners)), key=lambda i: order.get(owners[i], -1)) if owners[i] is not None]
    counts = np.bincount([order[owners[i]] for i in keep], minlength=len(sessions))
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    return _Profiles(terms, norms, index.dense.vectors()[keep], sessions, starts)


def _terms(tokens: list[str], common: set[str]):
    """A unit's terms, each with the word whose idf weighs it: its tokens except bare numbers (dates, times,
    prices say little alone) and `common` words, and each number with the word after it ("3 shirt")."""
    for i, token in enumerate(tokens):
        word = tokens[i + 1] if token.isdigit() and i + 1 < len(tokens) else token
        if not word.isdigit() and word not in common:
            yield (f"{token} {word}" if word is not token else token), word


def _link(sid: str, other: str, profiles: _Profiles, similarity: float, threshold: float) -> Link | None:
    """The link between two sessions; None when it is weaker than `threshold`."""
    mine, theirs = profiles.terms[sid], profiles.terms[other]
    weights = {t: mine[t] for t in mine.keys() & theirs.keys()}
    norm = profiles.norms[sid] * profiles.norms[other]
    overlap = sum(w * w for w in weights.values()) / norm if norm else 0.0
    strength = (max(similarity, 0.0) + overlap) / 2
    if strength < threshold:
        return None
    terms = tuple(sorted(weights, key=lambda t: (-weights[t], t))[:TERMS_SHOWN])
    return Link(sid, other, round(strength, 4), round(similarity, 4), round(overlap, 4), terms)
