"""Typed records of a user's history: sessions of turns, and the L0 units built over them."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, fields
from datetime import datetime

from apdmem.errors import InvalidIdError, shown

ROLES = ("user", "assistant", "system")

# Ids become file and key names: printable, no path separators, no "..", bounded length.
_ID = re.compile(r"^[^\x00-\x1f\x7f/\\]{1,200}$")


def check_id(value: object, what: str) -> str:
    """Return `value` if it is usable as a user or session id, else raise InvalidIdError."""
    if not isinstance(value, str) or not _ID.match(value) or ".." in value or value.strip() != value or not _utf8(value):
        raise InvalidIdError(
            f"invalid {what} id {shown(value)}: use 1-200 printable characters, "
            "without '/', '\\', '..', control characters, lone surrogates or surrounding spaces"
        )
    return value


_SURROGATE = re.compile("[\ud800-\udfff]")


def readable(text: str) -> str:
    """`text` with every lone surrogate replaced by U+FFFD, the replacement character.

    Python turns the invalid UTF-8 bytes of a command-line argument into lone surrogates, and a JSON escape can
    carry one; no encoder, tokenizer or model client accepts them. Free text (a question, a query) goes through
    this once where it enters apdmem; ids are refused instead (`check_id`).

    >>> readable("caf\\udcff au lait")
    'caf\ufffd au lait'
    """
    return _SURROGATE.sub("\ufffd", text)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True)
class Turn:
    """One message. `speaker` names a human speaker where roles alone are ambiguous (LoCoMo);
    `turn_id` keeps a dataset's own turn id (LoCoMo `dia_id`); `has_answer` keeps LongMemEval's label."""

    role: str
    content: str
    speaker: str | None = None
    turn_id: str | None = None
    has_answer: bool = False


_TURN_FIELDS = [f.name for f in fields(Turn)]  # in their order: what `Session.to_json` writes of a turn (and hashes)

METADATA_FORM = 'an object of names to strings, numbers or booleans, e.g. {"channel": "email"}'


def check_metadata(value: object) -> dict:
    """`value` if it is usable as a session's metadata (None: none), else ValueError naming the expected form. The
    name "date" is the session's own date in search filters, so no metadata may take it."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and k.strip() and _utf8(k) for k in value) or not all(
            isinstance(v, (str, int, float, bool)) and (not isinstance(v, str) or _utf8(v)) for v in value.values()):
        raise ValueError(f"metadata must be {METADATA_FORM}; got {shown(value)}")
    if "date" in value:
        raise ValueError("metadata may not be named 'date': it is the session's own date in search filters")
    return dict(value)


@dataclass(frozen=True)
class Session:
    """A conversation session: id, start time, ordered turns, and the metadata its writer gave it (e.g.
    ``{"channel": "email"}``, what search filters read)."""

    session_id: str
    date: datetime
    turns: tuple[Turn, ...]
    metadata: dict = field(default_factory=dict, hash=False)

    def content_hash(self) -> str:
        """Hash of everything that defines the session; re-ingesting an identical session is a no-op."""
        payload = json.dumps(self.to_json(), sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(payload.encode()).hexdigest()

    def to_json(self) -> dict:
        return {
            "session_id": self.session_id,
            "date": self.date.isoformat(),
            "turns": [{k: v for k in _TURN_FIELDS if (v := getattr(t, k)) not in (None, False)} for t in self.turns],
            **({"metadata": dict(self.metadata)} if self.metadata else {}),  # none: the hash of a session before metadata
        }

    @classmethod
    def from_json(cls, data: dict) -> Session:
        return cls(
            session_id=data["session_id"],
            date=datetime.fromisoformat(data["date"]),
            turns=tuple(Turn(**t) for t in data["turns"]),
            metadata=check_metadata(data.get("metadata")),
        )


@dataclass
class Unit:
    """An L0 thematic unit: a window of turns [start, end) of one session, summarized.

    `summary` is what a reader sees and what BM25 indexes; `embed_texts` are what the dense index embeds (one vector each).
    """

    session_id: str
    start: int
    end: int
    summary: str
    keywords: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    embed_texts: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"session_id": self.session_id, "start": self.start, "end": self.end, "summary": self.summary,
                "keywords": list(self.keywords), "tags": list(self.tags), "embed_texts": list(self.embed_texts)}

    @classmethod
    def from_json(cls, data: dict) -> Unit:
        """A stored unit; ValueError when it is not one (a damaged file)."""
        if not isinstance(data, dict):
            raise ValueError(f"a unit must be an object, got {type(data).__name__}")
        unit = cls(**data)
        lists = (unit.keywords, unit.tags, unit.embed_texts)
        if not (isinstance(unit.session_id, str) and isinstance(unit.summary, str) and type(unit.start) is int
                and type(unit.end) is int and 0 <= unit.start < unit.end
                and all(isinstance(v, list) and all(isinstance(t, str) for t in v) for v in lists)):
            raise ValueError(f"malformed unit of session {unit.session_id!r}")
        return unit


@dataclass
class Usage:
    """Token usage of model calls, summed, and the calls on the critical path: the longest chain of calls that
    had to wait for each other (calls made concurrently count once on it)."""

    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0
    critical_calls: int = 0

    def add(self, message_or_usage) -> None:
        """One more call, made after the ones already counted."""
        meta = getattr(message_or_usage, "usage_metadata", None) or {}
        self.input_tokens += int(meta.get("input_tokens", 0) or 0)
        self.output_tokens += int(meta.get("output_tokens", 0) or 0)
        self.calls += 1
        self.critical_calls += 1

    def merge(self, other: Usage) -> None:
        """Calls made after the ones already counted."""
        self.merge_concurrent([other])

    def merge_concurrent(self, others: list[Usage], width: int | None = None) -> None:
        """Calls made side by side, `width` at a time (default: all at once), after the ones already counted:
        tokens and calls add up; each group's longest chain extends the critical path."""
        width = width or max(len(others), 1)
        for start in range(0, len(others), width):
            group = others[start : start + width]
            for other in group:
                self.input_tokens += other.input_tokens
                self.output_tokens += other.output_tokens
                self.calls += other.calls
            self.critical_calls += max(other.critical_calls for other in group)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens
