"""Reckoning: what a temporal or counting question asks, computed from the dated quotes, without a model.

- a **date** ("When did I go to the support group?"): the day of the quote that tells of the event;
- an **order** ("Which did I finish first, 'Dune' or 'Emma'?"): the option whose quote is dated first (or last);
- a **duration** ("How many days passed between A and B?", "How long had I been A when B?", "How many weeks ago
  did I A?"): the days between the two events' quotes, or between the event's and the question's date, in the
  unit asked;
- a **count** ("How many museums did I visit?", "Which countries have I visited?", "List all ..."): the distinct
  items the opened sessions tell of, one line each, and how many.

An event's quote is the sentence a person said (not a model assistant) that the cross-encoder finds most
relevant to the event's sub-query (`decompose.events`; the question itself for a single event), above TELLS. Its
day is the one the sentence names ("yesterday", `quotes.said_dates`; the first day of a period it names), else
its session's date. When the evidence
dates only some of the events, the reckoning says which it could not date rather than guess.

The reckoning is written once, by `synthesize_notes` (`reckoning` in the state): the answer model reads it in the
notes, and the extractive reply states it as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from datetime import date

from apdmem.memory.index import tokenize
from apdmem.memory.time_expressions import NUMBERS, VAGUE, DateHint, add_months, resolve_relative_dates, spoken
from apdmem.nodes.common import question_today
from apdmem.nodes.decompose import choices, events
from apdmem.nodes.quotes import beside, said_dates, verbatim_sentences
from apdmem.nodes.tally import (FIGURE_FRAME, addends, asked_of, asks_difference, asks_total, difference, items_said, same_thing,
                                share_words, tells_a_deed, things_told, total)

COMPUTED = "Computed from your conversations (dates and quotes as said; no model wrote this):"
UNDATED = "What I read of your conversations does not date it all (quoted, no model wrote this):"
SAME_ITEM = 0.5  # share of their content words (of both together) two sentences share when they tell of one item
# Cross-encoder logit above which a sentence is taken to tell of an event or of an item a count asks for. Below
# ms-marco's "relevant" (0): a sentence tells of an event in its own words ("I accepted an offer as a data analyst"
# for "the day I accepted the job offer": -1.75), or of one item of a class the question names ("I went to the
# Guggenheim" for "museums I visited"). On the 151 dev questions (user sentences of the evidence sessions against
# three other sessions of the same history): for the events of the temporal questions, the best evidence sentence
# scores above -5 nine times in ten (median 4.3), the best other one below -9 nine times in ten; for the count
# questions, above -5 four times in five (median 1.0), and below -9.6. Counting every deed above it (not a session's
# best sentence only), of the 18 dev questions that ask a count with a number for gold, 6 replies state a count and 3
# are right at -5 to -7 (at -4: 1 of 6; at -8: 3 of 11); of the 12 that ask a total, 7 state a sum and 6 are right at
# any bar from -4 to -9.
TELLS = -5.0
# The bar of a sentence stating an addend of a sum, below TELLS: a figure of the kind asked, in a sentence of what is
# asked (`tally.asked_of`), is evidence itself ("I have a brother" scores -7.7 for "the total number of siblings I
# have"). On the 12 dev questions that ask a total, the sums right are 7 at any bar from -5 to -7, 8 at -8 and -9. A
# difference keeps TELLS: lower, a third figure makes the two compared a guess (of the 5 dev difference questions,
# one lost at -7, two at -8).
ADDS = -8.0
# The bar of a deed a count takes when its sentence says a word of what the question counts (`counted_words`: "my
# snake plant, which I got from my sister" for "How many plants did I acquire?", -7.05), below TELLS. On the 20 dev
# questions the reckoning counts, from -6 to -7 one count more is right than at TELLS (a museum tour, -6.0, the 4th art
# event), from -7.25 to -7.5 two more (with the snake plant); from -7.75 on, a tank said of in passing is counted twice.
NAMES = -7.5

_UNIT = r"(?P<unit>day|week|month|year)s?"
_DURATION = re.compile(rf"^(?:how (?:many|much) {_UNIT}\b|how long\b)", re.I)
_RELATION = re.compile(r"\b(?:ago|since|between|passed|elapsed|before|after|when|been)\b", re.I)
_AGO = re.compile(r"\b(?:ago|since)\b", re.I)
_DATE = re.compile(r"^(?:when (?:did|was|were|do|does|is|will|had)\b|(?:on )?what was the date\b|"
                   r"on what (?:date|day)\b|what date\b)", re.I)
_FIRST, _LAST = re.compile(r"\b(?:first|earlier|sooner)\b", re.I), re.compile(r"\b(?:last|later|most recently)\b", re.I)
# The words of a question that frame the computation ("How many days passed between", "How many different"): a
# cross-encoder reading them finds no event in a sentence (-3.7 for "I launched my website today" against "How many
# days passed between the day I launched my website", 4.6 without the frame).
_FRAME = re.compile(r"^(?:(?:how (?:many|much) (?:different |distinct |kinds of |types of )?(?:(?:day|week|month|year)s?\b)?|"
                    r"how long\b)(?:\s+(?:have|has|had|did|do|was|were|is|it|passed|elapsed|gone by|in total|ago|since|"
                    r"between|before|after)\b)*)\s*", re.I)
_COUNT = re.compile(r"^how many\b(?! (?:days?|weeks?|months?|years?|hours?|minutes?|pages?)\b)|"
                    r"^(?:which|what)\s+(?:\w+\s+){0,3}?\w+s\s+have I\b|^list\b|\blist (?:of )?all\b", re.I)
# A question about the current value ("How many bikes do I currently own?") asks for the latest figure, not a count.
_LATEST = re.compile(r"\b(?:current|currently|now|still|so far|at the moment|these days)\b", re.I)
# ... unless it names one of the items it counts ("How many tanks do I currently have, including the one I set up for
# my friend's kid?"): then the items are counted.
_INCLUDING = re.compile(r"\b(?:including|counting|together with)\b", re.I)
# What a "how many" question counts: its head noun ("online courses have I" -> "courses", "issues of National
# Geographic have I" -> "issues").
_COUNTED = re.compile(r"^how many (?:different |distinct )?(?:[\w'-]+ ){0,3}?(?P<head>[\w'-]+)(?: of [\w' -]+?)? "
                      r"(?:did|do|does|have|has|had|are|were|is|was|can|will|that|I)\b", re.I)
_NUMBER = re.compile(rf"^(?:\d+|{'|'.join(w for w in NUMBERS if ' ' not in w and len(w) > 2 and w not in VAGUE)})$", re.I)


@dataclass(frozen=True)
class Told:
    """A quote that tells of an event, and when it places the event: the first date its words name ("24 February
    to 25 February 2024" for "last weekend"), else the day it was said."""

    sentence: str
    session_date: str
    speaker: str

    @cached_property
    def named(self) -> DateHint | None:
        hints = said_dates(self.sentence, self.session_date)
        return hints[0] if hints else None

    @property
    def day(self) -> date:
        """The day of the event: the day its words name, else the first of the period they name, else the day
        it was said."""
        return self.named.start if self.named else date.fromisoformat(self.session_date[:10])

    def when(self) -> str:
        """The event's date, or, when the words name none, the day it was told of."""
        return self.named.spoken() if self.named else f"told of on {spoken(self.day)}"

    def line(self) -> str:
        """The quote as the extractive reply shows one: its session's date, who said it, the dates it names."""
        return f'{self.session_date[:10]}, {self.speaker}: "{self.sentence}"{beside(self.sentence, self.session_date)}'


def kind(question: str) -> str | None:
    """What the question asks to compute: "order", "duration", "date", "difference", "total", "count", or None."""
    question = " ".join(question.split())
    if len(choices(question)[1]) > 1 and (_FIRST.search(question) or _LAST.search(question)):
        return "order"
    if _DURATION.match(question) and _RELATION.search(question):
        return "duration"
    if _DATE.match(question):
        return "date"
    if asks_difference(question):
        return "difference"
    if asks_total(question):
        return "total"
    if _COUNT.search(question) and (not _LATEST.search(question) or _INCLUDING.search(question)):
        return "count"
    return None


def reckon_evidence(state, memory, reranker) -> str:
    """The reckoning of the state's question from its disclosed evidence (`reckoning`)."""
    quotes = [(q.sentence, q.date, q.who) for q in verbatim_sentences(state.get("evidence", []), memory)]
    today = state.get("today") or question_today(state).date().isoformat()
    return reckoning(state["question"], today, quotes, reranker, state.get("date_ranges"))


def reckoning(question: str, today: str, quotes: list[tuple[str, str, str]], reranker,
              date_ranges: list[list[str]] | None = None) -> str:
    """The computed reply to a temporal or counting question from `quotes` (`quotes.verbatim_sentences`), under
    COMPUTED (or UNDATED, when the quotes do not date every event), or ""
    when the question asks for no computation or nothing disclosed bears on it. `today` is the question's date
    (ISO); `date_ranges` the question's own (`normalize_dates`): a count keeps the items dated within them."""
    asked = kind(question)
    # What people said ("the assistant said" is a model) and not asked: a question tells of no event or item.
    people = [q for q in quotes if not q[2].startswith("the ") and not q[0].endswith("?")]
    if asked is None or not people:
        return ""
    if asked == "difference":
        return figures_reply(question, people, reranker, "difference")
    if asked == "total":  # a sum of stated figures; a count of the items told of when none are stated
        summed = figures_reply(question, people, reranker, "total")
        return summed or (count(question, people, reranker, date_ranges or []) if _COUNT.search(question) else "")
    if asked == "count":
        return count(question, people, reranker, date_ranges or [])
    named = _events(question, asked)
    if asked == "duration" and len(named) == 1 and not _AGO.search(question):
        return ""  # "how long had I been A?" with no second event: nothing to measure from
    told: list[tuple[str, Told | None]] = []
    for label, query in named:  # two events are two sentences: a later one takes its next best
        told.append((label, told_of(query, people, reranker, besides={q.sentence for _, q in told if q})))
    dated = [quote for _, quote in told if quote is not None]
    missing = [label for label, quote in told if quote is None]
    if not dated:
        return ""
    if missing:
        return (f"{UNDATED}\nI cannot tell: nothing I read dates {', '.join(f'“{label}”' for label in missing)}. "
                f"What I read dates: " + "; ".join(q.line() for q in dated))
    found = figure(question, asked, told, date.fromisoformat(today[:10]))
    if found is None:
        return f"{UNDATED}\nI cannot tell which came first: both are told of on {spoken(dated[0].day)} — " + "; ".join(q.line() for q in dated)
    return f"{COMPUTED}\n{found} — " + "; ".join(q.line() for q in dated)


def _events(question: str, asked: str) -> list[tuple[str, str]]:
    """(label, sub-query) of each event the question names: each option of a choice, each event of an interval,
    the question itself when it names one."""
    if asked == "order":
        frame, options = choices(question)
        return [(option, f"{frame} {option}") for option in options]
    found = events(question) if asked == "duration" else []
    return [(_FRAME.sub("", q) or q, q) for q in found] or [(question, question)]


def told_of(query: str, quotes: list[tuple[str, str, str]], reranker, besides: set[str] = frozenset()) -> Told | None:
    """The quote most relevant to `query` (above TELLS), but none in `besides`."""
    pool = [q for q in quotes if q[0] not in besides]
    if not pool:
        return None
    score, (sentence, session_date, speaker) = max(zip(relevance(query, pool, reranker), pool), key=lambda p: p[0])
    return Told(sentence, session_date, speaker) if score > TELLS else None


def relevance(query: str, quotes: list[tuple[str, str, str]], reranker) -> list[float]:
    """The cross-encoder's relevance of each quote to what `query` asks about (its computation frame left out),
    each read with the name of who said it where that is a person's name ("Caroline: I went to ..."): questions
    name people."""
    topic = _FRAME.sub("", " ".join(query.split())) or query
    for hint in resolve_relative_dates(topic, date.today()):  # a count's dates are checked apart, not read
        topic = topic.replace(hint.expression, " ")
    topic = " ".join(topic.split())
    return reranker.score([(topic, f"{_name(speaker)}{sentence}") for sentence, _, speaker in quotes])


def _name(speaker: str) -> str:
    """ "Caroline: " for "Caroline said"; "" for "you said" or "the assistant said"."""
    name = speaker.removesuffix(" said")
    return "" if name == "you" or name.startswith("the ") else f"{name}: "


def figure(question: str, asked: str, told: list[tuple[str, Told]], today: date) -> str | None:
    """The computed answer: a date, the option dated first (or last), or a duration in the unit asked; None for
    options the conversation's date alone puts on one day (no order to tell)."""
    days = [quote.day for _, quote in told]
    if asked == "date":
        return told[0][1].when()
    if asked == "order":
        pick = max if _LAST.search(question) and not _FIRST.search(question) else min
        tied = [quote for _, quote in told if quote.day == pick(days)]
        if len(tied) > 1:  # the same day named, or only the same conversation's date: no order to tell
            return "the same day" if all(q.named for q in tied) else None
        return f"{next(label for label, quote in told if quote is tied[0])} ({'last' if pick is max else 'first'})"
    start, end = (days[0], today) if len(days) == 1 else (min(days), max(days))
    unit = (_DURATION.match(" ".join(question.split()))["unit"] or "").lower()
    return duration(start, end, unit) + (" ago" if len(days) == 1 and re.search(r"\bago\b", question, re.I) else "")


def duration(start: date, end: date, unit: str = "") -> str:
    """The time from `start` to `end` in `unit` (day, week, month, year; "" picks one), with the days beside any
    other unit. Months and years are calendar ones ("about" when days are left over).

    >>> duration(date(2023, 3, 2), date(2023, 3, 21), "day"), duration(date(2023, 3, 1), date(2023, 3, 29))
    ('19 days', '4 weeks (28 days)')
    >>> duration(date(2023, 1, 15), date(2023, 3, 20), "month")
    'about 2 months (64 days)'
    """
    days = (end - start).days
    unit = unit or ("day" if days < 14 else "week" if days < 60 else "month")
    if unit == "day":
        return _plural(days, "day")
    if unit == "week":
        return f"{'about ' if days % 7 else ''}{_plural(round(days / 7), 'week')} ({_plural(days, 'day')})"
    months = (end.year - start.year) * 12 + end.month - start.month
    if add_months(start, months) > end:
        months -= 1
    rest = (end - add_months(start, months)).days
    months_exact = months + rest / (add_months(start, months + 1) - add_months(start, months)).days
    per = 12 if unit == "year" else 1
    about = "about " if rest or months % per else ""
    return f"{about}{_plural(round(months_exact / per), unit)} ({_plural(days, 'day')})"


def _plural(n: int, unit: str) -> str:
    return f"{n} {unit}" + ("" if n == 1 else "s")


def count(question: str, quotes: list[tuple[str, str, str]], reranker, date_ranges: list[list[str]]) -> str:
    """The distinct items the quotes tell of: the sentences relevant to the question (above TELLS, or above NAMES when
    they say a word of what it counts) that tell of something their speaker did (`tally.tells_a_deed`: "I attended",
    not "I'm looking for"); sentences that tell of one thing (`tally.same_thing`: one name, or SAME_ITEM of their
    words but the question's) are one item, counted once, kept when one of them is dated within the question's date
    ranges (when it names some). A sentence telling of two joined things ("the peace lily and a succulent plant":
    `tally.things_told`) counts both. One line each (its most relevant sentence), oldest first, under their number;
    "" for fewer than two items. When an item states a number of what is counted ("I have 3 bikes"), the lines are
    listed without a count of them, the latest first and marked so."""
    scores = relevance(question, quotes, reranker)
    stated = _stated_figures(question, list(zip(scores, quotes)))
    if stated:  # "I have 3 bikes": a count is not the answer
        # A figure said again later is its latest value ("that's 14 countries now"): the latest comes first.
        lines = [f"- {'latest' if i == 0 else 'earlier'}, {item.line()}" for i, item in enumerate(reversed(stated))]
        return "\n".join([COMPUTED, f"What I read of your conversations says, in {len(stated)} places (numbers as said, "
                                    "the latest first):", *lines])
    named = counted_words(question)
    items: list[list[tuple[float, Told]]] = []
    for score, quote in sorted(zip(scores, quotes), key=lambda pair: pair[1][1]):
        if not tells_a_deed(quote[0]) or score <= (NAMES if named & set(tokenize(quote[0])) else TELLS):
            continue
        told = (score, Told(*quote))
        same = next((item for item in items if any(same_thing(quote[0], t.sentence, SAME_ITEM, question) for _, t in item)),
                    None)
        if same is None:
            items.append([told])
        else:
            same.append(told)
    if date_ranges:
        items = [item for item in items if any(_within(t, date_ranges) for _, t in item)]
    shown = [max(item, key=lambda pair: pair[0])[1] for item in items]
    many = [max(things_told(t.sentence, named) for _, t in item) for item in items]
    if sum(many) < 2:
        return ""  # one item: the quotes answer as they are, there is nothing to gather
    lines = [f"- {item.line()}" + (f" ({n} of them)" if n > 1 else "") for item, n in zip(shown, many)]
    return "\n".join([COMPUTED, f"{sum(many)} found in what I read of your conversations (each counted once, oldest first):", *lines])


_AUXILIARIES = set(tokenize("different distinct did do does have has had are were is was can will that"))


def counted_words(question: str) -> set[str]:
    """The words (stems) that name what a "how many" question counts, but the frame's ("different art-related events"
    -> art, relat, event; "pieces of furniture" -> piec, furnitur; "times" -> none)."""
    counted = _COUNTED.match(" ".join(question.split()))
    if not counted:
        return set()
    return set(tokenize(counted.group(0)[len("how many"):])) - _AUXILIARIES - FIGURE_FRAME


def _stated_figures(question: str, scored: list[tuple[float, tuple[str, str, str]]]) -> list[Told]:
    """When the sessions state numbers of what the question counts: of each session, its sentence most relevant to
    the question (above TELLS), oldest first, one per item (SAME_ITEM of their words); none when no sentence of them
    states a number (`_states_number`) or they are fewer than two."""
    best: dict[str, tuple[float, tuple[str, str, str]]] = {}
    for score, quote in scored:
        if score > TELLS and score > best.get(quote[1], (TELLS, None))[0]:
            best[quote[1]] = (score, quote)
    items: list[Told] = []
    for _, quote in sorted(best.values(), key=lambda pair: pair[1][1]):
        if not any(share_words(quote[0], other.sentence, SAME_ITEM) for other in items):
            items.append(Told(*quote))
    return items if len(items) > 1 and any(_states_number(item.sentence, question) for item in items) else []


def _within(told: Told, date_ranges: list[list[str]]) -> bool:
    """Whether what a quote tells of happened within one of the ranges: the period its words name overlaps one, or
    (when they name none) it was said within one."""
    start, end = (told.named.start, told.named.end) if told.named else (told.day, told.day)
    return any(first <= f"{end}" and f"{start}" <= last for first, last in date_ranges)


def figures_reply(question: str, quotes: list[tuple[str, str, str]], reranker, asked: str) -> str:
    """The sum ("total") or the difference ("difference") of the figures the quotes relevant to the question (above
    ADDS for a sum, TELLS for a difference) and of what it asks (`tally.asked_of`) state (`tally.total`,
    `tally.difference`), first, then each figure with its quote; "" when the figures make none (fewer than two; for a
    difference, other than two of one thing)."""
    compared = asked == "difference"
    bar, kinds, figures = TELLS if compared else ADDS, asked_of(question), []
    for score, quote in sorted(zip(relevance(question, quotes, reranker), quotes), key=lambda pair: pair[1][1]):
        if score > bar:
            said = items_said(quote[0], kinds)
            figures += [(figure, Told(*quote).line(), said) for figure in addends(quote[0], question, compared=compared)]
    # A sum adds only figures of what it asks. A difference takes figures of no item for an item no sentence names:
    # it is said in other words ("my resort in Maui" for "Hawaii").
    unnamed = compared and len(set().union(*(said for *_, said in figures))) < len(kinds)
    figures = [(figure, line) for figure, line, said in figures if said or not kinds or unnamed]
    found = difference(figures) if compared else total(figures)
    if found is None:
        return ""
    value, used = found
    if compared:
        heading = f"{value} apart, the two figures your conversations state ({used[0][0].shown()} − {used[1][0].shown()}):"
    else:
        heading = (f"{value} in total, adding what your conversations state ("
                   + " + ".join(figure.shown() for figure, _ in used) + "; each figure counted once):")
    return "\n".join([COMPUTED, heading, *(f"- {figure.shown()}: {line}" for figure, line in used)])


def _states_number(sentence: str, question: str) -> bool:
    """Whether a sentence states a number of what the question counts ("I packed 7 shirts" for "How many
    shirts ..."): a number at most three words before its head noun."""
    counted = _COUNTED.match(" ".join(question.split()))
    if not counted:
        return False
    head, words = tokenize(counted["head"]), sentence.split()
    for i, word in enumerate(words):
        if head and tokenize(word.strip(".,!?;:'\"()")) == head:
            if any(_NUMBER.match(w.strip(".,!?;:'\"()$")) for w in words[max(0, i - 3):i]):
                return True
    return False
