"""Errors raised by apdmem. Each one says what was wrong and where."""

import shlex


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


class ModelError(ApdmemError):
    """A model endpoint failed: it cannot be reached, refused the request or answered in a shape apdmem does not
    read. The message names the endpoint (never its key) and the reason."""


class StoreError(ApdmemError):
    """The store refused an operation: read-only, no rights on it, or unreachable. The message names the store
    (never a password) and the reason."""


class OtherSpaceError(ConfigError):
    """The user's memory was embedded with other embeddings than the configured ones: its vectors cannot be
    searched or extended with them. `apdmem reindex` (`Memory.reindex`) re-embeds it. `recorded` and
    `configured` name the two spaces."""

    def __init__(self, user_id: str, recorded, configured: str):
        self.user_id, self.recorded, self.configured = user_id, recorded, configured
        super().__init__(f"memory of user {user_id!r} was embedded with {recorded!r}; this configuration uses {configured!r}: "
                         f"run `apdmem reindex --user {shlex.quote(user_id)}` to re-embed it")
