"""`Memory`: one user's four-layer memory, its indexes, and the operations on them.

A user's store holds, under ``users/<user>/``:

- ``manifest.json``: the listing (sessions with date, turn count, content hash, unit count) and the number of
  the current *generation*;
- ``index/<generation>/units.json`` and ``vectors.f32``: the L0 units and their vectors as saved by that
  generation (derived data: rebuilt from the layers when missing or damaged);
- ``sessions/<session>/``: the layers (``session.json`` and ``L3.md``, ``L0.json`` and ``L0.md``, and L1/L2
  once read).

Writers (ingest, forget, the cache of L1/L2) hold the user's writer lock while they change the store, re-read
the manifest under it, and write the manifest last; the work that takes long (models, embeddings) happens
before the lock is taken. Readers never take the lock: they read the manifest, then the index files of its
generation, and start over if a writer replaced that generation meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from langchain_core.documents import Document
from langchain_core.runnables.config import ContextThreadPoolExecutor
from tqdm.auto import tqdm

from apdmem.errors import ConfigError, UnknownSessionError
from apdmem.memory import layers
from apdmem.memory.index import UnitIndex
from apdmem.memory.loaders import session_from_messages
from apdmem.memory.records import Session, Unit, Usage, check_id
from apdmem.memory.retriever import HybridRetriever, rank_sessions
from apdmem.memory.store import UserStore, open_store, session_key
from apdmem.models import embed_array, embeddings_id, get_chat_model, get_embeddings, is_embedded

FORMAT = 2
CHECKPOINT_SECONDS = 30  # during a long ingestion, what is built is committed at least this often
CHUNK = 32  # sessions built (units, vectors) per step of an ingestion
READ_ATTEMPTS = 20  # a reader starts over this often when writers keep replacing the generation it reads

log = logging.getLogger("apdmem")


@dataclass
class IngestReport:
    """What an `ingest` call did."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    turns: int = 0
    units: int = 0
    seconds: float = 0.0
    usage: Usage = field(default_factory=Usage)


@dataclass
class Generation:
    """One consistent state of a memory: the manifest as stored and the index saved with it."""

    raw: bytes | None  # manifest.json as read (None: nothing stored yet)
    manifest: dict
    index: UnitIndex | None  # None until the first session (its dimension comes from the embeddings)

    @property
    def number(self) -> int:
        return self.manifest["generation"]


class _Stale(Exception):
    """The generation being read was replaced by a writer meanwhile: read again."""


class _Damaged(Exception):
    """Stored state that a reader cannot use as it is; a writer repairs it (the message says what)."""


class Memory:
    """A user's long-term memory: sessions stored as L0-L3 layers, with a hybrid index over L0.

    Example:
        >>> from apdmem import Memory, load_sessions                                  # doctest: +SKIP
        >>> memory = Memory("alice", l0_mode="raw")                                   # doctest: +SKIP
        >>> memory.ingest(load_sessions("history.json"))                              # doctest: +SKIP
        >>> [d.metadata["session_id"] for d in memory.search("my dog's name", k=3)]   # doctest: +SKIP

    `store` is where memories live: a directory (default ``$APDMEM_MEMORY_DIR``, else ``~/.apdmem``) or a
    LangChain byte store. `l0_mode` is "llm" (units summarized by the chat model), "raw" (the window text, no
    model call) or "auto" (raw with the embedded chat models "local" and "local:smollm2", llm otherwise). Models are specification strings
    (see `apdmem.models`) or LangChain objects. Everything this object reads or writes is inside the user's
    namespace. Several processes may read and write one user's memory at once.
    """

    def __init__(
        self,
        user_id: str,
        *,
        store=None,
        chat_model="local",
        embeddings="local",
        base_url: str | None = None,
        l0_mode: str = "auto",
        window: int = 4,
        stride: int = 2,
        lexical: str = "auto",
        concurrency: int = 4,
    ):
        self.user_id = check_id(user_id, "user")
        if l0_mode == "auto":
            # No generative model ("local"), or the embedded 135M one, whose summaries are worse than the text
            # they summarize: index raw windows.
            l0_mode = "raw" if is_embedded(chat_model) else "llm"
        if l0_mode not in ("llm", "raw"):
            raise ConfigError(f"unknown l0_mode {l0_mode!r}: use 'auto', 'llm' or 'raw'")
        self.store = UserStore(open_store(store), user_id)
        self._chat_spec, self._base_url = chat_model, base_url
        self.embeddings = get_embeddings(embeddings, base_url)
        self._space = embeddings_id(embeddings, base_url) if isinstance(embeddings, str) else type(embeddings).__name__
        self.l0_mode, self.window, self.stride, self.lexical = l0_mode, window, stride, lexical
        self.concurrency = concurrency
        self.usage = Usage()  # tokens spent by this object's model calls (construction and lazy layers)
        self._usage_lock = threading.Lock()
        self._writing = threading.RLock()  # this object's writers, one at a time (the store lock orders processes)
        self._swap = threading.Lock()
        self._current = Generation(None, self._parse_manifest(None), None)
        self.refresh()
        with self._writing, self.store.writer(wait=False) as held:  # start-up cleaning, unless a writer is busy
            if held and self.store.get("manifest.json") == self._current.raw:
                self._sweep(self._current)

    # --- models ----------------------------------------------------------------------------------------

    @property
    def chat_model(self):
        """The chat model for construction, loaded on first use (raw-mode ingestion never needs it)."""
        return get_chat_model(self._chat_spec, self._base_url)

    def _embed(self, texts: list[str]) -> np.ndarray:
        vectors = embed_array(self.embeddings, texts)
        return vectors.reshape(len(texts), -1) if len(texts) else np.zeros((0, self._dimension()), np.float32)

    def _dimension(self) -> int:
        return getattr(self.embeddings, "dimension", None) or len(self.embeddings.embed_query("dimension"))

    # --- the current generation ----------------------------------------------------------------------------

    @property
    def manifest(self) -> dict:
        return self._current.manifest

    @property
    def index(self) -> UnitIndex:
        generation = self._current
        return generation.index or UnitIndex(self._dimension(), self.lexical)

    def refresh(self) -> None:
        """Catch up with what other writers (processes, or other `Memory` objects) committed. Cheap when
        nothing changed: one read of the manifest. Called by `search` and `session_ids`."""
        raw = self.store.get("manifest.json")
        if raw == self._current.raw:
            return
        try:
            self._adopt(self._read(raw))
        except _Damaged:
            with self._writer():  # repaired under the lock, as a writer would
                pass

    def _adopt(self, generation: Generation) -> None:
        with self._swap:  # generations only move forward, whichever thread read last
            if generation.number >= self._current.number or generation.raw is None:
                self._current = generation

    def _read(self, raw: bytes | None) -> Generation:
        """The generation `raw` names, read without the lock; raises _Damaged when it needs a repair."""
        for _ in range(READ_ATTEMPTS):
            try:
                return self._generation(raw)
            except _Stale:
                raw = self.store.get("manifest.json")
        raise _Damaged(f"index files of generation {self._parse_manifest(raw)['generation']} keep vanishing")

    def _parse_manifest(self, raw: bytes | None) -> dict:
        if raw is None:
            return {"format": FORMAT, "generation": 0, "user_id": self.user_id, "embeddings": self._space, "sessions": {}}
        try:
            manifest = json.loads(raw)
            assert isinstance(manifest, dict) and isinstance(manifest.get("generation"), int)
            version = manifest.get("format")
        except (ValueError, AssertionError, RecursionError):
            raise _Damaged("manifest.json is unreadable") from None
        if version != FORMAT:
            newer = isinstance(version, int) and version > FORMAT
            raise ConfigError(f"memory of user {self.user_id!r} has format {version}; this apdmem reads format {FORMAT}"
                              + ("; upgrade apdmem" if newer else "; ingest the history again into a new memory directory"))
        sessions = manifest.get("sessions")
        if not isinstance(sessions, dict) or not all(_listing_entry(m) for m in sessions.values()):
            raise _Damaged("manifest.json is unreadable")
        if manifest.get("embeddings") != self._space:
            raise ConfigError(f"memory of user {self.user_id!r} was indexed with embeddings {manifest.get('embeddings')!r}, "
                              f"not {self._space!r}; open it with the same embeddings")
        return manifest

    def _generation(self, raw: bytes | None) -> Generation:
        manifest = self._parse_manifest(raw)
        if raw is None:
            return Generation(None, manifest, None)
        number = manifest["generation"]
        table, vectors = self.store.get_many([f"index/{number}/units.json", f"index/{number}/vectors.f32"])
        if table is None or vectors is None:
            if self.store.get("manifest.json") != raw:
                raise _Stale()
            raise _Damaged(f"index of generation {number} is missing")
        try:
            index = UnitIndex.load(table, vectors, self.lexical)
        except ValueError as exc:
            if self.store.get("manifest.json") != raw:
                raise _Stale() from None
            raise _Damaged(f"index of generation {number} is damaged: {exc}") from None
        if not _indexes_listing(index, manifest):
            raise _Damaged(f"index of generation {number} does not match the listing")
        stored = {k.split("/")[1] for k in self.store.keys("sessions/") if k.endswith("/session.json")}
        if missing := [s for s in manifest["sessions"] if session_key(s) not in stored]:
            raise _Damaged(f"listed sessions without their files: {', '.join(missing)}")
        return Generation(raw, manifest, index)

    # --- writing ----------------------------------------------------------------------------------------

    @contextmanager
    def _writer(self) -> Iterator[Generation]:
        """Hold the user's writer lock and yield the current generation, read under the lock and repaired if
        it needs it. Inside, change a copy (`_derive`) and `_commit` it."""
        with self._writing:
            with self.store.writer():
                raw = self.store.get("manifest.json")
                try:
                    generation = self._read(raw)
                except _Damaged as damage:
                    generation = self._repair(raw, str(damage))
                self._adopt(generation)
                yield generation

    def _derive(self, generation: Generation) -> Generation:
        """A copy of `generation` to change; the stored one is untouched until `_commit`."""
        manifest = json.loads(json.dumps(generation.manifest))
        index = generation.index.compact() if generation.index else UnitIndex(self._dimension(), self.lexical)  # a copy
        return Generation(generation.raw, manifest, index)

    def _commit(self, generation: Generation) -> Generation:
        """Save the index of a new generation, then the manifest that makes it current, then drop the
        generations before it. Called under the writer lock."""
        old = generation.manifest["generation"]
        number = generation.manifest["generation"] = max(old, self._current.number) + 1
        index = generation.index if generation.index.alive.all() else generation.index.compact()
        table, vectors = index.dump()
        self.store.put({f"index/{number}/units.json": table, f"index/{number}/vectors.f32": vectors})
        raw = json.dumps(generation.manifest, ensure_ascii=False).encode()
        self.store.put({"manifest.json": raw})
        self.store.delete([k for k in self.store.keys("index/") if k.split("/")[1] != str(number)])
        committed = Generation(raw, generation.manifest, index)
        self._adopt(committed)
        return committed

    def _sweep(self, generation: Generation) -> None:
        """Delete what a killed writer left: files of sessions that are not listed (an ingestion or a forget
        stopped half way) and index files of other generations. Called under the writer lock."""
        listed = {session_key(s) for s in generation.manifest["sessions"]}
        stale = [k for k in self.store.keys("sessions/") if k.split("/")[1] not in listed]
        stale += [k for k in self.store.keys("index/") if generation.raw is None or k.split("/")[1] != str(generation.number)]
        if stale:
            self.store.delete(stale)
            log.warning("apdmem: removed %d file(s) left by an interrupted write in the memory of user %r: %s",
                        len(stale), self.user_id, ", ".join(sorted({"/".join(k.split("/")[:2]) for k in stale})))

    def _repair(self, raw: bytes | None, damage: str) -> Generation:
        """Rebuild what a reader could not use (under the writer lock): the listing from the stored sessions if
        the manifest is unreadable, the index from the L0 layers; listed sessions whose files are gone are
        dropped. Logs a warning naming what was repaired."""
        try:
            manifest = self._parse_manifest(raw)
        except _Damaged:
            manifest = self._listing_from_sessions()
        sessions = manifest["sessions"]
        stored = {k.split("/")[1] for k in self.store.keys("sessions/") if k.endswith("/session.json")}
        dropped = [s for s in sessions if session_key(s) not in stored]
        index = self._saved_index(manifest)  # when only the listing was wrong, the saved index is kept
        for sid in dropped:
            del sessions[sid]
            if index is not None:
                index.remove(sid)
        rebuilt = index is None
        if rebuilt:
            units = []
            for sid in sessions:
                units += self._read_units(sid, repair=False)
                sessions[sid]["units"] = sum(1 for u in units if u.session_id == sid)
            index = UnitIndex(self._dimension(), self.lexical, len(units))
            index.add(units, self._embed([t for u in units for t in u.embed_texts]))
        generation = self._commit(Generation(raw, manifest, index))
        self._sweep(generation)
        log.warning("apdmem: repaired the memory of user %r (%s): %s%s", self.user_id, damage,
                    f"index rebuilt from {len(sessions)} sessions" if rebuilt else "saved index kept",
                    f"; dropped from the listing: {', '.join(dropped)}" if dropped else "")
        return generation

    def _saved_index(self, manifest: dict) -> UnitIndex | None:
        """The index saved with the manifest's generation, if it is readable and holds the listed sessions."""
        number = manifest["generation"]
        table, vectors = self.store.get_many([f"index/{number}/units.json", f"index/{number}/vectors.f32"])
        try:
            index = UnitIndex.load(table, vectors, self.lexical) if table is not None and vectors is not None else None
        except ValueError:
            return None
        return index if index is not None and _indexes_listing(index, manifest) else None

    def _listing_from_sessions(self) -> dict:
        manifest = self._parse_manifest(None)
        for key in self.store.keys("sessions/"):
            if key.endswith("/session.json"):
                session = self._stored_session(key.split("/")[1])
                if session is not None:
                    manifest["sessions"][session.session_id] = _listing(session, 0)
        return manifest

    def _key(self, session_id: str, name: str) -> str:
        return f"sessions/{session_key(session_id)}/{name}"

    def _delete_files(self, session_id: str) -> None:
        self.store.delete(self.store.keys(f"sessions/{session_key(session_id)}/"))

    def _stored_session(self, key: str) -> Session | None:
        """The session stored under a session key; None when it is missing or unreadable."""
        try:
            session = Session.from_json(self.store.get_json(f"sessions/{key}/session.json"))
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
            return None
        return session if session_key(session.session_id) == key else None

    def _read_units(self, session_id: str, *, repair: bool = True) -> list[Unit]:
        """L0 units of a session; a damaged L0.json is rebuilt from the session's messages (raw units)."""
        try:
            data = self.store.get_json(self._key(session_id, "L0.json"))
            units = [Unit.from_json(u) for u in data]
            if all(u.session_id == session_id and u.embed_texts for u in units) and units:
                return units
        except (ValueError, TypeError, RecursionError):
            pass
        session = self._stored_session(session_key(session_id))
        if session is None:
            return []
        units = [layers.raw_unit(session, a, b) for a, b in layers.window_spans(len(session.turns), self.window, self.stride)]
        log.warning("apdmem: L0 of session %r of user %r was unreadable; rebuilt from its messages", session_id, self.user_id)
        if repair:
            with self._writing, self.store.writer(wait=False) as held:
                if held and session_id in self.manifest["sessions"]:
                    self._write_l0(session, units)
        return units

    def _write_l0(self, session: Session, units: list[Unit]) -> None:
        self.store.put_json({self._key(session.session_id, "L0.json"): [u.to_json() for u in units]})
        self.store.put_text({self._key(session.session_id, "L0.md"): layers.render_l0(session, units)})

    # --- ingestion and forgetting -------------------------------------------------------------------------

    def ingest(self, sessions: Iterable[Session], *, progress: bool = False) -> IngestReport:
        """Add sessions: store L3, build L0, index it. Identical sessions already stored are skipped; a stored
        session whose content changed is replaced. Safe to interrupt and run again, and to run alongside other
        writers of the same user: each commit re-reads what they committed."""
        started, report = time.perf_counter(), IngestReport()
        self.refresh()
        todo = []
        # A session id given twice in one call: the later version wins.
        for session in {s.session_id: s for s in sessions}.values():
            check_id(session.session_id, "session")
            known = self.manifest["sessions"].get(session.session_id)
            if known and known["hash"] == session.content_hash():
                report.unchanged.append(session.session_id)
            else:
                todo.append(session)
        bar = tqdm(total=sum(len(s.turns) for s in todo), desc=f"ingest {self.user_id}", unit="turn", disable=not progress)
        built, spent, last_commit = [], Usage(), time.monotonic()
        for i in range(0, len(todo), CHUNK):
            chunk = todo[i : i + CHUNK]
            built += self._build(chunk, spent)
            bar.update(sum(len(s.turns) for s in chunk))
            if time.monotonic() - last_commit > CHECKPOINT_SECONDS or i + CHUNK >= len(todo):
                self._add(built, spent, report)
                built, spent, last_commit = [], Usage(), time.monotonic()
        bar.close()
        report.seconds = time.perf_counter() - started
        return report

    def _build(self, sessions: list[Session], spent: Usage) -> list[tuple[Session, list[Unit], np.ndarray]]:
        """Units and their vectors (the slow part, done without the lock); model tokens are added to `spent`."""
        model = self.chat_model if self.l0_mode == "llm" else None
        known = self._valid_units(sessions) if model is not None else {}  # raw units cost no model call
        units, usage = layers.build_units(
            sessions, mode=self.l0_mode, model=model, window=self.window, stride=self.stride, concurrency=self.concurrency,
            known=known,
        )
        for total in (self.usage, spent):
            total.merge(usage)
        vectors = self._embed([t for s in sessions for u in units[s.session_id] for t in u.embed_texts])
        out, offset = [], 0
        for s in sessions:
            count = sum(len(u.embed_texts) for u in units[s.session_id])
            out.append((s, units[s.session_id], vectors[offset : offset + count]))
            offset += count
        return out

    def _add(self, built: list[tuple[Session, list[Unit], np.ndarray]], spent: Usage, report: IngestReport) -> None:
        """Commit built sessions (under the lock, against what is stored now: another writer may have added
        some of them meanwhile)."""
        report.usage.merge(spent)
        with self._writer() as current:
            sessions = current.manifest["sessions"]
            fresh = [b for b in built if sessions.get(b[0].session_id, {}).get("hash") != b[0].content_hash()]
            report.unchanged += sorted({s.session_id for s, _, _ in built} - {s.session_id for s, _, _ in fresh})
            replaced = [s.session_id for s, _, _ in fresh if s.session_id in sessions]
            kept = {s.session_id: self._valid_notes(s) for s, _, _ in fresh if s.session_id in replaced}
            if replaced:
                # Unlist the old versions before their files change: a run killed below must not leave the
                # manifest naming a session whose layers are half replaced. Running again re-adds them.
                current = self._derive(current)
                for sid in replaced:
                    current.index.remove(sid)
                    del current.manifest["sessions"][sid]
                current = self._commit(current)
                for sid in replaced:
                    self._delete_files(sid)
            generation = self._derive(current)
            construction = generation.manifest.setdefault("construction_usage", {"input_tokens": 0, "output_tokens": 0, "calls": 0})
            for key in construction:
                construction[key] += getattr(spent, key)
            for session, units, vectors in fresh:
                sid = session.session_id
                self.store.put_json({self._key(sid, "L0.json"): [u.to_json() for u in units]})
                self.store.put_text({self._key(sid, "L3.md"): layers.render_l3(session), self._key(sid, "L0.md"): layers.render_l0(session, units)})
                if kept.get(sid):
                    self._write_notes(session, kept[sid])
                self.store.put_json({self._key(sid, "session.json"): session.to_json()})  # last: the session is whole
                generation.manifest["sessions"][sid] = _listing(session, len(units))
                (report.updated if sid in replaced else report.added).append(sid)
                report.turns += len(session.turns)
                report.units += len(units)
            if fresh:
                generation.index.add([u for _, units, _ in fresh for u in units], np.concatenate([v for _, _, v in fresh]))
                self._commit(generation)

    def _valid_notes(self, session: Session) -> dict[int, list[str]]:
        """The cached L2 notes of the stored version of `session` that still hold for it: those of turns
        unchanged at the same place, the date unchanged too (a turn's notes are made from it and the date).
        L1 facts are made from the whole session, so a changed session never keeps them."""
        old = self._stored_session(session_key(session.session_id))
        if old is None or old.date != session.date:
            return {}
        cached = _notes_from(self.store.get_json(self._key(session.session_id, "L2.json")), len(old.turns))
        return {t: notes for t, notes in cached.items() if t < len(session.turns) and session.turns[t] == old.turns[t]}

    def _valid_units(self, sessions: list[Session]) -> dict[tuple[str, int, int], Unit]:
        """The stored L0 units that still hold for new versions of stored sessions: windows of turns unchanged at
        the same place, the date unchanged too (a summary is made from them), so that a session extended by new
        turns has only its new windows summarized. Read without the lock: a session is read before and after its
        units, which are kept only if it did not change meanwhile (a writer stores a session's units first)."""
        known = {}
        for session in sessions:
            if session.session_id not in self.manifest["sessions"]:
                continue
            key = session_key(session.session_id)
            old = self._stored_session(key)
            if old is None or old.date != session.date:
                continue
            try:
                units = [Unit.from_json(u) for u in self.store.get_json(self._key(session.session_id, "L0.json"))]
            except (ValueError, TypeError, RecursionError):
                continue
            if self._stored_session(key) != old:
                continue
            for unit in units:
                if unit.session_id == session.session_id and session.turns[unit.start : unit.end] == old.turns[unit.start : unit.end] \
                        and unit.end <= min(len(old.turns), len(session.turns)):
                    known[(session.session_id, unit.start, unit.end)] = unit
        return known

    def _write_notes(self, session: Session, notes: dict[int, list[str]]) -> None:
        self.store.put_json({self._key(session.session_id, "L2.json"): {str(t): n for t, n in sorted(notes.items())}})
        self.store.put_text({self._key(session.session_id, "L2.md"): layers.render_l2(session, notes)})

    def remember(self, messages, *, session_id: str, date: datetime | str | None = None) -> IngestReport:
        """Store one conversation (LangChain messages, or ``{"role", "content"}`` dicts as in the generic
        format) as session `session_id`. Sent again with more messages, the session is extended: the L2 notes
        of its unchanged turns are kept, its L1 facts are made again on the next read. Without `date`, a stored
        session keeps its date and a new one is dated now, so a conversation saved as it goes keeps the date
        it started.

        >>> memory.remember([{"role": "user", "content": "My cat is called Miso."}], session_id="chat-7")  # doctest: +SKIP
        """
        if date is None:
            self.refresh()
            known = self.manifest["sessions"].get(session_id) if isinstance(session_id, str) else None
            date = known["date"] if known else datetime.now().replace(microsecond=0)
        return self.ingest([session_from_messages(messages, session_id=session_id, date=date)])

    def forget(self, session_id: str) -> None:
        """Remove a session from every layer and index: no byte of it stays in the store."""
        with self._writer() as current:
            if session_id not in current.manifest["sessions"]:
                raise UnknownSessionError(session_id)
            generation = self._derive(current)
            generation.index.remove(session_id)
            del generation.manifest["sessions"][session_id]
            # The new generation first (its commit drops the old index, which holds the session's L0 text),
            # then the files: a kill in between leaves unlisted files, which the next writer deletes.
            self._commit(generation)
            self._delete_files(session_id)

    # --- reading ----------------------------------------------------------------------------------------

    def session_ids(self) -> list[str]:
        """Ids of stored sessions, oldest first."""
        self.refresh()
        sessions = self.manifest["sessions"]
        return sorted(sessions, key=lambda s: (sessions[s]["date"], s))

    def session(self, session_id: str) -> Session:
        """The stored session (L3)."""
        if session_id not in self.manifest["sessions"]:
            raise UnknownSessionError(session_id)
        session = self._stored_session(session_key(session_id))
        if session is not None:
            return session
        self.refresh()  # forgotten or replaced meanwhile?
        with self._writer() as current:
            if session_id in current.manifest["sessions"] and self._stored_session(session_key(session_id)) is None:
                self.store.delete([self._key(session_id, "session.json")])  # unreadable: drop it from the listing
                self._repair(current.raw, f"session {session_id!r} is unreadable")
        raise UnknownSessionError(session_id)

    def search(self, query: str | list[str], k: int = 10, *, date_range=None) -> list[Document]:
        """Top-k sessions for one query or several sub-queries, each with its best L0 unit.

        `date_range` is a (start, end) pair of dates or ISO strings, or a list of such pairs: sessions in or
        near a range rank higher, none is dropped (`memory.search("my trip", date_range=("2023-05-01", "2023-05-31"))`).
        """
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        queries = [query] if isinstance(query, str) else list(query)
        queries = [q for q in queries if q.strip()]
        self.refresh()
        generation = self._current  # one generation for the whole search, whatever writers do meanwhile
        if not queries or generation.index is None or not len(generation.index):
            return []
        dates = {sid: meta["date"] for sid, meta in generation.manifest["sessions"].items()} if date_range else None
        hits = rank_sessions(generation.index, queries, self._embed(queries), k, date_range=date_range, session_dates=dates)
        docs = []
        for hit in hits:
            unit = generation.index.units[hit.row]
            meta = generation.manifest["sessions"][hit.session_id]
            docs.append(
                Document(
                    page_content=unit.summary,
                    metadata={"session_id": hit.session_id, "date": meta["date"], "span": [unit.start, unit.end], "score": hit.score, "keywords": unit.keywords},
                )
            )
        return docs

    def as_retriever(self, k: int = 10) -> HybridRetriever:
        """This memory as a LangChain retriever."""
        return HybridRetriever(memory=self, k=k)

    def units(self, session_id: str) -> list[Unit]:
        """L0 units of a session."""
        self.session(session_id)
        return self._read_units(session_id)

    def _cache(self, session: Session, items: dict[str, object], texts: dict[str, str]) -> None:
        """Store generated L1/L2 files, unless the session was forgotten or replaced while they were made."""
        with self._writer() as current:
            listed = current.manifest["sessions"].get(session.session_id)
            if listed and listed["hash"] == session.content_hash():
                self.store.put_json(items)
                self.store.put_text(texts)

    def facts(self, session_id: str, *, usage: Usage | None = None) -> list[str]:
        """L1 key facts, generated on first read and cached. A generation's tokens are added to `usage` (the
        caller's own account; `self.usage` is the running total of every caller)."""
        session = self.session(session_id)
        cached = self.store.get_json(self._key(session_id, "L1.json"))
        if isinstance(cached, list) and all(isinstance(f, str) for f in cached):
            return cached
        spent = Usage()
        facts = layers.extract_facts(session, self.chat_model, spent)
        self._account(spent, usage)
        self._cache(session, {self._key(session_id, "L1.json"): facts}, {self._key(session_id, "L1.md"): layers.render_l1(session, facts)})
        return facts

    def notes(self, session_id: str, turns: list[int] | None = None, *, usage: Usage | None = None) -> dict[int, list[str]]:
        """L2 evidence notes by turn index (all turns, or the listed 0-based ones), generated on first read
        (groups of turns concurrently); tokens are added to `usage` as in `facts`."""
        session = self.session(session_id)
        wanted = range(len(session.turns)) if turns is None else [t for t in turns if 0 <= t < len(session.turns)]
        cached = _notes_from(self.store.get_json(self._key(session_id, "L2.json")), len(session.turns))
        missing = [t for t in wanted if t not in cached]
        if missing:
            spent = Usage()
            cached.update(layers.extract_notes(session, self.chat_model, spent, missing, concurrency=self.concurrency))
            self._account(spent, usage)
            self._cache(session, {self._key(session_id, "L2.json"): {str(t): n for t, n in sorted(cached.items())}},
                        {self._key(session_id, "L2.md"): layers.render_l2(session, cached)})
        return {t: cached[t] for t in wanted}

    def build_facts(self, session_ids: Iterable[str] | None = None, *, progress: bool = False) -> Usage:
        """Build L1 of the given sessions (default: all) now rather than on first read, `concurrency` sessions at
        a time; sessions whose L1 is cached are skipped. Returns the tokens spent."""
        ids = list(self.session_ids() if session_ids is None else session_ids)
        spent = [Usage() for _ in ids]
        bar = tqdm(total=len(ids), desc=f"L1 {self.user_id}", unit="session", disable=not progress)

        def build(i: int) -> None:
            self.facts(ids[i], usage=spent[i])
            bar.update()

        with ContextThreadPoolExecutor(max_workers=max(1, self.concurrency)) as pool:
            list(pool.map(build, range(len(ids))))
        bar.close()
        total = Usage()
        total.merge_concurrent(spent, self.concurrency)
        return total

    def _account(self, spent: Usage, usage: Usage | None) -> None:
        with self._usage_lock:
            self.usage.merge(spent)
        if usage is not None:
            usage.merge(spent)

    def read(self, session_id: str, layer: str, turns: list[int] | None = None) -> str:
        """A layer of a session as Markdown (L1 and L2 are materialized on first read)."""
        session = self.session(session_id)
        if layer == "L0":
            return layers.render_l0(session, self.units(session_id))
        if layer == "L1":
            return layers.render_l1(session, self.facts(session_id))
        if layer == "L2":
            return layers.render_l2(session, self.notes(session_id, turns))
        if layer == "L3":
            return layers.render_l3(session, turns)
        raise ValueError(f"unknown layer {layer!r}: use one of {', '.join(layers.LAYERS)}")

    # --- async: the same operations in a worker thread, so that an event loop goes on meanwhile -----------

    async def aingest(self, sessions: Iterable[Session], *, progress: bool = False) -> IngestReport:
        """`ingest`, awaitable: it runs in a worker thread and the event loop is free meanwhile."""
        return await asyncio.to_thread(self.ingest, list(sessions), progress=progress)

    async def aremember(self, messages, *, session_id: str, date: datetime | str | None = None) -> IngestReport:
        """`remember`, awaitable (in a worker thread)."""
        return await asyncio.to_thread(self.remember, messages, session_id=session_id, date=date)

    async def aforget(self, session_id: str) -> None:
        """`forget`, awaitable (in a worker thread)."""
        await asyncio.to_thread(self.forget, session_id)

    async def asearch(self, query: str | list[str], k: int = 10, *, date_range=None) -> list[Document]:
        """`search`, awaitable (in a worker thread: the query embedding and scoring take the CPU)."""
        return await asyncio.to_thread(self.search, query, k, date_range=date_range)

    async def aread(self, session_id: str, layer: str, turns: list[int] | None = None) -> str:
        """`read`, awaitable (in a worker thread: a first read of L1/L2 calls the chat model)."""
        return await asyncio.to_thread(self.read, session_id, layer, turns)

    async def asession_ids(self) -> list[str]:
        """`session_ids`, awaitable (in a worker thread: it may read the store)."""
        return await asyncio.to_thread(self.session_ids)


def _listing(session: Session, units: int) -> dict:
    return {"date": session.date.isoformat(), "turns": len(session.turns), "hash": session.content_hash(), "units": units}


def _indexes_listing(index: UnitIndex, manifest: dict) -> bool:
    """Whether the index holds exactly the listed sessions' units (as many of each as the listing says)."""
    counts: dict[str, int] = {}
    for unit in index.units:
        counts[unit.session_id] = counts.get(unit.session_id, 0) + 1
    return counts == {s: m["units"] for s, m in manifest["sessions"].items() if m["units"]}


def _listing_entry(meta: object) -> bool:
    """Whether a manifest entry has the shape `_listing` gives it."""
    return (isinstance(meta, dict) and isinstance(meta.get("date"), str) and isinstance(meta.get("hash"), str)
            and type(meta.get("turns")) is int and type(meta.get("units")) is int)


def _notes_from(data: object, n_turns: int) -> dict[int, list[str]]:
    """Cached L2 notes; entries that are not notes of an existing turn are ignored (and regenerated)."""
    if not isinstance(data, dict):
        return {}
    notes = {}
    for turn, items in data.items():
        if turn.isdigit() and int(turn) < n_turns and isinstance(items, list) and all(isinstance(n, str) for n in items):
            notes[int(turn)] = items
    return notes


SHARED_MEMORIES = 128  # users whose loaded index a process keeps (least recently used first out)
_shared: OrderedDict[tuple, Memory] = OrderedDict()
_shared_lock = threading.Lock()


def open_memory(user_id: str, *, store=None, chat_model="local", embeddings="local", base_url: str | None = None) -> Memory:
    """A user's `Memory`, opened once per process and shared (a server's runs for one user reuse its loaded
    index; `Memory.search` reloads it only when another writer committed a new generation)."""
    key = (str(store), check_id(user_id, "user"), _identity(chat_model), _identity(embeddings), base_url)
    with _shared_lock:
        memory = _shared.get(key)
        if memory is None:
            memory = _shared[key] = Memory(user_id, store=store, chat_model=chat_model, embeddings=embeddings, base_url=base_url)
            while len(_shared) > SHARED_MEMORIES:
                _shared.popitem(last=False)
        _shared.move_to_end(key)
        return memory


def _identity(model) -> object:
    return model if isinstance(model, str) else id(model)  # the Memory keeps the object alive, so ids stay unique
