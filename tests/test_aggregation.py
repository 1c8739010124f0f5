"""Counts, sums and differences across sessions (issue 33), each class of miss seen on the dev questions shown on
small real memories: the real cross-encoder scores every sentence, and the graph runs with the default models."""

import pytest
from graph_helpers import clean_environment, run_graph

from apdmem.graph import Context
from apdmem.models import get_reranker
from apdmem.nodes.holds import KNOWN_VOCABULARY, holding
from apdmem.nodes.reckon import COMPUTED, reckoning
from conftest import make_session


@pytest.fixture(autouse=True)
def environment(monkeypatch):
    clean_environment(monkeypatch)


@pytest.fixture(scope="module")
def reranker():
    return get_reranker("local")


PLANTS = [
    make_session("p1", "2023-05-20", ["I water my plants with fertilizer from the nursery where I bought the peace lily and a "
                                      "succulent plant two weeks ago.", "That mix is fine for both."]),
    make_session("p2", "2023-05-22", ["I bought an orchid plant in February and it still blooms.", "Orchids bloom for months."]),
    make_session("p3", "2023-05-25", ["I'm also wondering if I should repot my snake plant, which I got from my sister last month.",
                                      "Wait until its roots fill the pot."]),
]
TANKS = [
    make_session("t1", "2023-05-21", ["I've also been taking care of a small 1-gallon tank that I set up for a friend's kid.",
                                      "Guppies do well in small tanks."]),
    make_session("t2", "2023-05-23", ["My old tank was a 5-gallon one that I got from my cousin, with a betta named Finley.",
                                      "Bettas like warm water."]),
    make_session("t3", "2023-05-27", ["I've finally set up my 20-gallon freshwater community tank, and it's doing well.",
                                      "Congratulations on the new tank!"]),
]


def test_the_graph_counts_two_plants_told_in_one_sentence_and_one_told_in_passing(make_memory):
    """Two plants in one sentence are two; the snake plant, told of in passing (the cross-encoder scores it below the
    bar of a deed that does not name what is counted), names it; the orchid of February is outside "the last month"."""
    memory = make_memory()
    memory.ingest(PLANTS)
    final, _ = run_graph("How many plants did I acquire in the last month?", Context(), "2023/05/30 (Tue) 21:51", memory=memory)
    lines = final["answer"].splitlines()
    assert lines[:2] == [COMPUTED, "3 found in what I read of your conversations (each counted once, oldest first):"], final["answer"]
    assert "peace lily" in lines[2] and lines[2].endswith("(2 of them)") and "snake plant" in lines[3] and len(lines) == 4
    assert "orchid" in final["notes"].split("## Computed")[0]  # disclosed, and left out of the count by its date


def test_the_graph_counts_what_i_have_now_including_one_named(make_memory):
    """"How many ... do I currently have, including ..." counts the items (not the latest figure); every item says
    "tank", which tells none apart, and "5-gallon" and "20-gallon" are two."""
    memory = make_memory()
    memory.ingest(TANKS)
    final, _ = run_graph("How many tanks do I currently have, including the one I set up for my friend's kid?", Context(),
                         "2023/05/30 (Tue) 21:36", memory=memory)
    assert final["answer"].splitlines()[1] == "3 found in what I read of your conversations (each counted once, oldest first):"
    assert final["notes"].endswith("## Computed from the dated evidence\n" + final["answer"])


def test_a_count_verb_the_memory_says_in_other_words_is_held(make_memory, reranker):
    """On a memory large enough for absence to say something, a count's verb never said ("acquire") does not make
    the memory refuse; a thing never said ("cacti") still does."""
    memory = make_memory()
    memory.ingest(PLANTS)
    evidence = [{"session_id": s.session_id, "date": s.date.isoformat(), "layer": "L3", "turn": 0,
                 "text": f"user: {s.turns[0].content}"} for s in PLANTS]
    assert holding("How many plants did I acquire in the last month?", evidence, memory, reranker, KNOWN_VOCABULARY).held
    refused = holding("How many cacti did I acquire in the last month?", evidence, memory, reranker, KNOWN_VOCABULARY)
    assert not refused.held and refused.unsaid == ["cacti"]


def test_a_sum_adds_the_figures_of_the_items_asked_and_one_said_as_a(reranker):
    """The addends of "my coworker and brother" are theirs: neither the cashback nor a friend's gift; "3 sisters"
    and "a brother" (a/an is one) make the siblings."""
    gifts = [("I got my brother a $100 gift card for his graduation.", "2023-05-28", "you said"),
             ("I've already earned $50 in cashback rewards on my card.", "2023-05-28", "you said"),
             ("I bought my best friend candles for her birthday and spent $30.", "2023-05-28", "you said"),
             ("For my coworker's baby shower I bought baby clothes for $100.", "2023-05-29", "you said")]
    reply = reckoning("What is the total amount I spent on gifts for my coworker and brother?", "2023-05-30", gifts, reranker)
    assert reply.splitlines()[1] == "$200 in total, adding what your conversations state ($100 + $100; each figure counted once):", reply
    siblings = [("I come from a family with 3 sisters, so I grew up with girls around.", "2023-05-24", "you said"),
                ("Oh, and I should mention that I have a brother, which might be influencing my social circle dynamics.",
                 "2023-05-25", "you said")]
    reply = reckoning("What is the total number of siblings I have?", "2023-05-30", siblings, reranker)
    assert reply.splitlines()[1] == "4 in total, adding what your conversations state (3 sisters + 1 brother; each figure counted once):"


def test_a_difference_compares_two_figures_of_what_it_asks(reranker):
    """The marathon's target against its time ("4h 22min"), not against a personal best of another race."""
    quotes = [("My target time for the marathon was 4 hours and 10 minutes.", "2023-05-20", "you said"),
              ("By the way, I just completed my first full marathon in 4h 22min, so I'm looking for routes to keep my "
               "endurance up.", "2023-05-25", "you said"),
              ("By the way, my personal best is 2 hours and 15 minutes.", "2023-05-30", "you said")]
    reply = reckoning("How many minutes did I exceed my target time by in the marathon?", "2023-05-30", quotes, reranker)
    assert reply.splitlines()[1] == "12 minutes apart, the two figures your conversations state (262 minutes − 250 minutes):", reply
    # Without the race's time, the target and the personal best are no two figures of one thing: nothing computed.
    assert reckoning("How many minutes did I exceed my target time by in the marathon?", "2023-05-30", quotes[::2], reranker) == ""
