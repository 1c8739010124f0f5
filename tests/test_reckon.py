"""The reckoning: temporal and counting questions computed from dated quotes, with the real cross-encoder
choosing each event's sentence; and the graph's notes and extractive reply carrying it."""

from datetime import date

import pytest
from graph_helpers import clean_environment, run_graph

from apdmem.graph import Context
from apdmem.models import get_reranker
from apdmem.nodes.answer import QUOTED
from apdmem.nodes.holds import KNOWN_VOCABULARY, holding
from apdmem.nodes.reckon import COMPUTED, UNDATED, duration, kind, reckoning
from conftest import make_session


@pytest.fixture(autouse=True)
def environment(monkeypatch):
    clean_environment(monkeypatch)


@pytest.fixture(scope="module")
def reranker():
    return get_reranker("local")


QUOTES = [
    ("I went to a support group yesterday.", "2023-05-08T13:56:00", "Caroline said"),
    ("I launched my website today, so excited!", "2023-03-02T10:00:00", "you said"),
    ("I just signed a contract with my first client.", "2023-03-21T10:00:00", "you said"),
    ("I finished reading 'The Nightingale' last night.", "2023-01-10T10:00:00", "you said"),
    ("I just finished 'The Hate U Give', what a book.", "2023-02-05T10:00:00", "you said"),
    ("I visited the Museum of Modern Art with my sister.", "2023-02-11T10:00:00", "you said"),
    ("Yesterday I went to the Guggenheim for a new exhibition.", "2023-02-20T10:00:00", "you said"),
    ("I went to the Guggenheim for a new exhibition and loved it.", "2023-03-04T10:00:00", "you said"),
    ("You might enjoy the Whitney Museum as well.", "2023-02-25T10:00:00", "the assistant said"),
    ("I love cooking pasta on weekends.", "2023-02-26T10:00:00", "you said"),
]

KINDS = [
    ("When did Caroline go to the support group?", "date"),
    ("What was the date on which I attended the first BBQ event in June?", "date"),
    ("Which book did I finish reading first, 'The Hate U Give' or 'The Nightingale'?", "order"),
    ("Who became a parent first, Rachel or Alex?", "order"),
    ("How many days passed between the day I moved and the day I adopted a cat?", "duration"),
    ("How long had I been taking guitar lessons when I bought the new guitar amp?", "duration"),
    ("How many weeks ago did I meet up with my aunt?", "duration"),
    ("How many different museums or galleries did I visit in the month of February?", "count"),
    ("Which countries have I visited?", "count"),
    ("How many bikes do I currently own?", None),  # the latest figure, not a count
    ("How many days did I spend in total traveling in Hawaii?", "total"),  # a sum of what was said
    ("What is the total cost of the car cover and the detailing spray I bought?", "total"),
    ("How much more money did I raise than my initial goal in the charity ride?", "difference"),
    ("What is the difference in price between my luxury boots and the pair at the budget store?", "difference"),
    ("What time do I usually go to the gym?", None),
    ("What is my dog's name?", None),
]


@pytest.mark.parametrize(("question", "asked"), KINDS, ids=[k[0] for k in KINDS])
def test_kind(question, asked):
    assert kind(question) == asked


def test_durations_in_the_unit_asked():
    assert duration(date(2023, 3, 2), date(2023, 3, 21), "day") == "19 days"
    assert duration(date(2023, 3, 1), date(2023, 3, 29), "week") == "4 weeks (28 days)"
    assert duration(date(2023, 3, 1), date(2023, 3, 26), "week") == "about 4 weeks (25 days)"
    assert duration(date(2023, 1, 31), date(2023, 3, 31), "month") == "2 months (59 days)"
    assert duration(date(2023, 1, 15), date(2023, 3, 20), "month") == "about 2 months (64 days)"
    assert duration(date(2021, 6, 1), date(2023, 6, 1), "year") == "2 years (730 days)"
    assert duration(date(2023, 5, 1), date(2023, 5, 2)) == "1 day"


def test_a_date_is_the_day_the_words_name(reranker):
    reply = reckoning("When did Caroline go to the support group?", "2023-05-30", QUOTES, reranker)
    assert reply == f'{COMPUTED}\n7 May 2023 — 2023-05-08, Caroline said: "I went to a support group yesterday." (7 May 2023)'
    # Words that name no date: the day it was told of, said as such.
    reply = reckoning("When did I sign a contract with my first client?", "2023-05-30", QUOTES, reranker)
    assert reply.startswith(f"{COMPUTED}\ntold of on 21 March 2023 — 2023-03-21, you said: ")


def test_a_duration_between_two_events_and_since_one(reranker):
    between = ("How many days passed between the day I launched my website and the day I signed a contract with "
               "my first client?")
    assert reckoning(between, "2023-05-30", QUOTES, reranker) == (
        f'{COMPUTED}\n19 days — 2023-03-02, you said: "I launched my website today, so excited!" (2 March 2023); '
        '2023-03-21, you said: "I just signed a contract with my first client."')
    ago = reckoning("How many weeks ago did I launch my website?", "2023-04-01", QUOTES, reranker)
    assert ago.startswith(f"{COMPUTED}\nabout 4 weeks (30 days) ago — 2023-03-02, you said: \"I launched my website")


def test_an_order_by_the_days_the_quotes_name(reranker):
    reply = reckoning("Which book did I finish reading first, 'The Hate U Give' or 'The Nightingale'?", "2023-05-30",
                      QUOTES, reranker)
    assert reply.startswith(f"{COMPUTED}\n'The Nightingale' (first) — ")  # 9 January ("last night", said on the 10th), not 5 February
    assert '"I finished reading \'The Nightingale\' last night." (9 January 2023)' in reply


def test_an_event_nothing_dates_is_named_not_guessed(reranker):
    reply = reckoning("How many days passed between the day I adopted a cat and the day I launched my website?",
                      "2023-05-30", QUOTES, reranker)
    assert reply.startswith(f"{UNDATED}\nI cannot tell: nothing I read dates “the day I adopted a cat”. What I read dates: ")
    assert "launched my website" in reply and "days —" not in reply


def test_a_count_lists_each_item_once_within_the_question_dates(reranker):
    question = "How many different museums or galleries did I visit in the month of February?"
    reply = reckoning(question, "2023-03-05", QUOTES, reranker, [["2023-02-01", "2023-02-28"]])
    lines = reply.splitlines()
    assert lines[:2] == [COMPUTED, "2 found in what I read of your conversations (each counted once, oldest first):"]
    assert "Museum of Modern Art" in lines[2] and "Guggenheim" in lines[3] and len(lines) == 4  # the assistant's Whitney is no visit
    # Without the month, the Guggenheim told of again on 4 March is still one item.
    again = reckoning(question.replace(" in the month of February", ""), "2023-03-05", QUOTES, reranker)
    assert again.splitlines()[1].startswith("2 found")


def test_stated_numbers_are_listed_not_counted(reranker):
    quotes = [("I have 3 bikes in the garage now.", "2023-01-05", "you said"),
              ("I bought 2 more bikes at the flea market.", "2023-03-05", "you said")]
    reply = reckoning("How many bikes did I buy or own?", "2023-05-30", quotes, reranker)
    assert reply.splitlines()[1] == "What I read of your conversations says, in 2 places (numbers as said, the latest first):"
    assert reply.splitlines()[2].startswith("- latest, 2023-03-05") and reply.splitlines()[3].startswith("- earlier, 2023-01-05")
    issues = [("I've finished five issues of National Geographic so far.", "2023-01-05", "you said"),
              ("I'm reading National Geographic again, the issue on coral reefs.", "2023-03-05", "you said")]
    reply = reckoning("How many issues of National Geographic have I finished reading?", "2023-05-30", issues, reranker)
    assert reply.splitlines()[1] == "What I read of your conversations says, in 2 places (numbers as said, the latest first):"


def test_a_count_takes_every_deed_of_a_session_once_and_no_plans(reranker):
    """Items spread over sessions, several in one session, one told again in another session (one name: counted
    once), plans and requests (no deed) and a deed outside the question's month left out."""
    quotes = [("I attended a lecture at the Art Gallery on street art on March 3rd.", "2023-03-08", "you said"),
              ("I also volunteered at the Children's Museum for their Art Afternoon event.", "2023-03-08", "you said"),
              ("I'm looking for information on local art events and exhibitions.", "2023-03-08", "you said"),
              ("I'm thinking of organizing a street art workshop for kids.", "2023-03-08", "you said"),
              ("I went to the Women in Art exhibition at the Modern Art Museum on February 20th.", "2023-02-22", "you said"),
              ("The Women in Art exhibition I saw last month was my favorite.", "2023-03-08", "you said"),
              ("I went to an art fair two months ago and bought a print.", "2023-03-08", "you said")]
    question = "How many art-related events did I attend in the past month?"
    reply = reckoning(question, "2023-03-08", quotes, reranker, [["2023-02-08", "2023-03-08"]])
    lines = reply.splitlines()
    assert lines[:2] == [COMPUTED, "3 found in what I read of your conversations (each counted once, oldest first):"], reply
    assert sum("Women in Art" in line for line in lines) == 1 and not any("art fair" in line for line in lines)
    assert not any("looking for" in line or "thinking of" in line for line in lines)


def test_a_total_adds_the_figures_stated_across_sessions_once_each(reranker):
    """The addends are in two sessions, the cover's price said twice (counted once); a plan and a range are no
    addends; the reply states the sum, then each figure with its quote."""
    quotes = [("I bought a waterproof car cover and it cost me $120.", "2023-05-20", "you said"),
              ("By the way, the car cover I got for $120 has been great.", "2023-05-25", "you said"),
              ("I got a detailing spray from Amazon for $20 that removed the tar stains.", "2023-05-28", "you said"),
              ("I think I'll get the polisher that costs around $150.", "2023-05-28", "you said"),
              ("Detailing kits seem to go for $60-$70 these days.", "2023-05-28", "you said")]
    reply = reckoning("What is the total cost of the car cover and detailing spray I purchased?", "2023-05-30", quotes, reranker)
    lines = reply.splitlines()
    assert lines[:2] == [COMPUTED, "$140 in total, adding what your conversations state ($120 + $20; each figure counted once):"]
    assert lines[2] == '- $120: 2023-05-20, you said: "I bought a waterproof car cover and it cost me $120."'
    assert lines[3].startswith("- $20: 2023-05-28, you said:") and len(lines) == 4
    numbers = [("I've completed three courses on Coursera so far.", "2023-05-23", "you said"),
               ("Since I've completed two courses on edX, I know the format.", "2023-05-30", "you said"),
               ("I've completed two courses on edX, which helped at work.", "2023-05-30", "you said")]
    reply = reckoning("How many online courses have I completed in total?", "2023-05-31", numbers, reranker)
    assert reply.splitlines()[1] == "5 in total, adding what your conversations state (3 courses + 2 courses; each figure counted once):"


def test_a_difference_compares_the_two_figures_stated_in_two_sessions(reranker):
    """Two sessions state the two figures (rates and bounds compared as said, a range left out, the price said
    again once); a third figure of the same kind leaves which two are compared unknown: no computation."""
    quotes = [("I booked a resort in Maui that costs over $300 per night.", "2023-05-24", "you said"),
              ("I'd like to keep the hostels to $50-$75 per person.", "2023-05-24", "you said"),
              ("I stayed in a hostel in Tokyo that cost $30 per night last January.", "2023-05-26", "you said"),
              ("The Tokyo hostel at $30 per night was a bargain.", "2023-05-27", "you said")]
    question = "How much more did I spend on accommodations per night in Hawaii compared to Tokyo?"
    lines = reckoning(question, "2023-05-30", quotes, reranker).splitlines()
    assert lines[:2] == [COMPUTED, "$270 apart, the two figures your conversations state ($300 − $30):"]
    assert lines[2].startswith("- $300: 2023-05-24, you said:") and lines[3].startswith("- $30: 2023-05-26, you said:")
    assert len(lines) == 4
    japan = question.replace("Tokyo", "Japan")
    assert reckoning(japan, "2023-05-30", quotes, reranker).splitlines()[1].startswith("$270 apart")
    third = ("My cabin in Kyoto was $90 per night.", "2023-05-28", "you said")
    assert reckoning(japan, "2023-05-30", [*quotes, third], reranker) == ""
    marathon = [("My target time for the marathon was 4 hours and 10 minutes.", "2023-05-20", "you said"),
                ("I finished the marathon in 4 hours and 22 minutes.", "2023-05-27", "you said")]
    reply = reckoning("How many minutes did I exceed my target time by in the marathon?", "2023-05-30", marathon, reranker)
    assert reply.splitlines()[1] == "12 minutes apart, the two figures your conversations state (262 minutes − 250 minutes):"


def test_a_total_of_one_figure_is_no_sum(reranker):
    quotes = [("I spent $45 on a new lamp.", "2023-05-20", "you said"), ("I love my new reading corner.", "2023-05-21", "you said")]
    assert reckoning("What is the total amount I spent on the lamp?", "2023-05-30", quotes, reranker) == ""


SISTER_GIFTS = [
    make_session("s1", "2024-03-02", ["I bought my sister a silver necklace from Tiffany's for $200.", "What a lovely gift!"]),
    make_session("s2", "2024-03-20", ["Any ideas for a weekend hike near Seattle?", "Try Rattlesnake Ledge."]),
    make_session("s3", "2024-04-11", ["The necklace from Tiffany's was $200, and she wears it every day.", "Glad she loves it!"]),
    make_session("s4", "2024-05-05", ["I also got my sister a spa gift card for $100 for her birthday.", "She must be thrilled."]),
]


def test_the_graph_sums_across_sessions_and_the_notes_carry_it(make_memory):
    """A small memory: the amounts in three sessions, one repeated; the graph opens them, the notes end with the sum,
    and the extractive reply states it."""
    memory = make_memory()
    memory.ingest(SISTER_GIFTS)
    final, _ = run_graph("How much did I spend on gifts for my sister in total?", Context(), "2024/06/01 (Sat) 10:00", memory=memory)
    assert final["answer"].splitlines()[:2] == [COMPUTED, "$300 in total, adding what your conversations state ($200 + $100; "
                                                          "each figure counted once):"], final["answer"]
    assert final["notes"].endswith("## Computed from the dated evidence\n" + final["answer"])


def test_a_generative_answer_reads_the_sum_in_its_notes(make_memory):
    """The generative path gets the same figures: with a chat model (scripted: routing only, it computes nothing),
    the notes the answer prompt carries end with the sum and its addends."""
    from graph_helpers import ScriptedChatModel

    from apdmem.graph import Settings

    model = ScriptedChatModel(script={"Reflection": [{"sufficient": False, "deepen": [
        {"session_id": sid, "layer": "L3"} for sid in ("s1", "s3", "s4")]}]})
    memory = make_memory(chat_model=model)
    memory.ingest(SISTER_GIFTS)
    final, _ = run_graph("How much did I spend on gifts for my sister in total?", Context(), settings=Settings(chat_model=model),
                         memory=memory)
    assert final["answer_mode"] == "generative" and final["reckoning"].splitlines()[1].startswith("$300 in total")
    assert model.prompts_of("answer")[0].count("$300 in total, adding what your conversations state ($200 + $100") == 1


def test_no_reckoning_without_a_computation_or_an_event(reranker):
    assert reckoning("What is my dog's name?", "2023-05-30", QUOTES, reranker) == ""
    assert reckoning("When did I buy a sailboat?", "2023-05-30", QUOTES, reranker) == ""
    assert reckoning("When did Caroline go to the support group?", "2023-05-30", [], reranker) == ""


def test_the_graph_computes_an_interval_and_the_notes_carry_it(make_memory, history):
    """On the synthetic history: the graph opens both sessions, the notes carry the computed days, the extractive
    reply states them first, and a quote with a time expression shows the date it names."""
    memory = make_memory()
    memory.ingest(history)
    question = "How many days passed between the day I adopted my beagle and the day I accepted the job offer?"
    final, _ = run_graph(question, Context(), "2024/06/01 (Sat) 10:00", memory=memory)
    expected = (f'{COMPUTED}\n22 days — 2024-03-10, you said: "I adopted a beagle puppy from the shelter and named her '
                'Biscuit."; 2024-04-01, you said: "I accepted an offer as a data analyst at Northwind Logistics."')
    assert final["answer_mode"] == "extractive" and final["answer"] == expected
    assert final["notes"].endswith("## Computed from the dated evidence\n" + expected)
    final, _ = run_graph("Which mountain did I hike with my sister?", Context(), "2024/06/01 (Sat) 10:00", memory=memory)
    assert final["answer"].startswith(QUOTED) and not final["reckoning"]
    assert '"Last weekend my sister Maya and I hiked up Mount Rainier to Camp Muir." (24 February to 25 February 2024)' in final["answer"]


def test_an_order_the_conversation_date_alone_cannot_tell(reranker):
    rachel = ("My sister-in-law Rachel is doing great with her newborn twins.", "2023-03-17T10:00:00", "you said")
    alex = ("My cousin Alex adopted a baby girl from China.", "2023-03-17T10:00:00", "you said")
    question = "Who became a parent first, Rachel or Alex?"
    assert reckoning(question, "2023-05-30", [rachel, alex], reranker).startswith(
        f"{UNDATED}\nI cannot tell which came first: both are told of on 17 March 2023 — ")
    alex = ("My cousin Alex adopted a baby girl from China in January.", "2023-03-17T10:00:00", "you said")
    assert reckoning(question, "2023-05-30", [rachel, alex], reranker).startswith(f"{COMPUTED}\nAlex (first) — ")


def test_the_answer_benchmark_reads_a_reckoning_by_its_heading():
    from apdmem.eval.answers import ASSERTS, HEDGED, stance

    assert stance(f'{COMPUTED}\n19 days — 2023-03-02, you said: "I think I launched it today."') == ASSERTS
    assert stance(f'{UNDATED}\nI cannot tell: nothing I read dates “the move”. What I read dates: ...') == HEDGED


# --- Counts, sums and differences across sessions (issue 33): each class of miss seen on the dev questions -----------

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
