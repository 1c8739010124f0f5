"""Errors raised by apdmem. Each one says what was wrong and where."""


class ApdmemError(Exception):
    """Base class of every error apdmem raises on purpose."""


class InputError(ApdmemError, ValueError):
    """A conversation file or record cannot be read as a user's history.

    `source` names the file (or "<input>"), `record` the record inside it (session id or index).
    """

    def __init__(self, message: str, *, source: str = "<input>", record: str | int | None = None):
        self.source, self.record, self.reason = source, record, message
        where = source if record is None else f"{source}, record {record}"
        super().__init__(f"{where}: {message}")


class InvalidIdError(ApdmemError, ValueError):
    """A user or session id that cannot be used as a storage name."""


class UnknownSessionError(ApdmemError, KeyError):
    """The session is not in this user's memory."""

    def __str__(self) -> str:
        return f"no session {self.args[0]!r} in this user's memory"


class ConfigError(ApdmemError, ValueError):
    """A model or store specification that apdmem cannot honour."""


class StoreError(ApdmemError):
    """The store refused an operation: read-only, no rights on it, or unreachable. The message names the store
    (never a password) and the reason."""
