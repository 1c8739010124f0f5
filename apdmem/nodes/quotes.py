"""Quotes: the disclosed sentences found word for word in their session, with the session's date and who said
them, and the dates their time expressions name. The extractive reply quotes them (`apdmem.nodes.answer`) and the
reckoning computes from them (`apdmem.nodes.reckon`); a note or fact a model wrote is never one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

from apdmem.memory.layers import one_line, sentences
from apdmem.memory.time_expressions import MONTHS, WEEKDAYS, DateHint, resolve_said, undated

MIN_WORDS = 3  # shorter sentences ("Sure!", "Thanks a lot.") never answer anything
_CALENDAR = frozenset(WEEKDAYS + MONTHS)  # capitalized, but they date something and name nobody


@dataclass(frozen=True)
class Quote:
    """A disclosed sentence written word for word in a turn of its session, and its relevance to the question
    (the cross-encoder's logit; 0 until scored)."""

    sentence: str
    session_id: str
    date: str
    turn: int  # 0-based, in its session
    at: int  # where the sentence starts in its turn's text
    speaker: str  # who said it as the cross-encoder reads it: a name ("Maya"), else "" (the user or the assistant)
    role: str
    score: float = 0.0
    heading: str = ""  # the heading it falls under in its message (`heading`)
    follows: bool = False  # it follows up the best quote and carries its score (`apdmem.nodes.answer.followed_up`)
    before: str = ""  # the sentence before it in its message, unless that is its heading (`sentence_before`)
    # The question points at it in words the cross-encoder does not weigh: it is dated as the question dates what it
    # asks ("two weeks ago"), or it falls under a section the question names ("the chorus") (`answer.scored_quotes`).
    pointed: bool = False

    @property
    def said(self) -> tuple[str, str, int]:
        """The message it is part of, in the order messages were sent: its session's date (and id, for sessions of
        one date), then its turn."""
        return self.date, self.session_id, self.turn

    @property
    def who(self) -> str:
        """Who said it, as the reply names them: "you said", "the assistant said", "Maya said"."""
        return f"{self.speaker} said" if self.speaker else "you said" if self.role == "user" else f"the {self.role} said"


def verbatim_sentences(evidence: list, memory) -> list[Quote]:
    """Every disclosed sentence of MIN_WORDS or more that is written word for word in a turn of its session (in
    the disclosed turn, when the evidence names one), each once, unscored. A note or fact a model wrote is not a
    quote and is left out; the dates L1 and L2 write beside a sentence are not part of it."""
    found: dict[str, Quote] = {}
    for item in evidence:
        session = memory.session(item["session_id"])
        turns = [item["turn"]] if item["turn"] is not None else range(len(session.turns))
        texts = {i: one_line(session.turns[i].content) for i in turns if 0 <= i < len(session.turns)}
        for sentence in sentences(undated(_without_speaker(item))):
            if len(sentence.split()) < MIN_WORDS or sentence in found:
                continue
            where = next((i for i, text in texts.items() if sentence in text), None)
            if where is not None:
                turn = session.turns[where]
                title = heading(turn.content, sentence)
                found[sentence] = Quote(sentence, item["session_id"], item["date"], where, texts[where].index(sentence),
                                        turn.speaker or "", turn.role, heading=title,
                                        before=sentence_before(turn.content, sentence, title))
    return list(found.values())


def heading(message: str, sentence: str) -> str:
    """The heading a sentence of a message falls under: the last line before it that ends with a colon ("Chorus:",
    "Here are a few apps:"), else "". An item of a list ("Memrise - uses mnemonics.") or a line of a song rarely
    names its subject itself; its heading does.

    >>> heading("Here are two apps:\\n1. Duolingo: daily games.\\n2. Memrise uses mnemonics.", "Memrise uses mnemonics.")
    'Here are two apps:'
    """
    lines = [one_line(line) for line in message.splitlines() if line.strip()]
    at = next((i for i, line in enumerate(lines) if sentence in line), len(lines))
    return next((line for line in reversed(lines[:at]) if line.endswith(":")), "")


def sentence_before(message: str, sentence: str, title: str = "") -> str:
    """The sentence before one of a message's sentences ("" for its first, or when it is the heading `title`). A
    sentence often leaves out what the one before it named ("I was in Japan a few months ago. I spent two weeks
    traveling around the country.").

    >>> sentence_before("I was in Japan in May. I spent two weeks there.", "I spent two weeks there.")
    'I was in Japan in May.'
    """
    said = sentences(message)
    at = said.index(sentence) if sentence in said else 0
    return said[at - 1] if at and said[at - 1] != title else ""


def _without_speaker(item) -> str:
    """An evidence text without the "role: " prefix that L3 reads put before each message."""
    text = item["text"]
    if item["layer"] == "L3":
        return text.partition(": ")[2]
    return text


def said_dates(sentence: str, session_date: str) -> list[DateHint]:
    """The dates a quoted sentence names, resolved against its session's date (ISO, as evidence carries it) by
    the rules that built L1 and L2 (`time_expressions.resolve_said`)."""
    return resolve_said(sentence, date.fromisoformat(session_date[:10]))


def beside(sentence: str, session_date: str) -> str:
    """What a quote shows after its closing quotation mark: the dates its words name.

    >>> beside("I went to a support group yesterday.", "2023-05-08T13:56:00")
    ' (7 May 2023)'
    >>> beside("Last Tuesday I ran, next month I swim.", "2023-05-08")
    ' (Last Tuesday = 2 May 2023; next month = June 2023)'
    """
    hints = said_dates(sentence, session_date)
    if len(hints) == 1:
        return f" ({hints[0].spoken()})"
    return f" ({'; '.join(f'{h.expression} = {h.spoken()}' for h in hints)})" if hints else ""


def names(word: str) -> bool:
    """Whether a word after the first of a sentence names someone or something: capitalized, but not "I" ("I'm"),
    nor a day or a month ("on Tuesday" dates something).

    >>> [word for word in "Tell me what Alex's dentist said on Tuesday when I'm away".split()[1:] if names(word)]
    ["Alex's"]
    """
    return word[0].isupper() and bare(word) != "I" and bare(word).lower() not in _CALENDAR


def bare(word: str) -> str:
    """A word without what follows its apostrophe: "Alex's" and "I'm" name Alex and I."""
    return re.split("['’]", word)[0]
