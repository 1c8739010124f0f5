"""Yes or no, for a question whether the user did one thing ("Did I finish reading 'The Nightingale'?").

The extractive reply quotes what the user said ("… which I finished reading recently."); asked whether they did
it, it says yes or no only where a quote says so in so many words (`verdict`):

- **Yes** when the latest quote that speaks of the asked action and names everything the question names after its
  verb tells it as done by the user, in the past tense right after "I" ("I finished", "I've also finished"), in a
  sentence that is not a question and has no negation; a plan ("I'm planning to finish"), a question ("Should I
  finish it?"), a condition ("if I finished") or a negation never says yes.
- **No** only when that quote denies it: "I didn't finish", "I haven't finished", "I never finished".
- Nothing otherwise: the quotes are left to speak, as for any question. Nor is a question answered that asks which,
  when or how ("Did I visit with a friend or not?", "Did I finish it before the trip?"), whose yes is not one
  action's; nor one whose verb has an irregular past ("Did I buy ...", "bought"), which is not recognized.
"""

from __future__ import annotations

import re

from apdmem.memory.layers import sentences
from apdmem.nodes.quotes import Quote

_ASKED = re.compile(r"^(?:did|have|had)\s+i\s+(?:(?:ever|already|actually|really|finally)\s+)?([a-z]+)\b(.*)$", re.I)
# Words that make a question about more than whether one action happened.
_NOT_ONE_ACTION = re.compile(r"\b(?:or|before|after|when|first|last|since|until|times|how|which|what|who|where|why)\b", re.I)
_NEGATION = re.compile(r"\b(?:not|never|no|nor|without)\b|n't\b", re.I)
_CONDITION = re.compile(r"\b(?:if|whether|unless|once|when|before|after|until)\s+I\b", re.I)
_ADVERBS = r"(?:(?:also|just|already|finally|actually|recently|really|eventually|\w+ly)\s+){0,2}"
_WORD = re.compile(r"[a-z0-9]+")
# Words of a question that name nothing the quote must repeat.
_FUNCTION_WORDS = frozenset("a an the my your our his her their its this that these those of by for to in on at with from "
                            "about it them me you i yet".split())


def verdict(question: str, quotes: list[Quote]) -> tuple[str, Quote] | None:
    """"Yes" or "No" for a question whether the user did one thing, and the quote that says it: the first of
    `quotes` (latest first, as the reply lists them) that speaks of it (see the module); None when the question is
    not one or that quote does not decide.

    >>> said = Quote("I finished reading the novel yesterday.", "s1", "2023-05-02", 0, 0, "", "user")
    >>> verdict("Did I finish reading the novel?", [said])[0], verdict("Did I finish the novel or the essay?", [said])
    ('Yes', None)
    """
    last = sentences(question)[-1] if question.strip() else ""
    asked = _ASKED.match(last)
    if not asked or _NOT_ONE_ACTION.search(asked.group(2)):
        return None
    verb, named = asked.group(1).lower(), set(_WORD.findall(asked.group(2).lower())) - _FUNCTION_WORDS
    done = "|".join(map(re.escape, _past_forms(verb)))
    for quote in quotes:
        words = set(_WORD.findall(quote.sentence.lower()))
        if quote.role != "user" or not any(w.startswith(verb) for w in words) or not named <= words:
            continue
        sentence = quote.sentence
        if re.search(rf"\bI\s+(?:didn't|did not|haven't|have not|hadn't|had not|never)\s+{_ADVERBS}(?:{verb}|{done})\b", sentence):
            return "No", quote
        told = re.search(rf"\bI(?:'ve|'d|\s+have|\s+had)?\s+{_ADVERBS}(?:{done})\b", sentence)
        plain = not sentence.endswith("?") and not _NEGATION.search(sentence) and not _CONDITION.search(sentence)
        return ("Yes", quote) if told and plain else None
    return None


def _past_forms(verb: str) -> set[str]:
    """The regular past tense of a verb: finish -> finished, move -> moved, try -> tried, stop -> stopped."""
    forms = {f"{verb}ed", f"{verb}{verb[-1]}ed"}
    if verb.endswith("e"):
        forms.add(f"{verb}d")
    if verb.endswith("y") and verb[-2:-1] not in "aeiou":
        forms.add(f"{verb[:-1]}ied")
    return forms
