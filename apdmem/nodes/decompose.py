"""`decompose`: a compound question becomes sub-queries (one per event it names, plus the model's); a simple one
passes through."""

from __future__ import annotations

import re
from functools import lru_cache

from pydantic import BaseModel, Field

from apdmem import prompts
from apdmem.memory.index import tokenize
from apdmem.memory.records import Usage
from apdmem.models import ask_structured
from apdmem.nodes.common import annotate, usage_update


class SubQueries(BaseModel):
    """Search queries for the parts of a question."""

    queries: list[str] = Field(description="one short query per fact needed", json_schema_extra={"maxItems": 6})


def decompose(state, runtime, *, settings) -> dict:
    """The question itself is always the first query, then one per event it names (`events`, deterministic: with
    no generative model, the whole decomposition); the model may add sub-queries (never required)."""
    ctx, usage = runtime.context, Usage()
    question = state["question"]
    queries = [question]
    if ctx.decomposition:
        lowered = question.lower()
        queries += [q for q in events(question) if q.lower() != lowered][: ctx.max_queries - 1]
        prompt = prompts.DECOMPOSE.format(today=state.get("today", ""), question=question, max_queries=ctx.max_queries)
        out = ask_structured(settings.controller(), SubQueries, prompt, usage)
        for query in out.queries if out else []:
            query = query.strip()
            if usable(query, question) and query.lower() not in {q.lower() for q in queries} and len(queries) < ctx.max_queries:
                queries.append(query)
    annotate(queries=queries)
    return {"queries": queries, **usage_update("decompose", usage)}


def usable(query: str, question: str) -> bool:
    """Whether a proposed sub-query is a part of the question: one line sharing a content word with it. A weak
    model's debris (a stray comma, a URL fragment, text in another language) would only find noise, and the
    disclosure policy opens a session for every sub-query.

    >>> usable("when did I start reading The Nightingale", "How long did The Nightingale take me?"), usable(".com/en-US", "How often do I see Dr. Smith?")
    (True, False)
    """
    return "\n" not in query and not _words(question).isdisjoint(tokenize(query))


@lru_cache(maxsize=4)
def _words(question: str) -> frozenset[str]:
    """The question's words, tokenized once: `events` checks each of its parts against them (as many parts as
    a crafted question has clauses)."""
    return frozenset(tokenize(question))


# --- Events: one sub-query per event a comparison or interval question names (deterministic, no model) ---

# Words a named event's phrase starts after, when it is read back from a coordinator ("spent on X and Y").
_BOUNDARY = {"in", "on", "of", "for", "to", "at", "with", "from", "about", "by", "was", "is", "were", "are", "did", "do",
             "does", "i", "my", "the", "between", "what", "which", "how", "who"} - {"my", "the"}
# An aggregation or a difference over items the question names: "the total cost of X and Y", "how much ... X and Y".
_AGGREGATE = re.compile(r"^how (?:many|much)\b|\b(?:total|combined|altogether|both|sum|difference)\b", re.I)
# The patterns below read the question without its closing punctuation, stripped once (not \W: a quoted title
# keeps its closing quote). Each matches in linear time: a frame ends at the first "between", "before" or
# "after" (an atomic group; trying each later one again made a crafted question quadratic).
_END = " ?.!"
_CHOICE = re.compile(r"^(?P<frame>(?:which|who|what|whom|where|did|do|was|is)\b[^,]+),\s*(?P<options>.+?\bor\b.+)$", re.I)
_BETWEEN = re.compile(r"^(?>(?P<frame>.*?\bbetween))\s+(?P<pair>.+?\band\b.+)$", re.I)
_OFFSET = re.compile(r"^(?>(?P<frame>how (?:many|much|long)\b.*?)\b(?:before|after))\s+(?P<a>.+?)\s+"
                     r"(?P<b>(?:did|do|was|were|had|have)\s+I\b.+)$", re.I)
_CLAUSES = re.compile(r"\s+(?:when|before|after|while)\s+(?=I\b|my\b|the\b|we\b)", re.I)
_SINCE = re.compile(r"^how (?:many|much|long)\b.*?\b(?:ago\s+(?:did|was|were|had|have)\s+I|since)\s+(?P<event>.+)$", re.I)
# Options or items a question names that are made queries, each with the question's frame: a question naming
# more is a list, and a crafted one's thousands of items would repeat its frame thousands of times.
_MOST_ITEMS = 8
_JOINERS = re.compile(r"\s+(?:and|compared to|versus|vs\.?|than)\s+", re.I)


def events(question: str) -> list[str]:
    """One search query per event or item a comparison or interval question names, so that the disclosure
    policy's per-sub-query cover opens the session of each (the question's own ranking often shows only the best
    one). Deterministic phrasing patterns, no model; [] for a question that names a single thing.

    - a choice, "Which did I do first, X or Y?": the frame with each option;
    - an interval, "How many days passed between A and B?", "How long had I been A when B?", "How many days
      before A did I B?": each event;
    - a time since, "How many weeks ago did I A?", "How long since A?": the event without the interval words;
    - an aggregation or a difference over named items, "the total cost of X and Y", "X compared to Y",
      "more X than Y": the question's frame with each item.

    >>> events("Which book did I finish first, 'Dune' or 'Emma'?")
    ["Which book did I finish first 'Dune'", "Which book did I finish first 'Emma'"]
    >>> events("How many days passed between the day I moved and the day I adopted a cat?")
    ['How many days passed between the day I moved', 'How many days passed between the day I adopted a cat']
    """
    question = " ".join(question.split())
    body = question.rstrip(_END)
    if _CHOICE.match(body):
        frame, options = choices(question)
        found = [f"{frame} {o}" for o in options[:_MOST_ITEMS]] if len(options) > 1 else []
    elif match := _BETWEEN.match(body):
        found = [f"{match['frame']} {e}" for e in _pair(match["pair"])]
    elif match := _OFFSET.match(body):
        found = [f"{match['frame'].strip()} {match['a']}", match["b"]]
    elif len(parts := _CLAUSES.split(question.rstrip("?. "))) > 1:
        found = parts
    elif match := _SINCE.match(body):
        found = [match["event"]]
    else:
        found = _items(question)
    return list(dict.fromkeys(q.strip() for q in found if usable(q.strip(), question) and _names_something(q)))


def choices(question: str) -> tuple[str, list[str]]:
    """The frame and the options of a choice question ("Which did I do first, X or Y?"); ("", []) for another.

    >>> choices("Who became a parent first, Rachel or Alex?")
    ('Who became a parent first', ['Rachel', 'Alex'])
    """
    match = _CHOICE.match(" ".join(question.split()).rstrip(_END))
    if not match:
        return "", []
    return match["frame"], [o for o in re.split(r"\s*,\s*(?:or\s+)?|\s+or\s+", match["options"]) if o and o.lower() != "not"]


# Words of an interval question's frame: a part made of them alone ("How old was I") names no event.
_FRAME_WORDS = set(tokenize("how many much long old days weeks months years ago passed first"))


def _names_something(part: str) -> bool:
    """Whether a part of a question has at least two words beyond the interval frame."""
    return len(set(tokenize(part)) - _FRAME_WORDS) >= 2


def _pair(text: str) -> list[str]:
    """The two events of "between A and B": split at "and the <word>" when A starts with "the <word>" (the day I
    X and the day I Y), else at the first "and"."""
    first = text.split()[:2]
    if len(first) == 2 and first[0].lower() in ("the", "my"):
        cut = re.search(rf"\s+and\s+(?={re.escape(first[0])}\s+{re.escape(first[1])}\b)", text, re.I)
        if cut:
            return [text[: cut.start()], text[cut.end():]]
    a, _, b = re.split(r"\s+(and)\s+", text, maxsplit=1, flags=re.I)
    return [a, b]


def _items(question: str) -> list[str]:
    """Items named in a coordination (`coordinated`): the question up to the first item, followed by each item."""
    frame, items = coordinated(question)
    return [f"{frame} {i}".strip() for i in items]


def coordinated(question: str) -> tuple[str, list[str]]:
    """The frame and the items a question names in a coordination ("X and Y" in an aggregation, "X compared to Y",
    "more X than Y"); ("", []) for none. The first item starts after the nearest preposition or auxiliary before the
    coordinator, which the frame ends with.

    >>> coordinated("What is the total amount I spent on gifts for my coworker and brother?")
    ('What is the total amount I spent on gifts for', ['my coworker', 'brother'])
    """
    text = question.rstrip("?. ")
    joiner = _JOINERS.search(text)
    if not joiner or (joiner.group().strip().lower() == "and" and not _AGGREGATE.search(text)):
        return "", []
    words = text[: joiner.start()].split()
    start = max((i + 1 for i, w in enumerate(words) if w.lower() in _BOUNDARY), default=0)
    if start >= len(words):
        return "", []
    frame, boundary = " ".join(words[:start]), words[start - 1].lower() if start else ""
    items = [" ".join(words[start:])] + _JOINERS.split(text[joiner.end():])[: _MOST_ITEMS - 1]
    items = [re.sub(rf"^{re.escape(boundary)}\s+", "", i, flags=re.I) if boundary else i for i in items]
    return frame, [i for i in items if i]
