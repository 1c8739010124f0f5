"""`normalize_dates`: relative time expressions (and dates written out) in the question resolved to absolute
dates or ranges, for the models to read (`date_hints`) and for the disclosure policy to cover (`date_ranges`:
it opens a session dated near each, `apdmem.nodes.policy`).

Deterministic parsing first (`resolve_relative_dates`, `apdmem.memory.time_expressions`: the calendar rules
that also resolve the memory's own time expressions); the controller model only for temporal phrases the
parser leaves unresolved ("the week of my cousin's wedding" stays unresolved: no calendar can place it).
"""

from __future__ import annotations

import re
from datetime import date

from pydantic import BaseModel, Field

from apdmem import prompts
from apdmem.memory.records import Usage
from apdmem.memory.time_expressions import DateHint, resolve_relative_dates
from apdmem.models import ask_structured
from apdmem.nodes.common import annotate, checked_input, emit, usage_update

# Words that suggest a time reference; a question with one the parser did not resolve goes to the model.
TEMPORAL_CUE = re.compile(r"\b(ago|last|past|previous|recent(ly)?|earlier|weekend|yesterday|tomorrow|"
                          r"before|after|since|spring|summer|fall|autumn|winter|birthday|holiday)\b", re.I)


def unresolved_cues(question: str, hints: list[DateHint]) -> bool:
    """Whether the question has a temporal cue word outside every resolved expression."""
    covered = {word for h in hints for word in h.expression.lower().split()}  # a set: cues are words
    # "how many days ago ..." asks for an interval; the answer node computes it from the dates it is given.
    question = re.sub(r"\bhow (many|long) \w+( \w+)? ago\b", "", question, flags=re.I)
    return any(cue.group(0).lower() not in covered for cue in TEMPORAL_CUE.finditer(question))


class ResolvedRange(BaseModel):
    expression: str
    start: str = Field(description="YYYY-MM-DD")
    end: str = Field(description="YYYY-MM-DD")


class ResolvedDates(BaseModel):
    """Relative expressions resolved by the model."""

    ranges: list[ResolvedRange] = Field(default_factory=list, json_schema_extra={"maxItems": 4})


def resolve_with_model(question: str, today: date, model, usage) -> list[DateHint]:
    """Model fallback; any range that is not two valid dates in order, or not in the question, is dropped."""
    prompt = prompts.RESOLVE_DATES.format(today=today.isoformat(), weekday=f"{today:%A}", question=question)
    out = ask_structured(model, ResolvedDates, prompt, usage)
    hints = []
    for r in out.ranges if out else []:
        try:
            start, end = date.fromisoformat(r.start), date.fromisoformat(r.end)
        except ValueError:
            continue
        if start <= end and r.expression and r.expression.lower() in question.lower():
            hints.append(DateHint(r.expression, start, end))
    return hints


def normalize_dates(state, runtime, *, settings) -> dict:
    """Resolve relative dates in the question against the question date. This is the graph's first node: it
    checks the run's input (`checked_input`), and the question the others read is the input's with lone
    surrogates replaced (`readable`)."""
    question, asked = checked_input(state, runtime)
    ctx, today, usage = runtime.context, asked.date(), Usage()
    hints: list[DateHint] = []
    ignored: list[str] = []  # expressions that name no date of the calendar: nothing to search near, said in the trace
    if ctx.date_normalization:
        hints = resolve_relative_dates(question, today, ignored)
        if unresolved_cues(question, hints):
            hints += resolve_with_model(question, today, settings.controller(), usage)
    day = today.isoformat()  # not strftime's %Y, which leaves years before 1000 unpadded ("1-01-02")
    annotate(today=day, date_hints=[h.describe() for h in hints], ignored_dates=ignored)
    if hints or ignored:
        emit(runtime, event="dates", today=day, dates=[h.describe() for h in hints], ignored=ignored)
    return {"question": question, "today": day, "date_hints": [h.describe() for h in hints],
            "date_ranges": [[f"{h.start}", f"{h.end}"] for h in hints], **usage_update("normalize_dates", usage)}
