"""`Memory`: one user's four-layer memory, its indexes, and the operations on them.

`Memory` is the API over the layers: ingest, search, read, forget. How they are stored (generations, commits,
repairs, and what may be deleted) is the storage protocol of `apdmem.memory.generations`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import NamedTuple

import numpy as np
from langchain_core.documents import Document
from langchain_core.runnables.config import ContextThreadPoolExecutor
from tqdm.auto import tqdm

from apdmem.errors import ConfigError, StoreError, UnknownSessionError
from apdmem.memory import layers, lifts
from apdmem.memory.index import UnitIndex, spellings, unit_tokens
from apdmem.memory.links import Link
from apdmem.memory.backends import open_store
from apdmem.memory.loaders import session_from_messages
from apdmem.memory.records import Session, Unit, Usage, check_id, readable
from apdmem.memory.generations import Generation, Generations, key, listing
from apdmem.memory.retriever import RERANK_POOL, SEARCH_K, HybridRetriever, date_ranges, rank_sessions, session_filter
from apdmem.memory.retriever import rerank as rescore
from apdmem.memory.store import UserStore, session_key
from apdmem.models import chat_model_id, embed_array, embeddings_id, get_chat_model, get_embeddings, get_reranker, is_embedded, recorded_space
from apdmem.settings import L0_MODES, Settings

CHECKPOINT_SECONDS = 30  # during a long ingestion, what is built is committed at least this often
CHUNK = 32  # sessions built (units, vectors) per step of an ingestion

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


class Built(NamedTuple):
    """A session made ready for the index, without the lock: its hash, L0 units, their vectors and BM25 tokens."""

    session: Session
    hash: str
    units: list[Unit]
    vectors: np.ndarray
    tokens: list[list[str]]


class Prepared(NamedTuple):
    """What `Memory._add` commits: the new generation made from the one whose manifest is `base`, and the built
    sessions it adds (`fresh`: the others were held by `base` as they are)."""

    base: bytes | None
    fresh: list[Built]
    generation: Generation | None  # None when nothing is fresh


@dataclass
class ReindexReport:
    """What a `Memory.reindex` call did: the space the memory was embedded with (`recorded`, by today's names, after
    any repair; None when the user has no memory) and the one it is now (`space`); nothing was re-embedded when
    they were the same (`reindexed` False); `repaired` lists what opening it repaired."""

    recorded: object
    space: str
    reindexed: bool = False
    sessions: int = 0
    units: int = 0
    seconds: float = 0.0
    resumed: int = 0  # sessions whose vectors an interrupted reindex had saved
    repaired: list[str] = field(default_factory=list)  # what opening the memory repaired, and why


@dataclass
class LayersReport:
    """What a `Memory.rebuild_layers` call did: the sessions whose L1 it made again, those whose L2 it made again
    (with the turns), all by `writer`, and the tokens it spent."""

    writer: str
    l1: list[str] = field(default_factory=list)
    l2: dict[str, list[int]] = field(default_factory=dict)
    seconds: float = 0.0
    usage: Usage = field(default_factory=Usage)


class Memory:
    """A user's long-term memory: sessions stored as L0-L3 layers, with a hybrid index over L0.

    Example:
        >>> from apdmem import Memory, load_sessions                                  # doctest: +SKIP
        >>> memory = Memory("alice", l0_mode="raw")                                   # doctest: +SKIP
        >>> memory.ingest(load_sessions("history.json"))                              # doctest: +SKIP
        >>> [d.metadata["session_id"] for d in memory.search("my dog's name", k=3)]   # doctest: +SKIP

    `store` is where memories live: a directory or a ``postgresql://`` URL, or a LangChain byte store. `store`,
    the models, `base_url` and `l0_mode` left unset are resolved by `apdmem.settings.Settings`, as the graph, the
    tools, the command line and a server resolve them (``APDMEM_STORE``, ``APDMEM_CHAT_MODEL`` ..., default
    ``~/.apdmem`` and the embedded models). `l0_mode` is "llm" (units summarized by the chat model), "raw" (the
    window text, no model call) or "auto" (raw with the embedded chat models "local" and "local:smollm2", llm
    otherwise). Models are
    specification strings (see `apdmem.models`) or LangChain objects. Everything this object reads or writes is
    inside the user's namespace. Several processes may read and write one user's memory at once.
    """

    def __init__(
        self,
        user_id: str,
        *,
        store=None,
        chat_model=None,
        embeddings=None,
        base_url: str | None = None,
        l0_mode: str | None = None,
        reranker=None,
        window: int = 4,
        stride: int = 2,
        lexical: str = "auto",
        concurrency: int = 4,
        _reindexing: bool = False,
    ):
        self.user_id = check_id(user_id, "user")
        settings = Settings(store=store, chat_model=chat_model, embeddings=embeddings, base_url=base_url, l0_mode=l0_mode,
                            reranker_model=reranker)
        self._reranker_spec = settings.reranker_model  # loaded on the first `search(..., rerank=True)`
        store, chat_model, embeddings, base_url = settings.store, settings.chat_model, settings.embeddings, settings.base_url
        l0_mode = settings.l0_mode
        if l0_mode not in L0_MODES:
            raise ConfigError(f"unknown l0_mode {l0_mode!r}: use 'auto', 'llm' or 'raw'")
        if l0_mode == "auto":
            # No generative model ("local"), or the embedded 135M one, whose summaries are worse than the text
            # they summarize: index raw windows.
            l0_mode = "raw" if is_embedded(chat_model) else "llm"
        self.store = UserStore(open_store(store), user_id)
        self._chat_spec, self._base_url = chat_model, base_url
        # Who writes this memory's L1 and L2 (recorded with each, `layers.writer`): a cached layer written by
        # another (a model configured before, or none) is never served; it is made again when read.
        self.writers = {layer: layers.writer(chat_model_id(chat_model, base_url), layer) for layer in ("L1", "L2")}
        self.embeddings = get_embeddings(embeddings, base_url)
        self._space = embeddings_id(embeddings, base_url)
        self.l0_mode, self.window, self.stride, self.lexical = l0_mode, window, stride, lexical
        self.concurrency = concurrency
        self.usage = Usage()  # tokens spent by this object's model calls (construction and lazy layers)
        self._usage_lock = threading.Lock()
        # `_reindexing` (only `reindex` passes it) opens a memory embedded with other embeddings, which every other
        # use refuses in one line naming `apdmem reindex`.
        self.generations = Generations(self.store, space=self._space, lexical=lexical, dimension=self._dimension,
                                       embed=self._embed, window=window, stride=stride, reindexing=_reindexing)
        self.generations.start()

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

    # --- the current generation (the protocol itself is `apdmem.memory.generations`) -----------------------

    @property
    def manifest(self) -> dict:
        return self.generations.current.manifest

    @property
    def index(self) -> UnitIndex:
        generation = self.generations.current
        return generation.index or UnitIndex(self._dimension(), self.lexical)

    def nbytes(self) -> int:
        """About how much memory this object holds for the user: its loaded index (`UnitIndex.nbytes`)."""
        index = self.generations.current.index
        return index.nbytes() if index is not None else 0

    def refresh(self) -> None:
        """Catch up with what other writers (processes, or other `Memory` objects) committed. Cheap when
        nothing changed: one read of the manifest. Called by `search` and `session_ids`."""
        self.generations.refresh()

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

    def _build(self, sessions: list[Session], spent: Usage) -> list[Built]:
        """Units, their vectors and BM25 tokens (the slow part, done without the lock); model tokens are added to
        `spent`."""
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
            own = units[s.session_id]
            out.append(Built(s, s.content_hash(), own, vectors[offset : offset + count], [unit_tokens(u) for u in own]))
            offset += count
        return out

    def _add(self, built: list[Built], spent: Usage, report: IngestReport) -> None:
        """Commit built sessions. Their index and links are made first, without the lock, against the generation
        current then (`_linked`); under the lock, only when another writer committed meanwhile are they made again,
        against what it committed (it may have added some of these sessions, or others to link with). Then the
        lock is held for the commit alone: the sessions' files, the index and the manifest."""
        report.usage.merge(spent)
        self.refresh()
        prepared = self._linked(self.generations.current, built, spent)
        with self.generations.writer() as current:
            if current.raw != prepared.base:
                prepared = self._linked(current, built, spent)
            sessions, fresh = current.manifest["sessions"], prepared.fresh
            report.unchanged += sorted({b.session.session_id for b in built} - {b.session.session_id for b in fresh})
            replaced = {b.session.session_id for b in fresh if b.session.session_id in sessions}
            kept = {b.session.session_id: self._valid_notes(b.session) for b in fresh if b.session.session_id in replaced}
            if not fresh:
                return
            # Named unfinished (and the old versions unlisted) before any file changes: a run killed below leaves
            # files the next writer deletes, never a listed session half replaced. Running again re-adds them.
            begun = self.generations.begin(current, [b.session.session_id for b in fresh])
            self.generations.write_sessions([(b.session, b.units, (self.writers["L2"], kept.get(b.session.session_id)))
                                             for b in fresh])
            for b in fresh:
                (report.updated if b.session.session_id in replaced else report.added).append(b.session.session_id)
                report.turns += len(b.session.turns)
                report.units += len(b.units)
            # What was prepared, committed over what `begin` stored (which unlisted the replaced versions): the
            # commit writes against the generation stored now.
            made = prepared.generation
            self.generations.commit(replace(begun, manifest=made.manifest, index=made.index, links=made.links))

    def _linked(self, current, built: list[Built], spent: Usage) -> Prepared:
        """The generation `current` with the built sessions that it does not hold as they are now (`fresh`): their
        old versions removed, their units indexed and linked, the listing and the construction tokens updated.
        Nothing is stored: `_add` commits it while `current` is still current."""
        sessions = current.manifest["sessions"]
        fresh = [b for b in built if sessions.get(b.session.session_id, {}).get("hash") != b.hash]
        if not fresh:
            return Prepared(current.raw, fresh, None)
        generation = self.generations.derive(current)
        replaced = [b.session.session_id for b in fresh if b.session.session_id in sessions]
        if replaced:  # as `Generations.begin` commits them: without the old versions, compacted
            generation.unlist(replaced)
            generation.index = generation.index.compact()
        construction = generation.manifest.setdefault("construction_usage", {"input_tokens": 0, "output_tokens": 0, "calls": 0})
        for name in construction:
            construction[name] += getattr(spent, name)
        for b in fresh:
            generation.manifest["sessions"][b.session.session_id] = listing(b.session, len(b.units))
        generation.index.add([u for b in fresh for u in b.units], np.concatenate([b.vectors for b in fresh]),
                             [t for b in fresh for t in b.tokens])
        generation.links.add(generation.index, [b.session.session_id for b in fresh])
        return Prepared(current.raw, fresh, generation)

    def _valid_notes(self, session: Session) -> dict[int, list[str]]:
        """The cached L2 notes of the stored version of `session` that still hold for it: those this memory's writer
        made of turns unchanged at the same place, the date unchanged too (a turn's notes are made from it and the
        date). L1 facts are made from the whole session, so a changed session never keeps them."""
        old = self.generations.stored_session(session_key(session.session_id))
        if old is None or old.date != session.date:
            return {}
        cached = self._cached_notes(session.session_id, len(old.turns))
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
            folder = session_key(session.session_id)
            old = self.generations.stored_session(folder)
            if old is None or old.date != session.date:
                continue
            try:
                units = [Unit.from_json(u) for u in self.store.get_json(key(session.session_id, "L0.json"))]
            except (ValueError, TypeError, RecursionError):
                continue
            if self.generations.stored_session(folder) != old:
                continue
            for unit in units:
                if unit.session_id == session.session_id and session.turns[unit.start : unit.end] == old.turns[unit.start : unit.end] \
                        and unit.end <= min(len(old.turns), len(session.turns)):
                    known[(session.session_id, unit.start, unit.end)] = unit
        return known

    @classmethod
    def reindex(cls, user_id: str, *, progress: bool = False, **options) -> ReindexReport:
        """Re-embed a user's memory with the configured embeddings (`options` as `Memory` takes them: ``store``,
        ``embeddings``, ``base_url`` ...), whatever embeddings it was embedded with: the one operation that opens a
        memory of another space, which `Memory` refuses (`OtherSpaceError`).

        Every L0 unit is embedded again from its stored text, chunk by chunk, each chunk's vectors saved as it
        goes (no lock held: in PostgreSQL, one short transaction per chunk), and the new index is committed under
        the user's writer lock as a new generation that records the new space; the layers (L0 to L3) are not
        touched. Killed midway, it leaves the old generation current, and run again it embeds only what was not
        saved (``resumed`` sessions). Already in the configured space, it does nothing and says so (``reindexed``
        False). A memory that needed a repair to be opened is repaired first, and ``repaired`` says what was
        rebuilt and why (a rebuilt index is embedded with the configured embeddings already).

        >>> Memory.reindex("maya", progress=True)      # a memory embedded by the retired MiniLM   # doctest: +SKIP
        ReindexReport(recorded='local:minilm', space='local:bge-small', reindexed=True, sessions=7, units=14, ...)
        """
        started = time.perf_counter()
        memory = cls(user_id, _reindexing=True, **options)
        generations = memory.generations
        report = ReindexReport(None, generations.space, repaired=generations.repairs)
        if generations.current.raw is None:
            memory._say_empty()  # nothing stored: nothing to take the lock for
            return report
        report.recorded = recorded_space(generations.current.manifest.get("embeddings"))
        if not generations.own_space(generations.current.manifest):
            units = sum(meta["units"] for meta in generations.current.manifest["sessions"].values())
            with tqdm(total=units, desc=f"reindex {memory.user_id}", unit="unit", disable=not progress) as bar:
                committed = generations.reembed(bar.update)
            if committed is not None:
                report.reindexed, report.sessions = True, len(committed.manifest["sessions"])
                report.units, report.resumed = len(committed.index.units), generations.resumed
        report.seconds = time.perf_counter() - started
        return report

    def remember(self, messages, *, session_id: str, date: datetime | str | None = None,
                 metadata: dict | None = None) -> IngestReport:
        """Store one conversation (LangChain messages, or ``{"role", "content"}`` dicts as in the generic
        format) as session `session_id`, with its `metadata` (names to strings, numbers or booleans: what `search`
        filters read). Sent again with more messages, the session is extended: the L2 notes of its unchanged turns
        are kept, its L1 facts are made again on the next read. Without `date` (`metadata`), a stored session keeps
        its date (metadata) and a new one is dated now (has none), so a conversation saved as it goes keeps the
        date it started.

        >>> memory.remember([{"role": "user", "content": "My cat is called Miso."}], session_id="chat-7",   # doctest: +SKIP
        ...                 metadata={"channel": "email"})
        """
        if date is None or metadata is None:
            self.refresh()
            known = self.manifest["sessions"].get(session_id) if isinstance(session_id, str) else None
            if date is None:
                date = known["date"] if known else datetime.now().replace(microsecond=0)
            if metadata is None:
                metadata = known.get("metadata") if known else None
        return self.ingest([session_from_messages(messages, session_id=session_id, date=date, metadata=metadata)])

    def forget(self, *session_ids: str) -> None:
        """Remove sessions from every layer and index: no byte of them stays in the store. All or nothing: if one
        of them is not stored, none is removed (`UnknownSessionError` names it); the others go in one commit.

        >>> memory.forget("chat-7", "chat-8")  # doctest: +SKIP
        """
        session_ids = list(dict.fromkeys(session_ids))
        if not session_ids:
            return
        with self.generations.writer() as current:
            if missing := [s for s in session_ids if s not in current.manifest["sessions"]]:
                raise UnknownSessionError(missing[0])
            self.generations.forget(current, session_ids)

    # --- reading ----------------------------------------------------------------------------------------

    def session_ids(self) -> list[str]:
        """Ids of stored sessions, oldest first."""
        self.refresh()
        sessions = self.manifest["sessions"]
        if not sessions:
            self._say_empty()
        return sorted(sessions, key=lambda s: (sessions[s]["date"], s))

    def _say_empty(self) -> None:
        """A read that finds no memory says so (a warning: it may be the wrong user id or store)."""
        log.warning("apdmem: user %r has no memory in this store", self.user_id)

    def session(self, session_id: str) -> Session:
        """The stored session (L3)."""
        if session_id not in self.manifest["sessions"]:
            raise UnknownSessionError(session_id)
        session = self.generations.stored_session(session_key(session_id))
        if session is not None:
            return session
        self.refresh()  # forgotten or replaced meanwhile?
        if session_id in self.manifest["sessions"]:
            session = self.generations.unreadable_session(session_id)
        if session is None:
            raise UnknownSessionError(session_id)
        return session

    def search(self, query: str | list[str], k: int = SEARCH_K, *, filter=None, date_range=None,
               min_score: float | None = None, rerank: bool = False) -> list[Document]:
        """Top-k sessions for one query or several sub-queries, each with its best L0 unit.

        `min_score` drops sessions scoring below it (default: none; the k best are returned however weak). The
        score (``metadata["score"]``) is 0.8 x the cosine similarity of the best unit to the query plus 0.2 x its
        BM25 coverage (0 to 1), plus the date preference (up to 0.1) and, in llm mode, 0.25 per keyword of the
        unit named in the query. With the default embeddings (bge-small), sessions unrelated to a query score up to
        about 0.5 and the answering one 0.5-0.7 on the tests' history; look at the scores `apdmem search` prints
        before choosing a cut-off.

        `filter` keeps only the sessions whose metadata (given to `remember` or in the file `ingest` read) and date
        match (`retriever.session_filter`): ``{"channel": "email"}``; ``{"channel": {"$in": ["email", "sms"]}}``;
        ``{"date": {"$gte": "2023-05-01", "$lt": "2023-06-01"}}`` (by day). Every matching session is searched, however
        few.

        `date_range` is a (start, end) pair of dates or ISO strings, or a list of such pairs: sessions in or
        near a range rank higher, none is dropped (`memory.search("my trip", date_range=("2023-05-01", "2023-05-31"))`).
        A filter of another form is a `QueryError`, a date range an `InputError`, each naming the form.

        `rerank=True` ranks as the controller does: the `RERANK_POOL` (20) best sessions (or k, if more) are rescored
        with the cross-encoder (`reranker`, default Settings' `reranker_model`; `retriever.rerank`, which reads the first
        10), and the k best kept: better ordering for ~30 ms per session read on two cores; one query only. The score
        becomes a standard score (`min_score` applies before, to the search score, kept as ``metadata["search_score"]``). Then the controller's lifts apply
        (`apdmem.memory.lifts`) instead of the date preference: the best-ranked session dated near each date range,
        and, for a query that gathers several sessions ("how many", "the latest" ...), the sessions most strongly
        linked to the first ones, rise to 0.8 of the best score; a lifted session says why in ``metadata["via"]``.
        """
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        if rerank and not isinstance(query, str):
            raise ValueError("rerank=True needs one query, not a list")
        test = session_filter(filter) if filter is not None else None
        ranges = date_ranges(date_range)  # a malformed range fails here, in one line, whatever the memory holds
        queries = [query] if isinstance(query, str) else list(query)
        queries = [readable(q) for q in queries if q.strip()]  # an agent's or a program's query may carry lone surrogates
        self.refresh()
        generation = self.generations.current  # one generation for the whole search, whatever writers do meanwhile
        if not generation.manifest["sessions"]:
            self._say_empty()
        if not queries or generation.index is None or not len(generation.index):
            return []
        sessions = generation.manifest["sessions"]
        allowed = None if test is None else {sid for sid, meta in sessions.items() if test(meta)}
        if allowed is not None and not allowed:
            return []
        vectors = self._embed(queries)
        preferred = ranges if ranges and not rerank else None  # reranked, the controller's date lift applies instead
        dates = {sid: meta["date"] for sid, meta in sessions.items()} if preferred else None
        pool = max(k, RERANK_POOL) if rerank else k
        hits = rank_sessions(generation.index, queries, vectors, pool, date_range=preferred, session_dates=dates, allowed=allowed)
        docs = [self._document(generation, hit) for hit in hits if min_score is None or hit.score >= min_score]
        if not rerank or not docs:
            return docs
        docs = rescore(queries[0], docs, get_reranker(self._reranker_spec))
        return self._lifted(queries[0], docs, vectors[0], ranges, generation, k, allowed)

    @staticmethod
    def _document(generation, hit) -> Document:
        """A search hit as the document `search` returns: the session's best unit, with where it is and its score."""
        unit = generation.index.units[hit.row]
        meta = generation.manifest["sessions"][hit.session_id]
        return Document(page_content=unit.summary, metadata={"session_id": hit.session_id, "date": meta["date"],
                                                             "span": [unit.start, unit.end], "score": hit.score,
                                                             "keywords": unit.keywords})

    def _lifted(self, query: str, docs: list[Document], vector: np.ndarray, ranges, generation, k: int,
                allowed: set[str] | None) -> list[Document]:
        """Reranked documents with the controller's lifts applied (`lifts.lift`: the search node's), the k best: a
        linked session the search did not return comes with its best unit for the query."""
        candidates: dict[str, dict] = {}
        lifts.collect(candidates, query, docs)
        links = lifts.linked(self, list(candidates)) if lifts.follows_links(query) else {}
        if allowed is not None:  # a filter holds over links: a session it leaves out is never lifted in
            links = {sid: [link for link in found if link["session_id"] in allowed] for sid, found in links.items()}
        lifts.lift(candidates, query, links, [[f"{start}", f"{end}"] for start, end in ranges])
        found = {doc.metadata["session_id"]: doc for doc in docs}
        out = []
        for sid in lifts.ranking(candidates, query)[:k]:
            doc = found.get(sid)
            if doc is None:  # linked, not found by the search: its unit closest to the query
                best = rank_sessions(generation.index, [query], vector.reshape(1, -1), 1, allowed={sid})
                if not best:
                    continue
                doc = self._document(generation, best[0])
            via = {"via": candidates[sid]["via"]} if "via" in candidates[sid] else {}
            score = candidates[sid]["hits"][query]
            out.append(Document(page_content=doc.page_content, metadata={**doc.metadata, "score": score, **via}))
        return out

    def as_retriever(self, k: int = SEARCH_K, *, filter=None, min_score: float | None = None, rerank: bool = False) -> HybridRetriever:
        """This memory as a LangChain retriever (`k`, `filter`, `min_score` and `rerank` as in `search`)."""
        if filter is not None:
            session_filter(filter)  # a bad filter fails here, not at the first query
        return HybridRetriever(memory=self, k=k, filter=filter, min_score=min_score, rerank=rerank)

    def links(self, session_id: str | None = None) -> list[Link]:
        """Cross-session links (`apdmem.memory.links`): every link between two stored sessions (the older one
        first), or those of one session (`session_id` first in each), strongest first. Each says why: the best
        cosine between the two sessions' units, the idf-weighted overlap of their terms and the rarest terms they
        share.

        >>> [(l.other, l.strength, l.terms) for l in memory.links("chat-7")]            # doctest: +SKIP
        """
        self.refresh()
        generation = self.generations.current
        if session_id is not None and session_id not in generation.manifest["sessions"]:
            raise UnknownSessionError(session_id)
        links = generation.links.links(session_id) if generation.links else []
        if session_id is None:
            sessions = generation.manifest["sessions"]
            links = [link if (sessions[link.session_id]["date"], link.session_id) <= (sessions[link.other]["date"], link.other)
                     else link.reversed() for link in links]
        return links

    def spelled(self, terms: Iterable[str], session_ids: Iterable[str]) -> list[str]:
        """Index terms (stems, e.g. the terms a link shares: "jewelri", "3 shirt") as the words they stand for most
        often in these sessions' L0 units ("jewelry", "3 shirts"); a stem none of them spells stays as it is."""
        texts = []
        for sid in session_ids:
            try:
                texts += [u.summary for u in self.units(sid)]
            except UnknownSessionError:  # forgotten meanwhile: the stems stay
                continue
        words = spellings(texts)
        return [" ".join(words.get(part, part) for part in term.split()) for term in terms]

    def units(self, session_id: str) -> list[Unit]:
        """L0 units of a session."""
        self.session(session_id)
        return self.generations.read_units(session_id)

    def _cache(self, session: Session, items: dict[str, object], texts: dict[str, str]) -> None:
        """Store generated L1/L2 files, unless the session was forgotten or replaced while they were made. A
        read-only store keeps what it holds: the layers just made are served from memory."""
        try:
            with self.generations.writer() as current:
                listed = current.manifest["sessions"].get(session.session_id)
                if listed and listed["hash"] == session.content_hash():
                    self.store.put_json(items)
                    self.store.put_text(texts)
        except StoreError:
            log.debug("apdmem: the store is read-only; layers of session %r are served without caching them", session.session_id)

    def _cached_facts(self, session_id: str) -> list[str] | None:
        """The cached L1 of a session if this memory's writer made it (None: not cached, or by another writer)."""
        writer, facts = layers.recorded(self.store.get_json(key(session_id, "L1.json")), "L1")
        if writer == self.writers["L1"] and isinstance(facts, list) and all(isinstance(f, str) for f in facts):
            return facts
        return None

    def _cached_notes(self, session_id: str, n_turns: int) -> dict[int, list[str]]:
        """The cached L2 notes of a session that this memory's writer made (another writer's count as none)."""
        writer, notes = layers.recorded(self.store.get_json(key(session_id, "L2.json")), "L2")
        return _notes_from(notes, n_turns) if writer == self.writers["L2"] else {}

    def facts(self, session_id: str, *, usage: Usage | None = None) -> list[str]:
        """L1 key facts, generated on first read and cached (made again when the cached ones were written by
        another writer: `layers.writer`). A generation's tokens are added to `usage` (the caller's own account;
        `self.usage` is the running total of every caller)."""
        session = self.session(session_id)
        cached = self._cached_facts(session_id)
        if cached is not None:
            return cached
        spent = Usage()
        facts = layers.extract_facts(session, self.chat_model, spent)
        self._account(spent, usage)
        self._cache(session, {key(session_id, "L1.json"): layers.record("L1", self.writers["L1"], facts)},
                    {key(session_id, "L1.md"): layers.render_l1(session, facts)})
        return facts

    def notes(self, session_id: str, turns: list[int] | None = None, *, usage: Usage | None = None) -> dict[int, list[str]]:
        """L2 evidence notes by turn index (all turns, or the listed 0-based ones), generated on first read
        (groups of turns concurrently); tokens are added to `usage` as in `facts`."""
        session = self.session(session_id)
        wanted = range(len(session.turns)) if turns is None else [t for t in turns if 0 <= t < len(session.turns)]
        cached = self._cached_notes(session_id, len(session.turns))
        missing = [t for t in wanted if t not in cached]
        if missing:
            spent = Usage()
            cached.update(layers.extract_notes(session, self.chat_model, spent, missing, concurrency=self.concurrency))
            self._account(spent, usage)
            record = layers.record("L2", self.writers["L2"], {str(t): n for t, n in sorted(cached.items())})
            self._cache(session, {key(session_id, "L2.json"): record}, {key(session_id, "L2.md"): layers.render_l2(session, cached)})
        return {t: cached[t] for t in wanted}

    def build_facts(self, session_ids: Iterable[str] | None = None, *, progress: bool = False) -> Usage:
        """Build L1 of the given sessions (default: all) now rather than on first read, `concurrency` sessions at
        a time; sessions whose L1 is cached are skipped. Returns the tokens spent."""
        ids = list(self.session_ids() if session_ids is None else session_ids)
        return self._each_session(ids, lambda sid, spent: self.facts(sid, usage=spent), f"L1 {self.user_id}", progress)

    def rebuild_layers(self, *, progress: bool = False) -> LayersReport:
        """Make again, with this memory's chat model, every cached L1 and L2 that another writer made (another
        model, another prompt, or none: `layers.writer`; a layer cached before writers were recorded counts as
        another's), `concurrency` sessions at a time: L1 whole, L2 for the turns it held. Layers never cached are
        left to be made on first read. A reply never shows another writer's layer anyway (it is made again when
        read); this does the work at once, e.g. after changing the chat model.

        >>> Memory("maya").rebuild_layers()       # after answering with local:smollm2 once     # doctest: +SKIP
        LayersReport(writer='extractive (layers-3)', l1=['chat-7'], l2=['chat-7'], seconds=0.2, usage=Usage(...))
        """
        started, report = time.perf_counter(), LayersReport(self.writers["L1"])
        for sid in self.session_ids():
            l1_writer, l1 = layers.recorded(self.store.get_json(key(sid, "L1.json")), "L1")
            l2_writer, l2 = layers.recorded(self.store.get_json(key(sid, "L2.json")), "L2")
            if l1 is not None and l1_writer != self.writers["L1"]:
                report.l1.append(sid)
            turns = _notes_from(l2, self.manifest["sessions"][sid]["turns"]) if l2_writer != self.writers["L2"] else {}
            if turns:
                report.l2[sid] = sorted(turns)

        def rebuild(sid: str, spent: Usage) -> None:
            if sid in report.l1:
                self.facts(sid, usage=spent)
            if sid in report.l2:
                self.notes(sid, report.l2[sid], usage=spent)

        todo = list(dict.fromkeys([*report.l1, *report.l2]))
        report.usage = self._each_session(todo, rebuild, f"layers {self.user_id}", progress)
        report.seconds = time.perf_counter() - started
        return report

    def _each_session(self, ids: list[str], work, desc: str, progress: bool) -> Usage:
        """Run ``work(session_id, usage)`` for each session, `concurrency` at a time, with a progress bar; returns
        the tokens spent."""
        spent = [Usage() for _ in ids]
        bar = tqdm(total=len(ids), desc=desc, unit="session", disable=not progress)

        def run(i: int) -> None:
            work(ids[i], spent[i])
            bar.update()

        with ContextThreadPoolExecutor(max_workers=max(1, self.concurrency)) as pool:
            list(pool.map(run, range(len(ids))))
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

    async def aforget(self, *session_ids: str) -> None:
        """`forget`, awaitable (in a worker thread)."""
        await asyncio.to_thread(self.forget, *session_ids)

    async def asearch(self, query: str | list[str], k: int = 10, *, filter=None, date_range=None) -> list[Document]:
        """`search`, awaitable (in a worker thread: the query embedding and scoring take the CPU)."""
        return await asyncio.to_thread(self.search, query, k, filter=filter, date_range=date_range)

    async def aread(self, session_id: str, layer: str, turns: list[int] | None = None) -> str:
        """`read`, awaitable (in a worker thread: a first read of L1/L2 calls the chat model)."""
        return await asyncio.to_thread(self.read, session_id, layer, turns)

    async def asession_ids(self) -> list[str]:
        """`session_ids`, awaitable (in a worker thread: it may read the store)."""
        return await asyncio.to_thread(self.session_ids)


def _notes_from(data: object, n_turns: int) -> dict[int, list[str]]:
    """Cached L2 notes; entries that are not notes of an existing turn are ignored (and regenerated)."""
    if not isinstance(data, dict):
        return {}
    notes = {}
    for turn, items in data.items():
        if turn.isdigit() and int(turn) < n_turns and isinstance(items, list) and all(isinstance(n, str) for n in items):
            notes[int(turn)] = items
    return notes


_shared: OrderedDict[tuple, Memory] = OrderedDict()  # the users a process keeps loaded, least recently used first
_shared_lock = threading.Lock()


def open_memory(user_id: str, *, store=None, chat_model=None, embeddings=None, base_url: str | None = None,
                l0_mode: str | None = None) -> Memory:
    """A user's `Memory`, opened once per process and shared (a server's runs for one user reuse its loaded
    index; `Memory.search` reloads it only when another writer committed a new generation). Unset options are
    resolved by `Settings`, as `Memory` resolves them.

    The users kept loaded take at most Settings' `cache_mb` together (``APDMEM_CACHE_MB``, by `Memory.nbytes`): the
    least recently used are dropped whole beyond it; the user just opened is kept, however large."""
    settings = Settings(store=store, chat_model=chat_model, embeddings=embeddings, base_url=base_url, l0_mode=l0_mode)
    budget = _megabytes(settings.cache_mb)
    store, chat_model, embeddings, base_url = settings.store, settings.chat_model, settings.embeddings, settings.base_url
    key = (_identity(store), check_id(user_id, "user"), _identity(chat_model), _identity(embeddings), base_url, settings.l0_mode)
    with _shared_lock:
        memory = _shared.get(key)
        if memory is None:
            memory = _shared[key] = Memory(user_id, store=store, chat_model=chat_model, embeddings=embeddings, base_url=base_url,
                                           l0_mode=settings.l0_mode)
        _shared.move_to_end(key)
        held = sum(m.nbytes() for m in _shared.values())
        while held > budget and len(_shared) > 1:
            held -= _shared.popitem(last=False)[1].nbytes()
        return memory


def _megabytes(value: object) -> int:
    """`cache_mb` in bytes; a ConfigError naming the setting when it is not a number of megabytes."""
    try:
        megabytes = float(value)
    except (TypeError, ValueError):
        megabytes = -1.0
    if not megabytes >= 0:
        raise ConfigError(f"cache_mb (APDMEM_CACHE_MB) must be a number of megabytes, got {value!r}")
    return int(megabytes * 2**20)


def _identity(model) -> object:
    return model if isinstance(model, str) else id(model)  # the Memory keeps the object alive, so ids stay unique
