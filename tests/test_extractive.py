"""The embedded default has no generative model (chat_model="local"): L1 and L2 are sentences of the session
itself, the answer quotes the disclosed evidence with its date, and the output says which mode answered.
Real models and a real haystack (the LongMemEval-S item shipped with the package); nothing is scripted."""

import re

import pytest
from graph_helpers import clean_environment, run_graph

from apdmem.errors import ConfigError
from apdmem.graph import Context
from apdmem.graph.state import Evidence
from apdmem.memory.layers import key_sentences, one_line, sentences, turn_sentences
from apdmem.memory.records import Turn
from apdmem.memory.time_expressions import dated, undated
from apdmem.models import LOCAL_CHAT, get_chat_model, get_reranker, is_embedded, is_generative
from apdmem.models.local import package_dir
from apdmem.nodes.answer import NOT_FOUND, QUOTED, UNCLEAR, extractive_answer
from apdmem.tools import read_raw

QUOTE = re.compile(r'^- (\d{4}-\d\d-\d\d), (.+?) said: "(.*)"(?: \(.+\))?$', re.M)


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
    quotes = QUOTE.findall(final["answer"])
    assert 1 <= len(quotes) <= 3 and len(quotes) == final["answer"].count("\n")
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
    assert '- 2024-03-10, you said: "Her first vet appointment with Dr. Alvarez is on Friday."' in reply.splitlines()
    assert extractive_answer("When is my puppy's first vet appointment?", [invented], memory, get_reranker()) == NOT_FOUND
    assert extractive_answer("Anything?", [], memory, get_reranker()) == NOT_FOUND
    unrelated = extractive_answer("What is the boiling point of mercury in kelvin?", read_raw(memory, "s-bread"), memory, get_reranker())
    assert unrelated.startswith(UNCLEAR + "\n") and len(QUOTE.findall(unrelated)) == 3 == unrelated.count("\n")
