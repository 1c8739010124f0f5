"""`Memory`: one user's four-layer memory, its indexes, and the operations on them."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from langchain_core.documents import Document
from langchain_core.stores import BaseStore
from tqdm.auto import tqdm

from apdmem.errors import ConfigError, UnknownSessionError
from apdmem.memory import layers
from apdmem.memory.index import DenseIndex, UnitIndex
from apdmem.memory.records import Session, Unit, Usage, check_id
from apdmem.memory.retriever import HybridRetriever, rank_sessions
from apdmem.memory.store import UserStore, open_store, session_key
from apdmem.models import embed_array, embeddings_id, get_chat_model, get_embeddings

FORMAT = 1
CHECKPOINT_SECONDS = 30  # during a long ingestion, progress is saved at least this often


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


class Memory:
    """A user's long-term memory: sessions stored as L0-L3 layers, with a hybrid index over L0.

    Example:
        >>> from apdmem import Memory, load_sessions                                  # doctest: +SKIP
        >>> memory = Memory("alice", l0_mode="raw")                                   # doctest: +SKIP
        >>> memory.ingest(load_sessions("history.json"))                              # doctest: +SKIP
        >>> [d.metadata["session_id"] for d in memory.search("my dog's name", k=3)]   # doctest: +SKIP

    `l0_mode` is "llm" (units summarized by the chat model), "raw" (the window text, no model call) or
    "auto" (raw with the embedded chat model, llm otherwise). `store` is any LangChain byte store (default: atomic files under the memory directory, which
    `directory` or ``$APDMEM_MEMORY_DIR`` sets). Models are specification strings (see `apdmem.models`)
    or LangChain objects. Everything this object reads or writes is inside the user's namespace.
    """

    def __init__(
        self,
        user_id: str,
        *,
        store: BaseStore[str, bytes] | None = None,
        directory: str | None = None,
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
        self.store = UserStore(store if store is not None else open_store(directory), user_id)
        self._chat_spec, self._base_url = chat_model, base_url
        self.embeddings = get_embeddings(embeddings, base_url) if isinstance(embeddings, str) else embeddings
        self._space = embeddings_id(embeddings, base_url) if isinstance(embeddings, str) else type(embeddings).__name__
        if l0_mode == "auto":
            # The embedded 135M model writes summaries worse than the text they summarize: index raw windows.
            l0_mode = "raw" if chat_model == "local" else "llm"
        if l0_mode not in ("llm", "raw"):
            raise ConfigError(f"unknown l0_mode {l0_mode!r}: use 'auto', 'llm' or 'raw'")
        self.l0_mode, self.window, self.stride, self.lexical = l0_mode, window, stride, lexical
        self.concurrency = concurrency
        self.usage = Usage()  # tokens spent by this object's model calls (construction and lazy layers)
        self._lock = threading.RLock()
        self._load()

    # --- models ----------------------------------------------------------------------------------------

    @property
    def chat_model(self):
        """The chat model for construction, loaded on first use (raw-mode ingestion never needs it)."""
        if isinstance(self._chat_spec, str):
            self._chat_spec = get_chat_model(self._chat_spec, self._base_url)
        return self._chat_spec

    def _embed(self, texts: list[str]) -> np.ndarray:
        vectors = embed_array(self.embeddings, texts)
        return vectors.reshape(len(texts), -1) if len(texts) else np.zeros((0, self._dimension()), np.float32)

    def _dimension(self) -> int:
        return getattr(self.embeddings, "dimension", None) or len(self.embeddings.embed_query("dimension"))

    # --- persistence ------------------------------------------------------------------------------------

    def _load(self) -> None:
        manifest = self.store.get_json("manifest.json") or {"format": FORMAT, "generation": 0, "sessions": {}}
        if manifest.get("format") != FORMAT:
            raise ConfigError(f"memory of user {self.user_id!r} has format {manifest.get('format')}; expected {FORMAT}")
        space = manifest.setdefault("embeddings", self._space)
        if space != self._space:
            raise ConfigError(
                f"memory of user {self.user_id!r} was indexed with embeddings {space!r}, not {self._space!r}; "
                "open it with the same embeddings"
            )
        self.manifest = manifest
        rows = self.store.get_json("index/rows.json")
        dense = self.store.get("index/dense.faiss")
        if rows and dense is not None and rows.get("generation") == manifest["generation"]:
            self.index = self._index_from(rows, dense)
        else:
            # Missing or stale index (first use, or a run killed between saves): rebuild from the layers.
            self.index = self._rebuild_index()

    def _index_from(self, rows: dict, dense: bytes) -> UnitIndex:
        units = {sid: self._read_units(sid) for sid in self.manifest["sessions"]}
        table = [units[sid][i] for sid, i in rows["units"]]
        return UnitIndex.restore(table, DenseIndex.from_bytes(dense, rows["vectors"]), self.lexical)

    def _rebuild_index(self) -> UnitIndex:
        units = [u for sid in self.manifest["sessions"] for u in self._read_units(sid)]
        index = UnitIndex(self._dimension(), self.lexical, len(units))
        index.add(units, self._embed([t for u in units for t in u.embed_texts]))
        return index

    def save(self) -> None:
        """Write the indexes, then the manifest that makes them current. Called by `ingest` and `forget`."""
        with self._lock:
            if not self.index.alive.all():  # rows of replaced sessions have no stored unit to point at
                self.index = self.index.compact()
            self.manifest["generation"] += 1
            # Each row points at (session, position in its L0.json): a session's live rows are in L0 order.
            position, units = Counter(), []
            for u in self.index.units:
                units.append((u.session_id, position[u.session_id]))
                position[u.session_id] += 1
            rows = {"generation": self.manifest["generation"], "units": units, "vectors": self.index.dense.rows.tolist()}
            self.store.put({"index/dense.faiss": self.index.dense.to_bytes()})
            self.store.put_json({"index/rows.json": rows})
            self.store.put_json({"manifest.json": self.manifest})

    def _key(self, session_id: str, name: str) -> str:
        return f"sessions/{session_key(session_id)}/{name}"

    def _read_units(self, session_id: str) -> list[Unit]:
        return [Unit(**u) for u in self.store.get_json(self._key(session_id, "L0.json"), [])]

    # --- ingestion and forgetting -------------------------------------------------------------------------

    def ingest(self, sessions: Iterable[Session], *, progress: bool = False) -> IngestReport:
        """Add sessions: store L3, build L0, index it. Identical sessions already stored are skipped;
        a stored session whose content changed is replaced. Safe to interrupt and run again."""
        started, report = time.perf_counter(), IngestReport()
        todo = []
        # A session id given twice in one call: the later version wins.
        for session in {s.session_id: s for s in sessions}.values():
            check_id(session.session_id, "session")
            known = self.manifest["sessions"].get(session.session_id)
            if known and known["hash"] == session.content_hash():
                report.unchanged.append(session.session_id)
            else:
                (report.updated if known else report.added).append(session.session_id)
                todo.append(session)
        bar = tqdm(total=sum(len(s.turns) for s in todo), desc=f"ingest {self.user_id}", unit="turn", disable=not progress)
        last_save = time.monotonic()
        with self._lock:
            if report.updated:
                # Unlist the old versions before their files change: a run killed below must not leave the
                # manifest naming a session whose layers are half replaced. Running again re-adds them.
                for sid in report.updated:
                    self._unlist(sid)
                self.save()
            for chunk in (todo[i : i + 32] for i in range(0, len(todo), 32)):
                self._add(chunk, report)
                bar.update(sum(len(s.turns) for s in chunk))
                if time.monotonic() - last_save > CHECKPOINT_SECONDS:
                    self.save()
                    last_save = time.monotonic()
            if todo:
                self.save()
        bar.close()
        report.seconds = time.perf_counter() - started
        return report

    def _add(self, sessions: list[Session], report: IngestReport) -> None:
        model = self.chat_model if self.l0_mode == "llm" else None
        units, usage = layers.build_units(
            sessions, mode=self.l0_mode, model=model, window=self.window, stride=self.stride, concurrency=self.concurrency
        )
        for total in (self.usage, report.usage):
            total.merge(usage)
        # Construction tokens are kept with the memory, so a cached memory still reports what it cost.
        built = self.manifest.setdefault("construction_usage", {"input_tokens": 0, "output_tokens": 0, "calls": 0})
        for key, value in vars(usage).items():
            built[key] += value
        for session in sessions:
            sid = session.session_id
            self._delete_files(sid)  # the old version (its cached L1/L2 too), or what a killed run left behind
            self.store.put_json({self._key(sid, "session.json"): session.to_json(), self._key(sid, "L0.json"): [u.to_json() for u in units[sid]]})
            self.store.put_text({self._key(sid, "L3.md"): layers.render_l3(session), self._key(sid, "L0.md"): layers.render_l0(session, units[sid])})
            self.manifest["sessions"][sid] = {"date": session.date.isoformat(), "turns": len(session.turns), "hash": session.content_hash(), "units": len(units[sid])}
            report.turns += len(session.turns)
            report.units += len(units[sid])
        batch = [u for s in sessions for u in units[s.session_id]]
        self.index.add(batch, self._embed([t for u in batch for t in u.embed_texts]))

    def _unlist(self, session_id: str) -> None:
        self.index.remove(session_id)
        del self.manifest["sessions"][session_id]

    def _delete_files(self, session_id: str) -> None:
        self.store.delete(self.store.keys(f"sessions/{session_key(session_id)}/"))

    def forget(self, session_id: str) -> None:
        """Remove a session from every layer and index."""
        with self._lock:
            if session_id not in self.manifest["sessions"]:
                raise UnknownSessionError(session_id)
            self._unlist(session_id)
            self.save()  # compacts the index; files go after, so a killed run leaves no listed session without them
            self._delete_files(session_id)

    # --- reading ----------------------------------------------------------------------------------------

    def session_ids(self) -> list[str]:
        """Ids of stored sessions, oldest first."""
        return sorted(self.manifest["sessions"], key=lambda s: (self.manifest["sessions"][s]["date"], s))

    def session(self, session_id: str) -> Session:
        """The stored session (L3)."""
        data = self.store.get_json(self._key(session_id, "session.json")) if session_id in self.manifest["sessions"] else None
        if data is None:
            raise UnknownSessionError(session_id)
        return Session.from_json(data)

    def search(self, query: str | list[str], k: int = 10, *, date_range=None) -> list[Document]:
        """Top-k sessions for one query or several sub-queries, each with its best L0 unit.

        `date_range` is a (start, end) pair of dates or ISO strings, or a list of such pairs: sessions in or
        near a range rank higher, none is dropped (`memory.search("my trip", date_range=("2023-05-01", "2023-05-31"))`).
        """
        queries = [query] if isinstance(query, str) else list(query)
        queries = [q for q in queries if q.strip()]
        if not queries or not len(self.index):
            return []
        dates = {sid: meta["date"] for sid, meta in self.manifest["sessions"].items()} if date_range else None
        hits = rank_sessions(self.index, queries, self._embed(queries), k, date_range=date_range, session_dates=dates)
        docs = []
        for hit in hits:
            unit = self.index.units[hit.row]
            meta = self.manifest["sessions"][hit.session_id]
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

    def facts(self, session_id: str) -> list[str]:
        """L1 key facts, generated on first read and cached."""
        cached = self.store.get_json(self._key(session_id, "L1.json"))
        if cached is not None:
            return cached
        session = self.session(session_id)
        facts = layers.extract_facts(session, self.chat_model, self.usage)
        self.store.put_json({self._key(session_id, "L1.json"): facts})
        self.store.put_text({self._key(session_id, "L1.md"): layers.render_l1(session, facts)})
        return facts

    def notes(self, session_id: str, turns: list[int] | None = None) -> dict[int, list[str]]:
        """L2 evidence notes by turn index (all turns, or the listed 0-based ones), generated on first read."""
        session = self.session(session_id)
        wanted = range(len(session.turns)) if turns is None else [t for t in turns if 0 <= t < len(session.turns)]
        cached = {int(t): n for t, n in (self.store.get_json(self._key(session_id, "L2.json")) or {}).items()}
        missing = [t for t in wanted if t not in cached]
        if missing:
            cached.update(layers.extract_notes(session, self.chat_model, self.usage, missing))
            self.store.put_json({self._key(session_id, "L2.json"): {str(t): n for t, n in sorted(cached.items())}})
            self.store.put_text({self._key(session_id, "L2.md"): layers.render_l2(session, cached)})
        return {t: cached[t] for t in wanted}

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
