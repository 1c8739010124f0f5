"""Time expressions resolved against the day they were written or said: the one place for date logic.

Two readers share the calendar rules:

- a question ("What did I buy last Saturday?") is resolved against the question date
  (`resolve_relative_dates`, read by `apdmem.nodes.dates.normalize_dates`): generous, since a range that is too
  wide only opens one more session ("a few days ago" is taken as three, "in March" as the latest March);
- a sentence of a session ("I went to a support group yesterday") is resolved against the session's date
  (`resolve_said`, read where L1 and L2 are built, `apdmem.memory.layers`): strict, since the date is shown to
  the user as a fact. Only what a calendar places without a guess is resolved: "a few days ago", "on Tuesday"
  (past or coming?), "next weekend" (this one or the one after?) stay unresolved; "in three weeks" is a date only
  in a sentence about the future ("I'll fly out in three weeks"; "I read it in three weeks" is a duration); a
  month or a day named without a year ("in March", "on June 12") is the next one in a sentence about the future,
  this year's when it has begun, and unresolved when it is still ahead in a sentence that is not (this June or
  last?).

`dated` writes a sentence's resolutions beside it, `[yesterday = 7 May 2023]`, and `undated` takes them off.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import date, timedelta

from apdmem.errors import shown

WEEKDAYS = [d.lower() for d in calendar.day_name]
MONTHS = [m.lower() for m in calendar.month_name[1:]]
SEASONS = {"spring": (3, 5), "summer": (6, 8), "fall": (9, 11), "autumn": (9, 11), "winter": (12, 2)}
NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
           "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "couple of": 2, "a few": 3, "few": 3,
           "several": 3}
VAGUE = {"a couple of", "couple of", "a few", "few", "several"}  # counts a question may take, a memory may not
_NUM = r"(\d+|a couple of|couple of|a few|few|several|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_UNIT = r"(day|week|month|year)s?"
# A sentence about the future: "in three weeks" in it is a date, not a duration.
_FUTURE = re.compile(r"\b(?:will|shall|going to|gonna|plan(?:ning)? to|planning|scheduled|hoping to)\b|['’]ll\b", re.I)
QUESTION, SAID = "question", "said"


class Vague(ValueError):
    """An expression that names no date without a guess ("a few days ago" in a memory)."""


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

    def spoken(self) -> str:
        """The range as people write it: "7 May 2023", "May 2023", "2023", "22 May to 28 May 2023"."""
        start, end = self.start, self.end
        if start == end:
            return spoken(start)
        if start == date(start.year, 1, 1) and end == date(start.year, 12, 31):
            return f"{start.year}"
        if start.day == 1 and end == add_months(start, 1) - timedelta(days=1):
            return f"{start:%B %Y}"
        first = f"{start.day} {start:%B}" if start.year == end.year else spoken(start)
        return f"{first} to {spoken(end)}"

    @property
    def point(self) -> date | None:
        """The day, when the expression names one day."""
        return self.start if self.start == self.end else None


def spoken(day: date) -> str:
    """ "7 May 2023" (no leading zero)."""
    return f"{day.day} {day:%B %Y}"


def add_months(day: date, months: int) -> date:
    """`day` moved by whole calendar months, clamped to the target month's length."""
    index = day.year * 12 + day.month - 1 + months
    year, month = divmod(index, 12)
    return date(year, month + 1, min(day.day, calendar.monthrange(year, month + 1)[1]))


def _shift(today: date, n: int, unit: str) -> date:
    """`today` moved back by n units (forward for negative n)."""
    unit = unit.lower()
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


def _rules(today: date, mode: str):
    """(pattern, resolver, readers) triples; a resolver returns (start, end) from the match, and `readers` says
    whether questions, memories or both resolve that pattern (see the module)."""
    both, question = (QUESTION, SAID), (QUESTION,)

    def num(text: str) -> int:
        if mode == SAID and text.lower() in VAGUE:
            raise Vague(text)
        return int(text) if text.isdigit() else NUMBERS[text.lower()]

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

    def written(m, month: str, day: str, year: str | None) -> tuple[date, date]:
        """A date written without a year is, in a question, the latest one not after today; in a memory, see
        `year_said`. A memory's date written with its year needs nothing beside it."""
        month_number, day_number = MONTHS.index(month.lower()) + 1, int(day)
        if year:
            if mode == SAID:
                raise Vague(m.group(0))
            return point(date(int(year), month_number, day_number))
        if mode == SAID:
            in_year = lambda y: date(y, month_number, day_number)  # noqa: E731
            return point(in_year(year_said(m, in_year, in_year)))
        this_year = date(today.year, month_number, day_number)
        return point(this_year if this_year <= today else date(today.year - 1, month_number, day_number))

    def year_said(m, first_day, last_day) -> int:
        """The year of a day or month a sentence names without one ("on March 3rd", "in June"; `first_day` and
        `last_day` give its range in a year): in a sentence about the future, the next one; else this year's,
        when it has begun ("I went to Paris in March", said in May). One still ahead in a sentence not about
        the future ("the concert is on June 12", said in May: this June or last?) stays unresolved."""
        if _FUTURE.search(m.string):
            return today.year if last_day(today.year) >= today else today.year + 1
        if first_day(today.year) > today:
            raise Vague(m.group(0))
        return today.year

    def month_said(m, name: str) -> tuple[date, date]:
        """ "in March", "back in March", "early March" in a memory: the month of `year_said`."""
        number = MONTHS.index(name.lower()) + 1
        start = date(year_said(m, lambda y: date(y, number, 1), lambda y: add_months(date(y, number, 1), 1) - timedelta(days=1)), number, 1)
        return start, add_months(start, 1) - timedelta(days=1)

    def whole_month(name: str, year: str | None) -> tuple[date, date]:
        start = date(int(year), MONTHS.index(name.lower()) + 1, 1) if year else month_named(name.lower(), "in")[0]
        return start, add_months(start, 1) - timedelta(days=1)

    def ahead(m) -> tuple[date, date]:
        """ "in three weeks": a day ahead, in a sentence about the future only."""
        if not _FUTURE.search(m.string[: m.start()]):
            raise Vague(m.group(0))
        return point(_shift(today, -num(m[1]), m[2]))

    def last_weekend() -> tuple[date, date]:  # computed when read: near year 1 it is no date
        saturday = weekday_before("saturday") if today.weekday() != 6 else today - timedelta(days=8)
        return saturday, saturday + timedelta(days=1)

    return [
        (r"the day before yesterday", lambda m: point(today - timedelta(days=2)), both),
        (r"the day after tomorrow", lambda m: point(today + timedelta(days=2)), both),
        (r"yesterday|last night", lambda m: point(today - timedelta(days=1)), both),
        (r"today|tonight|this (?:morning|afternoon|evening)", lambda m: point(today), both),
        (r"tomorrow", lambda m: point(today + timedelta(days=1)), both),
        (rf"{_NUM} {_UNIT} ago", lambda m: point(_shift(today, num(m[1]), m[2])), both),
        (rf"(?:in|over|during|within) the (?:last|past) {_NUM} {_UNIT}", lambda m: (_shift(today, num(m[1]), m[2]), today), both),
        (rf"(?:in|over|during|within) the (?:last|past) (few|couple of) {_UNIT}", lambda m: (_shift(today, num(m[1]), m[2]), today), both),
        (rf"(?:in|over|during|within) the (?:last|past) {_UNIT}", lambda m: (_shift(today, 1, m[1]), today), both),
        # "the past week" is rolling even without a preposition ("the last week" alone may be "of June").
        (r"the past (day|week|month|year)", lambda m: (_shift(today, 1, m[1]), today), both),
        (rf"(?:the )?(?:last|past) {_NUM} {_UNIT}", lambda m: (_shift(today, num(m[1]), m[2]), today), both),
        (rf"(?:in|within) {_NUM} {_UNIT}|{_NUM} {_UNIT} from now", lambda m: ahead(m) if m[1] else
         point(_shift(today, -num(m[3]), m[4])), (SAID,)),
        (r"(?:last|this past) weekend", lambda m: last_weekend(), both),
        (r"this weekend", lambda m: (weekday_after("saturday") if today.weekday() < 5 else today - timedelta(days=today.weekday() - 5), weekday_after("sunday") if today.weekday() != 6 else today), both),
        (rf"(?:last|this past|previous) ({'|'.join(WEEKDAYS)})", lambda m: point(weekday_before(m[1].lower())), both),
        (rf"on ({'|'.join(WEEKDAYS)})", lambda m: point(weekday_before(m[1].lower())), question),
        (rf"next ({'|'.join(WEEKDAYS)})", lambda m: point(weekday_after(m[1].lower())), both),
        (r"(?:last|previous|the previous) (week|month|year)", lambda m: _period(today, m[1].lower(), -1), both),
        (r"next (week|month|year)", lambda m: _period(today, m[1].lower(), 1), both),
        (r"earlier this (week|month|year)", lambda m: (_period(today, m[1].lower(), 0)[0], today), both),
        (r"this (week|month|year)", lambda m: _period(today, m[1].lower(), 0), both),
        (r"(last|this) (spring|summer|fall|autumn|winter)", lambda m: _season(today, m[2].lower(), m[1].lower()), both),
        (r"(in) (spring|summer|fall|autumn|winter)", lambda m: _season(today, m[2].lower(), m[1].lower()), question),
        (rf"(last|in|this|during|since|early|late) ({'|'.join(MONTHS)})\b(?! \d)", lambda m: (
            (month_named(m[2].lower(), m[1].lower())[0], today) if m[1].lower() == "since" else month_named(m[2].lower(), m[1].lower())),
         question),
        (rf"(?:in|during|early|late|early in|late in) ({'|'.join(MONTHS)})\b(?! \d)", lambda m: month_said(m, m[1]), (SAID,)),
        # Dates written out: "March 3rd", "May 20, 2023", "the 3rd of March", "the month of February 2023", "in 2022".
        (rf"({'|'.join(MONTHS)}) (\d{{1,2}})(?:st|nd|rd|th)?(?:,? ((?:19|20)\d\d))?", lambda m: written(m, m[1], m[2], m[3]), both),
        # Day first only after "the"/"on" or before a year: "3 May tickets" is no date.
        (rf"(?:(?:the|on) (\d{{1,2}})(?:st|nd|rd|th)? (?:of )?({'|'.join(MONTHS)})(?:,? ((?:19|20)\d\d))?"
         rf"|(\d{{1,2}})(?:st|nd|rd|th)? (?:of )?({'|'.join(MONTHS)}),? ((?:19|20)\d\d))",
         lambda m: written(m, m[2] or m[5], m[1] or m[4], m[3] or m[6]), both),
        (rf"(?:the )?month of ({'|'.join(MONTHS)})(?:,? ((?:19|20)\d\d))?", lambda m: whole_month(m[1], m[2]), question),
        (rf"(?:in|during) ({'|'.join(MONTHS)}),? ((?:19|20)\d\d)", lambda m: whole_month(m[1], m[2]), question),
        (r"(?:in|during) ((?:19|20)\d\d)", lambda m: (date(int(m[1]), 1, 1), date(int(m[1]), 12, 31)), question),
    ]


def _resolve(text: str, today: date, mode: str, ignored: list[str] | None = None) -> list[DateHint]:
    """Every expression the rules of `mode` resolve, left to right, without overlaps (earlier rules first). An
    expression that names no date ("February 30") or one outside the calendar's years 1-9999 ("1000000 days ago")
    is left out, and the reason appended to `ignored`."""
    taken = bytearray(len(text))  # 1 for each character of an expression already read (linear, unlike pairs)
    hints: list[tuple[int, DateHint]] = []
    for pattern, resolve, readers in _rules(today, mode):
        if mode not in readers:
            continue
        for m in re.finditer(rf"\b(?:{pattern})\b", text, flags=re.I):
            if any(taken[m.start():m.end()]):
                continue
            taken[m.start():m.end()] = b"\x01" * (m.end() - m.start())  # its parts are no other expression
            try:
                start, end = resolve(m)
            except Vague:  # no shorter rule reads a part of its words as a date
                continue
            except (ValueError, OverflowError) as exc:
                reason = "outside the years 1-9999" if isinstance(exc, OverflowError) else str(exc)
                if ignored is not None:
                    ignored.append(f"{shown(m.group(0))}: {reason}")
                continue
            hints.append((m.start(), DateHint(m.group(0), start, end)))
    return [h for _, h in sorted(hints, key=lambda x: x[0])]


def resolve_relative_dates(question: str, today: date, ignored: list[str] | None = None) -> list[DateHint]:
    """Every relative expression of a question the parser recognizes, left to right, without overlaps; one that
    names no date of the calendar is left out, with the reason appended to `ignored`.

    >>> [h.describe() for h in resolve_relative_dates("What did I buy last Saturday?", date(2023, 5, 30))]
    ['"last Saturday" = 2023-05-27 (Saturday)']
    """
    return _resolve(question, today, QUESTION, ignored)


def resolve_said(sentence: str, said_on: date) -> list[DateHint]:
    """The expressions of a sentence said on `said_on` that name a day or a period without a guess.

    >>> [h.spoken() for h in resolve_said("I went to a support group yesterday.", date(2023, 5, 8))]
    ['7 May 2023']
    >>> resolve_said("I went there a few days ago, on Tuesday.", date(2023, 5, 8))
    []
    """
    return _resolve(sentence, said_on, SAID)


_ANNOTATION = re.compile(r" \[[^\[\]=;]+ = [^\[\]=;]+(?:; [^\[\]=;]+ = [^\[\]=;]+)*\](?= |$)")


def dated(sentence: str, said_on: date) -> str:
    """`sentence` with the resolution of each of its time expressions beside it.

    >>> dated("I went to a support group yesterday.", date(2023, 5, 8))
    'I went to a support group yesterday. [yesterday = 7 May 2023]'
    """
    hints = resolve_said(sentence, said_on)
    if not hints:
        return sentence
    return f"{sentence} [{'; '.join(f'{h.expression} = {h.spoken()}' for h in hints)}]"


def undated(note: str) -> str:
    """A note (or several joined) without what `dated` wrote beside each sentence.

    >>> undated("I went to a support group yesterday. [yesterday = 7 May 2023]")
    'I went to a support group yesterday.'
    """
    return _ANNOTATION.sub("", note)
