"""The storage protocol of one user's memory: generations, commits, repairs, and the one rule for what a writer
may delete.

A user's store holds, under ``users/<user>/``:

- ``manifest.json``: the number of the current *generation* and the *segments* of its index, in order (a few
  hundred bytes: the listing is in the segments);
- ``index/<segment>/segment.json`` and ``vectors.f32``: a segment, written once by a commit and never changed: L0
  units (without their texts) with their BM25 tokens, and their vectors, plain float32; the listing entries of
  the sessions whose units it holds (date, turn count, content hash, unit count, metadata); and the link lists
  (`apdmem.memory.links`) that the commit changed, by the session keeping them (a later segment's list replaces an
  earlier one's). The index is the segments' units one after the other. Derived data: rebuilt from the layers, the
  links from the index, when missing or damaged;
- ``sessions/<session>/``: the layers (``session.json`` and ``L3.md``, ``L0.json`` and ``L0.md``, and L1/L2
  once read).

and, while a writer changes the files of some sessions, their ids under ``"unfinished"``; while a reindex runs
(or after one was killed), ``reindex/<space>/<session>``: the vectors it saved so far, each with a digest of the
texts they embed.

Writers (ingest, forget, the cache of L1/L2, a reindex's commit) hold the user's writer lock while they change
the store, re-read the manifest under it (when it is the one this process read or wrote last, the generation it
holds is current: nothing else is read), and write the manifest last; the work that takes long (models,
embeddings) happens before the lock is taken, and a reindex saves the vectors it makes meanwhile without it
(under ``reindex/``, which no reader reads). Before a writer creates, replaces or deletes the files of a session it names the
session unfinished in the manifest (unlisting an old version); its commit lists the new version and clears the
mark. So a writer killed at any moment leaves either files the manifest names as unfinished (debris) or a
whole session still listed; and ``session.json`` is written last, so a folder with a readable one is whole.

A commit writes what changed, not the history (`_plan`): new segments, numbered after the generation it replaces,
then the manifest naming them, then it deletes the segments no longer named. Its new segment holds the sessions
added or replaced (their units are the last of the index) and the link lists that changed; a segment holding a byte
of a session that is gone (forgotten, or replaced: its old units, its entry, a link to it) is written again
without it, in its place, so that forgetting leaves no byte of a session; and the segments at the end of the list
are merged by eights while they are of one size (tier) and hold at most `SEGMENT_UNITS` units together (`_merged`).
So a one-session commit writes that session's segment and a small manifest, whatever the history; a unit is
written again about twice as its segment is merged; forgetting rewrites at most a segment's worth; and a user keeps
a few dozen segments (fewer than eight small ones per tier, and full ones of 256 to 2,048 units). The merge is part
of the commit that triggers it, under the same lock: readers never wait for it. Why segments and not one file
per session: a commit then writes one file pair whatever it holds, a reader opens a few dozen files and not
thousands, and a link list changed by a commit (new sessions are linked both ways) is written with it, not into
the segment of the session that keeps it. Why a removal rewrites segments rather than recording a tombstone:
forgetting must leave no byte of the session, and so no segment keeps dead units (only link lists that a later
segment replaced, dropped when their segment is merged or written again), and no compaction for dead data is
needed. In PostgreSQL each file is a row written in the writer's transaction.

Readers never take the lock and never write (a read-only store serves them): they read the manifest, then the
segments it names (immutable: a number is never reused once named), and start over if a writer replaced the
generation meanwhile (a segment it names is gone). A process that holds a generation and finds its segments
followed by new ones (another process committed sessions) reads only those. What a reader cannot use (a missing or unreadable manifest, an
index that does not fit, a whole session left unlisted) is repaired by a writer, which writes the index whole
again; on a read-only store, in memory only.

Format 2 (before segments: the listing in the manifest, ``index/<generation>/units.json``, ``vectors.f32`` and
``links.json`` holding the whole index) is read as it is; the first write (any writer, or the sweep of a start-up
that finds debris) writes its index as segments in a commit of its own, the same units in the same order.

`Generations` is the only code that deletes anything from a user's store (besides `migrate`, which replaces
a user of its target wholesale on the operator's request), and `Generations._debris` is the one rule for what
may be deleted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from apdmem.errors import ConfigError, InvalidIdError, OtherSpaceError, StoreError, warn_once
from apdmem.memory import layers
from apdmem.memory.index import UnitIndex, make_lexical
from apdmem.memory.links import LinkTable, threshold
from apdmem.memory.records import Session, Unit, check_id
from apdmem.memory.store import TEMPORARY_PREFIX, UserStore, session_key
from apdmem.models import recorded_space

FORMAT = 3  # format 2 (one whole index per generation) is read, and rewritten as segments by the first write
READ_ATTEMPTS = 20  # a reader starts over this often when writers keep replacing the generation it reads
MAX_GENERATION = 2**53  # generation numbers are file names and JSON numbers: a larger one is damage
REEMBED_CHUNK = 32  # sessions re-embedded, and their vectors saved in one write, per step of a reindex
SEGMENT_UNITS = 2048  # units a segment holds at most (~13 MB of raw units with bge-small), unless one session holds more
MERGE_FANOUT = 8  # this many segments of one tier at the end of the index are merged into one
TIER_UNITS = 32  # segments of tier 0 hold fewer units than this, of tier 1 fewer than MERGE_FANOUT times as many ...
SEGMENT, VECTORS = "segment.json", "vectors.f32"  # the files of a segment, under index/<number>/

log = logging.getLogger("apdmem")


@dataclass
class Generation:
    """One consistent state of a memory: the manifest as stored and the index saved with it."""

    raw: bytes | None  # manifest.json as read (None: nothing stored yet)
    manifest: dict  # as stored, with the listing ("sessions") gathered from the segments
    index: UnitIndex | None  # None until the first session (its dimension comes from the embeddings)
    links: LinkTable | None = None  # the sessions' links, saved with the index (None with it)
    # The stored segments of the index, in order; None when the index is not stored as these (format 2, or a repair
    # made in memory only): the next commit then writes it whole.
    segments: list[Segment] | None = None

    @property
    def number(self) -> int:
        return self.manifest["generation"]

    def unlist(self, session_ids: list[str]) -> None:
        """Remove these listed sessions from this generation (one `Generations.derive` made, not yet committed):
        their units, their links and their entries."""
        for sid in session_ids:
            self.index.remove(sid)
            self.links.remove(sid)
            del self.manifest["sessions"][sid]


@dataclass
class Segment:
    """One stored segment of an index: units with their vectors and tokens, the listing entries of their sessions, and
    link lists, as a commit wrote them (``index/<number>/segment.json`` and ``vectors.f32``)."""

    number: int
    listing: dict[str, dict]  # the sessions whose units it holds, in the order of their units, with their entries
    links: dict[str, list]  # link lists as stored, by the session keeping them
    units: int
    part: object = None  # the link lists as stored, with their format and threshold (`LinkTable.part`)
    # The lists of a link table that this segment's lists are, by session, for the sessions whose latest list it holds
    # (it wrote them, or they were read from it): a table's lists are never changed, so a commit finds the same list
    # object unchanged without comparing what it holds (`_plan`).
    kept: dict[str, list | None] = field(default_factory=dict, compare=False)
    names: frozenset[str] = field(init=False)  # every session it holds a byte of: its own, and those of its links

    def __post_init__(self) -> None:
        linked = (link[0] for links in self.links.values() if isinstance(links, list)
                  for link in links if isinstance(link, list) and link)
        self.names = frozenset(chain(self.listing, self.links, (o for o in linked if isinstance(o, str))))


@dataclass
class _Part:
    """A segment to write: the sessions whose units and entries it holds, and those whose link lists it holds."""

    sessions: list[str]
    links: list[str]


class Stale(Exception):
    """The generation being read was replaced by a writer meanwhile: read again."""


class Damaged(Exception):
    """Stored state that a reader cannot use as it is; a writer repairs it (the message says what)."""


class Generations:
    """The committed generations of one user's memory in `store`, and the protocol that changes them.

    `space` names the configured embeddings (`apdmem.models.embeddings_id`): a memory recording another space is
    refused (`OtherSpaceError`), except by `reembed` (``reindexing=True``). `dimension` and `embed` give the
    embeddings' dimension and vectors (to check the index, and to rebuild a damaged one; None for a reader that
    only reads, such as `migrate`'s); `window`/`stride` rebuild raw L0 units.
    """

    def __init__(self, store: UserStore, *, space: str, lexical: str, dimension: Callable[[], int] | None,
                 embed: Callable[[list[str]], np.ndarray] | None, window: int, stride: int, reindexing: bool = False):
        self.store, self.user_id = store, store.user_id
        self.space, self.lexical = recorded_space(space), lexical
        self.link_threshold = threshold(self.space)
        self.reindexing = reindexing  # a memory of another space is read only to be re-embedded
        self._dimension, self._embed = dimension, embed
        self.window, self.stride = window, stride
        self.writing = threading.RLock()  # this process's writers of the user, one at a time (the store lock orders processes)
        self._swap = threading.Lock()
        self.current = Generation(None, self.parse_manifest(None), None)
        self._read_once = False
        self.repairs: list[str] = []  # what `repair` did, for a caller's report (`Memory.reindex`)
        self.resumed = 0  # sessions whose vectors the last `reembed` found saved by an interrupted one

    # --- reading (no lock taken, nothing written unless something needs a repair) ---------------------------

    def start(self) -> None:
        """Read the current generation; if a killed writer left debris, clean it (unless a writer is busy or
        the store is read-only). A user with nothing stored is left without a trace."""
        self.refresh()
        if not self._needs_sweep(self.current):
            return
        try:
            with self.writing, self.store.writer(wait=False) as held:
                if held and self.store.get("manifest.json") == self.current.raw:
                    self.sweep(self._upgraded(self.current))
        except StoreError:
            pass  # a read-only store is served as it is; its debris is never read

    def refresh(self) -> None:
        """Catch up with what other writers committed. Cheap when nothing changed: one read of the manifest."""
        raw = self.store.get("manifest.json")
        if self._read_once and raw == self.current.raw:
            return
        try:
            self.adopt(self.read(raw))
        except Damaged as damage:
            try:
                with self.writer():  # repaired under the lock, as a writer would
                    pass
            except StoreError as refused:  # a read-only store: repaired in memory, for this reader only
                self.adopt(self.repair(raw, str(damage), unsaved=str(refused)))
        self._read_once = True

    def adopt(self, generation: Generation) -> None:
        with self._swap:  # generations only move forward, whichever thread read last
            if generation.number >= self.current.number or generation.raw is None:
                self.current = generation

    def read(self, raw: bytes | None, *, need_links: bool = True) -> Generation:
        """The generation `raw` names, read without the lock; raises Damaged when it needs a repair. With
        ``need_links=False`` a missing or unusable link table is no damage: the generation comes without one (its
        ``links`` None), as a copy that rebuilds it needs it."""
        for _ in range(READ_ATTEMPTS):
            try:
                return self._generation(raw, need_links)
            except Stale:
                raw = self.store.get("manifest.json")
        raise Damaged("index files keep vanishing")

    def parse_manifest(self, raw: bytes | None) -> dict:
        """The manifest stored as `raw` (None: a new, empty one); raises Damaged when it is unusable."""
        if raw is None:
            return {"format": FORMAT, "generation": 0, "user_id": self.user_id, "embeddings": self.space, "sessions": {}}
        try:
            manifest = json.loads(raw)
            assert isinstance(manifest, dict)
            version = manifest.get("format")
        except (ValueError, AssertionError, RecursionError):
            raise Damaged("manifest.json is unreadable") from None
        if version not in (2, FORMAT):
            newer = isinstance(version, int) and version > FORMAT
            raise ConfigError(f"memory of user {self.user_id!r} has format {version}; this apdmem reads format {FORMAT}"
                              + ("; upgrade apdmem" if newer else "; ingest the history again into a new memory directory"))
        number = manifest.get("generation")
        if type(number) is not int or not 0 <= number <= MAX_GENERATION:
            raise Damaged("manifest.json names no valid generation")
        sessions, unfinished = manifest.get("sessions", {}), manifest.get("unfinished", [])
        if version == FORMAT:  # the listing is in the segments
            segments = manifest.get("segments")
            if not isinstance(segments, list) or not all(type(n) is int and 0 < n <= number for n in segments) \
                    or len(set(segments)) != len(segments) or "sessions" in manifest:
                raise Damaged("manifest.json is unreadable")
        elif not isinstance(sessions, dict) or not all(_listing_entry(m) for m in sessions.values()):
            raise Damaged("manifest.json is unreadable")
        if not isinstance(unfinished, list) or not all(isinstance(s, str) and _valid_id(s) for s in unfinished):
            raise Damaged("manifest.json is unreadable")
        if not self.own_space(manifest) and not self.reindexing:
            raise OtherSpaceError(self.user_id, recorded_space(manifest.get("embeddings")), self.space)
        return manifest

    def own_space(self, manifest: dict) -> bool:
        """Whether the manifest records this object's space (the names of older memories read by today's)."""
        return recorded_space(manifest.get("embeddings")) == self.space

    def _generation(self, raw: bytes | None, need_links: bool = True) -> Generation:
        manifest = self.parse_manifest(raw)
        try:
            index, links, segments = self._stored_index(manifest, self.current)
        except ValueError as damage:
            if self.store.get("manifest.json") != raw:
                raise Stale() from None  # a writer replaced what this manifest names meanwhile
            raise Damaged(str(damage)) from None
        folders = {k.split("/")[1] for k in self.store.keys("sessions/")}
        if strays := self._unlisted_sessions(manifest, folders):
            if self.store.get("manifest.json") != raw:
                raise Stale()  # a writer announced them meanwhile
            what = "manifest.json is missing" if raw is None else f"sessions not listed: {', '.join(sorted(strays))}"
            raise Damaged(what)
        if raw is None or not manifest["sessions"]:
            return Generation(raw, manifest, None, segments=segments)
        number = manifest["generation"]
        if self._dimension is not None and self.own_space(manifest) and index.dimension != self._dimension():
            raise Damaged(f"index of generation {number} has vectors of dimension {index.dimension}, "
                          f"the embeddings give {self._dimension()}")
        if not _indexes_listing(index, manifest):
            raise Damaged(f"index of generation {number} does not match the listing")
        if links is None and need_links:
            if self.store.get("manifest.json") != raw:
                raise Stale()
            raise Damaged(f"link table of generation {number} is missing, damaged or built at another threshold")
        stored = {k.split("/")[1] for k in self.store.keys("sessions/") if k.endswith("/session.json")}
        if missing := [s for s in manifest["sessions"] if session_key(s) not in stored]:
            raise Damaged(f"listed sessions without their files: {', '.join(missing)}")
        return Generation(raw, manifest, index, links, segments)

    def _stored_index(self, manifest: dict, base: Generation | None = None
                      ) -> tuple[UnitIndex | None, LinkTable | None, list[Segment] | None]:
        """The index and link table the manifest names, and its segments (None: a format-2 index, stored whole). Fills
        the manifest's listing from the segments. The link table is None when missing, damaged or built at another
        threshold than the manifest's space's; ValueError (saying what) when the index cannot be read.

        When the segments of `base` (a generation read or committed before) come first, unchanged (another process
        committed sessions meanwhile), only the segments after them are read: the index is a copy of base's with
        their units added after its own, as a whole read would make it."""
        if manifest.get("format", FORMAT) != FORMAT:
            return self._whole_index(manifest)
        names, manifest["sessions"] = manifest.pop("segments", []), {}
        known = _reusable(base, names)
        values = self.store.get_many([f"index/{n}/{name}" for n in names[len(known) :] for name in (SEGMENT, VECTORS)])
        parts, segments, listing, links = [], list(known), {}, {}
        for segment in known:
            listing.update(segment.listing)
            _lay_over(links, segment.part)
        for number, table, vectors in zip(names[len(known) :], values[::2], values[1::2]):
            if table is None or vectors is None:
                raise ValueError(f"index segment {number} is missing")
            try:
                data = json.loads(table)
                own, own_links = data["sessions"], data.get("links")
                if not all(_listing_entry(m) for m in own.values()) or not own.keys().isdisjoint(listing):
                    raise ValueError("listing entries damaged or repeated")
                _lay_over(links, own_links)
                own_lists = own_links.get("links") if isinstance(own_links, dict) else None
                segment = Segment(number, own, own_lists if isinstance(own_lists, dict) else {}, len(data["units"]),
                                  own_links)
            except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
                raise ValueError(f"index segment {number} is damaged: {exc}") from None
            listing.update(own)
            parts.append((data, vectors))
            segments.append(segment)
        if not segments:
            return None, None, segments
        values = data = None  # the tables, read and parsed: load_parts frees them one by one as it reads them
        try:
            index = UnitIndex.load_parts(parts, self.lexical) if parts else None
        except ValueError as exc:
            raise ValueError(f"index of generation {manifest['generation']} is damaged: {exc}") from None
        start = 0
        for segment in segments[len(known) :]:  # each segment holds the units of the sessions it lists, and only those
            held = Counter(u.session_id for u in index.units[start : start + segment.units])
            if held != {s: m["units"] for s, m in segment.listing.items() if m["units"]}:
                raise ValueError(f"index segment {segment.number} does not match its listing")
            start += segment.units
        if known:
            total = len(base.index.units) + len(index.units)
            if type(make_lexical(self.lexical, total)) is not type(base.index.lexical):  # a whole read picks another
                manifest["segments"] = names
                return self._stored_index(manifest)
            index = base.index.compact().extended(index)
        manifest["sessions"] = listing
        try:
            table = LinkTable.load(links, listing, threshold(recorded_space(manifest.get("embeddings"))))
        except ValueError:
            table = None
        else:
            home = {sid: segment for segment in segments for sid in segment.links}  # where each latest list is
            for segment in segments:
                segment.kept = {sid: table.kept.get(sid) for sid in segment.links if home[sid] is segment}
        return index, table, segments

    def _whole_index(self, manifest: dict) -> tuple[UnitIndex | None, LinkTable | None, None]:
        """The index and link table of a format-2 generation (``index/<generation>/units.json``, ``vectors.f32``,
        ``links.json``)."""
        if not manifest["sessions"]:
            return None, None, None
        number = manifest["generation"]
        table, vectors = self.store.get_many([f"index/{number}/units.json", f"index/{number}/vectors.f32"])
        if table is None or vectors is None:
            raise ValueError(f"index of generation {number} is missing")
        try:
            index = UnitIndex.load(table, vectors, self.lexical)
        except ValueError as exc:
            raise ValueError(f"index of generation {number} is damaged: {exc}") from None
        return index, self._saved_links(number, manifest), None

    def _unlisted_sessions(self, manifest: dict, folders: set[str]) -> dict[str, Session]:
        """Whole sessions stored but not listed, and not named by a writer as unfinished: a listing lost or
        damaged. They are listed again by a repair, never deleted."""
        known = {session_key(s) for s in manifest["sessions"]} | {session_key(s) for s in manifest.get("unfinished", [])}
        found = {}
        for folder in sorted(folders - known):
            session = self.recovered_session(folder)
            if session is not None:
                found[session.session_id] = session
        return found

    # --- writing ----------------------------------------------------------------------------------------

    @contextmanager
    def writer(self) -> Iterator[Generation]:
        """Hold the user's writer lock and yield the current generation, read under the lock and repaired if
        it needs it. Inside, change a copy (`derive`) and `commit` it."""
        with self.writing:
            with self.store.writer():
                raw = self.store.get("manifest.json")
                if raw is not None and raw == self.current.raw and self.current.segments is not None:
                    generation = self.current  # what this process read or committed last is current: not read again
                else:
                    try:
                        generation = self.read(raw)
                    except Damaged as damage:
                        generation = self.repair(raw, str(damage))
                    self.adopt(generation)
                yield self._upgraded(generation)

    def _upgraded(self, generation: Generation) -> Generation:
        """`generation`, its index stored as segments: a format-2 index (one whole index per generation) is written
        as segments by a commit of the same sessions. Called under the writer lock."""
        if generation.manifest.get("format") == FORMAT:
            return generation
        log.info("apdmem: the index of user %r is rewritten as segments (format %d)", self.user_id, FORMAT)
        return self.commit(self.derive(generation))

    def derive(self, generation: Generation) -> Generation:
        """A copy of `generation` to change; the stored one is untouched until `commit`."""
        manifest = _copied(generation.manifest)
        index = generation.index.compact() if generation.index else UnitIndex(self._dimension(), self.lexical)  # a copy
        links = generation.links.copy() if generation.links else LinkTable(self.link_threshold)
        return Generation(generation.raw, manifest, index, links, generation.segments)

    def commit(self, generation: Generation) -> Generation:
        """Save a new generation: the segments that hold what changed since the generation it was derived from (see
        `_plan`; all of them when it has no stored segments), with its link table (built from the index if the
        generation has none), then the manifest that makes it current and names its segments, then drop the segments
        it no longer names. Sessions now listed are no longer unfinished. Called under the writer lock."""
        manifest = generation.manifest
        first = max(manifest["generation"], self.current.number) + 1
        manifest["format"] = FORMAT
        _settle(manifest, manifest["sessions"])
        index = generation.index if generation.index.alive.all() else generation.index.compact()
        links = generation.links if generation.links is not None else LinkTable.build(index, self.link_threshold)
        rows = index.owners.rows  # each session's rows (kept up to date as units are added: not gathered again)
        listing, segments, number = manifest["sessions"], [], first
        touched = listing.changed | links.changed if isinstance(listing, Listing) and links.changed is not None else None
        for planned in _plan(generation.segments, listing, rows, links, touched):
            if isinstance(planned, _Part):
                planned, number = self._write_segment(number, planned, index, rows, listing, links), number + 1
            segments.append(planned)
        manifest["generation"] = max(first, number - 1)
        committed = self._save_manifest(Generation(None, manifest, index, links, segments))
        self.store.delete(self._debris(committed, walk=False)[0])  # the sweeps walk the whole folder for leftovers
        return committed

    def _write_segment(self, number: int, part: _Part, index: UnitIndex, rows: dict[str, list[int]], listing: dict,
                       links: LinkTable) -> Segment:
        """Write a segment numbered `number`: the units of these sessions from `index` with their listing entries, and
        these sessions' link lists."""
        table, vectors = index.part([r for sid in part.sessions for r in rows.get(sid, ())])
        table["sessions"] = {sid: listing[sid] for sid in part.sessions}
        table["links"] = links.part(part.links)
        self.store.put({f"index/{number}/{SEGMENT}": _json(table),
                        f"index/{number}/{VECTORS}": vectors})
        return Segment(number, table["sessions"], table["links"]["links"], len(table["units"]), table["links"],
                       {sid: links.kept.get(sid) for sid in part.links})

    def _save_manifest(self, generation: Generation) -> Generation:
        """Write the manifest of a generation whose segments are stored: what makes it current."""
        stored = {**{k: v for k, v in generation.manifest.items() if k != "sessions"}, "format": FORMAT,
                  "segments": [segment.number for segment in generation.segments]}
        raw = _json(stored)
        self.store.put({"manifest.json": raw})
        saved = Generation(raw, generation.manifest, generation.index, generation.links, generation.segments)
        self.adopt(saved)
        return saved

    def begin(self, current: Generation, session_ids: list[str]) -> Generation:
        """Before a writer writes the files of these sessions: name them unfinished in the manifest (unlisting
        the versions stored now), then delete what is stored under them. A writer killed before its commit
        leaves only files that the manifest names as unfinished: debris. Called under the writer lock."""
        replaced = [s for s in session_ids if s in current.manifest["sessions"]]
        if replaced:
            generation = self.derive(current)
            generation.unlist(replaced)
        else:
            generation = Generation(current.raw, _copied(current.manifest), current.index, current.links,
                                    current.segments)
        unfinished = generation.manifest.setdefault("unfinished", [])
        unfinished += [s for s in session_ids if s not in unfinished]
        begun = self.commit(generation) if replaced else self._save_manifest(generation)
        for sid in session_ids:
            self._delete_session(sid)
        return begun

    def reembed(self, progress: Callable[[int], object] = lambda units: None) -> Generation | None:
        """Commit a new generation of the same sessions whose index holds every L0 unit embedded again, from the text
        of the session's L0 layer, with this object's embeddings, and whose manifest records their space; nothing
        but the index and the manifest changes. Returns it, or None when the memory records this space already
        (another reindex finished first). `progress` is given the number of units embedded after each chunk.

        The embedding, the long part, holds no lock (no transaction in PostgreSQL): nothing but a reindex writes a
        memory of another space. Each chunk of `REEMBED_CHUNK` sessions is embedded and its vectors saved at
        once (``reindex/<space>/<session>``, one write), so a reindex killed midway keeps what it saved, and run
        again it embeds only the rest (`resumed` counts the sessions it found saved). The commit, under the writer
        lock, reads the listing again and embeds what changed meanwhile; the saved vectors are then debris (see
        `_debris`). Killed before its manifest is written, it leaves the old generation current."""
        self.resumed = 0
        sessions = list(self.current.manifest["sessions"])
        for i in range(0, len(sessions), REEMBED_CHUNK):
            vectors = self._session_vectors(sessions[i : i + REEMBED_CHUNK], save=True)
            progress(sum(len(units) for units, _ in vectors.values()))
        with self.writer() as current:
            if self.own_space(current.manifest):
                return None
            manifest = _copied(current.manifest)
            manifest["embeddings"] = self.space
            index = UnitIndex(self._dimension(), self.lexical)
            for sid, (units, vectors) in self._session_vectors(list(manifest["sessions"]), save=False).items():
                manifest["sessions"][sid] = {**manifest["sessions"][sid], "units": len(units)}
                index.add(units, vectors)
            return self.commit(Generation(current.raw, manifest, index))

    def _session_vectors(self, session_ids: list[str], *, save: bool) -> dict[str, tuple[list[Unit], np.ndarray]]:
        """The L0 units of these sessions with their vectors in this object's space: the vectors a reindex saved
        for the same texts, else embedded now (and, with `save`, saved in one write). Counts the saved ones found
        in `resumed` when saving."""
        units = {sid: self.read_units(sid, repair=False) for sid in session_ids}
        texts = {sid: [t for u in units[sid] for t in u.embed_texts] for sid in session_ids}
        keys = {sid: f"reindex/{_space_tag(self.space)}/{session_key(sid)}" for sid in session_ids}
        out = {}
        for sid, raw in zip(session_ids, self.store.get_many(list(keys.values()))):
            vectors = _saved_vectors(raw, texts[sid], self._dimension())
            if vectors is not None:
                out[sid] = (units[sid], vectors)
        todo = [sid for sid in session_ids if sid not in out]
        if save:
            self.resumed += len(out)
        if todo:
            vectors = self._embed([t for sid in todo for t in texts[sid]])
            start = 0
            for sid in todo:
                out[sid] = (units[sid], vectors[start : start + len(texts[sid])])
                start += len(texts[sid])
            if save:
                self.store.put({keys[sid]: _vectors_value(texts[sid], out[sid][1]) for sid in todo})
        return {sid: out[sid] for sid in session_ids}

    def forget(self, current: Generation, session_ids: list[str]) -> None:
        """Remove listed sessions: the new generation first (without them, and naming them unfinished; its commit
        drops the old index, which holds their L0 text), then their files, then the marks. A kill in between
        leaves files that the next writer deletes, never a session listed again."""
        generation = self.derive(current)
        generation.unlist(session_ids)
        generation.manifest.setdefault("unfinished", []).extend(session_ids)
        committed = self.commit(generation)
        for session_id in session_ids:
            self._delete_session(session_id)
        self.sweep(committed, walk=False)  # their folders are empty now; a start walks the user's other folders

    def _delete_session(self, session_id: str) -> None:
        folder = f"sessions/{session_key(session_id)}/"
        self.store.delete(self.store.keys(folder) + self.store.leftovers(folder))

    # --- what may be deleted ----------------------------------------------------------------------------------

    def _debris(self, generation: Generation, *, walk: bool = True) -> tuple[list[str], list[str]]:
        """THE rule for what may be deleted from a user's store (nothing else ever is): what a killed writer
        provably left. Returns (keys, leftovers); the leftovers only with `walk` (they are found by walking every
        folder of the user):

        - index files of segments the manifest does not name (a manifest must be stored: without one, no index
          file is known to be old): a commit killed before its manifest was written left them, or a later commit
          replaced them (format 2: index files of any generation other than the manifest's);
        - the files of a session the manifest names as unfinished and does not list: a forget or a
          replacement committed its removal, or an ingestion announced it and was killed before its commit;
        - temporary files of an interrupted write, and links (a store never holds one: a link is planted);
        - vectors saved by a reindex into the space the manifest records (it is done) or of a session the manifest
          does not list.

        A session's own files are never debris because a listing is missing, unreadable or lacks it: such
        a session is listed again by `repair`.
        """
        manifest = generation.manifest
        keys = []
        if generation.raw is not None:
            named = set(self.index_keys(generation))
            keys += [k for k in self.store.keys("index/") if k not in named]
        for sid in manifest.get("unfinished", []):
            if sid not in manifest["sessions"]:
                keys += self.store.keys(f"sessions/{session_key(sid)}/")
        if generation.raw is not None and (saved := self.store.keys("reindex/")):
            done = _space_tag(recorded_space(manifest.get("embeddings")))
            listed = {session_key(s) for s in manifest["sessions"]}
            keys += [k for k in saved if k.split("/")[1] == done or k.split("/")[-1] not in listed]
        return keys, self.store.leftovers() if walk else []

    @staticmethod
    def index_keys(generation: Generation) -> list[str]:
        """The keys of the index files that the manifest of `generation`, as stored, names: its segments' (format 2:
        its generation's); none when it is unreadable."""
        try:
            manifest = json.loads(generation.raw)
            if manifest["format"] == FORMAT:
                return [f"index/{number}/{name}" for number in manifest["segments"] for name in (SEGMENT, VECTORS)]
            return [f"index/{manifest['generation']}/{name}" for name in ("units.json", "vectors.f32", "links.json")]
        except (ValueError, TypeError, KeyError, RecursionError):
            return []

    def _needs_sweep(self, generation: Generation) -> bool:
        keys, leftovers = self._debris(generation)
        return bool(keys or leftovers or generation.manifest.get("unfinished"))

    def sweep(self, generation: Generation, *, walk: bool = True) -> Generation:
        """Delete the debris of killed writers (see `_debris`; the leftovers found walking every folder of the user
        only with `walk`) and clear the sessions marked unfinished, whose files are gone then. Called under the writer
        lock."""
        keys, leftovers = self._debris(generation, walk=walk)
        if keys or leftovers:
            self.store.delete(keys + leftovers)
        temporary = [k for k in leftovers if k.rsplit("/", 1)[-1].startswith(TEMPORARY_PREFIX)]
        if temporary:
            log.warning("apdmem: removed %d temporary file(s) left in the memory of user %r by an interrupted write",
                        len(temporary), self.user_id)
        if planted := [k for k in leftovers if k not in temporary]:
            log.warning("apdmem: removed %d link(s) or special file(s) planted in the memory of user %r (never "
                        "followed): %s", len(planted), self.user_id, ", ".join(planted))
        if sessions := sorted({k.split("/")[1] for k in keys if k.startswith("sessions/")}):
            log.warning("apdmem: removed the files of %d session(s) that an interrupted write or a forget left in the "
                        "memory of user %r: %s", len(sessions), self.user_id, ", ".join(sessions))
        if generation.manifest.get("unfinished") and generation.raw is not None:
            manifest = _copied(generation.manifest)
            _settle(manifest, manifest.get("unfinished", []))
            generation = Generation(None, manifest, generation.index, generation.links, generation.segments)
            # a generation repaired in memory (the store refused it, then took a writer) is committed whole
            generation = self.commit(generation) if generation.segments is None else self._save_manifest(generation)
        return generation

    # --- repair -----------------------------------------------------------------------------------------------

    def repair(self, raw: bytes | None, damage: str, *, unsaved: str | None = None) -> Generation:
        """Rebuild what a reader could not use (under the writer lock, or, when the store refused the writer
        (`unsaved` says why), in memory only):
        the listing from the stored sessions if the manifest is missing or unreadable, whole sessions that
        are not listed are listed again, the index is rebuilt from the L0 layers if it does not fit, the link
        table from the index; listed
        sessions that can no longer be read are dropped from the listing (their files are kept). Logs a
        warning naming what was repaired (in memory: once per process, though every open repairs again)."""
        save = unsaved is None
        try:
            manifest = self.parse_manifest(raw) if raw is not None else None
        except Damaged:
            manifest = None
        if manifest is None:
            manifest = self.parse_manifest(None)
            manifest["generation"] = self.current.number
        index = self._saved_index(manifest)  # when only the listing was wrong, the saved index is kept
        sessions = manifest["sessions"]  # of format 3, gathered from the segments (empty when they cannot be read)
        folders = {k.split("/")[1] for k in self.store.keys("sessions/")}
        relisted = self._unlisted_sessions(manifest, folders)
        dropped = []
        for sid in list(sessions):
            if self.stored_session(session_key(sid)) is None:
                session = self.recovered_session(session_key(sid))
                if session is None or session.session_id != sid:
                    dropped.append(sid)
                    del sessions[sid]
                    if index is not None:
                        index.remove(sid)
                elif save:
                    self.store.put_json({key(sid, "session.json"): session.to_json()})
        rebuilt, was = index is None, recorded_space(manifest.get("embeddings"))
        if rebuilt:
            index = UnitIndex(self._dimension(), self.lexical)
            manifest["embeddings"] = self.space  # a reindex may have read a memory of another space
        for sid, session in relisted.items():
            sessions[sid] = listing(session, 0)
        self._index_units(index, [sid for sid in sessions if rebuilt or sid in relisted], sessions)
        # cheap beside embedding, and what it was built from may have changed
        links = LinkTable.build(index, self.link_threshold)
        if save:
            generation = self.sweep(self.commit(Generation(raw, manifest, index, links)))
        else:
            generation = Generation(raw, manifest, index, links)
        what = (f"repaired the memory of user {self.user_id!r} ({damage}): "
                + (f"index rebuilt from {len(sessions)} sessions" if rebuilt else "saved index kept")
                + (f", embedded with {self.space!r} (was {was!r})" if rebuilt and was != self.space else "")
                + (f"; listed again: {', '.join(sorted(relisted))}" if relisted else "")
                + (f"; dropped from the listing: {', '.join(dropped)}" if dropped else ""))
        self.repairs.append(what)
        if save:
            log.warning("apdmem: %s", what)
        else:
            warn_once(f"apdmem: {what} (in memory only: {unsaved})", key=self.store.location)
        return generation

    def _index_units(self, index: UnitIndex, session_ids: list[str], sessions: dict) -> None:
        """Add the L0 units of these sessions to `index` (embedding them), and count them in the listing."""
        units = []
        for sid in session_ids:
            own = self.read_units(sid, repair=False)
            sessions[sid]["units"] = len(own)
            units += own
        index.add(units, self._embed([t for u in units for t in u.embed_texts]))

    def _saved_index(self, manifest: dict) -> UnitIndex | None:
        """The index saved with the manifest's generation, if it is readable, holds the listed sessions and is in this
        object's space (one of another space, read by a reindex, is rebuilt: vectors of two spaces never mix). Fills
        the listing of a format-3 manifest from its segments (when they cannot be read: an empty one)."""
        try:
            index, _, _ = self._stored_index(manifest)
        except ValueError:
            return None
        if index is None or not self.own_space(manifest) or index.dimension != self._dimension() \
                or not _indexes_listing(index, manifest):
            return None
        return index

    def _saved_links(self, number: int, manifest: dict) -> LinkTable | None:
        """The link table saved with generation `number`, if it is readable, was built at the threshold of the space
        the manifest records (another than this object's when a reindex reads it) and links listed sessions only."""
        raw = self.store.get(f"index/{number}/links.json")
        recorded = threshold(recorded_space(manifest.get("embeddings")))
        try:
            return LinkTable.load(raw, manifest["sessions"], recorded) if raw is not None else None
        except ValueError:
            return None

    def unreadable_session(self, session_id: str) -> Session | None:
        """A listed session whose session.json cannot be read: rebuilt from its L3.md if that is readable
        (and written back, unless the store is read-only), else dropped from the listing, its files kept."""
        session = self.recovered_session(session_key(session_id))
        if session is not None and session.session_id != session_id:
            session = None
        try:
            with self.writer() as current:
                if session_id in current.manifest["sessions"] and self.stored_session(session_key(session_id)) is None:
                    if session is not None:
                        self.store.put_json({key(session_id, "session.json"): session.to_json()})
                    else:
                        self.repair(current.raw, f"session {session_id!r} is unreadable")
        except StoreError:
            pass  # read-only: the rebuilt session is served, nothing is saved
        return session

    # --- the layers the protocol reads ----------------------------------------------------------------------

    def stored_session(self, folder: str) -> Session | None:
        """The session stored under a session key; None when it is missing or unreadable."""
        try:
            session = Session.from_json(self.store.get_json(f"sessions/{folder}/session.json"))
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
            return None
        return session if session_key(session.session_id) == folder else None

    def recovered_session(self, folder: str) -> Session | None:
        """The stored session, or, when its session.json is unreadable, the session its L3.md shows (turn ids
        and labels, and the seconds of its date, are not in L3: they are lost)."""
        session = self.stored_session(folder)
        if session is not None:
            return session
        text = self.store.get(f"sessions/{folder}/L3.md")
        session = layers.parse_l3(text.decode("utf-8", "replace")) if text is not None else None
        if session is None or session_key(session.session_id) != folder:
            return None
        warn_once(f"apdmem: session.json of session {session.session_id!r} of user {self.user_id!r} was unreadable; "
                  "rebuilt from its L3.md", key=self.store.location)  # met at every read until a writer saves it
        return session

    def read_units(self, session_id: str, *, repair: bool = True) -> list[Unit]:
        """L0 units of a session; a damaged L0.json is rebuilt from the session's messages (raw units)."""
        try:
            data = self.store.get_json(key(session_id, "L0.json"))
            units = [Unit.from_json(u) for u in data]
            if all(u.session_id == session_id and u.embed_texts for u in units) and units:
                return units
        except (ValueError, TypeError, RecursionError):
            pass
        session = self.recovered_session(session_key(session_id))
        if session is None:
            return []
        units = [layers.raw_unit(session, a, b) for a, b in layers.window_spans(len(session.turns), self.window, self.stride)]
        warn_once(f"apdmem: L0 of session {session_id!r} of user {self.user_id!r} was unreadable; rebuilt from its "
                  "messages", key=self.store.location)
        if repair:
            try:
                with self.writing, self.store.writer(wait=False) as held:
                    if held and session_id in self.current.manifest["sessions"]:
                        self.write_session(session, units, whole=False)
            except StoreError:
                pass  # read-only: served from memory
        return units

    def write_session(self, session: Session, units: list[Unit], *, whole: bool = True,
                      notes: tuple[str, dict[int, list[str]] | None] | None = None) -> None:
        """Write a session's layers (under the lock), as `write_sessions` does; ``whole=False`` writes L0 only."""
        if whole:
            self.write_sessions([(session, units, notes)])
        else:
            sid = session.session_id
            self.store.put_json({key(sid, "L0.json"): [u.to_json() for u in units]})
            self.store.put_text({key(sid, "L0.md"): layers.render_l0(session, units)})

    def write_sessions(self, sessions: list[tuple[Session, list[Unit], tuple[str, dict[int, list[str]] | None] | None]]) -> None:
        """Write sessions' layers (under the lock), each given with its units and the L2 notes kept from a version
        it replaces, as (writer, notes by turn): first L0, L3 (and those notes) of all, then every ``session.json``,
        so that a session.json on disk means the session is whole. Two writes however many sessions: a file store
        syncs its disk once per write, not once per file."""
        files, heads = {}, {}
        for session, units, notes in sessions:
            sid = session.session_id
            files[key(sid, "L0.json")] = _json([u.to_json() for u in units])
            files[key(sid, "L3.md")] = layers.render_l3(session).encode()
            files[key(sid, "L0.md")] = layers.render_l0(session, units).encode()
            writer, kept = notes or (None, None)
            if kept:
                files[key(sid, "L2.json")] = _json(layers.record("L2", writer, {str(t): n for t, n in sorted(kept.items())}))
                files[key(sid, "L2.md")] = layers.render_l2(session, kept).encode()
            heads[key(sid, "session.json")] = _json(session.to_json())
        self.store.put(files)
        self.store.put(heads)


def _json(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()


def _plan(stored: list[Segment] | None, listing: dict, rows: dict[str, list[int]], links: LinkTable,
          touched: set[str] | None = None) -> list[Segment | _Part]:
    """The segments of a new generation, in order: stored ones it keeps as they are, and parts to write. Its sessions
    are listed in `listing`, and their units are at `rows` of its index (in the order of the segments); `touched`
    holds every session whose entry or link list may differ from the stored ones (None: any session).

    Without stored segments, everything is written. Else the segments holding a byte of a session whose entry is gone
    or changed (forgotten, replaced) are written again without it, in their place, and one more part holds the
    sessions whose entry is new or changed (their units were added at the end of the index) and the link lists that
    changed, split into parts of at most `SEGMENT_UNITS` units; then the end of the list is merged (`_merged`). Only
    the touched sessions are compared with the stored ones: a commit's plan costs what it changed."""
    if stored is None:
        order = list(rows) + [sid for sid in listing if sid not in rows]  # sessions without units are listed too
        return _merged(_split(_Part(order, [sid for sid in order if sid in links.kept]), listing), listing)
    if touched is None:
        touched = set(listing).union(*(segment.names for segment in stored))
    was: dict[str, dict] = {}  # the stored entry of each touched session
    home: dict[str, Segment] = {}  # the segment holding the latest stored list of each touched session
    for segment in stored:
        for sid in touched:
            if sid in segment.listing:
                was[sid] = segment.listing[sid]
            if sid in segment.links:
                home[sid] = segment

    def place(sid):  # where a session's units are in the index (the few without units after them, as listed)
        return (0, rows[sid][0]) if sid in rows else (1, list(listing).index(sid))

    # Entries and link lists are replaced, never changed: the same object is unchanged (most of them, compared first).
    fresh = sorted((sid for sid in touched if sid in listing and was.get(sid) is not listing[sid]
                    and was.get(sid) != listing[sid]), key=place)
    gone = {sid for sid in was if sid not in listing} | {sid for sid in fresh if sid in was}
    kept, unknown = links.kept, object()
    relinked = sorted((sid for sid in touched if sid in listing and (
        home[sid].kept.get(sid, unknown) is not kept.get(sid)  # not the very list it stores: compare
        and [link.to_json() for link in kept.get(sid, [])] != home[sid].links[sid]
        if sid in home else sid in kept)), key=place)
    moved = set(relinked)
    plan: list[Segment | _Part] = []
    for i, segment in enumerate(stored):
        if segment.names.isdisjoint(gone):
            plan.append(segment)
            continue
        later = set().union(*(other.links.keys() for other in stored[i + 1 :]))  # lists that replace its own
        part = _Part([sid for sid in segment.listing if sid not in gone],
                     [sid for sid in segment.links if sid not in later and sid in listing and sid not in moved])
        if part.sessions or part.links:
            plan.append(part)
    return _merged(plan + _split(_Part(fresh, relinked), listing), listing)


def _split(part: _Part, listing: dict) -> list[_Part]:
    """`part` as parts of at most `SEGMENT_UNITS` units (whole sessions), each with the link lists of its sessions (the
    other sessions' with the last); none when it holds nothing."""
    chunks, size = [[]], 0
    for sid in part.sessions:
        if size and size + listing[sid]["units"] > SEGMENT_UNITS:
            chunks.append([])
            size = 0
        chunks[-1].append(sid)
        size += listing[sid]["units"]
    own = [set(chunk) for chunk in chunks]
    parts = [_Part(chunk, [sid for sid in part.links if sid in mine]) for chunk, mine in zip(chunks, own)]
    parts[-1].links += [sid for sid in part.links if not any(sid in mine for mine in own)]
    return [p for p in parts if p.sessions or p.links]


def _merged(plan: list[Segment | _Part], listing: dict) -> list[Segment | _Part]:
    """`plan` with its last `MERGE_FANOUT` segments merged into one while they are of one tier (`_tier`) and hold at
    most `SEGMENT_UNITS` units together: the segments of one-session commits are merged by eights, then those by
    eights, so that a unit is written again about twice (once per tier below the last), and an index keeps few
    segments (fewer than `MERGE_FANOUT` per tier, and segments of a tier 2 of at least 256 units). Merged, a segment
    drops the link lists that later ones replace."""
    def sessions(entry):
        return list(entry.listing) if isinstance(entry, Segment) else entry.sessions

    def units(entry):
        return entry.units if isinstance(entry, Segment) else sum(listing[sid]["units"] for sid in entry.sessions)

    while len(plan) >= MERGE_FANOUT:
        tail = plan[-MERGE_FANOUT:]
        sizes = [units(entry) for entry in tail]
        if len({_tier(size) for size in sizes}) > 1 or sum(sizes) > SEGMENT_UNITS:
            break
        home = {sid: entry for entry in tail for sid in entry.links}  # the latest lists (no entry comes after the tail)
        plan[-MERGE_FANOUT:] = [_Part([sid for entry in tail for sid in sessions(entry)],
                                      [sid for entry in tail for sid in entry.links if home[sid] is entry])]
    return plan


def _tier(units: int) -> int:
    """The tier of a segment of this many units: 0 below `TIER_UNITS`, then one more per `MERGE_FANOUT` times as many."""
    return 0 if units < TIER_UNITS else 1 + int(math.log(units / TIER_UNITS, MERGE_FANOUT) + 1e-9)


def _reusable(base: Generation | None, names: list[int]) -> list[Segment]:
    """The segments of `base`, all of them, when they come first in `names` (followed by others) and its index holds
    them; else none."""
    if base is None or not base.segments or base.index is None or not base.index.alive.all():
        return []
    if [segment.number for segment in base.segments] != names[: len(base.segments)] or len(base.segments) == len(names):
        return []
    return base.segments


def _lay_over(table: dict, part: object) -> None:
    """Lay the link lists of a segment (`LinkTable.part`) over `table`, those of the segments before it: a later list
    replaces an earlier one. A part that is no such part, or of another format or threshold than those before, leaves
    `table` without a format: `LinkTable.load` refuses it, and the table is rebuilt."""
    if not isinstance(part, dict) or not isinstance(part.get("links"), dict) or "format" in table and table["format"] is None:
        table["format"] = None
        return
    for name in ("format", "threshold"):
        if table.setdefault(name, part.get(name)) != part.get(name):
            table["format"] = None
    table.setdefault("links", {}).update(part["links"])


def _space_tag(space: object) -> str:
    """A file name for an embedding space (the folder of a reindex's saved vectors)."""
    return hashlib.sha256(json.dumps(space).encode()).hexdigest()[:16]


def _vectors_value(texts: list[str], vectors: np.ndarray) -> bytes:
    """What a reindex saves for a session: a header naming the texts (by digest) and the shape, then the vectors."""
    header = {"texts": _digest(texts), "shape": list(vectors.shape)}
    return json.dumps(header).encode() + b"\n" + np.ascontiguousarray(vectors, dtype="<f4").tobytes()


def _saved_vectors(raw: bytes | None, texts: list[str], dimension: int) -> np.ndarray | None:
    """The vectors `_vectors_value` saved for exactly these texts, in this dimension; None for anything else."""
    try:
        head, body = raw.split(b"\n", 1)
        header = json.loads(head)
        vectors = np.frombuffer(body, dtype="<f4").reshape(len(texts), dimension)
    except (AttributeError, ValueError, TypeError, RecursionError):
        return None
    if header != {"texts": _digest(texts), "shape": [len(texts), dimension]} or not np.isfinite(vectors).all():
        return None
    return vectors.astype(np.float32)


def _digest(texts: list[str]) -> str:
    return hashlib.sha256(_json(texts)).hexdigest()


def _copied(manifest: dict) -> dict:
    """A copy of a manifest to change, its listing a `Listing`. The entries of its listing are shared, not copied (a
    generation of thousands of sessions is copied at each commit): whoever changes a copy replaces an entry, never
    changes it."""
    copied = json.loads(json.dumps({key: value for key, value in manifest.items() if key != "sessions"}))
    return {key: Listing(value) if key == "sessions" else copied[key] for key, value in manifest.items()}


class Listing(dict):
    """A copy of a generation's listing (session id -> entry) that notes which sessions get a new entry or lose theirs
    (`changed`): what its commit compares with the stored segments (`_plan`), rather than every session."""

    def __init__(self, entries: dict) -> None:
        super().__init__(entries)
        self.changed: set[str] = set()

    def __setitem__(self, session_id, entry) -> None:
        self.changed.add(session_id)
        super().__setitem__(session_id, entry)

    def __delitem__(self, session_id) -> None:
        self.changed.add(session_id)
        super().__delitem__(session_id)

    def _refused(self, *args, **kwargs):
        raise TypeError("a listing changes by setting or deleting one entry at a time")

    pop = popitem = setdefault = update = clear = __ior__ = _refused


def _settle(manifest: dict, done) -> None:
    """Drop from the manifest's unfinished sessions those in `done`."""
    unfinished = [s for s in manifest.get("unfinished", []) if s not in done]
    if unfinished:
        manifest["unfinished"] = unfinished
    else:
        manifest.pop("unfinished", None)


def _valid_id(value: str) -> bool:
    try:
        check_id(value, "session")
    except InvalidIdError:
        return False
    return True


def key(session_id: str, name: str) -> str:
    """The key of a layer file of a session."""
    return f"sessions/{session_key(session_id)}/{name}"


def listing(session: Session, units: int) -> dict:
    """The manifest entry of a session (with its metadata, which search filters read without opening the session)."""
    entry = {"date": session.date.isoformat(), "turns": len(session.turns), "hash": session.content_hash(), "units": units}
    return {**entry, "metadata": dict(session.metadata)} if session.metadata else entry


def _indexes_listing(index: UnitIndex, manifest: dict) -> bool:
    """Whether the index holds exactly the listed sessions' units (as many of each as the listing says)."""
    counts: dict[str, int] = {}
    for unit in index.units:
        counts[unit.session_id] = counts.get(unit.session_id, 0) + 1
    return counts == {s: m["units"] for s, m in manifest["sessions"].items() if m["units"]}


def _listing_entry(meta: object) -> bool:
    """Whether a manifest entry has the shape `listing` gives it."""
    return (isinstance(meta, dict) and isinstance(meta.get("date"), str) and isinstance(meta.get("hash"), str)
            and type(meta.get("turns")) is int and type(meta.get("units")) is int and isinstance(meta.get("metadata", {}), dict))
