"""`normalize_dates`: relative time expressions (and dates written out) in the question resolved to absolute
dates or ranges, for the models to read (`date_hints`) and for the disclosure policy to cover (`date_ranges`:
it opens a session dated near each, `apdmem.nodes.policy`).

Deterministic parsing first (`resolve_relative_dates`); the controller model only for temporal phrases the
parser leaves unresolved ("the week of my cousin's wedding" stays unresolved: no calendar can place it).
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import date, timedelta

from pydantic import BaseModel, Field

from apdmem import prompts
from apdmem.errors import shown
from apdmem.memory.records import Usage
from apdmem.models import ask_structured
from apdmem.nodes.common import annotate, checked_input, emit, usage_update

WEEKDAYS = [d.lower() for d in calendar.day_name]
MONTHS = [m.lower() for m in calendar.month_name[1:]]
SEASONS = {"spring": (3, 5), "summer": (6, 8), "fall": (9, 11), "autumn": (9, 11), "winter": (12, 2)}
NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
           "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "couple of": 2, "a few": 3, "few": 3,
           "several": 3}
_NUM = r"(\d+|a couple of|couple of|a few|few|several|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_UNIT = r"(day|week|month|year)s?"
# Words that suggest a time reference; a question with one the parser did not resolve goes to the model.
TEMPORAL_CUE = re.compile(r"\b(ago|last|past|previous|recent(ly)?|earlier|weekend|yesterday|tomorrow|"
                          r"before|after|since|spring|summer|fall|autumn|winter|birthday|holiday)\b", re.I)


@dataclass(frozen=True)
class DateHint:
    """A relative expression and the absolute range [start, end] it denotes."""

    expression: str
    start: date
    end: date

    def describe(self) -> str:  # isoformat, not %Y: year 1 is "0001"
        if self.start == self.end:
            return f'"{self.expression}" = {self.start.isoformat()} ({self.start:%A})'
        return f'"{self.expression}" = {self.start.isoformat()} to {self.end.isoformat()}'


def add_months(day: date, months: int) -> date:
    """`day` moved by whole calendar months, clamped to the target month's length."""
    index = day.year * 12 + day.month - 1 + months
    year, month = divmod(index, 12)
    return date(year, month + 1, min(day.day, calendar.monthrange(year, month + 1)[1]))


def _shift(today: date, n: int, unit: str) -> date:
    if unit == "day":
        return today - timedelta(days=n)
    if unit == "week":
        return today - timedelta(weeks=n)
    return add_months(today, -n * (12 if unit == "year" else 1))


def _period(today: date, unit: str, offset: int) -> tuple[date, date]:
    """The calendar week (Mon-Sun), month or year `offset` periods from the one holding today."""
    if unit == "week":
        start = today - timedelta(days=today.weekday()) + timedelta(weeks=offset)
        return start, start + timedelta(days=6)
    if unit == "month":
        start = add_months(today.replace(day=1), offset)
        return start, add_months(start, 1) - timedelta(days=1)
    start = date(today.year + offset, 1, 1)
    return start, date(today.year + offset, 12, 31)


def _season(today: date, name: str, which: str) -> tuple[date, date]:
    first, last = SEASONS[name]
    year = today.year
    end_year = year + 1 if first > last else year
    start, end = date(year, first, 1), add_months(date(end_year, last, 1), 1) - timedelta(days=1)
    if which == "last" or (which == "in" and start > today):
        while end >= today:  # the most recent season of that name that is already over
            start, end = add_months(start, -12), add_months(end.replace(day=1), -11) - timedelta(days=1)
    return start, end


def _rules(today: date):
    """(pattern, resolver) pairs; a resolver returns (start, end) from the match."""

    def num(text: str) -> int:
        return int(text) if text.isdigit() else NUMBERS[text]

    def weekday_before(name: str) -> date:
        back = (today.weekday() - WEEKDAYS.index(name)) % 7 or 7
        return today - timedelta(days=back)

    def weekday_after(name: str) -> date:
        ahead = (WEEKDAYS.index(name) - today.weekday()) % 7 or 7
        return today + timedelta(days=ahead)

    def month_named(name: str, which: str) -> tuple[date, date]:
        month = MONTHS.index(name) + 1
        year = today.year if (month < today.month or (month == today.month and which != "last")) else today.year - 1
        start = date(year, month, 1)
        return start, add_months(start, 1) - timedelta(days=1)

    def point(d: date) -> tuple[date, date]:
        return d, d

    def written(month: str, day: str, year: str | None) -> tuple[date, date]:
        """A date written without a year is the latest one not after today."""
        month_number, day_number = MONTHS.index(month.lower()) + 1, int(day)
        if year:
            return point(date(int(year), month_number, day_number))
        this_year = date(today.year, month_number, day_number)
        return point(this_year if this_year <= today else date(today.year - 1, month_number, day_number))

    def whole_month(name: str, year: str | None) -> tuple[date, date]:
        start = date(int(year), MONTHS.index(name.lower()) + 1, 1) if year else month_named(name.lower(), "in")[0]
        return start, add_months(start, 1) - timedelta(days=1)

    def last_weekend() -> tuple[date, date]:
        saturday = weekday_before("saturday") if today.weekday() != 6 else today - timedelta(days=8)
        return saturday, saturday + timedelta(days=1)

    return [
        (r"the day before yesterday", lambda m: point(today - timedelta(days=2))),
        (r"yesterday", lambda m: point(today - timedelta(days=1))),
        (r"today|tonight|this morning", lambda m: point(today)),
        (r"tomorrow", lambda m: point(today + timedelta(days=1))),
        (rf"{_NUM} {_UNIT} ago", lambda m: point(_shift(today, num(m[1]), m[2]))),
        (rf"(?:in|over|during|within) the (?:last|past) {_NUM} {_UNIT}", lambda m: (_shift(today, num(m[1]), m[2]), today)),
        (rf"(?:in|over|during|within) the (?:last|past) (few|couple of) {_UNIT}", lambda m: (_shift(today, num(m[1]), m[2]), today)),
        (rf"(?:in|over|during|within) the (?:last|past) {_UNIT}", lambda m: (_shift(today, 1, m[1]), today)),
        # "the past week" is rolling even without a preposition ("the last week" alone may be "of June").
        (r"the past (day|week|month|year)", lambda m: (_shift(today, 1, m[1]), today)),
        (rf"(?:the )?(?:last|past) {_NUM} {_UNIT}", lambda m: (_shift(today, num(m[1]), m[2]), today)),
        (r"(?:last|this past) weekend", lambda m: last_weekend()),
        (r"this weekend", lambda m: (weekday_after("saturday") if today.weekday() < 5 else today - timedelta(days=today.weekday() - 5), weekday_after("sunday") if today.weekday() != 6 else today)),
        (rf"(?:last|this past|on|previous) ({'|'.join(WEEKDAYS)})", lambda m: point(weekday_before(m[1].lower()))),
        (rf"next ({'|'.join(WEEKDAYS)})", lambda m: point(weekday_after(m[1].lower()))),
        (r"(?:last|previous|the previous) (week|month|year)", lambda m: _period(today, m[1], -1)),
        (r"next (week|month|year)", lambda m: _period(today, m[1], 1)),
        (r"earlier this (week|month|year)", lambda m: (_period(today, m[1], 0)[0], today)),
        (r"this (week|month|year)", lambda m: _period(today, m[1], 0)),
        (r"(last|this|in) (spring|summer|fall|autumn|winter)", lambda m: _season(today, m[2].lower(), m[1].lower())),
        (rf"(last|in|this|during|since|early|late) ({'|'.join(MONTHS)})\b(?! \d)", lambda m: (
            (month_named(m[2].lower(), m[1].lower())[0], today) if m[1].lower() == "since" else month_named(m[2].lower(), m[1].lower()))),
        # Dates written out: "March 3rd", "May 20, 2023", "the 3rd of March", "the month of February 2023", "in 2022".
        (rf"({'|'.join(MONTHS)}) (\d{{1,2}})(?:st|nd|rd|th)?(?:,? ((?:19|20)\d\d))?", lambda m: written(m[1], m[2], m[3])),
        # Day first only after "the"/"on" or before a year: "3 May tickets" is no date.
        (rf"(?:(?:the|on) (\d{{1,2}})(?:st|nd|rd|th)? (?:of )?({'|'.join(MONTHS)})(?:,? ((?:19|20)\d\d))?"
         rf"|(\d{{1,2}})(?:st|nd|rd|th)? (?:of )?({'|'.join(MONTHS)}),? ((?:19|20)\d\d))",
         lambda m: written(m[2] or m[5], m[1] or m[4], m[3] or m[6])),
        (rf"(?:the )?month of ({'|'.join(MONTHS)})(?:,? ((?:19|20)\d\d))?", lambda m: whole_month(m[1], m[2])),
        (rf"(?:in|during) ({'|'.join(MONTHS)}),? ((?:19|20)\d\d)", lambda m: whole_month(m[1], m[2])),
        (r"(?:in|during) ((?:19|20)\d\d)", lambda m: (date(int(m[1]), 1, 1), date(int(m[1]), 12, 31))),
    ]


def resolve_relative_dates(question: str, today: date, ignored: list[str] | None = None) -> list[DateHint]:
    """Every relative expression the parser recognizes, left to right, without overlaps. An expression that
    names no date ("February 30") or one outside the calendar's years 1-9999 ("1000000 days ago") is left out,
    and the reason appended to `ignored`.

    >>> [h.describe() for h in resolve_relative_dates("What did I buy last Saturday?", date(2023, 5, 30))]
    ['"last Saturday" = 2023-05-27 (Saturday)']
    """
    taken = bytearray(len(question))  # 1 for each character of an expression already recognized (linear, unlike pairs)
    hints: list[tuple[int, DateHint]] = []
    for pattern, resolve in _rules(today):
        for m in re.finditer(rf"\b(?:{pattern})\b", question, flags=re.I):
            if any(taken[m.start():m.end()]):
                continue
            taken[m.start():m.end()] = b"\x01" * (m.end() - m.start())  # its parts are no other expression
            try:
                start, end = resolve(m)
            except (ValueError, OverflowError) as exc:
                reason = "outside the years 1-9999" if isinstance(exc, OverflowError) else str(exc)
                if ignored is not None:
                    ignored.append(f"{shown(m.group(0))}: {reason}")
                continue
            hints.append((m.start(), DateHint(m.group(0), start, end)))
    return [h for _, h in sorted(hints, key=lambda x: x[0])]


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
    prompt = prompts.RESOLVE_DATES.format(today=f"{today:%Y-%m-%d}", weekday=f"{today:%A}", question=question)
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
    annotate(today=f"{today:%Y-%m-%d}", date_hints=[h.describe() for h in hints], ignored_dates=ignored)
    if hints or ignored:
        emit(runtime, event="dates", today=f"{today:%Y-%m-%d}", dates=[h.describe() for h in hints], ignored=ignored)
    return {"question": question, "today": f"{today:%Y-%m-%d}", "date_hints": [h.describe() for h in hints],
            "date_ranges": [[f"{h.start}", f"{h.end}"] for h in hints], **usage_update("normalize_dates", usage)}
