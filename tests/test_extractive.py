"""The embedded default has no generative model (chat_model="local"): L1 and L2 are sentences of the session
itself, the answer quotes the disclosed evidence with its date, and the output says which mode answered.
Real models and a real haystack (the LongMemEval-S item shipped with the package); nothing is scripted."""

import doctest
import re
from dataclasses import replace

import pytest
from conftest import make_session
from graph_helpers import clean_environment, run_graph

from apdmem.errors import ConfigError
from apdmem.graph import Context
from apdmem.graph.state import Evidence
from apdmem.memory.layers import key_sentences, one_line, sentences, turn_sentences
from apdmem.memory.records import Turn
from apdmem.memory.time_expressions import dated, undated
from apdmem.models import LOCAL_CHAT, get_chat_model, get_reranker, is_embedded, is_generative
from apdmem.models.local import package_dir
from apdmem.nodes import answer
from apdmem.nodes.answer import (ANSWERS, CLOSEST, FOLLOWS, NOT_FOUND, QUOTED, QUOTES, RELEVANT, UNCLEAR, Quote, chosen,
                                 extractive_answer, followed_up, quoted_reply, request, scored_quotes)
from apdmem.tools import read_raw

QUOTE = re.compile(r'^- (?:(?:latest|earlier), )?(\d{4}-\d\d-\d\d), (.+?) said: (".*)$', re.M)  # one line per message
# A quoted sentence, and the dates its words name beside it ("(7 May 2023)"); a message's sentences: "A" … "B".
SENTENCE = re.compile(r'"(.+?)"(?: \([^()]*\))?(?= … "|$)')


def quoted(reply: str) -> list[tuple[str, str, str]]:
    """(date, who, sentence) of every sentence a reply quotes."""
    return [(date, who, sentence) for date, who, said in QUOTE.findall(reply) for sentence in SENTENCE.findall(said)]


@pytest.fixture(autouse=True)
def environment(monkeypatch):
    clean_environment(monkeypatch)


def test_local_names_no_generative_model_and_local_smollm2_the_embedded_one():
    assert get_chat_model("local") is None and get_chat_model(None) is None
    assert not is_generative("local") and is_generative(LOCAL_CHAT) and is_generative("openai:gpt-4.1-mini")
    assert is_embedded("local") and is_embedded(LOCAL_CHAT) and not is_embedded("openai:gpt-4.1-mini")
    assert type(get_chat_model(LOCAL_CHAT)).__name__ == "LocalChatModel"  # the test extra installs local-chat
    with pytest.raises(ConfigError, match=r"unknown embedded chat model 'local:gpt2'.*'local:smollm2'"):
        get_chat_model("local:gpt2")
    with pytest.raises(ConfigError, match=r"package 'not_installed_here' is not installed: pip install 'apdmem\[local-chat\]'"):
        package_dir("not_installed_here", extra="local-chat")


def test_sentences_and_the_user_salient_ones():
    text = "Hi there!  I adopted a beagle named Biscuit on March 3.\nShe is 10 weeks old. Is that young?"
    assert sentences(text) == ["Hi there!", "I adopted a beagle named Biscuit on March 3.", "She is 10 weeks old.", "Is that young?"]
    # An item's number starts its sentence: a list, a chess game, "No. 5"; a number that ends a sentence still ends it.
    assert sentences("Try these:\n1. Duolingo. 2. Memrise uses mnemonics.\n28. Kg3 would be my move.") == [
        "Try these:", "1. Duolingo.", "2. Memrise uses mnemonics.", "28. Kg3 would be my move."]
    # (only a capital after the number ends a sentence: "26. hxg4" never did)
    assert sentences("25. g4 hxg4 26. hxg4 Rh8 27. Kg2 Bd5+ 28. Kg3 Be6") == ["25. g4 hxg4 26. hxg4 Rh8", "27. Kg2 Bd5+", "28. Kg3 Be6"]
    assert sentences("I live at No. 5 Elm Road. I am 32. My son is 4. We like Vol. 2 best.") == [
        "I live at No. 5 Elm Road.", "I am 32.", "My son is 4.", "We like Vol. 2 best."]
    long_turn = Turn("user", " ".join(f"Sentence number {i} is here." for i in range(400)))
    notes = turn_sentences(long_turn)
    assert sum(map(len, notes)) <= 2000 and all(n in long_turn.content for n in notes)
    assert turn_sentences(Turn("user", "x" * 5000 + " tail")) == ["x" * 2000]  # one overlong word: cut, still its text


def test_extractive_layers_are_sentences_of_the_session_itself(haystack):
    """Over all 50 sessions of a real history: every L1 fact is a sentence the user said, every L2 note a
    sentence of its own turn (with the dates its time expressions name beside it), every turn has notes, and no
    model is called."""
    item, memory = haystack
    calls, dated_notes = memory.usage.calls, 0
    for session in item.sessions:
        facts, notes = memory.facts(session.session_id), memory.notes(session.session_id)
        said = [one_line(t.content) for t in session.turns if t.role == "user"]
        assert facts == [dated(f, session.date.date()) for f in key_sentences(session)] and len(facts) <= 25
        assert all(any(undated(fact) in text for text in said) for fact in facts), session.session_id
        assert sorted(notes) == list(range(len(session.turns)))
        for turn, lines in notes.items():
            assert lines and all(undated(line) in one_line(session.turns[turn].content) for line in lines), (session.session_id, turn)
            assert all(dated(undated(line), session.date.date()) == line for line in lines)
            dated_notes += sum(line != undated(line) for line in lines)
        l1 = memory.read(session.session_id, "L1").splitlines()
        assert l1[2:] == [f"- {fact}" for fact in facts]
    assert dated_notes > 0  # the history says "yesterday", "last week" ... somewhere
    assert sum(1 for s in item.sessions if memory.facts(s.session_id)) >= 45  # almost every session says something
    assert memory.usage.calls == calls == 0


def test_the_graph_answers_by_quoting_the_evidence_with_its_date(haystack):
    item, memory = haystack
    final, events = run_graph(item.question, Context(), item.question_date.isoformat(), memory=memory)
    assert final["answer_mode"] == "extractive" and final["answer"].startswith(QUOTED + "\n")
    quotes = quoted(final["answer"])
    assert 1 <= len(quotes) <= QUOTES and len(QUOTE.findall(final["answer"])) == final["answer"].count("\n")
    sessions = {s.date.strftime("%Y-%m-%d"): s for s in item.sessions}
    for date, who, sentence in quotes:  # each quote is in a session of that date, said by who it names
        turn = next(t for s in item.sessions if f"{s.date:%Y-%m-%d}" == date for t in s.turns if sentence in one_line(t.content))
        assert who == ("you" if turn.role == "user" else f"the {turn.role}")
    assert date in sessions
    # The evidence turn of the benchmark ("I brought 7 shirts ...", reference answer 7) is quoted.
    gold = [one_line(t.content) for s in item.sessions if s.session_id in item.answer_session_ids for t in s.turns if t.has_answer]
    assert any(sentence in text and "7 shirts" in sentence for _, _, sentence in quotes for text in gold)
    assert sum(u.get("calls", 0) for u in final["usage"].values()) == 0 and events[0]["event"] == "search"


def test_a_note_no_one_said_is_never_quoted(make_memory, history):
    memory = make_memory()
    memory.ingest(history)
    invented = Evidence(session_id="s-dog", date="2024-03-10T18:30:00", layer="L1", turn=None,
                        text="The user's beagle sees Dr Okafor tomorrow at 9am in the city of Ashwood.")
    reply = extractive_answer("When is my puppy's first vet appointment?", [invented, *read_raw(memory, "s-dog", [2])],
                              memory, get_reranker())
    assert reply.startswith(QUOTED) and "Okafor" not in reply and "Ashwood" not in reply
    assert ("2024-03-10", "you", "Her first vet appointment with Dr. Alvarez is on Friday.") in quoted(reply)
    assert extractive_answer("When is my puppy's first vet appointment?", [invented], memory, get_reranker()) == NOT_FOUND
    assert extractive_answer("Anything?", [], memory, get_reranker()) == NOT_FOUND
    # Nothing disclosed answers: not in memory, naming the conversation read by its date.
    unrelated = extractive_answer("What is the boiling point of mercury in kelvin?", read_raw(memory, "s-bread"), memory, get_reranker())
    assert unrelated == f"{NOT_FOUND}\n{CLOSEST} 2024-03-18."


# --- Latest first, and only what answers (issue 29) ----------------------------------------------------------------

BIKE = [
    make_session("s-bike1", "2023-01-10T10:00", ["I bought a red bike last weekend, a Trek road bike.", "Nice! Where will you ride it?",
                                                 "Mostly along the river path to work.", "That's a lovely commute."]),
    make_session("s-soup", "2023-03-05T10:00", ["Can you suggest a recipe for lentil soup?", "Sure: lentils, carrots, onion and cumin.",
                                                "I'll make it tonight for my roommate Sam.", "Enjoy!"]),
    make_session("s-bike2", "2023-05-02T10:00", ["I sold the red bike and got a blue one, a Canyon gravel bike.",
                                                 "Great upgrade! Why gravel?", "I want to ride the forest trails on weekends.",
                                                 "Gravel bikes are perfect for that."]),
]


def quote(sentence: str, date: str, score: float, *, session: str = "s1", turn: int = 0, at: int = 0) -> Quote:
    return Quote(sentence, session, f"{date}T10:00:00", turn, at, "", "user", score)


def test_quotes_that_answer_come_latest_first_one_line_per_message():
    old = quote("I live in Porto near the river.", "2023-01-12", 3.0)
    new = quote("We finally moved to Lisbon last weekend.", "2023-05-20", RELEVANT + 0.5, session="s3")
    also = quote("The apartment is in Alvalade.", "2023-05-20", RELEVANT + 0.1, session="s3", at=45)
    noise = quote("Boxes everywhere, but it is lovely.", "2023-06-01", RELEVANT - 0.1, session="s4")
    reply = quoted_reply([old, new, also, noise])  # best first, as `scored_quotes` gives them
    assert reply.splitlines() == [QUOTED, '- latest, 2023-05-20, you said: "We finally moved to Lisbon last weekend." '
                                          '(13 May to 14 May 2023) … "The apartment is in Alvalade."',
                                  '- earlier, 2023-01-12, you said: "I live in Porto near the river."']
    assert chosen([old, new, also, noise]) == [new, also, old]  # the one below RELEVANT is left out
    assert quoted_reply([old]) == QUOTED + '\n- 2023-01-12, you said: "I live in Porto near the river."'  # one message: no mark
    # Only quotes the cross-encoder does not judge relevant (below ANSWERS): shown as the closest, hedged.
    assert quoted_reply([new, also]).splitlines()[0] == UNCLEAR
    # Nothing answers: the memory does not hold it, and the sessions that came closest are named by their dates.
    assert quoted_reply([noise, replace(old, score=RELEVANT - 2)]) == f"{NOT_FOUND}\n{CLOSEST} 2023-06-01, 2023-01-12."
    assert quoted_reply([]) == NOT_FOUND


def test_a_question_asking_for_a_measure_a_colour_or_a_name_is_not_answered_by_quotes_that_say_none():
    """A relevance model finds "We bought a sofa for the new flat." relevant to "How much did the sofa cost?"; what
    it asks for, a measure, is in no quote, so the memory does not hold it. A count is not a measure: sentences
    without a number add up to it."""
    sofa = Quote("We bought a sofa for the new flat.", "s-sofa", "2023-02-04", 0, 0, "", "user", score=2.0)
    asked = {"How much did the sofa cost?": False, "What colour is the sofa?": False, "Who sold us the sofa?": False,
             "How many sofas do we have?": True, "Did we buy a sofa?": True}
    for question, answered in asked.items():
        assert (chosen([sofa], question) == [sofa]) is answered, question
        assert (quoted_reply([sofa], question) == f"{NOT_FOUND}\n{CLOSEST} 2023-02-04.") is not answered, question
    said = [replace(sofa, sentence=text, at=40) for text in ("It was 450 euros in the sale.", "It is dark green velvet.",
                                                             "We got it from Marta, a neighbour.")]
    for (question, _), quote in zip(asked.items(), said):
        assert chosen([sofa, quote], question) == [sofa, quote], question
    # A name is a capitalized word after the first that the question does not say.
    assert not answer.says_value("name", "Her name is Alex and she paints.", "What is Alex's last name?")
    assert answer.says_value("name", "Her name is Alex Moreau.", "What is Alex's last name?")
    assert doctest.testmod(answer).failed == 0


def test_a_later_message_that_follows_up_the_best_quote_takes_its_score():
    """An update is worded like what it updates, not like the question, and often over two sentences: read with the
    best quote as the query, the pair of them follows it up, and each takes the best quote's score."""
    def said(sentence, day, turn, at=0, score=-11.0):
        return Quote(sentence, f"s-{day}", day, turn, at, "", "user", score)

    best = said("I coach the under-nine netball team at my daughter's school on Saturday mornings.", "2022-10-01", 0, score=1.5)
    before = said("I bought new trainers for the netball season.", "2022-09-01", 0, score=-9.0)  # earlier: never raised
    handed = said("I handed the netball team over to another parent in January.", "2023-03-05", 0)
    instead = said("I referee hockey matches at the sports club instead.", "2023-03-05", 0, at=62)
    other = said("The roast chicken recipe worked perfectly.", "2023-03-05", 2)
    reranker = get_reranker()
    together, alone = reranker.score([(best.sentence, f"{handed.sentence} {instead.sentence}"), (best.sentence, instead.sentence)])
    assert together >= FOLLOWS > alone  # the change reads as one with the sentence before it
    raised = followed_up([best, before, handed, instead, other], reranker)
    assert [(q.sentence, q.score, q.follows) for q in raised[:3]] == [(best.sentence, 1.5, False), (handed.sentence, 1.5, True),
                                                                        (instead.sentence, 1.5, True)]
    assert raised[3:] == [before, other]
    assert QUOTED + '\n- latest, 2023-03-05, you said: "I handed' in quoted_reply(raised)
    # Nothing answers: nothing to follow up.
    weak = [replace(best, score=RELEVANT - 1), handed, instead]
    assert followed_up(weak, reranker) == weak


def test_a_small_memory_is_read_whole_and_the_reply_leads_with_what_changed_last(make_memory):
    memory = make_memory()
    memory.ingest(BIKE)
    final, events = run_graph("Do I still have my red bike?", Context(), "2023/06/01 (Thu) 10:00", memory=memory)
    assert set(final["opened"]) == {"s-bike1", "s-soup", "s-bike2"}  # three sessions: every one is opened
    lines = final["answer"].splitlines()
    assert lines[0] == QUOTED and lines[1].startswith('- latest, 2023-05-02, you said: "I sold the red bike')
    assert lines[2].startswith('- earlier, 2023-01-10, you said: "I bought a red bike') and len(lines) == 3
    # The trace shows each sentence's score and whether it was quoted.
    (traced,) = [e for e in events if e["event"] == "quotes"]
    assert traced["threshold"] == RELEVANT and [q["score"] for q in traced["quotes"]] == sorted(
        (q["score"] for q in traced["quotes"]), reverse=True)
    assert {q["sentence"] for q in traced["quotes"] if q["quoted"]} == {q["sentence"] for q in traced["quotes"]
                                                                        if q["score"] >= RELEVANT} and len(lines) - 1 <= QUOTES
    # Something never said: not in memory, naming the closest sessions read.
    final, _ = run_graph("What is my sister's name?", Context(), "2023/06/01 (Thu) 10:00", memory=memory)
    assert final["answer"].startswith(NOT_FOUND + "\n" + CLOSEST) and "2023-03-05" in final["answer"]


def test_apdmem_ask_prints_each_sentences_score_and_whether_it_was_quoted(make_memory, capsys):
    from apdmem.cli import ask
    from apdmem.graph import build_graph

    memory = make_memory()
    memory.ingest(BIKE)
    final = ask("Do I still have my red bike?", "2023-06-01", build_graph(memory=memory), Context())
    lines = capsys.readouterr().out.splitlines()
    at = lines.index(f"  [answer] the best sentences disclosed, scored against the question (quoted from {RELEVANT:+.1f}):")
    scored = [re.match(r"^ +([+-]\d+\.\d\d) (quoted  |left out) (\d{4}-\d\d-\d\d) (\S+): (.*)$", line) for line in lines[at + 1:]]
    assert scored and all(scored)
    for match in scored:  # quoted exactly when it scores RELEVANT or more and is among the QUOTES best
        score, mark, _, session, sentence = match.groups()
        assert session in final["opened"] and (mark == "quoted  ") == (f'"{sentence}"' in final["answer"])
        assert mark == "left out" or float(score) >= RELEVANT
    assert "sold the red bike" in scored[0].group(5) or "sold the red bike" in scored[1].group(5)


# --- What the assistant said: a list item, read under its heading and against what the question asks ------------

APPS = [
    make_session("s-apps", "2023-05-25T10:00", [
        "I practise Japanese with my co-workers. Do you have any recommendations for language apps?",
        "Sure, there are several good language learning apps, depending on your goals:\n\n"
        "1. Duolingo - Short gamified exercises to learn new words and grammar every day.\n"
        "2. Memrise - Memrise uses mnemonics to help learners memorize words and phrases.\n"
        "3. Babbel - Personalized lessons in bite-sized chunks with real-world conversations.",
        "Thanks, I'll try one of them on my commute.", "Have fun with it!"]),
    make_session("s-song", "2023-05-28T10:00", [
        "Write a short sad song with chords.",
        "Here is a sad song for you:\n\nVerse:\nAm F C G\nThe rain keeps falling on my street\n\nChorus:\nDm G C Am\n"
        "You left me in the cold", "Thank you, it's lovely.", "You're welcome!"]),
]


def test_a_list_item_the_assistant_gave_is_quoted_when_a_question_recalls_the_conversation(make_memory):
    """The cross-encoder reads a question's preamble as what to find: against the whole question, the sentence that
    introduces the list outscores the item that answers. Read against what the question asks (`request`) and in
    under its heading (`Quote.heading`), the item comes first and is asserted."""
    memory = make_memory()
    memory.ingest(APPS)
    question = ("I wanted to follow up on our previous conversation about language learning apps. You mentioned a few "
                "options, and I was wondering if you could remind me of the one that uses mnemonics to help learners memorize words?")
    assert request(question) == "the one that uses mnemonics to help learners memorize words?"
    quotes = scored_quotes(question, read_raw(memory, "s-apps"), memory, get_reranker())
    assert quotes[0].sentence == "2. Memrise - Memrise uses mnemonics to help learners memorize words and phrases."
    assert quotes[0].role == "assistant" and quotes[0].score >= ANSWERS
    assert quotes[0].heading == "Sure, there are several good language learning apps, depending on your goals:"
    reply = extractive_answer(question, read_raw(memory, "s-apps"), memory, get_reranker())
    assert reply.startswith(QUOTED + "\n") and ("2023-05-25", "the assistant", quotes[0].sentence) in quoted(reply)
    # A line of a song names nothing itself: it is read under its heading ("Chorus:").
    question = "I'm looking back at the sad song you wrote me. Can you remind me what the chords of the chorus were?"
    quotes = scored_quotes(question, read_raw(memory, "s-song"), memory, get_reranker())
    chords = next(q for q in quotes if q.sentence == "Dm G C Am")
    assert chords.heading == "Chorus:" and quotes.index(chords) < QUOTES


# --- An item's number, the sentence before, yes or no --------------------------------------------------------------

CHESS = [
    make_session("s-chess", "2023-05-21T10:00", [
        "Let's play chess, you're white. 1. e4 e5 2. Nf3 Nc6 3. Bb5 a6", "4. Ba4 would be my move.",
        "I play 4... Nf6. Your move.", "5. O-O is my choice here, castling to keep the king safe."]),
    make_session("s-trip", "2023-05-30T10:00", [
        "I'm planning a trip to Asia and I'm considering visiting Japan again.", "Japan is wonderful in autumn.",
        "I visited the Fushimi Inari Shrine when I was in Japan last spring. I spent two weeks traveling solo around "
        "the country and it was an incredible experience.", "That sounds amazing! Solo travel there is easy."]),
    make_session("s-soup", "2023-03-05T10:00", ["Can you suggest a recipe for lentil soup?", "Sure: lentils, carrots, onion and cumin.",
                                                "I'll make it tonight for my roommate Sam.", "Enjoy!"]),
]


def test_a_numbered_move_is_quoted_with_its_number(make_memory):
    """An item's number starts its sentence ("28. Kg3 would be my move."), in the reply and in the L2 notes."""
    memory = make_memory()
    memory.ingest(CHESS)
    final, _ = run_graph("I'm looking back at our chess game. What was the move you made after 3. Bb5 a6?", Context(),
                         "2023/06/01 (Thu) 10:00", memory=memory)
    assert ("2023-05-21", "the assistant", "4. Ba4 would be my move.") in quoted(final["answer"])
    assert memory.notes("s-chess", [1]) == {1: ["4. Ba4 would be my move."]}


def test_a_sentence_is_read_after_the_one_before_it_when_that_one_names_its_subject(make_memory):
    """"I spent two weeks traveling solo around the country" says where only after the sentence before it; read after
    it, it answers and the reply asserts. A sentence after one that answers alone does not take its score."""
    memory = make_memory()
    memory.ingest(CHESS)
    question = "How long was I in Japan for?"
    quotes = scored_quotes(question, read_raw(memory, "s-trip"), memory, get_reranker())
    weeks = next(q for q in quotes if q.sentence.startswith("I spent two weeks"))
    assert weeks.before.startswith("I visited the Fushimi Inari Shrine") and weeks.score >= ANSWERS
    final, _ = run_graph(question, Context(), "2023/06/01 (Thu) 10:00", memory=memory)
    assert final["answer"].startswith(QUOTED + "\n") and "two weeks" in final["answer"]
    # The sentence before answers alone: the one after it is scored as itself.
    question = "When did I visit the Fushimi Inari Shrine?"
    quotes = scored_quotes(question, read_raw(memory, "s-trip"), memory, get_reranker())
    visited, weeks = (next(q for q in quotes if q.sentence.startswith(start)) for start in ("I visited", "I spent"))
    assert visited.score >= ANSWERS and weeks.before == visited.sentence
    assert weeks.score == pytest.approx(get_reranker().score([(question, weeks.sentence)])[0], abs=1e-4)


BOOKS = [
    make_session("s-books1", "2023-01-21T10:00", [
        "I've been meaning to get back to 'Dune' by Frank Herbert, which I put down. Do you think I'll finish reading "
        "'Dune' by Frank Herbert before the book club?", "If you read on your commute, you easily will.",
        "I'm planning to finish reading 'Hyperion' by Dan Simmons this weekend.", "Good luck with it!"]),
    make_session("s-soup", "2023-03-05T10:00", ["Can you suggest a recipe for lentil soup?", "Sure: lentils, carrots, onion and cumin.",
                                                "I'll make it tonight for my roommate Sam.", "Enjoy!"]),
    make_session("s-books2", "2023-03-30T10:00", [
        "I loved 'Dune'! I finally finished reading 'Dune' by Frank Herbert last week, what a world.",
        "Glad you enjoyed it! Next, try 'Children of Dune'.",
        "I haven't finished 'The Silmarillion' by Tolkien, it is too dense for me.", "It is a demanding read."]),
]


@pytest.mark.parametrize("question, said", [
    ("Did I finish reading 'Dune' by Frank Herbert?", "Yes, according to what you said on 2023-03-30."),
    ("Did I finish 'The Silmarillion' by Tolkien?", "No, according to what you said on 2023-03-30."),
    ("Did I finish reading 'Hyperion' by Dan Simmons?", None),  # only planned
    ("Did I finish reading 'Dune' or 'Hyperion'?", None),  # not one action
])
def test_a_question_whether_the_user_did_something_is_answered_yes_or_no_only_by_what_they_said(make_memory, question, said):
    memory = make_memory()
    memory.ingest(BOOKS)
    final, _ = run_graph(question, Context(), "2023/06/01 (Thu) 10:00", memory=memory)
    lines = final["answer"].splitlines()
    assert lines[0] == QUOTED and quoted(final["answer"])
    assert (lines[1] if not lines[1].startswith("- ") else None) == said


# --- What the question points at: a date, a section ------------------------------------------------------------------

READING = [
    make_session("s-circe", "2023-01-10T10:00", ["I finished 'Circe' by Madeline Miller and loved the ending.", "Great pick!"]),
    make_session("s-nightingale", "2023-01-31T10:00", [
        "I just finished a historical fiction novel, 'The Nightingale' by Kristin Hannah, today and I'm in the mood "
        "for something similar.", "Try 'The Alice Network' next."]),
    make_session("s-cake", "2023-02-05T10:00", [
        "By the way, I just baked a chocolate cake for my friend's birthday party last weekend that turned out amazing.",
        "Happy baking!"]),
]


def test_a_quote_dated_as_the_question_dates_what_it_asks_is_asserted(make_memory):
    """The cross-encoder sees no date beside a sentence and holds "a week ago" against it; the quote dated a week
    before the question is read against the question without its date, and the reply asserts it. A quote the
    question dates is asserted from TELLS on; a quote of another date is not pointed at."""
    memory = make_memory()
    memory.ingest(READING)
    question, asked = "Which book did I finish a week ago?", "2023/02/07 (Tue) 10:00"
    assert answer.undated_question(question, answer.asked_dates(question, "2023-02-07")) == "Which book did I finish?"
    final, _ = run_graph(question, Context(), asked, memory=memory)
    assert final["answer"].startswith(QUOTED + "\n") and "The Nightingale" in final["answer"]
    evidence = read_raw(memory, "s-nightingale") + read_raw(memory, "s-circe")
    quotes = {q.sentence[:12]: q for q in scored_quotes(question, evidence, memory, get_reranker(), today="2023-02-07")}
    assert quotes["I just finis"].pointed and not quotes["I finished '"].pointed
    dated = get_reranker().score([(question, quotes["I just finis"].sentence)])[0]
    assert dated < ANSWERS <= quotes["I just finis"].score  # with its date, the question finds it less relevant
    # "a couple of days ago" dates when the user told it (the cake was baked the weekend before).
    question = "I mentioned cooking something for my friend a couple of days ago. What was it?"
    final, _ = run_graph(question, Context(), asked, memory=memory)
    assert final["answer"].startswith(QUOTED + "\n") and "chocolate cake" in final["answer"]
    cake = scored_quotes(question, read_raw(memory, "s-cake"), memory, get_reranker(), today="2023-02-07")[0]
    assert cake.pointed and answer.TELLS <= cake.score < ANSWERS and answer.asserted(cake)
    # A count is not told by one quote of its time; nor is a question whose date is far from every quote's pointed at.
    assert not any(q.pointed for q in scored_quotes("How many books did I finish in the past two weeks?", evidence, memory,
                                                    get_reranker(), today="2023-02-07"))
    # Two weeks ago is as precise as 3 days either side: the 10 January session is 4 days from the 24th.
    assert not any(q.pointed for q in scored_quotes("Which book did I finish two weeks ago?", evidence, memory,
                                                    get_reranker(), today="2023-02-07"))


SONGS = [make_session("s-songs", "2023-05-28T10:00", [
    "Write a sad song with chords.",
    "Here is a sad song for you:\n\nVerse:\nAm F C G\nThe rain keeps falling on my street\n\nChorus:\nDm G C Am\n"
    "You left me in the cold", "Make it more romantic.",
    "Sure, here is a more romantic one:\n\nVerse:\nC G Am F\nYour smile lights up the morning\n\nChorus:\nF G C Em\n"
    "You are the one I need"])]


def test_a_line_under_a_section_the_question_names_is_asserted(make_memory):
    """A line of chords says nothing of a chorus: the cross-encoder scores it below ANSWERS even under its heading.
    Under a section label the question names ("Chorus:"), it is what the question asks for, and the reply asserts
    it, the latest song's first; the lines under "Verse:" are not pointed at."""
    memory = make_memory()
    memory.ingest(SONGS)
    question = ("I'm looking back at the two sad songs you wrote me. Can you remind me what the chords of the chorus in "
                "the second song were?")
    quotes = {q.sentence: q for q in scored_quotes(question, read_raw(memory, "s-songs"), memory, get_reranker())}
    assert quotes["F G C Em"].pointed and quotes["Dm G C Am"].pointed and max(q.score for q in quotes.values()) < ANSWERS
    assert not quotes["Am F C G"].pointed and not quotes["C G Am F"].pointed
    reply = extractive_answer(question, read_raw(memory, "s-songs"), memory, get_reranker())
    assert reply.splitlines()[:2] == [QUOTED, '- latest, 2023-05-28, the assistant said: "F G C Em"']
    assert answer.names_section("What was the third step?", "Step 3:") is False  # "third" is not "3"
    assert answer.names_section("What did step 3 say?", "Step 3:") and not answer.names_section("What did step 3 say?", "Step 4:")
