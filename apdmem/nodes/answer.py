"""`answer`: the final reply, and which mode wrote it.

- **generative**: the generator model writes the reply from the organized notes and the controller's draft.
- **extractive**: without a generative model (the embedded default, ``chat_model="local"``), or when the model
  gives nothing, the reply quotes the disclosed sentences that answer the question: the cross-encoder scores each
  sentence against the question and what it asks (`scored_quotes`), and only sentences found word for word in
  their session and scoring at least `RELEVANT` are quoted, with the session's date and who said them, the latest
  session's first and marked as the latest when they come from several. The reply asserts them when one reaches
  `ANSWERS`, or `TELLS` when the question points at it beyond the cross-encoder's reading: it is dated as the
  question dates what it asks ("a week ago"), or it is a line under a section the question names ("Chorus:");
  otherwise it says they may not answer. When none answers, the reply says the memory does not hold it and names the
  sessions that came closest. No model writes a word of it; the trace shows each sentence's score.
  A later message that follows up the best quote (`followed_up`: "I switched from the food bank to the animal
  shelter." after "I volunteer at the food bank") is quoted with it, though it may not share a word with the question.

When the memory does not hold the answer at all (`apdmem.nodes.holds`: the question names something no disclosed
sentence says), the extractive reply says so and names the sessions that came closest; a chat model reads it in
the notes.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import date, timedelta

from apdmem import prompts
from apdmem.memory.records import Usage
from apdmem.memory.time_expressions import DateHint, resolve_relative_dates
from apdmem.models import generate
from apdmem.nodes.common import annotate, emit, open_memory, usage_update
from apdmem.nodes.quotes import Quote, bare, beside, names, said_dates, verbatim_sentences
from apdmem.nodes.reckon import TELLS, kind
from apdmem.nodes.yesno import verdict

NOT_FOUND = "I don't have that information from our past conversations."
CLOSEST = "The closest I read are the conversations of"
QUOTED = "From your conversations (quoted, no model wrote this):"
# The heading of quotes none of which the cross-encoder judges relevant (all below ANSWERS): they are the closest the
# memory holds, and the reply says they may not answer.
UNCLEAR = "The closest I found in your conversations (quoted, no model wrote this; it may not answer the question):"
QUOTES = 5  # most sentences quoted
# The cross-encoder's logit (ms-marco) at or above which a sentence answers the question. Calibrated on the 151 dev
# questions and the 147 questions of the evolving-memory suite (README "Extractive replies"): of the thresholds -11 to
# +4 and QUOTES 3 or 5, -10 with 5 gives the most replies right (mean share per question group 0.606: quotes the
# gold, leads with the current value, or says "not in memory" for what was never said). Sentences unrelated to the
# question score -10 to -11.3; a higher threshold also leaves out answers the cross-encoder scores low
# ("I went fully vegan last month." -10.3 for "What diet do I follow these days?"), and at 0, its nominal boundary,
# 0.43 of the dev abstention questions and 0.16 of the suite's never-said ones are still answered.
RELEVANT = -10.0
# The cross-encoder's nominal boundary (ms-marco: relevant above 0). Quotes between RELEVANT and it are shown, as the
# closest the memory holds, under UNCLEAR unless one of them reaches it: a reply asserts only what the model judges
# relevant (on the 151 dev questions, quoting under QUOTED whatever reached RELEVANT made 0.311 of the quotable
# replies confident and wrong, against 0.149 when weak quotes were hedged). Calibrated on the 175 quotable questions
# of the 151 dev questions and the suite (docs/controller.md "Extractive replies"): lowering it trades hedged replies
# for confident wrong ones about one for one (counting never-said questions answered). Rule: the fewest quotable replies
# wrong or hedged among the values with no more confident wrong than at 0, the higher of a tie. Swept again once
# quotes were read after the sentence before them (-10 to +4): 0 and -0.5 tie (47 wrong or hedged, 16 confident wrong;
# -1.5: 41, 21; -10: 19, 55), so the model's own boundary.
ANSWERS = 0.0
# A quote the question points at in words the cross-encoder does not weigh (`Quote.pointed`: dated as the question
# dates what it asks, or under a section the question names) answers at TELLS, the bar at which the reckoning takes a
# sentence to tell of an event: the cross-encoder cannot check "two weeks ago" against a sentence ("I attended the
# exhibit at the Met today." scores -5.1 for "I mentioned an art event two weeks ago. Where was it held?", -3.0
# without the date), nor read a line of notes under "Chorus:" as the chorus (-2.5 with its heading).
# The most words a heading has as the label of a section ("Chorus:", "Step 2:", "Ingredients:"); a longer one introduces
# what follows ("Here are a few apps:") rather than naming it.
LABEL_WORDS = 3
# The cross-encoder's logit at or above which two neighbouring sentences of a later message, read with the best quote as
# the query, follow it up (`followed_up`). An update is often worded unlike the question and like what it updates:
# against "Where do I volunteer now?" "I switched from the food bank to the animal shelter." scores -10.5, against "I
# volunteer at the food bank every Saturday morning" (its pair with the next sentence) -2.6; a sentence on something
# else of the same session -11.2. Calibrated on the 151 dev questions and the suite's 147 together (docs/controller.md
# "Extractive replies"): from -4.5 to -3 the suite's current value leads 50 of 51 replies (47 without), the dev
# knowledge-update replies contain the gold 19 of 19 (18) and no reply of any type loses its gold or turns
# confidently wrong; -5 and -2.5 each lead one fewer. -3.5 sits inside the plateau.
FOLLOWS = -3.5
TRACED = 8  # sentences the trace shows with their scores, best first
# The words with which a question asks to be reminded of something ("Can you remind me of", "I was wondering if you
# could"): what follows them is what it asks (`request`).
_LEAD_IN = re.compile(r"\b(?:remind me(?: of)?|wondering(?: if| whether)?(?: you could)?,?|trying to recall|tell me(?: about)?)\s+",
                      re.IGNORECASE)
# What a question asks for when it asks for a kind of value that must be said to be known (`asked_value`): a measure
# ("How much does it cost?", "How long have I ...?"; not "how many", a count, which sentences without a number add up
# to), a colour, a name ("What is my dentist's name?", "Which brand ...?", "Who ...?"); and how a sentence says one
# (`says_value`). Calibrated on the 151 dev questions and the suite together (docs/controller.md "Extractive replies").
_ASKED_VALUES = {
    "measure": re.compile(r"\b(?:how (?:much|old|long|far|fast|tall|big)|what (?:time|year|age)|phone number|salary|price|cost)\b",
                          re.IGNORECASE),
    "colour": re.compile(r"\bcolou?rs?\b", re.IGNORECASE),
    "name": re.compile(r"\b(?:names?|brands?|who|whom|whose)\b", re.IGNORECASE),
}
_MEASURE = re.compile(r"\d|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|"
                      r"sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|"
                      r"thousand|million|dozen|half|couple|few|once|twice)\b|\ban? (?:year|month|week|day|hour|minute)",
                      re.IGNORECASE)
_COLOUR = re.compile(r"\b(?:red|blue|green|black|white|gr[ae]y|silver|yellow|orange|purple|pink|brown|gold|beige|navy|"
                     r"teal|maroon)\b", re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z][\w'’-]*")


def answer(state, runtime, *, settings, memory=None) -> dict:
    ctx, usage = runtime.context, Usage()
    model = settings.generator()
    draft = state.get("draft", "") if ctx.draft_answer else ""
    reply = ""
    if state.get("evidence") and model is not None:
        prompt = prompts.ANSWER.format(today=state.get("today", ""), question=state["question"],
                                       notes=state.get("notes", ""), draft=draft or "(none)")
        reply = generate(model, prompt, usage)
    reply, mode = (reply or draft, "generative") if reply or draft else (None, "extractive")
    if reply is None and not state.get("holding", {}).get("held", True):
        reply = "\n".join([NOT_FOUND, *state["holding"]["closest"]])
    if reply is None and state.get("reckoning"):  # a temporal or counting question, computed (`nodes.reckon`)
        reply = state["reckoning"]
    if reply is None:
        quotes = scored_quotes(state["question"], state.get("evidence", []), open_memory(runtime, settings, memory),
                               settings.reranker(), today=state.get("today"))
        reply, quoted = quoted_reply(quotes, state["question"]), chosen(quotes, state["question"])
        traced = [{"score": round(q.score, 3), "session_id": q.session_id, "date": q.date, "turn": q.turn,
                   "sentence": q.sentence, "quoted": q in quoted, "follows": q.follows,
                   "pointed": q.pointed} for q in quotes[:TRACED]]
        annotate(quotes=traced)
        emit(runtime, event="quotes", threshold=RELEVANT, quotes=traced)
    evidence = state.get("evidence", [])
    annotate(step=state.get("step", 0), answer_mode=mode, sessions=sorted({e["session_id"] for e in evidence}),
             layers=sorted({e["layer"] for e in evidence}), evidence_items=len(evidence))
    return {"answer": reply, "answer_mode": mode, **usage_update("answer", usage)}


def extractive_answer(question: str, evidence: list, memory, reranker) -> str:
    """The reply of the extractive mode for this disclosed `evidence` (`quoted_reply` of `scored_quotes`)."""
    return quoted_reply(scored_quotes(question, evidence, memory, reranker), question)


def scored_quotes(question: str, evidence: list, memory, reranker, *, today: str | None = None) -> list[Quote]:
    """Every disclosed sentence that can be quoted (`verbatim_sentences`), scored against the question, best first.

    A sentence is scored against the question and against its `request`, read alone and after its context; its
    score is its best reading's. Two contexts can lift it: the heading it falls under (`Quote.heading`), when the
    sentence after it scores above the heading alone (a heading that answers does not lift every item below it),
    and the sentence before it (`Quote.before`: "I was in Japan in May." before "I spent two weeks there."), when
    that one does not answer alone (scores below ANSWERS: a sentence that follows an answer does not take its
    score) and the two read together score above it. A sentence a named person said is read with their name before
    it ("Aisha: I quit Bean There."), so that a question naming them finds it. The sentences that follow up the best
    one then take its score (`followed_up`).

    Given the question's date (`today`, ISO), a question that dates what it asks ("Which book did I finish a week
    ago?") is also read without its dates by the quotes dated as it asks (`dated_as_asked`): their date is checked
    against the question's, and the cross-encoder, which sees no date beside a sentence, would hold the words
    against them. Not a question that asks to compute (`reckon.kind`: "How many times did I bake in the past two
    weeks?"): a quote of that time is one item, not the answer. Those quotes, and the lines under a section the
    question names (`names_section`: "Chorus:"), are `Quote.pointed`."""
    quotes = verbatim_sentences(evidence, memory)
    asked = list(dict.fromkeys([question, request(question)]))
    hints = asked_dates(question, today) if kind(question) is None else []
    on_date = [dated_as_asked(q, hints, today) for q in quotes] if hints else [False] * len(quotes)
    undated = undated_question(question, hints)
    dated = [ask for ask in dict.fromkeys([undated, request(undated)]) if ask not in asked] if any(on_date) else []
    pairs = list(dict.fromkeys((ask, text) for q, dates in zip(quotes, on_date) for ask in asked + (dated if dates else [])
                               for text in _texts(q)))
    scores = dict(zip(pairs, reranker.score(pairs))) if pairs else {}

    def relevance(q: Quote, ask: str) -> float:
        said = _said(q.speaker, q.sentence)
        best = scores[ask, said]
        if q.heading and (under := scores[ask, f"{q.heading} {said}"]) > scores[ask, q.heading]:
            best = max(best, under)
        if q.before and (alone := scores[ask, q.before]) < ANSWERS and (after := scores[ask, f"{q.before} {said}"]) > alone:
            best = max(best, after)
        return best

    best = [max(relevance(q, ask) for ask in asked + (dated if dates else [])) for q, dates in zip(quotes, on_date)]
    pointed = [dates or bool(q.heading and names_section(question, q.heading)) for q, dates in zip(quotes, on_date)]
    scored = (replace(q, score=score, pointed=point) for q, score, point in zip(quotes, best, pointed))
    return followed_up(sorted(scored, key=lambda q: -q.score), reranker)


def asked_dates(question: str, today: str | None) -> list[DateHint]:
    """The dates a question names ("two weeks ago", "in February"), resolved against its date (ISO; none without
    one) by the calendar rules of `normalize_dates` (the extractive mode has no model to resolve more)."""
    return resolve_relative_dates(question, date.fromisoformat(today[:10])) if today else []


def undated_question(question: str, hints: list[DateHint]) -> str:
    """The question without the expressions of its dates.

    >>> undated_question("Which book did I finish a week ago?", asked_dates("Which book did I finish a week ago?", "2023-02-07"))
    'Which book did I finish?'
    """
    for hint in hints:
        question = re.sub(re.escape(hint.expression), "", question, flags=re.IGNORECASE)
    return re.sub(r"\s+([?.!,;:])", r"\1", " ".join(question.split()))


def dated_as_asked(quote: Quote, hints: list[DateHint], today: str) -> bool:
    """Whether the quote's session date, or a date its words name, falls within a date the question names (`hints`):
    the question may date what happened or when it was told ("I mentioned cooking something a couple of days ago").
    A day named by its distance from the question's date ("two weeks ago") is taken as precise to a quarter of that
    distance (two weeks ago: 3 days either side; a couple of days ago: that day)."""
    said = date.fromisoformat(quote.date[:10])
    spans = [(said, said), *((hint.start, hint.end) for hint in said_dates(quote.sentence, quote.date))]
    asked_on = date.fromisoformat(today[:10])
    for hint in hints:
        slack = timedelta(days=abs((asked_on - hint.start).days) // 4 if hint.point else 0)
        # Differences of dates, not dates moved by the slack: those may fall off the calendar (year 1, year 9999).
        if any(start - hint.end <= slack and hint.start - end <= slack for start, end in spans):
            return True
    return False


def names_section(question: str, heading: str) -> bool:
    """Whether a heading is the label of a section (LABEL_WORDS words or fewer, "Chorus:", "Step 2:") whose every
    word the question says: the lines under it are what the question asks for, though they may not say a word of it.

    >>> names_section("What was the chord progression for the chorus?", "Chorus:")
    True
    >>> names_section("What was the chord progression for the chorus?", "Here are the chords:")
    False
    """
    label, said = re.findall(r"[a-z0-9]+", heading.lower()), set(re.findall(r"[a-z0-9]+", question.lower()))
    return 0 < len(label) <= LABEL_WORDS and set(label) <= said


def followed_up(quotes: list[Quote], reranker) -> list[Quote]:
    """Scored quotes (best first) with the sentences that follow up the best one raised to its score: each pair of
    neighbouring disclosed sentences of a message said after the best quote's (a message's only sentence alone) is
    read with the best quote as the query, and the sentences of a pair scoring FOLLOWS or more are `Quote.follows`.
    A change is told in the words of what it changes, not of the question ("I switched from the food bank to the
    animal shelter." for "Where do I volunteer now?"), often over two sentences ("I quit Bean There. I'm opening my
    own bakery called Crumb and Co in March!"); raised, it is quoted, and as the latest message, first."""
    if not quotes or quotes[0].score < RELEVANT:
        return quotes
    best = quotes[0]
    pairs = _neighbours([q for q in quotes if q.said > best.said])
    if not pairs:
        return quotes
    scores = reranker.score([(_texts(best)[0], _said(pair[0].speaker, " ".join(q.sentence for q in pair))) for pair in pairs])
    follows = {q for pair, score in zip(pairs, scores) if score >= FOLLOWS for q in pair if q.score < best.score}
    raised = (replace(q, score=best.score, follows=True) if q in follows else q for q in quotes)
    return sorted(raised, key=lambda q: -q.score)


def _neighbours(quotes: list[Quote]) -> list[list[Quote]]:
    """The pairs of neighbouring quotes of each message, in the order it says them; a message's only quote alone."""
    messages: dict[tuple, list[Quote]] = {}
    for q in sorted(quotes, key=lambda q: (*q.said, q.at)):
        messages.setdefault(q.said, []).append(q)
    return [parts[i:i + 2] for parts in messages.values() for i in range(max(len(parts) - 1, 1))]


def _said(speaker: str, text: str) -> str:
    """What the cross-encoder reads of words a named `speaker` said: their name before them."""
    return f"{speaker}: {text}" if speaker else text


def _texts(quote: Quote) -> list[str]:
    """What `scored_quotes` reads of a quote: the quote (`_said`), then each context it has (its heading, the
    sentence before it) alone and the quote after it."""
    said = _said(quote.speaker, quote.sentence)
    return [said, *(text for context in (quote.heading, quote.before) if context for text in (context, f"{context} {said}"))]


def request(question: str) -> str:
    """What a question asks: the words after its last lead-in ("Can you remind me of", "I was wondering if you
    could"), else the whole question. The cross-encoder reads a question's preamble ("I'm looking back at our
    previous conversation about language apps.") as what to find, and scores the item of a list that answers far
    below the sentence that introduces the list.

    >>> request("I'm looking back at our talk about apps. Can you remind me of the one that uses mnemonics?")
    'the one that uses mnemonics?'
    >>> request("Where do I live now?")
    'Where do I live now?'
    """
    found = list(_LEAD_IN.finditer(question))
    return " ".join(question[found[-1].end():].split()) if found else question


def quoted_reply(quotes: list[Quote], question: str = "") -> str:
    """The extractive reply from scored quotes (best first): the `chosen` ones under QUOTED (UNCLEAR when none of
    them is `asserted`), one line per message, the latest message first, its sentences in the order it says them;
    when they come from several messages, each line is marked "latest" or "earlier" (a question about the past,
    "where did I live before?", finds its answer among the earlier ones). Asked whether the user did one thing, a
    line after the heading says "Yes" or "No" when a quote that reaches ANSWERS says so in so many words
    (`apdmem.nodes.yesno.verdict`). NOT_FOUND when none scores RELEVANT, naming the sessions whose sentences came
    closest (`closest`)."""
    quoted = chosen(quotes, question)
    if not quoted:
        return "\n".join([NOT_FOUND, *closest(quotes)])
    messages: dict[tuple, list[Quote]] = {}
    for q in quoted:
        messages.setdefault(q.said, []).append(q)
    lines = [QUOTED if any(asserted(q) for q in quoted) else UNCLEAR]
    if (decided := verdict(question, quoted)) and decided[1].score >= ANSWERS:
        lines.append(f"{decided[0]}, according to what you said on {decided[1].date[:10]}.")
    for said, parts in messages.items():
        first = parts[0]
        when = (("latest, " if said == quoted[0].said else "earlier, ") if len(messages) > 1 else "") + first.date[:10]
        lines.append(f"- {when}, {first.who}: " + " … ".join(f'"{q.sentence}"{beside(q.sentence, q.date)}' for q in parts))
    return "\n".join(lines)


def asserted(quote: Quote) -> bool:
    """Whether a quote lets the reply assert: it reaches ANSWERS, or TELLS when the question points at it
    (`Quote.pointed`)."""
    return quote.score >= (TELLS if quote.pointed else ANSWERS)


def chosen(quotes: list[Quote], question: str = "") -> list[Quote]:
    """The quotes a reply to `question` shows: the QUOTES best of those scoring at least RELEVANT (the ones that
    answer the question), the latest message first, a message's sentences in their order; none when the question
    asks for a kind of value (`asked_value`) none of them says (`says_value`): "What brand of dog food does Biscuit
    eat?" is not answered by "Biscuit loves his food."."""
    answering = [q for q in quotes if q.score >= RELEVANT][:QUOTES]
    kind = asked_value(question)
    if kind and not any(says_value(kind, q.sentence, question) for q in answering):
        return []
    return sorted(answering, key=lambda q: (*q.said, -q.at), reverse=True)


def asked_value(question: str) -> str | None:
    """The kind of value a question asks for when it must be said to be known: "measure", "colour" or "name"; None
    for any other question.

    >>> asked_value("How much did I pay for the blue bike?"), asked_value("What is my dentist's name?")
    ('measure', 'name')
    >>> asked_value("How many bikes do I have?") is None  # a count: sentences without a number add up to it
    True
    """
    return next((kind for kind, asks in _ASKED_VALUES.items() if asks.search(question)), None)


def says_value(kind: str, sentence: str, question: str) -> bool:
    """Whether a sentence says a value of this kind: a number or a duration ("a year") for a measure, a colour, or for
    a name a word after its first that `names` something the question does not say ("Alex's" is "Alex").

    >>> says_value("name", "My dentist is Dr. Okafor.", "What is my dentist's name?")
    True
    >>> says_value("name", "Her name is Alex and she plays violin.", "What is Alex's last name?")
    False
    >>> says_value("name", "My dentist appointment is on Tuesday.", "What is my dentist's name?")
    False
    """
    if kind == "measure":
        return bool(_MEASURE.search(sentence))
    if kind == "colour":
        return bool(_COLOUR.search(sentence))
    asked = {bare(word).lower() for word in _WORD.findall(question)}
    return any(names(word) and bare(word).lower() not in asked for word in _WORD.findall(sentence)[1:])


def closest(quotes: list[Quote]) -> list[str]:
    """A line naming, by their dates, the sessions of the QUOTES best-scoring sentences, best first (the trace names
    their ids); none when nothing was disclosed."""
    dates = list(dict.fromkeys(q.date[:10] for q in quotes))[:QUOTES]
    return [f"{CLOSEST} " + ", ".join(dates) + "."] if dates else []
