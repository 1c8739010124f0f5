"""Memories in PostgreSQL, for deployments where several workers or machines serve the same users.

Each namespace (``users/<user key>``) is a langchain-community `SQLStore` namespace: rows of (namespace, key,
value) in its table, over SQLAlchemy and psycopg 3. What this module adds is what `SQLStore` does not do:

- writers: a transaction holding a transaction-scoped advisory lock keyed by the namespace. Every write of the
  writer joins that transaction (each `SQLStore` call commits a savepoint inside it), so a writer's changes
  (a new generation: layers, index, manifest) become visible together when it leaves, and a writer killed
  half way leaves the previous generation as it was;
- key listings that read one namespace's keys under the prefix only (`SQLStore.yield_keys` reads every row of its
  table): a range of an index of the keys in byte order (`KEY_ORDER_INDEX`, created with the table, or when a
  worker first starts on a table made before it), so that a commit's listings do not read every row of a user of
  thousands of sessions.

Readers use pooled connections outside any writer's transaction, so they see committed generations only and
never wait for a writer.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from langchain_community.storage.sql import Base, LangchainKeyValueStores, SQLStore
from sqlalchemy import create_engine, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from apdmem.errors import ConfigError, StoreError
from apdmem.memory.store import MemoryStore

log = logging.getLogger("apdmem")
_SCHEMA_LOCK = 0x617064_6D656D  # an advisory lock key for creating the table once when workers start together
# The keys of each namespace in byte order ("C"), whatever the database's collation: a prefix is a range of it.
KEY_ORDER_INDEX = "apdmem_keys_in_byte_order"


def _lock_key(name: str) -> int:
    """A signed 64-bit advisory lock key for a namespace."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big", signed=True)


@functools.cache
def open_postgres(url: str) -> PostgresStore:
    """The store at a ``postgresql://`` URL, one per process (its connection pool is shared)."""
    return PostgresStore(url)


class PostgresStore(MemoryStore):
    """Memories in a PostgreSQL database (see the module's docstring)."""

    def __init__(self, url: str, *, pool_size: int = 8):
        try:
            parsed = make_url(url).set(drivername="postgresql+psycopg")
        except Exception:  # noqa: BLE001 - SQLAlchemy's URL parser raises several kinds
            raise ConfigError(f"not a PostgreSQL URL: {url!r}") from None
        self.url = parsed.render_as_string(hide_password=True)  # safe to show in messages and logs
        self.engine = create_engine(parsed, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True)
        self._writing = threading.local()  # namespace -> the connection of this thread's writer
        self._namespaces: dict[str, _Namespace] = {}
        try:
            with self.engine.begin() as connection:
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_LOCK})
                Base.metadata.create_all(connection, tables=[LangchainKeyValueStores.__table__])
                _index_keys_in_byte_order(connection)
        except SQLAlchemyError as exc:
            raise ConfigError(f"cannot use PostgreSQL at {self.url}: {_reason(exc)}") from None

    @property
    def location(self) -> str:
        return f"PostgreSQL at {self.url}"

    def identity(self) -> tuple:
        """The server (by the time it started), the database and the table of its rows, as the server names them:
        the same for two URLs that reach one database (another host name, another role)."""
        query = text("SELECT pg_postmaster_start_time()::text, current_database(), "
                     "to_regclass('langchain_key_value_stores')::oid::bigint")
        with self.refused(), self.engine.connect() as connection:
            return ("postgresql", *connection.execute(query).one())

    def namespace(self, name: str) -> _Namespace:
        if name not in self._namespaces:
            self._namespaces[name] = _Namespace(self, name)
        return self._namespaces[name]

    def connection_of_writer(self, name: str):
        """The connection of this thread's writer of `name`, if this thread is one."""
        return getattr(self._writing, "connections", {}).get(name)

    @contextmanager
    def writer(self, name: str, *, wait: bool = True) -> Iterator[bool]:
        with self.engine.connect() as connection:
            transaction = connection.begin()
            try:
                if wait:
                    connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _lock_key(name)})
                elif not connection.execute(text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": _lock_key(name)}).scalar():
                    transaction.rollback()
                    yield False
                    return
                connections = self._writing.__dict__.setdefault("connections", {})
                connections[name] = connection
                try:
                    yield True
                finally:
                    del connections[name]
                transaction.commit()
            except BaseException:
                if transaction.is_active:
                    transaction.rollback()
                raise

    def namespaces(self, prefix: str) -> list[str]:
        table = LangchainKeyValueStores
        with self.refused(), Session(self.engine) as session:
            query = select(table.namespace).where(table.namespace.startswith(prefix, autoescape=True)).distinct()
            return sorted(session.scalars(query))

    @contextmanager
    def refused(self) -> Iterator[None]:
        """A database error (no rights on the table, a read-only role, a lost server) as one StoreError: the
        first line of the server's message, never the SQL or its parameters."""
        try:
            yield
        except SQLAlchemyError as exc:
            raise StoreError(f"PostgreSQL at {self.url} refused: {_reason(exc)}") from None


class _Namespace(SQLStore):
    """One namespace as a LangChain byte store; inside a writer, its calls join the writer's transaction."""

    def __init__(self, owner: PostgresStore, name: str):
        self._owner = owner
        super().__init__(namespace=name, engine=owner.engine)

    @property
    def session_maker(self):
        connection = self._owner.connection_of_writer(self.namespace)
        if connection is None:
            return self._pooled_sessions
        # Each SQLStore call commits; joined this way, its commit ends a savepoint, not the writer's transaction.
        return lambda: Session(bind=connection, join_transaction_mode="create_savepoint")

    @session_maker.setter
    def session_maker(self, value) -> None:  # set by SQLStore.__init__
        self._pooled_sessions = value

    def yield_keys(self, *, prefix: str | None = None) -> Iterator[str]:
        table = LangchainKeyValueStores
        query = select(table.key).where(table.namespace == self.namespace)
        if prefix:
            query = query.where(table.key.startswith(prefix, autoescape=True), table.key.collate("C") >= prefix)
            if (above := _above(prefix)) is not None:
                query = query.where(table.key.collate("C") < above)
        with self._owner.refused(), self._make_sync_session() as session:
            return iter(list(session.scalars(query.order_by(table.key))))

    def mget(self, keys):
        with self._owner.refused():
            return super().mget(keys)

    def mset(self, key_value_pairs):
        with self._owner.refused():
            super().mset(key_value_pairs)

    def mdelete(self, keys):
        with self._owner.refused():
            super().mdelete(keys)


def _index_keys_in_byte_order(connection) -> None:
    """Create `KEY_ORDER_INDEX` if the table has none. A role that may not (it does not own a table made before the
    index was) leaves it out: its listings read every row of a namespace, as they did before, and a warning says so."""
    if connection.execute(text("SELECT to_regclass(:name)"), {"name": KEY_ORDER_INDEX}).scalar() is not None:
        return
    try:
        with connection.begin_nested():
            connection.execute(text(f'CREATE INDEX {KEY_ORDER_INDEX} ON langchain_key_value_stores (namespace, key COLLATE "C")'))
    except SQLAlchemyError as exc:
        log.warning("apdmem: PostgreSQL did not create the index %s (%s): listing a user's keys reads all its rows",
                    KEY_ORDER_INDEX, _reason(exc))


def _above(prefix: str) -> str | None:
    """The first string after every string that starts with `prefix`, in byte order (that of code points, in UTF-8);
    None when there is none (the prefix is the last code point, repeated)."""
    stripped = prefix.rstrip(chr(0x10FFFF))
    if not stripped:
        return None
    following = ord(stripped[-1]) + 1
    return stripped[:-1] + chr(0xE000 if 0xD800 <= following < 0xE000 else following)  # no surrogates in UTF-8


def _reason(exc: SQLAlchemyError) -> str:
    """The first line of the driver's message (no SQL, no parameters)."""
    return str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
