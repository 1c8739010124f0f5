"""The four layers of a session and their Markdown views.

- L3 raw messages: the turns themselves, stored at ingestion.
- L0 thematic units: one per window of turns, built at ingestion (by the chat model, or `raw`: the window
  text itself); the only layer that is indexed.
- L1 key facts and L2 turn-level evidence notes: built on first read, then cached with the name of their writer
  (`writer`); a cached layer another writer made is made again when read. A generative chat model writes them;
  without one (the embedded default, ``chat_model="local"``), or where a model's reply is unusable, they are
  extractive: sentences of the session itself (L1: the user's own salient sentences; L2: each turn's
  sentences), so nothing a model invented is ever presented as the user's memory.

Each L1 fact and L2 note carries, beside its words, the dates its time expressions name, resolved against the
session's date ("I went to a support group yesterday. [yesterday = 7 May 2023]", `time_expressions.dated`), so
whoever reads the evidence (the answer model, the extractive reply, an agent) is told the date, not left to work
it out.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timedelta

from langchain_core.runnables.config import ContextThreadPoolExecutor
from pydantic import BaseModel, Field
from tqdm.auto import tqdm

from apdmem import prompts
from apdmem.memory.records import ROLES, Session, Turn, Unit, Usage
from apdmem.memory.time_expressions import dated
from apdmem.models import EXTRACTIVE, ask_structured

LAYERS = ("L0", "L1", "L2", "L3")
TURN_CHARS = 2_000  # per turn in construction prompts: keeps a window well inside small context windows
MAX_FACTS = 25
FACT_CHARS = 300  # an extractive L1 fact is one sentence of at most this length
# What L1 and L2 hold, by version of their builder: a cache written by another version is stale and rebuilt.
# 2: each fact and note carries the dates its time expressions name (`time_expressions.dated`).
# 3: an item's number starts its sentence ("28. Kg3 would be my move.", not "28." and "Kg3 would be my move.": `sentences`).
LAYER_BUILDER = "layers-3"


class WindowSummary(BaseModel):
    """L0 summary of a window of turns."""

    summary: str = Field(description="one sentence: what the turns are about, names and absolute dates", json_schema_extra={"maxLength": 400})
    keywords: list[str] = Field(default_factory=list, description="up to 8 exact names, numbers, terms", json_schema_extra={"maxItems": 8})
    tags: list[str] = Field(default_factory=list, description="up to 4 short topic tags", json_schema_extra={"maxItems": 4})


class KeyFacts(BaseModel):
    """L1 key facts about the user."""

    facts: list[str] = Field(description="5-25 self-contained facts about the user", json_schema_extra={"maxItems": 25})


class TurnNotes(BaseModel):
    """L2 notes for one turn."""

    turn: int = Field(description="turn number as shown")
    facts: list[str] = Field(description="atomic self-contained facts with every specific detail", json_schema_extra={"maxItems": 10})


class EvidenceNotes(BaseModel):
    """L2 evidence notes, grouped by turn."""

    turns: list[TurnNotes] = Field(json_schema_extra={"maxItems": 4})


# --- L0 ---------------------------------------------------------------------------------------------


def window_spans(n_turns: int, window: int = 4, stride: int = 2) -> list[tuple[int, int]]:
    """Overlapping windows [start, end) covering every turn; the last window ends at the last turn."""
    if window < 1 or stride < 1:
        raise ValueError("window and stride must be positive")
    if n_turns == 0:
        return []
    starts = list(range(0, max(n_turns - window, 0) + 1, stride))
    if starts[-1] + window < n_turns:
        starts.append(n_turns - window)
    return [(s, min(s + window, n_turns)) for s in starts]


def raw_unit(session: Session, start: int, end: int) -> Unit:
    """A unit whose text is the window itself (no model call).

    The lexical index sees every turn. The dense index embeds the turns of people one by one: the user's, and
    in a conversation between two people (LoCoMo: the second speaker is loaded as the assistant, with a
    `speaker` name) the other person's too, each prefixed with the speaker's name, since questions name people
    ("When did Caroline go to the support group?"). A model assistant's turns are not embedded: the embedded model
    reads at most 512 tokens, so long answers would be truncated, they cost several times more to embed, and the
    lexical index already covers their wording. Turn-sized texts are also shared by the overlapping windows,
    so the embedding cache computes each once.
    """
    turns = session.turns[start:end]
    people = [_named(t) for t in turns if (t.role == "user" or t.speaker) and t.content.strip()]
    return Unit(
        session_id=session.session_id,
        start=start,
        end=end,
        summary="\n".join(f"{_speaker(t)}: {t.content}" for t in turns),
        embed_texts=people or [_named(turns[0])[:TURN_CHARS]],
    )


def _named(turn: Turn) -> str:
    """A turn's text for the dense index: with its speaker's name where it has one."""
    return f"{turn.speaker}: {turn.content}" if turn.speaker else turn.content


def llm_unit(session: Session, start: int, end: int, model, usage: Usage) -> Unit:
    """A unit summarized by the chat model; the raw window where its reply is unusable (a model that cannot be
    reached is an error, `ModelError`)."""
    date = session.date
    prompt = prompts.L0_WINDOW.format(
        date=date.isoformat(" ", "minutes"),
        weekday=date.strftime("%A"),
        yesterday=(date - timedelta(days=1)).date().isoformat() if date.toordinal() > 1 else "a day before the calendar",
        turns=format_turns(session, range(start, end)),
    )
    out = ask_structured(model, WindowSummary, prompt, usage)
    if out is None or not out.summary.strip():
        return raw_unit(session, start, end)
    keywords, tags = [one_line(k) for k in out.keywords[:8] if k.strip()], [one_line(t) for t in out.tags[:4] if t.strip()]
    summary = one_line(out.summary)
    return Unit(
        session_id=session.session_id,
        start=start,
        end=end,
        summary=summary,
        keywords=keywords,
        tags=tags,
        embed_texts=[" ".join([summary, *keywords])],
    )


def one_line(text: str) -> str:
    """Model-written text as a single line: each fact is one Markdown bullet."""
    return " ".join(text.split())


def build_units(
    sessions: list[Session],
    *,
    mode: str,
    model=None,
    window: int = 4,
    stride: int = 2,
    concurrency: int = 4,
    progress: bool = False,
    known: dict[tuple[str, int, int], Unit] | None = None,
) -> tuple[dict[str, list[Unit]], Usage]:
    """L0 units for each session. In "llm" mode windows are summarized concurrently (bounded). Units in
    `known`, by (session id, start, end), are used as they are (a stored session's windows that did not change)."""
    if mode not in ("llm", "raw"):
        raise ValueError(f"unknown l0_mode {mode!r}: use 'llm' or 'raw'")
    usage, known = Usage(), known or {}
    spans = {s.session_id: window_spans(len(s.turns), window, stride) for s in sessions}
    jobs = [(s, a, b) for s in sessions for a, b in spans[s.session_id] if (s.session_id, a, b) not in known]
    bar = tqdm(total=len(jobs), desc="L0 units", unit="window", disable=not progress or mode == "raw")
    if mode == "raw":
        units = [raw_unit(*job) for job in jobs]
    else:

        def run(job):
            unit = llm_unit(*job, model, usage)
            bar.update()
            return unit

        with ContextThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            units = list(pool.map(run, jobs))
    bar.close()
    made = {(u.session_id, u.start, u.end): u for u in units}
    by_session = {sid: [known.get((sid, a, b)) or made[(sid, a, b)] for a, b in windows] for sid, windows in spans.items()}
    return by_session, usage


# --- L1 and L2 ------------------------------------------------------------------------------------------


def extract_facts(session: Session, model, usage: Usage) -> list[str]:
    """L1: key facts about the user, written by the chat model; without a generative model (`model` None) or
    where its reply is unusable, the user's own salient sentences (`key_sentences`)."""
    out = ask_structured(model, KeyFacts, _session_prompt(prompts.L1_FACTS, session, range(len(session.turns))), usage)
    facts = [one_line(f) for f in (out.facts if out else []) if f.strip()][:MAX_FACTS]
    return with_dates(session, facts or key_sentences(session))


def extract_notes(session: Session, model, usage: Usage, turns: list[int] | None = None, *, concurrency: int = 1) -> dict[int, list[str]]:
    """L2: atomic evidence bullets per turn (all turns, or the listed ones), four turns per model call, up to
    `concurrency` calls at a time. Without a generative model (`model` None) each turn's notes are its own
    sentences (`turn_sentences`); so are those of turns the model's reply skips or garbles, so no turn is lost."""
    wanted = list(range(len(session.turns))) if turns is None else sorted(set(turns))
    if model is None:
        return {index: with_dates(session, turn_sentences(session.turns[index])) for index in wanted}
    chunks = [wanted[i : i + 4] for i in range(0, len(wanted), 4)]
    spent = [Usage() for _ in chunks]

    def run(i: int) -> dict[int, list[str]]:
        chunk, notes = chunks[i], {}
        out = ask_structured(model, EvidenceNotes, _session_prompt(prompts.L2_NOTES, session, chunk), spent[i])
        for item in out.turns if out else []:
            index = item.turn - 1
            if index in chunk and (facts := [one_line(f) for f in item.facts if f.strip()]):
                notes[index] = facts
        for index in chunk:
            notes.setdefault(index, turn_sentences(session.turns[index]))
        return notes

    workers = max(1, min(concurrency, len(chunks)))
    with ContextThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(run, range(len(chunks))))
    usage.merge_concurrent(spent, workers)
    return {t: with_dates(session, n) for notes in results for t, n in notes.items()}


def with_dates(session: Session, texts: list[str]) -> list[str]:
    """Facts or notes, each with the dates its time expressions name beside it (`time_expressions.dated`)."""
    return [dated(text, session.date.date()) for text in texts]


# --- Who wrote a cached L1 or L2 --------------------------------------------------------------------------

PROMPTS = {"L1": prompts.L1_FACTS, "L2": prompts.L2_NOTES}
CONTENT = {"L1": "facts", "L2": "notes"}  # the field of a cached layer's record that holds it


def writer(model_id: str, layer: str) -> str:
    """The writer a cached L1 or L2 records: "extractive" when no model wrote it (`model_id` from
    `apdmem.models.chat_model_id`), else the model and a fingerprint of the layer's prompt, each with the version
    of what a layer holds (`LAYER_BUILDER`), so that a layer written by another model, by this one from another
    prompt, or by an earlier version of the builder is never served as this configuration's.

    >>> writer("extractive", "L1"), writer("local:smollm2", "L2")[:22]
    ('extractive (layers-3)', 'local:smollm2 (prompt ')
    """
    if model_id == EXTRACTIVE:
        return f"{EXTRACTIVE} ({LAYER_BUILDER})"
    fingerprint = hashlib.sha256(f"{LAYER_BUILDER}\n{PROMPTS[layer]}".encode()).hexdigest()[:8]
    return f"{model_id} (prompt {fingerprint})"


def record(layer: str, writer_name: str, content) -> dict:
    """A cached layer as stored (``L1.json``, ``L2.json``): its writer and its content (L1: the facts; L2: the
    notes by turn index as a string)."""
    return {"writer": writer_name, CONTENT[layer]: content}


def recorded(data: object, layer: str) -> tuple[str | None, object]:
    """(writer, content) of a stored layer record; a layer cached before writers were recorded (a bare list of
    facts, or notes by turn) has writer None: unknown, so it is made again when read."""
    if isinstance(data, dict) and isinstance(data.get("writer"), str):
        return data["writer"], data.get(CONTENT[layer])
    return None, data


# --- Extractive L1 and L2: sentences of the session itself ------------------------------------------------

# A sentence ends at ., ! or ? followed by a space and a capital, digit or opening quote, unless the word before is
# a title or an initial ("Dr. Alvarez", "J. K. Rowling"), the text so far is an item's number ("28. Kg3 would be
# my move.", "1. Duolingo", "2.1. Setup"), or a number follows an abbreviation that stands before numbers ("No. 5",
# "Vol. 2", "v. 3"); a line break always ends one.
_LINE_BREAK = re.compile(r"\s*\n\s*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'“(\[]?[A-Z0-9])")
_ABBREVIATION = re.compile(r"(?:\b(?:Dr|Mr|Mrs|Ms|Mx|Prof|Sr|Jr|St|Mt|vs|e\.g|i\.e)|(?<![\w.])[A-Z])\.$")
_ENUMERATOR = re.compile(r"\d+(?:\.\d+)*\.")
_BEFORE_NUMBER = re.compile(r"\b(?:[Nn]os?|[Vv]ol|[Oo]p|[Ff]ig|pp?|[Cc]h|v|[Vv]er|approx|ca)\.$")
_ITEM_NUMBER = re.compile(r"(?<![\w.])(\d+)\.(?=\s|$)")  # "27." in "26. hxg4 Rh8 27. Kg2"
_FIRST_PERSON = re.compile(r"\b(?:i|my|me|mine|myself|we|our|ours|us)\b(?![\w-])", re.I)
_DIGIT = re.compile(r"\d")


def sentences(text: str) -> list[str]:
    """The sentences of a text in order, each on one line (runs of whitespace become one space). The number of an
    item of a numbered list or a chess game starts the item's sentence (`_sentence_break`).

    >>> sentences("I saw Dr. Alvarez. Is that enough?\\n- and 2 hats\\n28. Kg3 would be my move. It was No. 5.")
    ['I saw Dr. Alvarez.', 'Is that enough?', '- and 2 hats', '28. Kg3 would be my move.', 'It was No. 5.']
    >>> sentences("26. hxg4 Rh8 27. Kg2 Bd5+ 28. Kg3 Be6")
    ['26. hxg4 Rh8', '27. Kg2 Bd5+', '28. Kg3 Be6']
    """
    found = []
    for line in _LINE_BREAK.split(text):
        current = ""
        pieces = _SENTENCE_END.split(line)
        for piece, following in zip(pieces, [*pieces[1:], None]):
            current = f"{current} {piece}" if current else piece
            if following is not None and (end := _sentence_break(current, following)) is not None:
                found.append(current[:end])
                current = current[end:].lstrip()
        found.append(current)
    return [one_line(s) for s in found if s.strip()]


def _sentence_break(text: str, following: str) -> int | None:
    """Where a sentence ends in `text`, which ends with ., ! or ? before `following`: at its end; None when it goes
    on (a title or initial, an item's number alone, an abbreviation before a number: `_ABBREVIATION`, `_ENUMERATOR`,
    `_BEFORE_NUMBER`); or before its last number when the text is a run of numbered items ("26. hxg4 Rh8 27."), whose
    numbers count up by one from its start: that number begins the next item."""
    if _ABBREVIATION.search(text) or _ENUMERATOR.fullmatch(text) or _BEFORE_NUMBER.search(text) and following[:1].isdigit():
        return None
    numbers = list(_ITEM_NUMBER.finditer(text))
    counted = [int(n.group(1)) for n in numbers]
    if len(numbers) > 1 and numbers[0].start() == 0 and numbers[-1].end() == len(text) \
            and counted == list(range(counted[0], counted[0] + len(numbers))):
        return numbers[-1].start()
    return len(text)


def salience(sentence: str) -> int:
    """How much a user's sentence says about them: first person (+2), a number (+1), names (+1 each, at most 3),
    a question (-1)."""
    words = sentence.split()
    names = sum(1 for w in words[1:] if w[:1].isupper() and len(w) > 1 and not _FIRST_PERSON.fullmatch(w.split("'")[0]))
    return (2 * bool(_FIRST_PERSON.search(sentence)) + bool(_DIGIT.search(sentence)) + min(names, 3)
            - sentence.endswith("?"))


def key_sentences(session: Session) -> list[str]:
    """Extractive L1: the user's own most salient sentences (`salience`; at least four words, at most
    FACT_CHARS characters, each once), at most MAX_FACTS, in the order they were said."""
    found: dict[str, tuple[int, int]] = {}
    for turn in session.turns:
        if turn.role != "user":
            continue
        for sentence in sentences(turn.content):
            if len(sentence.split()) >= 4 and len(sentence) <= FACT_CHARS and sentence not in found:
                found[sentence] = (-salience(sentence), len(found))
    best = sorted(found, key=found.get)[:MAX_FACTS]
    return sorted(best, key=lambda s: found[s][1])


def turn_sentences(turn: Turn) -> list[str]:
    """Extractive L2 of a turn: its sentences, whole, up to TURN_CHARS characters in all (a first sentence
    longer than that is cut at a word boundary)."""
    notes, size = [], 0
    for sentence in sentences(turn.content):
        if size + len(sentence) > TURN_CHARS:
            if not notes:
                notes.append(sentence[:TURN_CHARS].rsplit(" ", 1)[0])
            break
        notes.append(sentence)
        size += len(sentence)
    return notes or [one_line(turn.content)]


def _session_prompt(template: str, session: Session, indexes) -> str:
    return template.format(
        date=session.date.isoformat(" ", "minutes"), weekday=session.date.strftime("%A"), turns=format_turns(session, indexes)
    )


def format_turns(session: Session, indexes) -> str:
    """Numbered turns (1-based) for prompts, each clipped to TURN_CHARS."""
    lines = []
    for i in indexes:
        turn = session.turns[i]
        text = turn.content if len(turn.content) <= TURN_CHARS else turn.content[:TURN_CHARS] + " [...]"
        lines.append(f"[{i + 1}] {_speaker(turn)}: {text}")
    return "\n".join(lines)


def _speaker(turn: Turn) -> str:
    return turn.speaker or turn.role


# --- Markdown views -----------------------------------------------------------------------------------


def _heading(session: Session, layer: str, title: str) -> str:
    return f"# {layer} {title}: session {session.session_id} ({session.date.isoformat(' ', 'minutes')}, {session.date:%A})\n"


def render_l0(session: Session, units: list[Unit]) -> str:
    parts = [_heading(session, "L0", "thematic summaries")]
    for u in units:
        parts.append(f"\n## Turns {u.start + 1}-{u.end}\n{u.summary}\n")
        if u.keywords:
            parts.append(f"- keywords: {', '.join(u.keywords)}\n")
        if u.tags:
            parts.append(f"- tags: {', '.join(u.tags)}\n")
    return "".join(parts)


def render_l1(session: Session, facts: list[str]) -> str:
    return _heading(session, "L1", "key facts") + "\n" + "".join(f"- {f}\n" for f in facts)


def render_l2(session: Session, notes: dict[int, list[str]]) -> str:
    parts = [_heading(session, "L2", "evidence notes")]
    for index in sorted(notes):
        parts.append(f"\n## Turn {index + 1} ({_speaker(session.turns[index])})\n")
        parts.extend(f"- {n}\n" for n in notes[index])
    return "".join(parts)


def render_l3(session: Session, turns=None) -> str:
    parts = [_heading(session, "L3", "raw messages")]
    for i in range(len(session.turns)) if turns is None else turns:
        parts.append(f"\n## Turn {i + 1} ({_speaker(session.turns[i])})\n{session.turns[i].content}\n")
    return "".join(parts)


_L3_HEADING = re.compile(r"# L3 raw messages: session (?P<id>.+) \((?P<date>\d{4}-\d\d-\d\d \d\d:\d\d), \w+\)\n")
_L3_TURN = re.compile(r"\n## Turn (\d+) \(([^\n]*)\)\n")


def parse_l3(text: str) -> Session | None:
    """The session an L3 page shows (its `render_l3`), or None when `text` is not one. What L3 does not show
    is lost: turn ids and labels, the seconds of the date, and a role where a speaker's name replaced it."""
    heading = _L3_HEADING.match(text)
    if heading is None:
        return None
    parts = _L3_TURN.split(text[heading.end() :])
    if parts[0] or len(parts) < 4:
        return None
    turns = []
    for i in range(1, len(parts), 3):
        number, speaker, content = int(parts[i]), parts[i + 1], parts[i + 2]
        if number != len(turns) + 1 or not content.endswith("\n"):
            return None
        role = speaker if speaker in ROLES else "user"
        turns.append(Turn(role, content[:-1], None if speaker in ROLES else speaker))
    try:
        return Session(heading["id"], datetime.strptime(heading["date"], "%Y-%m-%d %H:%M"), tuple(turns))
    except ValueError:
        return None
