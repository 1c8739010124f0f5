"""Per-user storage of layer documents behind LangChain's `ByteStore` interface, with per-user writer locks.

A backend (`MemoryStore`) gives each namespace (``users/<user key>``) a LangChain byte store of its own, and
serializes the writers of a namespace across processes. Backends: atomic files (the default), PostgreSQL
(`apdmem.memory.postgres`), and, within one process, memory or any LangChain byte store. User and session ids
are validated and encoded so that no call made for one user can name another user's keys, on case-sensitive
and case-insensitive file systems alike. Values are bytes (JSON, Markdown, float32 vectors): nothing loaded
from a store is ever executed or unpickled, and no stored value names a file to open.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import stat
import logging
import threading
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

from langchain_core.stores import BaseStore, InMemoryByteStore

from apdmem.errors import StoreError, warn_once
from apdmem.memory.records import check_id

log = logging.getLogger("apdmem")
TEMPORARY_PREFIX = ".tmp-"
LOCK_NAME = ".lock"


class MemoryStore:
    """Where memories live: a byte store per namespace, and a writer lock per namespace.

    - `namespace(name)`: a LangChain byte store of the keys under `name` (keys relative to it).
    - `writer(name, wait=True)`: a context manager yielding True once this caller is the only writer of the
      namespace (readers never take it), or False at once with ``wait=False`` if another writer holds it.
      What a writer writes becomes visible to readers when it leaves, or as it goes (files: each write is
      atomic and the manifest is written last).
    - `namespaces(prefix)`: names of the namespaces under `prefix` that hold data.
    """

    @property
    def location(self) -> str:
        """Where this store is, as messages name it (never a password)."""
        return f"{type(self).__name__} {id(self):#x}"

    def identity(self) -> tuple:
        """What names the data of this store: two stores of the same identity hold the same data (one directory
        reached by two paths, one database by two URLs)."""
        return ("object", id(self))

    def namespace(self, name: str) -> BaseStore[str, bytes]:
        return _Prefixed(self, name)

    def writer(self, name: str, *, wait: bool = True):
        raise NotImplementedError

    def namespaces(self, prefix: str) -> list[str]:
        return sorted({prefix + k[len(prefix) :].split("/")[0] for k in self.yield_keys(prefix=prefix)})

    def leftovers(self, prefix: str) -> list[str]:
        """Names under `prefix` that hold no data but may need removing (temporary files of a killed write,
        planted links); a store that has none returns []."""
        return []


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


class AtomicFileStore(BaseStore[str, bytes], MemoryStore):
    """Files under a root directory, one per key, whose writes replace each file atomically (a process killed
    mid-write leaves the old value or the new one, never a torn file), with an OS file lock per namespace
    (``<namespace>/.lock``).

    Below the root, the store never follows a link: every folder and file is opened with ``O_NOFOLLOW``
    relative to its parent folder, so a link planted in the store (to another user's files, or outside the
    store) is never read, written through or deleted through. A hard link (a file with more than one name: the
    store never makes one, so its other name may be in another user's folder) is never read either. A link is
    not a key: reads see nothing there, and a write replaces the link itself; `leftovers` names a symbolic link
    so that the storage protocol removes it, but never a hard link (which of its names was planted cannot be
    told: deleting the other would lose a file), which a warning names instead. A folder where a file belongs (or a file where a folder belongs) is read as
    nothing and never deleted: a write there fails with a `StoreError` naming its path.
    """

    def __init__(self, root_path: str | os.PathLike) -> None:
        self.root_path = Path(root_path)
        self._threads = _ProcessLocks()  # flock is per open file; this also orders this process's own threads

    @property
    def location(self) -> str:
        return f"memory directory {str(self.root_path)!r}"

    def identity(self) -> tuple:
        try:
            info = os.stat(self.root_path)
        except FileNotFoundError:  # not made yet: no other path reaches it (a link to it would make it exist)
            return ("files", str(self.root_path.resolve()))
        return ("files", info.st_dev, info.st_ino)

    # --- walking folders without following links -----------------------------------------------------------

    @staticmethod
    def _parts(key: str) -> list[str]:
        parts = key.split("/")
        if not key or any(p in ("", ".", "..") or "\x00" in p for p in parts):
            raise ValueError(f"invalid store key {key!r}")
        return parts

    @contextmanager
    def _folder(self, parts: Sequence[str], *, create: bool = False) -> Iterator[int | None]:
        """A descriptor of the folder `parts` below the root (None when it is missing, or is not a real folder
        when reading). Creating, a link in the way is replaced by a folder."""
        opened: list[int] = []
        try:
            try:
                opened.append(os.open(self.root_path, os.O_RDONLY | os.O_DIRECTORY))
            except FileNotFoundError:
                if not create:
                    yield None
                    return
                self.root_path.mkdir(parents=True, exist_ok=True)
                opened.append(os.open(self.root_path, os.O_RDONLY | os.O_DIRECTORY))
            for part in parts:
                try:
                    fd = _open_folder(part, opened[-1], create)
                except NotADirectoryError:  # creating: a file where the folder belongs
                    raise _in_the_way(self.root_path, "/".join(parts[: len(opened)]), "a file", "a folder") from None
                if fd is None:
                    yield None
                    return
                opened.append(fd)
            yield opened[-1]
        finally:
            for fd in opened:
                os.close(fd)

    # --- the byte store -----------------------------------------------------------------------------------

    def mget(self, keys: Sequence[str]) -> list[bytes | None]:
        values = []
        for key in keys:
            *folder, name = self._parts(key)
            with self._folder(folder) as fd:
                values.append(None if fd is None else _read_file(name, fd))
        return values

    def mset(self, key_value_pairs: Sequence[tuple[str, bytes]]) -> None:
        """Write each value to a temporary file, make them durable, then rename each over its key (a link there is
        replaced, not followed). One value is synced alone (fsync); several are synced together by one sync of the
        file systems, far cheaper than one fsync per file (20,000 files: seconds instead of a minute)."""
        written: list[tuple[list[str], str, str]] = []  # (folder, temporary name, key) of each value written
        renamed = 0
        try:
            for key, value in key_value_pairs:
                *folder, _ = self._parts(key)
                with _refused(self.root_path), self._folder(folder, create=True) as fd:
                    tmp = TEMPORARY_PREFIX + os.urandom(6).hex()
                    handle = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=fd)
                    written.append((folder, tmp, key))
                    with os.fdopen(handle, "wb") as out:
                        out.write(value)
                        if len(key_value_pairs) == 1:
                            out.flush()
                            os.fsync(out.fileno())
            if len(written) > 1:
                os.sync()
            for renamed, (folder, tmp, key) in enumerate(written):
                with _refused(self.root_path), self._folder(folder, create=True) as fd:
                    try:
                        os.replace(tmp, key.rsplit("/", 1)[-1], src_dir_fd=fd, dst_dir_fd=fd)
                    except IsADirectoryError:
                        raise _in_the_way(self.root_path, key, "a folder", "a file") from None
        except BaseException:
            for folder, tmp, _ in written[renamed:]:  # what was not renamed in
                with suppress(OSError), self._folder(folder) as fd:
                    if fd is not None:
                        os.unlink(tmp, dir_fd=fd)
            raise

    def mdelete(self, keys: Sequence[str]) -> None:
        for key in keys:
            parts = self._parts(key)
            with self._folder(parts[:-1]) as fd:
                if fd is None:
                    continue
                with suppress(FileNotFoundError), _refused(self.root_path):
                    os.unlink(parts[-1], dir_fd=fd)  # a link is removed itself, never its target
            for depth in range(len(parts) - 1, 0, -1):  # folders left empty (a forgotten session's) go too
                with self._folder(parts[:depth]) as fd:
                    if fd is None or os.listdir(fd):
                        break
                with self._folder(parts[: depth - 1]) as parent:
                    try:
                        if parent is None:
                            break
                        os.rmdir(parts[depth - 1], dir_fd=parent)
                    except OSError:
                        break

    def yield_keys(self, *, prefix: str | None = None) -> Iterator[str]:
        # Temporary files of an interrupted write, lock files and links are not keys.
        return iter([k for k, kind in self._walk(prefix or "") if kind == "file"])

    def leftovers(self, prefix: str) -> list[str]:
        """Names under `prefix` that are not data: temporary files of a killed write, links, other special files."""
        return [k for k, kind in self._walk(prefix) if kind not in ("file", "hard link")]

    def _walk(self, prefix: str) -> list[tuple[str, str]]:
        """(key, kind) of every entry under `prefix` ("file", "temporary", "link", "hard link" or "special"),
        links never entered. A hard link is neither data nor a leftover: never read, and never deleted, for its
        other name may be the real file (another user's, or this user's own); it is named in a warning."""
        head, _, rest = prefix.rpartition("/")
        folder = self._parts(head) if head else []
        found: list[tuple[str, str]] = []
        with self._folder(folder) as fd:
            if fd is not None:
                _walk_folder(fd, (head + "/") if head else "", rest, found)
        for key, kind in found:
            if kind == "hard link":
                warn_once(f"apdmem: {str(self.root_path / key)!r} has another name (a hard link, which apdmem never "
                          "makes): it is not read, and not deleted (its other name may be a user's file): remove the "
                          "name that was planted")
        return sorted(found)

    # --- writers --------------------------------------------------------------------------------------------

    @contextmanager
    def writer(self, namespace: str, *, wait: bool = True) -> Iterator[bool]:
        with self._threads.hold(namespace, wait) as held:
            if not held:
                yield False
                return
            with _refused(self.root_path), self._folder(self._parts(namespace), create=True) as fd:
                try:
                    handle = _open_lock(fd)
                except IsADirectoryError:
                    raise _in_the_way(self.root_path, f"{namespace}/{LOCK_NAME}", "a folder", "a file") from None
            with os.fdopen(handle, "a+b") as lock:
                try:
                    fcntl.flock(lock.fileno(), fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
                except BlockingIOError:
                    yield False
                    return
                try:
                    yield True
                finally:
                    fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _open_lock(folder: int) -> int:
    """The lock file of a namespace, opened without following a link (a planted one is removed, not followed)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
    try:
        return os.open(LOCK_NAME, flags, 0o600, dir_fd=folder)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
    log.warning("apdmem: removed a link planted in the store where a lock file belongs")
    os.unlink(LOCK_NAME, dir_fd=folder)
    return os.open(LOCK_NAME, flags | os.O_EXCL, 0o600, dir_fd=folder)


def _open_folder(name: str, parent: int, create: bool) -> int | None:
    """A descriptor of the folder `name` in `parent`, never through a link; None when there is no such folder
    (reading). Creating, a link in the way is removed (the link itself, not its target) and a folder made."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        return os.open(name, flags, dir_fd=parent)
    except FileNotFoundError:
        if not create:
            return None
    except OSError:  # a link (ELOOP) or a file (ENOTDIR)
        if not create:
            return None
        if not stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
            raise
        log.warning("apdmem: removed a link planted in the store where a folder belongs: %s", name)
        os.unlink(name, dir_fd=parent)
    with suppress(FileExistsError):
        os.mkdir(name, dir_fd=parent)
    return os.open(name, flags, dir_fd=parent)


def _in_the_way(root: Path, key: str, found: str, kept: str) -> StoreError:
    """The one-line error of a write that meets `found` (a folder, a file) where the store keeps `kept`: the store
    deletes only what it wrote, so whoever put it there removes it."""
    return StoreError(f"{str(root / key)!r} is {found} where apdmem keeps {kept}; apdmem deletes nothing it did not "
                      "write: remove it")


@contextmanager
def _refused(root: Path) -> Iterator[None]:
    """A write the file system refuses (read-only, immutable, no rights) as one StoreError."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT):
            raise
        raise StoreError(f"cannot write in the memory directory {str(root)!r}: {exc.strerror or exc}") from None


def _read_file(name: str, folder: int) -> bytes | None:
    """The content of the regular file `name` in `folder`; None for a missing file, a link (symbolic, or hard: a
    file with another name, maybe in another user's folder), a folder or anything else."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
    except OSError:  # missing, a link (ELOOP)
        return None
    if not _data(os.fstat(fd)):
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def _data(info: os.stat_result) -> bool:
    """Whether a file is one the store wrote: a regular file with one name (it never makes a hard link)."""
    return stat.S_ISREG(info.st_mode) and info.st_nlink == 1


def _walk_folder(fd: int, path: str, start: str, found: list[tuple[str, str]]) -> None:
    for entry in os.scandir(fd):
        if (start and not entry.name.startswith(start)) or entry.name == LOCK_NAME:
            continue  # a lock file holds nothing (a link there is replaced by the writer that takes the lock)
        key = path + entry.name
        if entry.is_symlink():
            found.append((key, "link"))
        elif entry.is_dir(follow_symlinks=False):
            child = _open_folder(entry.name, fd, False)
            if child is not None:
                try:
                    _walk_folder(child, key + "/", "", found)
                finally:
                    os.close(child)
        elif entry.name.startswith(TEMPORARY_PREFIX):
            found.append((key, "temporary"))
        elif entry.is_file(follow_symlinks=False):
            if not _data(entry.stat(follow_symlinks=False)):
                found.append((key, "hard link"))
            elif not entry.name.startswith("."):
                found.append((key, "file"))
        else:
            found.append((key, "special"))


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
        self.location = store.location
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

    def leftovers(self, prefix: str = "") -> list[str]:
        """Temporary files and planted links under `prefix` (keys relative to the user's namespace)."""
        return [k[len(self.root) + 1 :] for k in self._store.leftovers(f"{self.root}/{prefix}")]

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
