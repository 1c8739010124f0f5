"""Quotes: the disclosed sentences found word for word in their session, with the session's date and who said
them, and the dates their time expressions name. The extractive reply quotes them (`apdmem.nodes.answer`) and the
reckoning computes from them (`apdmem.nodes.reckon`); a note or fact a model wrote is never one.
"""

from __future__ import annotations

from datetime import date

from apdmem.memory.layers import one_line, sentences
from apdmem.memory.time_expressions import DateHint, resolve_said, undated

MIN_WORDS = 3  # shorter sentences ("Sure!", "Thanks a lot.") never answer anything


def verbatim_sentences(evidence: list, memory) -> list[tuple[str, str, str]]:
    """(sentence, session date, speaker) for every disclosed sentence of MIN_WORDS or more that is written word
    for word in a turn of its session (in the disclosed turn, when the evidence names one), each once. A note
    or fact a model wrote is not a quote and is left out; the dates L1 and L2 write beside a sentence are not
    part of it."""
    found: dict[str, tuple[str, str, str]] = {}
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
                speaker = f"{turn.speaker} said" if turn.speaker else "you said" if turn.role == "user" else f"the {turn.role} said"
                found[sentence] = (sentence, item["date"], speaker)
    return list(found.values())


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
