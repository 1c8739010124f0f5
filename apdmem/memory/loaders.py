"""Read a user's history from LongMemEval, LoCoMo or generic JSON / JSONL files into typed Sessions.

Loaders validate the whole file before returning, so a caller that stores what it gets stores all or nothing.
Every problem is an InputError naming the file and the record (session id, or the entry's position).
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from apdmem.errors import InputError, shown
from apdmem.limits import MAX_MESSAGE_CHARS  # refused here rather than halfway through ingest
from apdmem.memory.records import ROLES, Session, Turn, check_id, check_metadata

_ROLE_ALIASES = {"human": "user", "ai": "assistant"}  # LangChain's type names, common in chat exports
_LANGCHAIN_ROLES = ((HumanMessage, "user"), (AIMessage, "assistant"), (SystemMessage, "system"))
_DATE_FORMATS = ("%Y/%m/%d (%a) %H:%M", "%I:%M %p on %d %B, %Y")  # LongMemEval, LoCoMo
_LOCOMO_SESSION = re.compile(r"session_(\d+)")


@dataclass
class LongMemEvalItem:
    """One LongMemEval question with its haystack; `sessions` keep the haystack order."""
    question_id: str
    question_type: str
    question: str
    question_date: datetime
    answer: str
    answer_session_ids: list[str]
    sessions: list[Session]

    @property
    def is_abstention(self) -> bool:
        """True for questions whose correct reply is that the history does not hold the answer."""
        return self.question_id.endswith("_abs")


@dataclass
class LoCoMoQuestion:
    """One LoCoMo QA pair; `evidence` lists dia_ids (= Turn.turn_id); category 5 is adversarial."""
    question: str
    answer: str
    evidence: list[str]
    category: int


@dataclass
class LoCoMoSample:
    """One LoCoMo conversation between two speakers, with its questions."""
    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: list[Session]
    questions: list[LoCoMoQuestion]


def load_sessions(path: str | os.PathLike) -> list[Session]:
    """All sessions of a LongMemEval, LoCoMo or generic file, the format detected from the content.

    A session repeated identically (LongMemEval items share haystack sessions) is kept once; two different
    sessions under one id raise InputError.
    """
    with _in_file(path):
        kind, records = _parse(path)
        return _unique(records if kind == "generic" else [s for r in records for s in r.sessions])


def load_longmemeval(path: str | os.PathLike) -> list[LongMemEvalItem]:
    """LongMemEval items from an official file (a JSON list or one item, optionally gzip-compressed)."""
    with _in_file(path):
        return _parse(path, expect="LongMemEval")[1]


def load_locomo(path: str | os.PathLike) -> list[LoCoMoSample]:
    """LoCoMo samples from a file holding a list of samples or one sample."""
    with _in_file(path):
        return _parse(path, expect="LoCoMo")[1]


def parse_date(text: str) -> datetime:
    """A LongMemEval, LoCoMo or ISO 8601 date as a naive datetime; ValueError for anything else.

    A timezone is dropped and the wall-clock time kept: "this morning" in the conversation refers to it.

    >>> parse_date("2023/05/20 (Sat) 00:29"), parse_date("1:56 pm on 8 May, 2023")
    (datetime.datetime(2023, 5, 20, 0, 29), datetime.datetime(2023, 5, 8, 13, 56))
    """
    if not isinstance(text, str):
        raise ValueError(f"date must be a string, got {type(text).__name__} {shown(text)}")
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(text.strip(), fmt)
        except ValueError:
            pass
    try:
        return datetime.fromisoformat(text.strip()).replace(tzinfo=None)
    except ValueError:
        expected = "e.g. '2023/05/20 (Sat) 00:29', '1:56 pm on 8 May, 2023' or ISO 8601 '2023-05-20T00:29'"
        raise ValueError(f"unrecognized date {shown(text)}: expected {expected}") from None


def session_from_messages(messages: Sequence[BaseMessage | dict], *, session_id: str, date: datetime | str,
                          metadata: dict | None = None) -> Session:
    """A Session from one conversation: LangChain messages (Human -> user, AI -> assistant, System -> system)
    or messages of the generic format (``{"role": "user", "content": "..."}``), mixed as they come, with its
    `metadata` (names to strings, numbers or booleans, e.g. ``{"channel": "email"}``: what search filters read).

    Other messages (tool results, ...) are not conversation and raise InputError. Content given as a list of
    content blocks keeps its text blocks, joined.

    >>> session_from_messages([{"role": "user", "content": "I moved to Lisbon."}], session_id="c1", date="2024-05-01").turns[0].role
    'user'
    """
    sid = _checked(check_id, session_id, "session", where=None)  # the message names the id: named once
    if not isinstance(messages, (list, tuple)):
        raise InputError(f"messages must be a list, got {type(messages).__name__}", record=sid)
    turns = []
    for i, message in enumerate(messages):
        if not isinstance(message, BaseMessage):
            turns.append(_dict_turn(message, sid, i))
            continue
        role = next((r for cls, r in _LANGCHAIN_ROLES if isinstance(message, cls)), None)
        if role is None:
            raise InputError(f"message {i}: a {type(message).__name__} cannot be a turn", record=sid)
        # .text joins the text blocks of list content (skipping images, tool calls), as LangChain does everywhere
        turns.append(_turn(role, str(message.text), sid, i, speaker=message.name))
    if isinstance(date, datetime):
        date = date.replace(tzinfo=None)  # as parse_date does, so that all stored dates compare
    return _session(sid, date, turns, _checked(check_metadata, metadata, where=sid))


def parse_sessions(records: Any) -> list[Session]:
    """Sessions of the generic format given as Python objects (a list of ``{"session_id", "date",
    "messages"}``, e.g. a request's JSON), checked whole as `load_sessions` checks a file."""
    if not isinstance(records, list) or not records:
        raise InputError("expected a non-empty list of sessions, each {'session_id', 'date', 'messages'}")
    return _unique([_generic_session(entry, i) for i, entry in enumerate(records)])


@contextmanager
def _in_file(path: str | os.PathLike) -> Iterator[None]:
    """Name the file in every InputError raised while it is read."""
    try:
        yield
    except InputError as e:
        raise InputError(e.reason, source=str(path), record=e.record) from e.__cause__


def _parse(path: str | os.PathLike, expect: str | None = None) -> tuple[str, list]:
    """Read the file, detect its format (which must be `expect` if given) and parse every entry."""
    data = _read(Path(path))
    entries = data if isinstance(data, list) else [data]
    first = entries[0] if entries else None
    kind = next((k for k, keys in _SHAPES.items() if isinstance(first, dict) and keys <= first.keys()), None)
    if kind is None:
        raise InputError(
            f"unknown format ({'an empty list' if not entries else 'first entry not recognized'}): expected "
            "LongMemEval items ('haystack_sessions'), LoCoMo samples ('conversation', 'qa') or sessions ('messages')"
        )
    if expect not in (None, kind):
        raise InputError(f"expected a {expect} file, found {kind} data")
    return kind, [_PARSERS[kind](entry, i) for i, entry in enumerate(entries)]


def _read(path: Path) -> Any:
    """The file's JSON content: gunzipped if `.gz`; one document, or a list of JSON lines."""
    if not path.is_file():
        raise InputError("no such file" if not path.exists() else "not a regular file")
    raw = path.read_bytes()
    if path.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise InputError(f"not a valid gzip file ({e})") from e
    try:
        text = raw.decode("utf-8-sig")  # tolerate the byte-order mark some editors write
    except UnicodeDecodeError as e:
        raise InputError(f"invalid UTF-8 at byte offset {e.start}") from e
    if not text.strip():
        raise InputError("the file is empty")
    if not path.name.removesuffix(".gz").endswith(".jsonl"):
        try:
            return _loads(text)
        except InputError as e:  # unless a one-line value is followed by more: JSON lines under another name
            cause = e.__cause__
            if not isinstance(cause, json.JSONDecodeError) or cause.msg != "Extra data" or "\n" in text[: cause.pos].strip():
                raise
    # split on "\n" only: JSON strings may hold U+2028 and other characters that splitlines() breaks at
    return [_loads(line, n) for n, line in enumerate(text.split("\n")) if line.strip()]


def _loads(text: str, line_offset: int = 0) -> Any:
    """json.loads, failing with an InputError that gives the line and column in the file."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"malformed JSON at line {e.lineno + line_offset}, column {e.colno}: {e.msg}") from e
    except RecursionError:
        raise InputError(f"JSON nested too deeply (line {line_offset + 1})") from None


def _field(obj: Any, key: str, kind: type | tuple[type, ...], where: str | int, default: Any = ..., part: str = ""):
    """obj[key] checked to be of `kind` (`default` if absent and given); errors name record `where`, `part` of it."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(obj, dict):
        raise InputError(f"{part}expected an object with {key!r}, got {type(obj).__name__}", record=where)
    if key not in obj and default is not ...:
        return default
    if key not in obj:
        raise InputError(f"{part}missing field {key!r}", record=where)
    value = obj[key]
    if not isinstance(value, kinds) or (isinstance(value, bool) and int in kinds):  # True is an int to isinstance
        expected = " or ".join(k.__name__ for k in kinds)
        raise InputError(f"{part}field {key!r} must be {expected}, got {type(value).__name__}", record=where)
    return value


def _strings(obj: Any, key: str, where: str | int, part: str = "") -> list[str]:
    """obj[key] checked to be a list of strings (ids); an absent key is an empty list."""
    values = _field(obj, key, list, where, default=[], part=part)
    if not all(isinstance(v, str) for v in values):
        raise InputError(f"{part}field {key!r} must be a list of strings", record=where)
    return values


def _checked(check: Callable[..., Any], *args: Any, where: str | int | None) -> Any:
    """check(*args), its ValueError (a bad id or date, shown in the message) as an InputError naming the record."""
    try:
        return check(*args)
    except ValueError as e:  # InvalidIdError is one too
        raise InputError(str(e), record=where) from e


def _turn(role: Any, content: Any, sid: str, index: int, **extra: Any) -> Turn:
    """One checked Turn: a known role, string content of at most MAX_MESSAGE_CHARS."""
    role = _ROLE_ALIASES.get(role, role) if isinstance(role, str) else role
    if role not in ROLES:
        raise InputError(f"message {index}: unknown role {shown(role)} (use user, assistant, system, human, ai)", record=sid)
    if not isinstance(content, str):
        raise InputError(f"message {index}: content must be a string, got {type(content).__name__}", record=sid)
    if len(content) > MAX_MESSAGE_CHARS:
        raise InputError(f"message {index}: {len(content):,} characters, over {MAX_MESSAGE_CHARS:,}", record=sid)
    for text in (content, extra.get("speaker") or ""):
        _check_text(text, f"message {index}", sid)
    return Turn(role, content, **extra)


def _check_text(text: str, what: str, sid: str) -> None:
    """Refuse text that cannot be stored as UTF-8 (a lone surrogate, e.g. from a JSON escape "\\ud800")."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InputError(f"{what}: not valid Unicode text (lone surrogate U+{ord(text[e.start]):04X} "
                         f"at character {e.start})", record=sid) from None


def _session(sid: str, date: datetime | str, turns: list[Turn], metadata: dict | None = None) -> Session:
    """A Session from checked parts; a session without turns has nothing to remember and is refused."""
    if not turns:
        raise InputError("session has no turns", record=sid)
    return Session(sid, date if isinstance(date, datetime) else _checked(parse_date, date, where=sid), tuple(turns),
                   metadata or {})


def _unique(sessions: list[Session]) -> list[Session]:
    """The sessions with identical repeats dropped; a different session under a seen id is an error."""
    seen: dict[str, Session] = {}
    for s in sessions:
        first = seen.setdefault(s.session_id, s)
        if first != s:
            what = f"dates ({first.date} and {s.date})" if first.date != s.date else "turns" if first.turns != s.turns else "metadata"
            raise InputError(f"duplicate session id {s.session_id!r} with different {what}", record=s.session_id)
    return list(seen.values())


def _generic_session(entry: Any, index: int) -> Session:
    """{"session_id", "date", "messages": [{"role", "content"}], "metadata"?: {...}} -> Session."""
    sid = _checked(check_id, _field(entry, "session_id", str, index), "session", where=index)
    metadata = _checked(check_metadata, _field(entry, "metadata", object, sid, default=None), where=sid)
    return _session(sid, _field(entry, "date", str, sid), _dict_turns(_field(entry, "messages", object, sid), sid), metadata)


def _dict_turns(messages: Any, sid: str) -> list[Turn]:
    """[{"role", "content", "has_answer"?}] -> Turns (generic messages and LongMemEval turns)."""
    if not isinstance(messages, list):
        raise InputError(f"messages must be a list, got {type(messages).__name__}", record=sid)
    return [_dict_turn(m, sid, i) for i, m in enumerate(messages)]


def _dict_turn(message: Any, sid: str, index: int) -> Turn:
    """{"role", "content", "has_answer"?} -> Turn."""
    role, content = (_field(message, key, object, sid, part=f"message {index}: ") for key in ("role", "content"))
    has_answer = _field(message, "has_answer", bool, sid, default=False, part=f"message {index}: ")
    return _turn(role, content, sid, index, has_answer=has_answer)


def _longmemeval_item(entry: Any, index: int) -> LongMemEvalItem:
    """One LongMemEval item -> LongMemEvalItem, sessions in haystack order."""
    qid = _field(entry, "question_id", str, index)
    keys = ("haystack_session_ids", "haystack_dates", "haystack_sessions")
    ids, dates, raw_sessions = (_field(entry, key, list, qid) for key in keys)
    if not len(ids) == len(dates) == len(raw_sessions):
        raise InputError(f"{', '.join(keys)} differ in length", record=qid)
    sessions = []
    for sid, date, turns in zip(ids, dates, raw_sessions):
        sid = _checked(check_id, sid, "session", where=qid)
        sessions.append(_session(sid, date, _dict_turns(turns, sid)))
    return LongMemEvalItem(
        question_id=qid,
        question_type=_field(entry, "question_type", str, qid),
        question=_field(entry, "question", str, qid),
        question_date=_checked(parse_date, _field(entry, "question_date", str, qid), where=qid),
        answer=str(_field(entry, "answer", (str, int), qid)),  # counting questions have int answers
        answer_session_ids=_strings(entry, "answer_session_ids", qid),
        sessions=sessions,  # as in the file: official haystacks repeat a session now and then
    )


def _locomo_sample(entry: Any, index: int) -> LoCoMoSample:
    """One LoCoMo sample -> LoCoMoSample; session ids are "<sample_id>:session_<N>", ordered by N."""
    sample_id = _field(entry, "sample_id", str, index, default=f"sample{index}")
    conv = _field(entry, "conversation", dict, sample_id)
    speaker_a, speaker_b = (_field(conv, key, str, sample_id) for key in ("speaker_a", "speaker_b"))
    sessions = []
    for n in sorted(int(m[1]) for key in conv if (m := _LOCOMO_SESSION.fullmatch(key))):
        sid = _checked(check_id, f"{sample_id}:session_{n}", "session", where=sample_id)
        turns = [_locomo_turn(t, sid, i, speaker_a) for i, t in enumerate(_field(conv, f"session_{n}", list, sid))]
        sessions.append(_session(sid, _field(conv, f"session_{n}_date_time", str, sid), turns))
    if not sessions:
        raise InputError("conversation has no session_<N> keys", record=sample_id)
    qa = _field(entry, "qa", list, sample_id)
    questions = [_locomo_question(q, sample_id, f"qa {i}: ") for i, q in enumerate(qa)]
    return LoCoMoSample(sample_id, speaker_a, speaker_b, sessions, questions)


def _locomo_turn(raw: Any, sid: str, index: int, speaker_a: str) -> Turn:
    """{speaker, dia_id, text, blip_caption?} -> Turn; speaker_a plays the user."""
    part = f"message {index}: "
    speaker, text, dia_id = (_field(raw, key, str, sid, part=part) for key in ("speaker", "text", "dia_id"))
    caption = _field(raw, "blip_caption", str, sid, default=None, part=part)
    if caption:  # the shared image is part of what was said; its caption is all a text memory can keep of it
        text += f" [shares an image: {caption}]"
    role = "user" if speaker == speaker_a else "assistant"
    return _turn(role, text, sid, index, speaker=speaker, turn_id=dia_id)


def _locomo_question(raw: Any, sample_id: str, part: str) -> LoCoMoQuestion:
    """One LoCoMo QA pair; adversarial (category 5) ones may have only an adversarial_answer, or none."""
    answer = _field(raw, "answer", (str, int), sample_id, default=None, part=part)
    if answer is None:
        answer = _field(raw, "adversarial_answer", (str, int), sample_id, default="", part=part)
    return LoCoMoQuestion(
        question=_field(raw, "question", str, sample_id, part=part),
        answer=str(answer),
        evidence=_strings(raw, "evidence", sample_id, part=part),
        category=_field(raw, "category", int, sample_id, part=part),
    )


# Keys that identify each format on the first entry; the parsers then check every entry in full.
_SHAPES = {"LongMemEval": {"haystack_sessions"}, "LoCoMo": {"conversation", "qa"}, "generic": {"messages"}}
_PARSERS = {"LongMemEval": _longmemeval_item, "LoCoMo": _locomo_sample, "generic": _generic_session}
