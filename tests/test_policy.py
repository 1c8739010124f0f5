"""The deterministic disclosure policy: the head of a ranking, sub-query and date coverage, deepening what L1 did
not cover, and stopping. Offline: a real raw-mode memory, a scripted model where layers are built."""

from types import SimpleNamespace

import pytest
from graph_helpers import ScriptedChatModel, clean_environment, run_graph

from apdmem.graph import Context, Settings
from apdmem.nodes import policy
from apdmem.nodes.decompose import decompose, events


@pytest.fixture(autouse=True)
def environment(monkeypatch):
    clean_environment(monkeypatch)


@pytest.fixture
def memory(ingested):
    return ingested(ScriptedChatModel())


def candidate(score: float, hits: dict, summary: str = "") -> dict:
    return {"date": "2024-03-01T00:00:00", "summary": summary, "score": score, "spans": [[0, 4]], "hits": hits}


@pytest.mark.parametrize("scores, expected", [
    # Background = median after the first three places.
    ([2.0, 1.9, 1.3, 1.2, 1.1, 1.0, 1.0], 3),   # background 1.05: 1.9 is 89% of the way to the best, 1.3 26%
    ([2.0, 1.9, 1.2, 1.2, 1.1, 1.0, 1.0], 2),   # 1.2 is 16% of the way: out
    ([2.0, 1.25, 1.1, 1.0, 1.0, 1.0], 2),       # background 1.0: 25% exactly: in
    ([2.0, 1.24, 1.1, 1.0, 1.0, 1.0], 1),       # 24%: out, the best alone stands out
    ([2.0, 1.99, 1.98, 1.97, 1.0, 1.0, 1.0], 4),  # a flat head: every session in it
    ([2.0, 1.9, 1.0], 2),                       # a short ranking: the last score is the background
    ([1.0, 1.0, 1.0], 1),                       # nothing stands out: the first only
    ([3.0], 1),
    ([], 0),
])
def test_head_is_the_part_of_a_ranking_that_stands_out_from_the_background(scores, expected):
    assert policy.head(scores) == expected


def test_each_sub_query_is_covered_by_an_opened_session():
    question, sub_a, sub_b = "q", "a", "b"
    candidates = {
        "s1": candidate(2.0, {question: 2.0, sub_a: 1.9}),
        "s2": candidate(1.95, {question: 1.95}),
        "s3": candidate(1.0, {question: 1.0, sub_b: 1.0}),
        "s6": candidate(1.0, {question: 1.0}),
        "s4": candidate(1.8, {sub_b: 1.8}),
        "s5": candidate(1.7, {sub_a: 1.0, sub_b: 1.2}),
    }
    state = {"question": question, "searched": [question, sub_a, sub_b], "candidates": candidates}
    # The question's head is s1, s2; sub-query a is covered by s1; b stands out with s4 alone: s4 is added.
    assert policy.wanted(state) == ["s1", "s2", "s4"]
    assert policy.wanted({**state, "searched": [question]}) == ["s1", "s2"]
    assert policy.wanted({**state, "searched": []}) == []


def test_each_date_the_question_names_is_covered_by_a_session_dated_near_it():
    question = "What did I buy ten days ago?"
    scores = {"s1": (2.0, "2024-03-01"), "s2": (1.0, "2024-02-10"), "s3": (0.95, "2024-02-12"),
              "s4": (0.9, "2024-02-19"), "s5": (0.9, "2024-02-20"), "s6": (0.9, "2024-01-05")}
    candidates = {s: {**candidate(v, {question: v}), "date": f"{day}T10:00:00"} for s, (v, day) in scores.items()}
    state = {"question": question, "searched": [question], "candidates": candidates}
    assert policy.wanted(state) == ["s1"]  # s1 alone stands out
    # 2024-02-17: s4 (two days later) is the best-ranked session within three days of it; s3 (five days) is not.
    assert policy.wanted({**state, "date_ranges": [["2024-02-17", "2024-02-17"]]}) == ["s1", "s4"]
    # A range an opened session is dated in is covered already; a range no candidate is near adds nothing.
    assert policy.wanted({**state, "date_ranges": [["2024-02-26", "2024-03-02"], ["2023-06-01", "2023-06-30"]]}) == ["s1"]
    assert policy.wanted({**state, "date_ranges": [["2024-02-10", "2024-02-10"], ["2024-02-17", "2024-02-17"]]}) == ["s1", "s2", "s4"]
    # The session the cover opens is lifted into the question's ranking too: s4 to 0.8 of the best score, second.
    lifted = {s: {**c, "hits": dict(c["hits"])} for s, c in candidates.items()}
    policy.lift(lifted, question, {}, [["2024-02-17", "2024-02-17"], ["2023-06-01", "2023-06-30"]])
    assert policy.ranking(lifted, question) == ["s1", "s4", "s2", "s3", "s5", "s6"]
    assert (lifted["s4"]["hits"][question], lifted["s4"]["score"]) == (pytest.approx(1.6), pytest.approx(1.6))
    assert lifted["s4"]["via"] == {"date_range": ["2024-02-17", "2024-02-17"]}
    assert policy.wanted({**state, "candidates": lifted}) == ["s1", "s4"]
    # A dated session ranking above the lift stays where it is.
    policy.lift(lifted, question, {}, [["2024-03-01", "2024-03-01"]])
    assert lifted["s1"]["hits"][question] == 2.0


def test_a_session_that_stands_alone_is_opened_alone():
    scores = {"s1": 2.0, "s2": 1.1, "s3": 1.05, "s4": 1.0, "s5": 1.0}
    state = {"question": "q", "searched": ["q"], "candidates": {s: candidate(v, {"q": v}) for s, v in scores.items()}}
    assert policy.head(list(scores.values())) == 1
    assert policy.wanted(state) == ["s1"]


def test_a_session_is_read_deeper_when_its_l1_lacks_the_words_it_matched_on():
    state = {
        "question": "Which mountain did I hike with my sister?",
        "candidates": {"s-hiking": candidate(2.0, {"Which mountain did I hike with my sister?": 2.0},
                                             "user: My sister Maya and I hiked up Mount Rainier.")},
        "evidence": [{"session_id": "s-hiking", "date": "", "layer": "L1", "turn": None, "text": "The user likes the outdoors."}],
    }
    assert policy.uncovered(state, "s-hiking")  # "sister", "hike" matched; L1 says neither
    state["evidence"].append({"session_id": "s-hiking", "date": "", "layer": "L1", "turn": None,
                              "text": "The user hiked Mount Rainier with their sister Maya."})
    assert not policy.uncovered(state, "s-hiking")
    assert not policy.uncovered(state, "s-unknown")


@pytest.mark.parametrize("question, best, depth", [
    # The scripted L1 holds the session's first turn. It says "hiked" and "sister": enough, L1 it stays.
    ("Which mountain did I hike with my sister?", "s-hiking", "L1"),
    # It lacks "vet" and "appointment", which the matched turns have: the exact turns are read.
    ("When is my puppy's first vet appointment?", "s-dog", "L3"),
])
def test_plan_opens_then_deepens_then_stops(memory, question, best, depth):
    model, memory = memory
    context = Context(reflection=False)
    final, _ = run_graph(question, context, settings=Settings(chat_model=model), memory=memory)
    reads = [(d["session_id"], d["layer"]) for d in final["drills"]]
    opened_first = [sid for sid, layer in reads if layer == "L1"]
    assert opened_first == policy.wanted(final) and opened_first[0] == best and final["opened"][best] == depth
    for sid in opened_first:  # deeper exactly where L1 did not cover the matched words
        assert not policy.uncovered(final, sid)
        assert (final["opened"][sid] == "L3") == policy.uncovered({**final, "evidence": [e for e in final["evidence"] if e["layer"] == "L1"]}, sid)
    assert final["stop_reason"] == "nothing left to try" and "Reflection" not in model.kinds()
    assert policy.plan(final, context) == []
    # L3 reads are free: only L1 reads called the model.
    assert final["usage"]["drill"]["calls"] == model.kinds().count("KeyFacts") == len(opened_first)


def test_drill_width_bounds_a_round(memory):
    model, memory = memory
    scores = {"s-dog": 2.0, "s-bread": 1.99, "s-job": 1.98, "s-knee": 1.97, "s-japan": 1.0}
    state = {"question": "q", "searched": ["q"], "opened": {}, "candidates": {s: candidate(v, {"q": v}) for s, v in scores.items()}}
    assert policy.wanted(state) == ["s-dog", "s-bread", "s-job", "s-knee"]
    assert len(policy.plan(state, Context(drill_width=2))) == 2


# --- One sub-query per event: `decompose.events` (deterministic phrasing patterns; made-up questions) ---

@pytest.mark.parametrize("question, expected", [
    # A choice: the frame with each option (quotes kept, "or" lists of three).
    ("Which course did I start first, 'Intro to Pottery' or 'Watercolor Basics'?",
     ["Which course did I start first 'Intro to Pottery'", "Which course did I start first 'Watercolor Basics'"]),
    ("Who moved abroad first, Priya, Tom or Lena?",
     ["Who moved abroad first Priya", "Who moved abroad first Tom", "Who moved abroad first Lena"]),
    # An interval between two events: split where the second "the day" starts, else at the first "and".
    ("How many weeks passed between the day I adopted the kitten and the day I took it to the vet?",
     ["How many weeks passed between the day I adopted the kitten", "How many weeks passed between the day I took it to the vet"]),
    ("What is the price difference between my road bike and the gravel bike I rented?",
     ["What is the price difference between my road bike", "What is the price difference between the gravel bike I rented"]),
    # Two clauses joined by when/before/after.
    ("How long had I been learning Italian when I visited Rome?", ["How long had I been learning Italian", "I visited Rome"]),
    ("How many days before the book fair did I finish my novel draft?",
     ["How many days the book fair", "did I finish my novel draft"]),
    # Time since one event: the event alone, without the interval words.
    ("How many months ago did I repaint the garden shed?", ["repaint the garden shed"]),
    ("How long has it been since I sold my old piano?", ["I sold my old piano"]),
    # An aggregation or comparison over named items: the frame with each item.
    ("What is the total cost of the tent and sleeping bag I bought?",
     ["What is the total cost of the tent", "What is the total cost of sleeping bag I bought"]),
    ("How much more did I pay for rent in Lisbon compared to Porto?",
     ["How much more did I pay for rent in Lisbon", "How much more did I pay for rent in Porto"]),
])
def test_events_are_split_into_one_query_each(question, expected):
    assert events(question) == expected


@pytest.mark.parametrize("question", [
    "What is my dog's name?",                                       # one thing
    "Did I go to the concert with a friend or not?",                # "or not" is no choice
    "How many pieces of clothing did I buy, return, or exchange?",  # a list of verbs, not events
    "Where did I buy bread and cheese last week?",                  # "and" outside an aggregation
    "How old was I when I moved?",                                  # a part naming no event ("How old was I")
])
def test_a_question_naming_one_thing_is_not_split(question):
    assert events(question) == []


def test_without_a_generative_model_the_events_are_the_decomposition():
    question = "Which trip was first, the hike in Zion or the kayak tour in Maine?"
    runtime = SimpleNamespace(context=Context(), stream_writer=None)
    assert Settings().controller() is None  # the embedded default
    out = decompose({"question": question}, runtime, settings=Settings())
    assert out["queries"] == [question, *events(question)] and len(out["queries"]) == 3
    capped = decompose({"question": "Who left first, Ann, Bo, Cy or Di?"}, SimpleNamespace(context=Context(max_queries=3)), settings=Settings())
    assert len(capped["queries"]) == 3  # max_queries counts the question
    off = decompose({"question": question}, SimpleNamespace(context=Context(decomposition=False)), settings=Settings())
    assert off["queries"] == [question]


def test_a_small_memory_is_opened_whole_and_a_large_one_by_its_head():
    question, sub = "Do I still have my red bike?", "red bike"
    candidates = {"s1": candidate(2.0, {question: 2.0}), "s2": candidate(1.1, {question: 1.1}),
                  "s3": candidate(1.05, {question: 1.05}), "s4": candidate(0.5, {sub: 0.5})}
    state = {"question": question, "searched": [question, sub], "candidates": candidates}
    # Every candidate, the question's ranking first, then what only a sub-query found.
    assert policy.wanted({**state, "memory_sessions": policy.SMALL_MEMORY}) == ["s1", "s2", "s3", "s4"]
    assert policy.small({"memory_sessions": 1}) and not policy.small({})
    # One session more: the head (s1 stands out alone) and the sub-query's best.
    assert policy.wanted({**state, "memory_sessions": policy.SMALL_MEMORY + 1}) == policy.wanted(state) == ["s1", "s4"]
