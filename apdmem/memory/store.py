"""Per-user storage of layer documents behind LangChain's `ByteStore` interface, with per-user writer locks.

A backend (`MemoryStore`) gives each namespace (``users/<user key>``) a LangChain byte store of its own, and
serializes the writers of a namespace across processes. Backends: atomic files (the default), PostgreSQL
(`apdmem.memory.postgres`), and, within one process, memory or any LangChain byte store. User and session ids
are validated and encoded so that no call made for one user can name another user's keys, on case-sensitive
and case-insensitive file systems alike. Values are bytes (JSON, Markdown, float32 vectors): nothing loaded
from a store is ever executed or unpickled, and no stored value names a file to open.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import tempfile
import logging
import threading
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from langchain_classic.storage import LocalFileStore
from langchain_core.stores import BaseStore, InMemoryByteStore

from apdmem.errors import ConfigError
from apdmem.memory.records import check_id

MEMORY_DIR_ENV = "APDMEM_MEMORY_DIR"
log = logging.getLogger("apdmem")
TEMPORARY_PREFIX = ".tmp-"
LOCK_NAME = ".lock"


def default_memory_dir() -> Path:
    """The memory directory: ``$APDMEM_MEMORY_DIR``, else ``~/.apdmem``."""
    return Path(os.environ.get(MEMORY_DIR_ENV) or Path.home() / ".apdmem")


class MemoryStore:
    """Where memories live: a byte store per namespace, and a writer lock per namespace.

    - `namespace(name)`: a LangChain byte store of the keys under `name` (keys relative to it).
    - `writer(name, wait=True)`: a context manager yielding True once this caller is the only writer of the
      namespace (readers never take it), or False at once with ``wait=False`` if another writer holds it.
      What a writer writes becomes visible to readers when it leaves, or as it goes (files: each write is
      atomic and the manifest is written last).
    - `namespaces(prefix)`: names of the namespaces under `prefix` that hold data.
    """

    def namespace(self, name: str) -> BaseStore[str, bytes]:
        return _Prefixed(self, name)

    def writer(self, name: str, *, wait: bool = True):
        raise NotImplementedError

    def namespaces(self, prefix: str) -> list[str]:
        return sorted({prefix + k[len(prefix) :].split("/")[0] for k in self.yield_keys(prefix=prefix)})


class _Prefixed(BaseStore[str, bytes]):
    """The keys of a path-keyed byte store that start with "<name>/", without that prefix."""

    def __init__(self, store: BaseStore[str, bytes], name: str) -> None:
        self._store, self._prefix = store, name + "/"

    def mget(self, keys: Sequence[str]) -> list[bytes | None]:
        return self._store.mget([self._prefix + k for k in keys])

    def mset(self, key_value_pairs: Sequence[tuple[str, bytes]]) -> None:
        self._store.mset([(self._prefix + k, v) for k, v in key_value_pairs])

    def mdelete(self, keys: Sequence[str]) -> None:
        self._store.mdelete([self._prefix + k for k in keys])

    def yield_keys(self, *, prefix: str | None = None) -> Iterator[str]:
        return (k[len(self._prefix) :] for k in self._store.yield_keys(prefix=self._prefix + (prefix or "")))


class _ProcessLocks:
    """Per-namespace locks shared by the threads of this process."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = defaultdict(threading.Lock)

    @contextmanager
    def hold(self, namespace: str, wait: bool) -> Iterator[bool]:
        with self._guard:
            lock = self._locks[namespace]
        if not lock.acquire(blocking=wait):
            yield False
            return
        try:
            yield True
        finally:
            lock.release()


class AtomicFileStore(LocalFileStore, MemoryStore):
    """A `LocalFileStore` whose writes replace each file atomically (a process killed mid-write leaves the old
    value or the new one, never a torn file), with an OS file lock per namespace (``<namespace>/.lock``).

    Taking the lock also removes temporary files that killed writers left in the namespace: while it is held,
    no other writer of that namespace can have one in flight.
    """

    def __init__(self, root_path: str | os.PathLike) -> None:
        super().__init__(root_path)
        self._threads = _ProcessLocks()  # flock is per open file; this also orders this process's own threads

    def mset(self, key_value_pairs: Sequence[tuple[str, bytes]]) -> None:
        for key, value in key_value_pairs:
            path = self._get_full_path(key)
            self._mkdir_for_store(path.parent)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=TEMPORARY_PREFIX)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(value)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise

    def mdelete(self, keys: Sequence[str]) -> None:
        super().mdelete(keys)
        for key in keys:  # folders left empty (a forgotten session's) go too
            folder = self._get_full_path(key).parent
            while folder != self.root_path and folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
                folder = folder.parent

    def yield_keys(self, *, prefix: str | None = None) -> Iterator[str]:
        # Temporary files of an interrupted write and lock files are not keys.
        return (k for k in super().yield_keys(prefix=prefix) if not Path(k).name.startswith("."))

    @contextmanager
    def writer(self, namespace: str, *, wait: bool = True) -> Iterator[bool]:
        folder = self._get_full_path(namespace)
        with self._threads.hold(namespace, wait) as held:
            if not held:
                yield False
                return
            folder.mkdir(parents=True, exist_ok=True)
            with open(folder / LOCK_NAME, "a+b") as handle:
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
                except BlockingIOError:
                    yield False
                    return
                try:
                    stale = list(folder.rglob(TEMPORARY_PREFIX + "*"))
                    for path in stale:
                        path.unlink(missing_ok=True)
                    if stale:
                        log.warning("apdmem: removed %d temporary file(s) left in %s by an interrupted write",
                                    len(stale), namespace)
                    yield True
                finally:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


class InMemoryStore(InMemoryByteStore, MemoryStore):
    """An in-memory byte store (tests, throwaway runs); writers are serialized within the process."""

    def __init__(self) -> None:
        super().__init__()
        self._writers = _ProcessLocks()

    def writer(self, namespace: str, *, wait: bool = True):
        return self._writers.hold(namespace, wait)


class LockedStore(MemoryStore):
    """Any other LangChain byte store (path-like keys), its writers serialized within this process only: use a
    backend with its own locks (files, PostgreSQL) when several processes write one user."""

    def __init__(self, store: BaseStore[str, bytes]) -> None:
        self._writers = _ProcessLocks()
        self.mget, self.mset, self.mdelete, self.yield_keys = store.mget, store.mset, store.mdelete, store.yield_keys

    def writer(self, namespace: str, *, wait: bool = True):
        return self._writers.hold(namespace, wait)


def open_store(location: str | os.PathLike | BaseStore | None = None) -> MemoryStore:
    """The store at `location`: ``postgresql://user:password@host:port/database``; a directory (or a
    ``file://`` URL) of atomic files, by default the memory directory; or a store object, used as it is
    (a LangChain byte store gets process-local writer locks). A PostgreSQL store (its connection pool) is
    shared within the process."""
    if isinstance(location, MemoryStore):
        return location
    if isinstance(location, BaseStore):
        return LockedStore(location)
    text = str(location) if location is not None else ""
    if text.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
        from apdmem.memory.postgres import open_postgres

        return open_postgres(text)
    root = Path(text.removeprefix("file://")) if text else default_memory_dir()
    if root.exists() and not root.is_dir():
        raise ConfigError(f"memory directory {str(root)!r} is a file, not a directory")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create memory directory {str(root)!r}: {exc.strerror or exc}") from None
    return AtomicFileStore(root)


def memory_store() -> InMemoryStore:
    """An in-memory byte store (tests, throwaway runs)."""
    return InMemoryStore()


# A plain name is readable and safe on every file system: lower case only (case-insensitive systems would
# merge "Alice" and "alice"), no leading dot (lock and temporary files), no trailing dot, no device name.
_PLAIN_KEY = re.compile(r"^[a-z0-9_][a-z0-9_.\-]{0,99}$")
_DEVICE_NAMES = re.compile(r"^(con|prn|aux|nul|com\d|lpt\d)(\..*)?$")
_MAX_HEX_BYTES = 100  # "x-" + 200 hex digits stays far below the usual 255-byte limit on a file name


def session_key(identifier: str) -> str:
    """The storage name of a user or session id: the id itself when plain, else hex-encoded ("x-..."), else,
    for long ids, a SHA-256 digest ("h-..."). Injective, and case-insensitive file systems keep it so."""
    plain = _PLAIN_KEY.match(identifier) and not identifier.endswith(".") and not _DEVICE_NAMES.match(identifier)
    if plain and not identifier.startswith(("x-", "h-")):
        return identifier
    raw = identifier.encode("utf-8")
    return "x-" + raw.hex() if len(raw) <= _MAX_HEX_BYTES else "h-" + hashlib.sha256(raw).hexdigest()


class UserStore:
    """One user's namespace in a store: JSON and text helpers on top of `mget`/`mset`, and its writer lock."""

    def __init__(self, store: MemoryStore, user_id: str):
        self.user_id = check_id(user_id, "user")
        self._store = store
        self.root = f"users/{session_key(user_id)}"  # the user's folder in a file store
        self._kv = store.namespace(self.root)

    def writer(self, *, wait: bool = True):
        """The user's writer lock (a context manager yielding whether it was taken)."""
        return self._store.writer(self.root, wait=wait)

    def get(self, key: str) -> bytes | None:
        return self._kv.mget([key])[0]

    def get_many(self, keys: list[str]) -> list[bytes | None]:
        return self._kv.mget(keys)

    def put(self, items: dict[str, bytes]) -> None:
        self._kv.mset(list(items.items()))

    def delete(self, keys: list[str]) -> None:
        if keys:
            self._kv.mdelete(keys)

    def keys(self, prefix: str = "") -> list[str]:
        return list(self._kv.yield_keys(prefix=prefix))

    def get_json(self, key: str, default=None):
        raw = self.get(key)
        return default if raw is None else json.loads(raw)

    def put_json(self, items: dict[str, object]) -> None:
        self.put({k: json.dumps(v, ensure_ascii=False).encode() for k, v in items.items()})

    def get_text(self, key: str) -> str | None:
        raw = self.get(key)
        return None if raw is None else raw.decode()

    def put_text(self, items: dict[str, str]) -> None:
        self.put({k: v.encode() for k, v in items.items()})
