"""Errors raised by apdmem. Each one says what was wrong and where. And `warn_once`, for what is met again and
again (a read-only store at every open) but worth one warning."""

import logging
import shlex
import threading

_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def warn_once(message: str, *, key: str = "") -> None:
    """Log `message` as a warning of the "apdmem" logger the first time this process meets it (with `key`, the
    first time it meets both), at debug level after: a read-only store or a damaged file is met by every open and
    every run, and one warning says it."""
    with _warned_lock:
        first = (key, message) not in _warned
        _warned.add((key, message))
    logging.getLogger("apdmem").log(logging.WARNING if first else logging.DEBUG, "%s", message)

SHOWN_CHARS = 80  # of an id echoed in an error


def shown(value: object) -> str:
    """`value` (an id as a client sent it) as an error message shows it: quoted with its control characters
    escaped, and cut to SHOWN_CHARS characters, so that a newline or ten thousand characters sent where an id
    belongs leave the error one short line.

    >>> shown("chat-7"), shown("a\\nb"), shown("x" * 10_000).endswith("x'... (10,000 characters)")
    ("'chat-7'", "'a\\\\nb'", True)
    """
    if isinstance(value, str) and len(value) > SHOWN_CHARS:
        return f"{value[:SHOWN_CHARS]!r}... ({len(value):,} characters)"
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}... (a {type(value).__name__})"


class ApdmemError(Exception):
    """Base class of every error apdmem raises on purpose."""


class InputError(ApdmemError, ValueError):
    """A conversation file or record cannot be read as a user's history.

    `source` names the file (or "<input>"), `record` the record inside it (session id or index).
    """

    def __init__(self, message: str, *, source: str = "<input>", record: str | int | None = None):
        self.source, self.record, self.reason = source, record, message
        where = source if record is None else f"{source}, record {record if isinstance(record, int) else shown(record)}"
        super().__init__(f"{where}: {message}")


class InvalidIdError(ApdmemError, ValueError):
    """A user or session id that cannot be used as a storage name."""


class QueryError(ApdmemError, ValueError):
    """A search's filter or date range that is not of the form it takes; the message names the form."""


class UnknownSessionError(ApdmemError, KeyError):
    """The session is not in this user's memory."""

    def __str__(self) -> str:
        return f"no session {shown(self.args[0])} in this user's memory"


class ConfigError(ApdmemError, ValueError):
    """A model or store specification that apdmem cannot honour."""


class ModelError(ApdmemError, RuntimeError):
    """A configured model could not be reached or failed (connection refused, authentication, a server error):
    apdmem never answers without it when it was chosen. The message names the model and the reason, in one line
    (a LangGraph server shows it to the client: it is a RuntimeError). Output a model did give but that is unusable
    (not the JSON asked for) is no error: the caller falls back. A reranker endpoint that cannot be reached or
    answers in a shape apdmem does not read is one too. The message never holds a key."""


class StoreError(ApdmemError):
    """The store refused an operation: read-only, no rights on it, or unreachable. The message names the store
    (never a password) and the reason."""


class OtherSpaceError(ConfigError):
    """The user's memory was embedded with other embeddings than the configured ones: its vectors cannot be
    searched or extended with them. `apdmem reindex` (`Memory.reindex`) re-embeds it. `recorded` and
    `configured` name the two spaces."""

    def __init__(self, user_id: str, recorded, configured: str):
        self.user_id, self.recorded, self.configured = user_id, recorded, configured
        super().__init__(f"memory of user {shown(user_id)} was embedded with {recorded!r}; this configuration uses {configured!r}: "
                         f"run `apdmem reindex --user {shlex.quote(user_id)}` to re-embed it")


class LimitError(InputError):
    """A request asks more than one of the documented limits allows (`apdmem.limits`); `source` names the field."""
