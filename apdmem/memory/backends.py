"""Where memories live: the one place that turns a store location into a backend.

The backends sit side by side below this module: files and in-process stores (`apdmem.memory.store`) and
PostgreSQL (`apdmem.memory.postgres`); neither imports the other.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from langchain_core.stores import BaseStore

from apdmem.errors import ConfigError
from apdmem.memory.store import AtomicFileStore, LockedStore, MemoryStore
from apdmem.settings import Settings


POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")


def open_store(location: str | os.PathLike | BaseStore | None = None, *, existing: bool = False) -> MemoryStore:
    """The store at `location`: ``postgresql://user:password@host:port/database``; a directory (or a
    ``file://`` URL) of atomic files; by default (None) where `Settings` says (``APDMEM_STORE``, else
    ``APDMEM_MEMORY_DIR``, else ``~/.apdmem``); or a store object, used as it is
    (a LangChain byte store gets process-local writer locks). A PostgreSQL store (its connection pool) is
    shared within the process. Opening creates nothing: a directory is made by the first write. With
    ``existing=True`` (a source to read from), a directory that does not exist is an error.

    An empty location and a URL of any other scheme are errors (a URL is never taken for a directory name:
    it may hold a password).
    """
    if isinstance(location, MemoryStore):
        return location
    if isinstance(location, BaseStore):
        return LockedStore(location)
    if location is None:  # where `Settings` says memories live (APDMEM_STORE ..., ~/.apdmem), as for everything else
        return open_store(Settings().store, existing=existing)
    text = os.fspath(location) if isinstance(location, os.PathLike) else str(location)
    if not text.strip():
        raise ConfigError("the store location is empty: give a directory or a postgresql:// URL")
    scheme = _SCHEME.match(text)
    if scheme and scheme[1].lower() in POSTGRES_SCHEMES:
        from apdmem.memory.postgres import open_postgres  # on demand: SQLAlchemy is slow to import

        return open_postgres(text)
    if scheme and scheme[1].lower() != "file":
        raise ConfigError(f"unknown store URL scheme {scheme[1]!r}: use a directory, a file:// URL or a "
                          "postgresql:// URL")
    root = Path(text[len("file://") :] if scheme else text)
    if root.exists() and not root.is_dir():
        raise ConfigError(f"memory directory {str(root)!r} is a file, not a directory")
    if existing and not root.is_dir():
        raise ConfigError(f"no memory directory at {str(root)!r}")
    return AtomicFileStore(root)
