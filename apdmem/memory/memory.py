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
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from langchain_core.documents import Document
from langchain_core.runnables.config import ContextThreadPoolExecutor
from tqdm.auto import tqdm

from apdmem.errors import ConfigError, UnknownSessionError
from apdmem.memory import layers
from apdmem.memory.index import UnitIndex, spellings
from apdmem.memory.links import Link
from apdmem.memory.backends import open_store
from apdmem.memory.loaders import session_from_messages
from apdmem.memory.records import Session, Unit, Usage, check_id, readable
from apdmem.memory.generations import Generations, key, listing
from apdmem.memory.retriever import SEARCH_K, HybridRetriever, date_ranges, rank_sessions
from apdmem.memory.retriever import rerank as rescore
from apdmem.memory.store import UserStore, session_key
from apdmem.models import embed_array, embeddings_id, get_chat_model, get_embeddings, get_reranker, is_embedded, recorded_space
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


@dataclass
class ReindexReport:
    """What a `Memory.reindex` call did: the space the memory was embedded with (`recorded`, by today's names; None
    when the user has no memory) and the one it is now (`space`); nothing was done when they were the same
    (`reindexed` False)."""

    recorded: object
    space: str
    reindexed: bool = False
    sessions: int = 0
    units: int = 0
    seconds: float = 0.0


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
        with self.generations.writer() as current:
            sessions = current.manifest["sessions"]
            fresh = [b for b in built if sessions.get(b[0].session_id, {}).get("hash") != b[0].content_hash()]
            report.unchanged += sorted({s.session_id for s, _, _ in built} - {s.session_id for s, _, _ in fresh})
            replaced = [s.session_id for s, _, _ in fresh if s.session_id in sessions]
            kept = {s.session_id: self._valid_notes(s) for s, _, _ in fresh if s.session_id in replaced}
            if fresh:
                # Named unfinished (and the old versions unlisted) before any file changes: a run killed below
                # leaves files the next writer deletes, never a listed session half replaced. Running again
                # re-adds them.
                current = self.generations.begin(current, [s.session_id for s, _, _ in fresh])
            generation = self.generations.derive(current)
            construction = generation.manifest.setdefault("construction_usage", {"input_tokens": 0, "output_tokens": 0, "calls": 0})
            for name in construction:
                construction[name] += getattr(spent, name)
            for session, units, vectors in fresh:
                sid = session.session_id
                self.generations.write_session(session, units, notes=kept.get(sid))
                generation.manifest["sessions"][sid] = listing(session, len(units))
                (report.updated if sid in replaced else report.added).append(sid)
                report.turns += len(session.turns)
                report.units += len(units)
            if fresh:
                generation.index.add([u for _, units, _ in fresh for u in units], np.concatenate([v for _, _, v in fresh]))
                generation.links.add(generation.index, [s.session_id for s, _, _ in fresh])
                self.generations.commit(generation)

    def _valid_notes(self, session: Session) -> dict[int, list[str]]:
        """The cached L2 notes of the stored version of `session` that still hold for it: those of turns
        unchanged at the same place, the date unchanged too (a turn's notes are made from it and the date).
        L1 facts are made from the whole session, so a changed session never keeps them."""
        old = self.generations.stored_session(session_key(session.session_id))
        if old is None or old.date != session.date:
            return {}
        cached = _notes_from(self.store.get_json(key(session.session_id, "L2.json")), len(old.turns))
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

        Under the user's writer lock, every L0 unit is embedded again from its stored text, and the new index is
        committed as a new generation that records the new space; the layers (L0 to L3) are not touched. Killed
        midway, it leaves the old generation current (run it again). Already in the configured space, it does
        nothing and says so (``reindexed`` False).

        >>> Memory.reindex("maya", progress=True)      # a memory embedded by the retired MiniLM   # doctest: +SKIP
        ReindexReport(recorded='local:minilm', space='local:bge-small', reindexed=True, sessions=7, units=14, ...)
        """
        started = time.perf_counter()
        memory = cls(user_id, _reindexing=True, **options)
        generations = memory.generations
        report = ReindexReport(None, generations.space)
        if generations.current.raw is None:
            memory._say_empty()  # nothing stored: nothing to take the lock for
            return report
        with generations.writer() as current:
            report.recorded = recorded_space(current.manifest.get("embeddings"))
            if not generations.own_space(current.manifest):
                units = sum(meta["units"] for meta in current.manifest["sessions"].values())
                with tqdm(total=units, desc=f"reindex {memory.user_id}", unit="unit", disable=not progress) as bar:
                    committed = generations.reembed(current, bar.update)
                report.reindexed, report.sessions = True, len(committed.manifest["sessions"])
                report.units = len(committed.index.units)
        report.seconds = time.perf_counter() - started
        return report

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

    def search(self, query: str | list[str], k: int = SEARCH_K, *, date_range=None, min_score: float | None = None,
               rerank: bool = False) -> list[Document]:
        """Top-k sessions for one query or several sub-queries, each with its best L0 unit.

        `min_score` drops sessions scoring below it (default: none; the k best are returned however weak). The
        score (``metadata["score"]``) is 0.8 x the cosine similarity of the best unit to the query plus 0.2 x its
        BM25 coverage (0 to 1), plus the date preference (up to 0.1) and, in llm mode, 0.25 per keyword of the
        unit named in the query. With the default embeddings (bge-small), sessions unrelated to a query score up to
        about 0.5 and the answering one 0.5-0.7 on the tests' history; look at the scores `apdmem search` prints
        before choosing a cut-off.

        `date_range` is a (start, end) pair of dates or ISO strings, or a list of such pairs: sessions in or
        near a range rank higher, none is dropped (`memory.search("my trip", date_range=("2023-05-01", "2023-05-31"))`).

        `rerank=True` rescores the k sessions found with the cross-encoder (`reranker`, default Settings'
        `reranker_model`), as the controller's searches do (`retriever.rerank`, which reads the first 10): better
        ordering for ~30 ms per session on two cores; one query only. The score becomes a standard score (`min_score` applies
        before, to the search score, kept as ``metadata["search_score"]``).
        """
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        if rerank and not isinstance(query, str):
            raise ValueError("rerank=True needs one query, not a list")
        date_ranges(date_range)  # a malformed range fails here, in one line, whatever the memory holds
        queries = [query] if isinstance(query, str) else list(query)
        queries = [readable(q) for q in queries if q.strip()]  # an agent's or a program's query may carry lone surrogates
        self.refresh()
        generation = self.generations.current  # one generation for the whole search, whatever writers do meanwhile
        if not generation.manifest["sessions"]:
            self._say_empty()
        if not queries or generation.index is None or not len(generation.index):
            return []
        dates = {sid: meta["date"] for sid, meta in generation.manifest["sessions"].items()} if date_range else None
        hits = rank_sessions(generation.index, queries, self._embed(queries), k, date_range=date_range, session_dates=dates)
        docs = []
        for hit in hits:
            if min_score is not None and hit.score < min_score:
                break  # hits come best first
            unit = generation.index.units[hit.row]
            meta = generation.manifest["sessions"][hit.session_id]
            docs.append(
                Document(
                    page_content=unit.summary,
                    metadata={"session_id": hit.session_id, "date": meta["date"], "span": [unit.start, unit.end], "score": hit.score, "keywords": unit.keywords},
                )
            )
        return rescore(queries[0], docs, get_reranker(self._reranker_spec)) if rerank and docs else docs

    def as_retriever(self, k: int = SEARCH_K, *, min_score: float | None = None, rerank: bool = False) -> HybridRetriever:
        """This memory as a LangChain retriever (`k`, `min_score` and `rerank` as in `search`)."""
        return HybridRetriever(memory=self, k=k, min_score=min_score, rerank=rerank)

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
        """Store generated L1/L2 files, unless the session was forgotten or replaced while they were made."""
        with self.generations.writer() as current:
            listed = current.manifest["sessions"].get(session.session_id)
            if listed and listed["hash"] == session.content_hash():
                self.store.put_json(items)
                self.store.put_text(texts)

    def facts(self, session_id: str, *, usage: Usage | None = None) -> list[str]:
        """L1 key facts, generated on first read and cached. A generation's tokens are added to `usage` (the
        caller's own account; `self.usage` is the running total of every caller)."""
        session = self.session(session_id)
        cached = self.store.get_json(key(session_id, "L1.json"))
        if isinstance(cached, list) and all(isinstance(f, str) for f in cached):
            return cached
        spent = Usage()
        facts = layers.extract_facts(session, self.chat_model, spent)
        self._account(spent, usage)
        self._cache(session, {key(session_id, "L1.json"): facts}, {key(session_id, "L1.md"): layers.render_l1(session, facts)})
        return facts

    def notes(self, session_id: str, turns: list[int] | None = None, *, usage: Usage | None = None) -> dict[int, list[str]]:
        """L2 evidence notes by turn index (all turns, or the listed 0-based ones), generated on first read
        (groups of turns concurrently); tokens are added to `usage` as in `facts`."""
        session = self.session(session_id)
        wanted = range(len(session.turns)) if turns is None else [t for t in turns if 0 <= t < len(session.turns)]
        cached = _notes_from(self.store.get_json(key(session_id, "L2.json")), len(session.turns))
        missing = [t for t in wanted if t not in cached]
        if missing:
            spent = Usage()
            cached.update(layers.extract_notes(session, self.chat_model, spent, missing, concurrency=self.concurrency))
            self._account(spent, usage)
            self._cache(session, {key(session_id, "L2.json"): {str(t): n for t, n in sorted(cached.items())}},
                        {key(session_id, "L2.md"): layers.render_l2(session, cached)})
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

    async def aforget(self, *session_ids: str) -> None:
        """`forget`, awaitable (in a worker thread)."""
        await asyncio.to_thread(self.forget, *session_ids)

    async def asearch(self, query: str | list[str], k: int = 10, *, date_range=None) -> list[Document]:
        """`search`, awaitable (in a worker thread: the query embedding and scoring take the CPU)."""
        return await asyncio.to_thread(self.search, query, k, date_range=date_range)

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
