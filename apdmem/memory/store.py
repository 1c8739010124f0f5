"""Per-user storage of layer documents behind LangChain's `ByteStore` interface.

Every key a `UserStore` reads or writes lives under ``<user_id>/``; the user id is validated so that no
call made for one user can name another user's keys. Values are bytes (JSON or Markdown): nothing
loaded from a memory directory is ever executed or unpickled.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from langchain_classic.storage import LocalFileStore
from langchain_core.stores import BaseStore, ByteStore, InMemoryByteStore

from apdmem.memory.records import check_id

MEMORY_DIR_ENV = "APDMEM_MEMORY_DIR"


def default_memory_dir() -> Path:
    """The memory directory: ``$APDMEM_MEMORY_DIR``, else ``~/.apdmem``."""
    return Path(os.environ.get(MEMORY_DIR_ENV) or Path.home() / ".apdmem")


class AtomicFileStore(LocalFileStore):
    """A `LocalFileStore` whose writes replace each file atomically, so a process killed mid-write
    leaves either the old value or the new one, never a torn file."""

    def mset(self, key_value_pairs: Sequence[tuple[str, bytes]]) -> None:
        for key, value in key_value_pairs:
            path = self._get_full_path(key)
            self._mkdir_for_store(path.parent)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(value)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise

    def yield_keys(self, *, prefix: str | None = None) -> Iterator[str]:
        # Temporary files of an interrupted write are not keys.
        return (k for k in super().yield_keys(prefix=prefix) if not Path(k).name.startswith(".tmp-"))


def open_store(directory: str | os.PathLike | None = None) -> ByteStore:
    """The default byte store: atomic files under the memory directory."""
    root = Path(directory) if directory is not None else default_memory_dir()
    root.mkdir(parents=True, exist_ok=True)
    return AtomicFileStore(root)


def memory_store() -> ByteStore:
    """An in-memory byte store (tests, throwaway runs)."""
    return InMemoryByteStore()


# Keys of LocalFileStore are limited to this alphabet; other session ids are hex-encoded.
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_.\-]+$")


def session_key(session_id: str) -> str:
    """The storage name of a session id (readable when the id is plain, hex-encoded otherwise)."""
    # "." is plain but names the parent directory in a file store: "users/./" would be every user's keys.
    plain = _PLAIN_KEY.match(session_id) and session_id != "." and not session_id.startswith("x-")
    return session_id if plain else "x-" + session_id.encode().hex()


class UserStore:
    """One user's namespace in a byte store. JSON and text helpers on top of `mget`/`mset`."""

    def __init__(self, store: BaseStore[str, bytes], user_id: str):
        self.user_id = check_id(user_id, "user")
        self._store = store
        self.root = f"users/{session_key(user_id)}"  # the user's folder in a file store
        self._prefix = self.root + "/"

    def get(self, key: str) -> bytes | None:
        return self._store.mget([self._prefix + key])[0]

    def put(self, items: dict[str, bytes]) -> None:
        self._store.mset([(self._prefix + k, v) for k, v in items.items()])

    def delete(self, keys: list[str]) -> None:
        self._store.mdelete([self._prefix + k for k in keys])

    def keys(self, prefix: str = "") -> list[str]:
        return [k[len(self._prefix) :] for k in self._store.yield_keys(prefix=self._prefix + prefix)]

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
