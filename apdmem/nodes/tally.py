"""Tallies across sessions, without a model: the sum of the figures a "total" question asks for ("What is the total
cost of the car cover and the detailing spray?", "How many courses have I completed in total?"), the gap between
the two figures a difference asks for ("How much more did I raise than my goal?"), and what tells the items of a
count apart (`tells_a_deed`, `same_thing`; the count itself is `reckon.count`).

A figure is one a person stated in a sentence the cross-encoder finds relevant to the question (above
`reckon.ADDS` for a sum, `reckon.TELLS` for a difference) and that is of what the question asks (`asked_of`:
of one of the items it names, "gifts for my coworker and brother", not cashback; for a difference, of what it
compares, "my target time in the marathon", not a personal best at another race): an amount of money when the
question asks one ("how much", "cost", "spent"), else a number of things ("3 goals", "two assists", "57 rare
records", "4 hours and 10 minutes" and "4h 22min" as minutes, one thing a person says they have or got: "I have a
brother"). A figure is no addend when it is a range ("$150 to $200"), a rate ("$30 per night"), a
total already ("a total of $500"), a part of a word ("20-gallon"), or said of what may come ("I'll get the one that
costs $150"); a difference compares rates and bounds as said ("over $300 per night" against "$30 per night"). A
figure said again of the same thing is one: repeated across sessions, it is counted once. The result is stated
with its figures and their quotes, so the user sees what was added or compared.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from apdmem.memory.index import tokenize
from apdmem.memory.time_expressions import NUMBERS, VAGUE
from apdmem.nodes.decompose import coordinated
from apdmem.nodes.quotes import names

# The words of a question that ask for a sum.
TOTAL = re.compile(r"\b(?:total|altogether|combined|in all)\b", re.I)
_MONEY_QUESTION = re.compile(r"\b(?:how much|cost|costs|price|amount|spend|spent|pay|paid|money)\b|\$", re.I)
_NUMBER_WORDS = "|".join(sorted((w for w in NUMBERS if w not in VAGUE and w not in ("a", "an")), key=len, reverse=True))
_DIGITS = r"\d{1,3}(?:,\d{3})+(?!\d)|\d+"
_AMOUNT = rf"\$\s?(?:{_DIGITS})(?:\.\d+)?"
_COUNTED = rf"(?<![\w$.,-])(?:{_DIGITS}|{_NUMBER_WORDS})"
# A number of things: a number, up to two words (adjectives: "rare", "new"), a plural noun.
_THINGS = re.compile(rf"{_COUNTED}\s+(?:[a-z][\w'-]*\s+){{0,2}}?(?P<noun>[a-z][\w'-]*s)\b", re.I)
_MONEY = re.compile(_AMOUNT)
# A time written short: "4h 22min", "3 hrs 5 mins" (read as minutes).
_CLOCK = re.compile(r"(?<![\w.])(?P<hours>\d+)\s?h(?:rs?)?\s+(?:and\s+)?(?P<minutes>\d+)\s?mins?\b", re.I)
# One thing a person says they have or got ("I have a brother", "I also got an e-reader"): a/an as one.
_ONE = re.compile(r"\bI(?:['’]ve| have| had)?\s+(?:also\s+|just\s+)?(?:have|had|got|own|bought|adopted)\s+(?:a|an|one)\s+"
                  r"(?P<noun>[a-z][\w'-]*[^s\W])\b(?=\s*(?:[,.;!?]|$|\s+(?:and|but|which|who|that|from|in|at|as|so)\b))", re.I)
_HOURS_BEFORE = re.compile(rf"(?P<hours>{_DIGITS}|{_NUMBER_WORDS})\s+hours?\s+(?:and\s+)?$", re.I)
_TIME_UNITS = re.compile(r"^(?:second|minute|hour|day|night|week|month|year|time)s$", re.I)
# Ranges ("$150 to $200", "$60-$70"): neither end is a figure said.
_RANGE_AFTER = re.compile(r"^\s*(?:-|–|to|or)\s*\$?\d", re.I)
_RANGE_BEFORE = re.compile(r"(?:\b(?:between|from|(?<!up )to|or)|-|–)\s*$", re.I)
# Rates ("$30 per night", "40 hours a week") and bounds ("a total of $500", "up to $350,000"): no addends, but figures
# a difference compares ("over $300 per night" against "$30 per night").
_RATE = re.compile(r"^\s*(?:(?:\w+\s+)?(?:per|a|an|each|every)\s+(?:day|night|week|month|year|hour|person|piece|item)\b|/)", re.I)
_BOUND = re.compile(r"\b(?:total of|in total|up to|under|over|budget of)\s*$", re.I)
# Words of the clause before a figure that make it what may come ("I'll get the one that costs $150").
_MAY_COME = re.compile(r"\b(?:thinking|considering|wondering|looking|planning|plan|hoping|want|would|might|could|should|will|"
                       r"going to|if)\b|['’](?:ll|d)\b", re.I)
_CLAUSE = re.compile(r"[,;:—–]\s|\s-\s|\b(?:and|but|so|because)\s")


@dataclass(frozen=True)
class Addend:
    """A figure a quote states: its value, what it counts ("goals", "$" for money), the words that say it, and the
    sentence."""

    value: float
    counts: str
    words: str
    sentence: str

    def restates(self, other: Addend) -> bool:
        """Whether `other` states this figure again: the same value of the same thing, said of the same thing (the
        sentences name one name, "edX", "Tiffany's", or share half the content words of the shorter)."""
        if (self.value, self.counts) != (other.value, other.counts):
            return False
        if _names(self.sentence) & _names(other.sentence):
            return True
        words, other_words = set(tokenize(self.sentence)), set(tokenize(other.sentence))
        return len(words & other_words) >= 0.5 * min(len(words), len(other_words))

    def shown(self) -> str:
        return money(self.value) if self.counts == "$" else f"{_number(self.value)} {self.counts}"


def asks_difference(question: str) -> bool:
    """Whether a question asks how far apart two figures are ("How much more did I raise than my goal?", "What is
    the difference in price between ...", "How many minutes did I exceed my target by?").

    >>> asks_difference("How much more did I spend on hotels in Hawaii compared to Tokyo?"), asks_difference("How much did I spend?")
    (True, False)
    """
    return bool(re.match(r"^\s*(?:how (?:much|many \w+) (?:more|less|fewer)\b.*\b(?:than|compared)\b|"
                         r"what(?:'s| is| was) the difference\b|how (?:much|many \w+) did I exceed\b)", question, re.I))


def asks_total(question: str) -> bool:
    """Whether a question asks for a sum ("What is the total number of ...", "How many ... in total").

    >>> asks_total("What is the total cost of the car cover and detailing spray I purchased?")
    True
    >>> asks_total("How many bikes do I own?")
    False
    """
    return bool(TOTAL.search(question)) and bool(re.match(r"^\s*(?:how (?:many|much)|what(?:'s| is| was) the total)\b", question, re.I))


# Words that frame a sum or a difference, or name the unit it counts: what it is of is in the question's other words.
FIGURE_FRAME = set(tokenize("how much many more less fewer than compared difference exceed total number amount cost price spend "
                             "pay money altogether combined second minute hour day night week month year time dollar"))


def asked_of(question: str) -> list[set[str]]:
    """The words (stems) by which a sentence's figures are of what a question asks, one set per item it names ("the
    car cover and detailing spray", "my coworker and brother"); for a difference naming none, the words of what it
    compares ("my target time in the marathon": not "my personal best"); none when any figure will do (a total naming
    no items: "siblings" are "3 sisters" and "a brother")."""
    items = coordinated(question)[1]
    if not items and not asks_difference(question):
        return []
    kinds = [set(tokenize(item)) - FIGURE_FRAME for item in items] or [set(tokenize(question)) - FIGURE_FRAME]
    return [words for words in kinds if words]


def items_said(sentence: str, kinds: list[set[str]]) -> set[int]:
    """Which of the question's items (`asked_of`) a sentence says a word of.

    >>> items_said("I got my brother a $100 gift card.", asked_of("What is the total I spent on gifts for my coworker and brother?"))
    {1}
    """
    said = set(tokenize(sentence))
    return {i for i, words in enumerate(kinds) if words & said}


def addends(sentence: str, question: str, *, compared: bool = False) -> list[Addend]:
    """The figures of a sentence that add up to what the question asks (money for a question about money, else
    numbers of things), in their order; none for a range, a rate, a stated total or what may come. With
    `compared`, the figures a difference compares: rates and bounds too.

    >>> [a.shown() for a in addends("I've scored 3 goals and had two assists so far.", "What is the total number of goals?")]
    ['3 goals', '2 assists']
    >>> addends("I think I'll get the one that costs $150, or $60-$70 a piece.", "How much did I spend in total?")
    []
    """
    found = []
    pattern = _MONEY if _MONEY_QUESTION.search(question) else _THINGS
    if pattern is _THINGS:
        found += [Addend(60 * int(m["hours"]) + int(m["minutes"]), "minutes", m.group(0), sentence) for m in _CLOCK.finditer(sentence)]
        found += [Addend(1, m["noun"].lower(), m.group(0), sentence) for m in _ONE.finditer(sentence)
                  if not compared and not _TIME_UNITS.match(m["noun"] + "s")]
    for m in pattern.finditer(sentence):
        before = sentence[:m.start()]
        clause = _CLAUSE.split(before)[-1]
        after = sentence[m.end():]
        if _RANGE_AFTER.match(after) or _RANGE_BEFORE.search(before) or _MAY_COME.search(clause):
            continue
        if not compared and (_RATE.match(after) or _BOUND.search(before)):
            continue
        figure = m.group(0)
        if pattern is _MONEY:
            found.append(Addend(float(figure.strip("$ ").replace(",", "")), "$", figure, sentence))
            continue
        noun = m["noun"].lower()
        if _TIME_UNITS.match(noun) and not re.search(rf"\b{noun[:-1]}s?\b", question, re.I):
            continue  # "for five days" is no number of things, unless the question counts days
        value = _value(figure.split()[0])
        hours = _HOURS_BEFORE.search(before)
        if noun == "minutes" and hours:  # "4 hours and 10 minutes": 250 minutes
            value += 60 * _value(hours["hours"])
        found.append(Addend(value, noun, figure, sentence))
    return found


def _value(number: str) -> float:
    """The value of a number as written: "1,200", "seven"."""
    number = number.replace(",", "").lower()
    return float(NUMBERS.get(number, number))


def money(value: float) -> str:
    """An amount as a reply writes it: "$1,300", "$12.50"."""
    return f"${value:,.2f}" if value != int(value) else f"${int(value):,}"


def _number(value: float) -> str:
    return f"{value:g}"


def _names(sentence: str) -> set[str]:
    """The names a sentence says: its words with a capital letter, but its first word and "I"."""
    words = re.findall(r"[\w'’]+", sentence)[1:]
    return {w.lower() for w in words if any(c.isupper() for c in w) and w not in ("I", "I'm", "I've", "I'll", "I'd")}


def distinct(figures: list[tuple[Addend, str]]) -> list[tuple[Addend, str]]:
    """The figures (each with the line of the quote that states it), a figure said again (`Addend.restates`) once."""
    kept: list[tuple[Addend, str]] = []
    for addend, line in figures:
        if not any(addend.restates(other) for other, _ in kept):
            kept.append((addend, line))
    return kept


def difference(figures: list[tuple[Addend, str]]) -> tuple[str, list[tuple[Addend, str]]] | None:
    """How far apart the two figures are, as a reply writes it, and the two (the larger first, each as first
    stated); None unless the figures have exactly two values, of one thing (of more, which two are compared would be
    a guess)."""
    kept = list({addend.value: (addend, line) for addend, line in reversed(figures)}.values())
    if len(kept) != 2 or kept[0][0].counts != kept[1][0].counts:
        return None
    larger, smaller = sorted(kept, key=lambda pair: -pair[0].value)
    gap = larger[0].value - smaller[0].value
    return (money(gap) if larger[0].counts == "$" else f"{_number(gap)} {larger[0].counts}"), [larger, smaller]


def total(figures: list[tuple[Addend, str]]) -> tuple[str, list[tuple[Addend, str]]] | None:
    """The sum of distinct figures (each with the line of the quote that states it): a figure said again
    (`Addend.restates`) once; the sum as a reply writes it, and the figures added. None for fewer than two distinct
    figures (one figure is no sum: the quotes answer as they are)."""
    added = distinct(figures)
    if len(added) < 2:
        return None
    value = sum(a.value for a, _ in added)
    return (money(value) if added[0][0].counts == "$" else _number(value)), added


# --- items a count asks for ---------------------------------------------------------------------------------------

_IRREGULAR = ("went|got|gotten|saw|seen|took|taken|made|bought|had|met|ran|did|done|began|begun|brought|found|gave|given|ate|"
              "eaten|wrote|written|built|sold|paid|spent|won|caught|flew|flown|drove|driven|rode|ridden|left|came|read|set|"
              "put|kept|heard|held|sent|taught|told|swam|sang|grew|grown|lost|became|chose|chosen|fed|led|hung|shot|"
              "dug|threw|thrown|wore|worn|tore|broke|broken|fell|forgot|understood|stood|sat|slept|spoke|drew|drawn|"
              "been to|gone to")
# A sentence that tells of something its speaker did: "I" or "we" (perhaps "have" or "had", an adverb or two) and a
# verb in the past ("I recently attended", "we've visited", "which I got from my sister"); not "I'm interested",
# "I need", "I'll schedule", "I was thinking".
_DEED = re.compile(rf"\b(?:I|we)(?:['’]ve|['’]d| have| had)?\s+(?:(?:\w+ly|just|also|finally|actually|already|even|once|"
                   rf"then|first|since|both|all)\s+){{0,2}}(?:\w+[^e\W]ed|{_IRREGULAR})\b", re.I)



def tells_a_deed(sentence: str) -> bool:
    """Whether a sentence tells of something its speaker did (`_DEED`).

    >>> tells_a_deed("I recently attended a lecture at the Art Gallery."), tells_a_deed("I'll schedule an appointment.")
    (True, False)
    """
    return bool(_DEED.search(sentence))


# A thing joined to another in one sentence: "the peace lily and a succulent plant", "a lamp along with a rug".
_JOINED = re.compile(r"\b(?:and|along with|as well as|plus)\s+(?:a|an|another|some)\s+(?P<thing>(?:[\w'-]+\s+){0,2}[\w'-]+)", re.I)


def things_told(sentence: str, counted: set[str]) -> int:
    """How many of what a count counts (`counted`: its stems) a sentence tells of: one, and one more for each thing
    joined to another that says a word of it ("I bought the peace lily and a succulent plant" for plants: two).

    >>> things_told("I bought the peace lily and a succulent plant two weeks ago.", {"plant"})
    2
    """
    return 1 + sum(bool(counted & set(tokenize(m["thing"]))) for m in _JOINED.finditer(sentence))


def same_thing(a: str, b: str, share: float, asked: str = "") -> bool:
    """Whether two sentences tell of one thing: they say one name ("Natural History Museum", "Rachel Lee"; not a
    month or a day of the week), one compound ("kitchen shelves", "primary care physician": two content words in a
    row), or `share` of their content words (of both together) are the same. The words of the question `asked` tell
    nothing apart: every item of "How many art events did I attend?" says "art" (no name made of them alone, and
    the share is of the other words)."""
    known = set(tokenize(asked))
    shared = {n for n in _name_phrases(a) & _name_phrases(b) if not set(tokenize(n)) <= known}
    return bool(shared or _compounds(a) & _compounds(b)) or share_words(a, b, share, known)


def share_words(a: str, b: str, share: float, known: set[str] = frozenset()) -> bool:
    """Whether `share` of two sentences' content words (of both together, but the `known` ones) are the same."""
    words_a, words_b = set(tokenize(a)) - known, set(tokenize(b)) - known
    return bool(words_a and words_b) and len(words_a & words_b) >= share * len(words_a | words_b)


_VERB_FORM = re.compile(rf"^(?:\w+(?:ed|ing)|{_IRREGULAR.replace(' to', '')}|make|do|try|get|go|take|have|learn|see|find|use|"
                        r"buy|feel|think|want|need|like|love|keep|back|out|up|new|old|really|just|also|last|first|next|those|these|some|any|every|each|other)$")


def _compounds(sentence: str) -> set[tuple[str, str]]:
    """The compounds a sentence says ("kitchen shelves", "primary care"): two words in a row, neither a stopword nor
    a verb form nor a word that says little of a thing ("new", "last"), as stems; a hyphenated word is one ("a
    5-gallon tank" and "a 20-gallon tank" are two)."""
    words = [w if tokenize(w) and not _VERB_FORM.match(w) else "" for w in re.findall(r"[a-z0-9]+(?:[-'][a-z0-9]+)*", sentence.lower())]
    return {("-".join(tokenize(a)), "-".join(tokenize(b))) for a, b in zip(words, words[1:]) if a and b}


def _name_phrases(sentence: str) -> set[str]:
    """The names a sentence says, each as a whole ("Natural History Museum"): runs of words, but its first, that
    name something (`quotes.names`: capitalized, not "I", nor a month or a day of the week)."""
    runs, run = set(), []
    for i, word in enumerate(re.findall(r"[\w'’.]+", sentence) + [""]):
        word = word.strip(".")
        if i and word and names(word):
            run.append(word.lower())
        elif run:
            runs.add(" ".join(run))
            run = []
    return runs
