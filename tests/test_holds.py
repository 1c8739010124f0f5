"""Whether the memory holds the answer (`apdmem.nodes.holds`): a question about something the user never said, close
to what they said, is answered "not in memory", on a real history (the LongMemEval-S item shipped with the package,
50 sessions) with the embedded models; the same question about what they said is answered from it."""

import re

import pytest
from conftest import make_session
from graph_helpers import ScriptedChatModel, clean_environment, run_graph

from apdmem.graph import Context, Settings
from apdmem.models import get_reranker
from apdmem.nodes.answer import CLOSEST, NOT_FOUND, QUOTED
from apdmem.nodes.holds import KNOWN_VOCABULARY, NOT_HELD, UNSAID_BOUND, holding
from apdmem.nodes.reckon import COMPUTED

ASKED = "2023/05/30 (Tue) 10:00"
SAID = "How many shirts did I pack for my trip to Costa Rica?"
NEVER_SAID_PLACE = "How many shirts did I pack for my trip to Iceland?"  # the user went to Costa Rica
NEVER_SAID_THING = "What surfboard did I take to Costa Rica?"  # no surfboard in the whole history
# Never said either, but "I brought 7 shirts and 5 pairs of shorts" answers it for the cross-encoder (above
# UNSAID_BOUND): the rule holds it, a limit of a relevance model.
PARAPHRASED = "How many sweaters did I pack for my trip to Costa Rica?"


@pytest.fixture(autouse=True)
def environment(monkeypatch):
    clean_environment(monkeypatch)


def evidence_of(item, session_id: str) -> list[dict]:
    """The raw turns of one session, as the drill discloses them (L3)."""
    session = next(s for s in item.sessions if s.session_id == session_id)
    return [{"session_id": session_id, "date": session.date.isoformat(), "layer": "L3", "turn": i,
             "text": f"{t.role}: {t.content}"} for i, t in enumerate(session.turns)]


def test_a_word_the_memory_never_says_and_no_relevant_sentence_mean_not_held(haystack):
    item, memory = haystack
    evidence, sessions = evidence_of(item, "answer_82a04f59"), len(item.sessions)
    vocabulary = memory.index.units_with
    assert not {"iceland", "surfboard", "sweater"} & vocabulary.keys() and vocabulary["shirt"] > 0
    day = next(s for s in item.sessions if s.session_id == "answer_82a04f59").date

    said = holding(SAID, evidence, memory, get_reranker(), sessions)
    assert said.held and said.unsaid == [] and said.best is None  # every word said: no sentence needs scoring
    for question, word in [(NEVER_SAID_PLACE, "Iceland"), (NEVER_SAID_THING, "surfboard")]:
        lacking = holding(question, evidence, memory, get_reranker(), sessions)
        assert not lacking.held and lacking.unsaid == [word] and lacking.best < UNSAID_BOUND, lacking
        assert lacking.closest == [f"{CLOSEST} {day:%Y-%m-%d}."] and word in lacking.notes()
    paraphrased = holding(PARAPHRASED, evidence, memory, get_reranker(), sessions)
    assert paraphrased.held and paraphrased.unsaid == ["sweaters"] and paraphrased.best >= UNSAID_BOUND, paraphrased
    # A name no disclosed sentence says is unsaid even when another session says it: here none discloses "Costa Rica".
    other = evidence_of(item, item.sessions[0].session_id)
    assert holding(SAID, other, memory, get_reranker(), sessions).unsaid == ["Costa", "Rica"]


def test_a_small_memory_does_not_know_the_users_everyday_words_but_knows_their_names(haystack):
    """Below KNOWN_VOCABULARY sessions, a word the memory never says is no sign (a new user's few sessions may never
    say "city" or "now" of a question they answer), but a name none of it says still is."""
    item, memory = haystack
    evidence, small = evidence_of(item, "answer_82a04f59"), KNOWN_VOCABULARY - 1
    assert holding(NEVER_SAID_THING, evidence, memory, get_reranker(), small).held
    lacking = holding(NEVER_SAID_PLACE, evidence, memory, get_reranker(), small)
    assert not lacking.held and lacking.unsaid == ["Iceland"] and lacking.best < UNSAID_BOUND, lacking
    assert holding(NEVER_SAID_PLACE, [], memory, get_reranker(), len(item.sessions)).held  # nothing disclosed: the quotes decide


def test_a_day_or_a_month_names_nothing(haystack):
    """"In March" dates the question: no disclosed sentence says it (a session's date does), and it is no name."""
    item, memory = haystack
    evidence = evidence_of(item, "answer_82a04f59")
    assert not any("March" in e["text"] for e in evidence)
    dated = holding(SAID.replace("?", " in March?"), evidence, memory, get_reranker(), KNOWN_VOCABULARY - 1)
    assert dated.held and dated.unsaid == [], dated


def test_a_word_that_opens_a_sentence_of_the_question_names_nothing(haystack):
    """"Remind" opens the question's second sentence: capitalized, but no name, on a small memory as on a large one."""
    item, memory = haystack
    evidence = evidence_of(item, "answer_82a04f59")
    assert not any("remind" in e["text"].lower() for e in evidence)
    question = "I went to Costa Rica. Remind me how many shirts I packed for the trip?"
    told = holding(question, evidence, memory, get_reranker(), KNOWN_VOCABULARY - 1)
    assert told.held and told.unsaid == [], told
    # The same word inside a sentence is a name no disclosed sentence says.
    assert holding(question.replace(". Remind", ", Remind"), evidence, memory, get_reranker(), KNOWN_VOCABULARY - 1).unsaid


def test_a_new_users_three_sessions_hold_what_they_say_in_other_words_and_no_name_they_never_say(make_memory):
    """Through the graph, on a memory of three sessions (all opened): "city" and "now" are said by none, and the
    reply quotes the move; "Iceland" is said by none either, and the reply says the memory does not hold it."""
    memory = make_memory()
    memory.ingest([
        make_session("s-porto", "2023-03-01T10:00", ["I live in Porto and I love the river.", "Porto is lovely."]),
        make_session("s-move", "2023-05-20T10:00", ["Big news: we finally moved to Lisbon last weekend!", "Congrats!"]),
        make_session("s-trip", "2023-05-25T10:00", ["I packed 7 shirts for my trip to Costa Rica.", "Have fun!"]),
    ])
    final, _ = run_graph("Which city do I live in now?", Context(), ASKED, memory=memory)
    assert NOT_HELD not in final["notes"] and "Lisbon" in final["answer"], final["answer"]
    final, events = run_graph("What did I buy in Iceland?", Context(), ASKED, memory=memory)
    assert final["answer"].startswith(NOT_FOUND), final["answer"]
    assert [e["unsaid"] for e in events if e["event"] == "holding"] == [["Iceland"]]


def test_the_reply_says_not_in_memory_and_the_trace_says_why(haystack):
    _, memory = haystack
    final, events = run_graph(NEVER_SAID_PLACE, Context(), ASKED, memory=memory)
    assert final["answer"].startswith(NOT_FOUND + "\n" + CLOSEST), final["answer"]
    assert NOT_HELD in final["notes"] and "Iceland" in final["notes"]  # what a chat model would read
    (decision,) = [e for e in events if e["event"] == "holding"]
    assert decision["held"] is False and decision["unsaid"] == ["Iceland"] and decision["best"] < 3

    final, events = run_graph(SAID, Context(), ASKED, memory=memory)
    assert [e for e in events if e["event"] == "holding"] == [] and NOT_HELD not in final["notes"]  # every word said
    assert final["answer"].startswith((QUOTED, COMPUTED)) and "7 shirts" in final["answer"], final["answer"]


def test_apdmem_ask_prints_the_decision(haystack, capsys):
    from apdmem.cli import ask
    from apdmem.graph import build_graph

    _, memory = haystack
    ask(NEVER_SAID_THING, "2023-05-30", build_graph(memory=memory), Context())
    lines = capsys.readouterr().out.splitlines()
    assert any(re.fullmatch(r"  \[answer\] the question's words no disclosed sentence says: surfboard; best sentence "
                            r"[+-]\d+\.\d\d: the memory does not hold the answer", line) for line in lines), lines


def test_a_chat_model_is_told_the_memory_lacks_it(haystack):
    """Routing only (a scripted model): the notes the answer model reads say the memory does not hold it."""
    _, memory = haystack
    model = ScriptedChatModel()
    final, _ = run_graph(NEVER_SAID_PLACE, Context(controller=False), ASKED, settings=Settings(chat_model=model), memory=memory)
    (prompt,) = model.prompts_of("answer")
    assert NOT_HELD in prompt and "No conversation of the user says “Iceland”" in prompt
    assert final["answer_mode"] == "generative" and final["reckoning"] == ""  # nothing computed from the closest


CHORES = ["watered the tomatoes", "fixed the kitchen tap", "baked rye bread", "cleaned the garage", "painted the fence",
          "washed the car", "sorted the bookshelf", "walked to the market", "repaired a lamp", "ironed my shirts",
          "planted basil", "defrosted the freezer", "tidied the attic", "mended a sweater", "oiled the door hinges",
          "framed a photo", "swept the balcony", "sharpened the knives", "descaled the kettle", "dusted the shelves",
          "bottled lemonade", "knitted a scarf", "glued a chair leg", "hung new curtains", "pickled cucumbers",
          "varnished a stool", "aired the duvets", "raked the leaves", "polished my boots", "labelled the jars"]


def test_a_forgotten_session_says_nothing(make_memory):
    """In a memory of KNOWN_VOCABULARY sessions or more, a word only a forgotten session said is never said."""
    memory = make_memory()
    memory.ingest([make_session(f"s-{i:02d}", f"2023-01-{i + 1:02d}T10:00", [f"Today I {chore}.", "Well done!"])
                   for i, chore in enumerate(CHORES)])
    memory.ingest([make_session("s-trip", "2023-02-01T10:00", ["I packed 7 shirts for my trip to Costa Rica.", "Have fun!"]),
                   make_session("s-board", "2023-02-02T10:00", ["I bought a surfboard at the beach shop.", "Nice!"])])
    assert len(memory.session_ids()) >= KNOWN_VOCABULARY
    trip = [{"session_id": "s-trip", "date": "2023-02-01T10:00:00", "layer": "L3", "turn": 0,
             "text": "user: I packed 7 shirts for my trip to Costa Rica."}]
    question, sessions = "What surfboard did I pack for Costa Rica?", len(memory.session_ids())
    assert holding(question, trip, memory, get_reranker(), sessions).held  # another session says "surfboard"
    memory.forget("s-board")
    forgotten = holding(question, trip, memory, get_reranker(), sessions - 1)
    assert not forgotten.held and forgotten.unsaid == ["surfboard"], forgotten
