"""The evolving-memory suite (issue 29): small histories of facts that change, asked through the real graph with
the default models (no generative model: extractive replies; embedded embeddings and cross-encoder).

The suite's goals are the reply behaviour issue 29 asks for: lead with the current value and never present a stale
one as current (met), say "not in memory" for what was never said (not yet met on memories this small: expected to
fail, xfail not strict). The scoring and the suite's well-formedness are checked without marks."""

import copy
import doctest
import json
from dataclasses import replace

import pytest

from apdmem.errors import InputError
from apdmem.eval import answers
from apdmem.eval.answers import (ASSERTS, HEDGED, KINDS, MAX_SESSIONS, NOT_FOUND, leads_with_current, load_suite, mentions,
                                 run_suite, stale_as_current, stance, suite_figures, suite_path)
from apdmem.eval.longmemeval import EvalSettings
from apdmem.nodes.answer import NOT_FOUND as NOT_FOUND_REPLY
from apdmem.nodes.answer import QUOTED, UNCLEAR

pytestmark = pytest.mark.xdist_group("evolving")  # whole to one test process: the suite's replies are asked once
REPLY_BEHAVIOUR = pytest.mark.xfail(strict=False, reason="issue 29: abstention on small memories (15 of 46 never-said)")
GOAL_LEADS = 0.95  # share of current-value questions whose reply leads with the current value
GOAL_NOT_IN_MEMORY = 0.80  # share of never-said questions whose reply says the memory does not hold it


@pytest.fixture(scope="module")
def replies(tmp_path_factory):
    """Every scenario ingested once into a fresh store, its current-value and never-said questions asked through
    the graph with the default models: one record per question (`apdmem.eval.answers.suite_record`)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("LANGSMITH_TRACING", "false")
        for name in ("APDMEM_CHAT_MODEL", "APDMEM_CONTROLLER_MODEL", "APDMEM_GENERATOR_MODEL", "APDMEM_EMBEDDINGS",
                     "APDMEM_RERANKER_MODEL", "OPENAI_BASE_URL"):
            env.delenv(name, raising=False)
        scenarios = [replace(s, questions=[q for q in s.questions if q.kind in ("current", "never")]) for s in load_suite()]
        settings = EvalSettings(chat_model="local", controller_model="local", generator_model="local", embeddings="local",
                                l0_mode="raw", llm_judge=False, cache=tmp_path_factory.mktemp("evolving"))
        return run_suite(scenarios, store=str(settings.cache), settings=settings)


# --- the suite is well formed -------------------------------------------------------------------------------------


def test_every_scenario_is_well_formed_and_the_suite_covers_what_changes():
    scenarios = load_suite()  # raises on the first scenario with a problem (`scenario_problems`)
    questions = [q for s in scenarios for q in s.questions]
    assert len(scenarios) >= 40 and all(1 <= len(s.sessions) <= MAX_SESSIONS for s in scenarios)
    assert {q.kind for q in questions} == set(KINDS)
    assert all(any(q.kind == "current" for q in s.questions) for s in scenarios)  # every scenario asks for a current value
    topics = {s.topic for s in scenarios}
    assert {"move", "job", "pet", "partner", "preference", "plan-cancelled", "count", "corrected-same-day"} <= topics
    assert max(len(s.sessions) for s in scenarios) >= 10 and min(len(s.sessions) for s in scenarios) == 1
    assert sum(1 for s in scenarios if s.fillers) >= 40  # most histories hold talk about something else too
    speakers = {t.speaker for s in scenarios for session in s.sessions for t in session.turns if t.speaker}
    assert len(speakers) >= 4  # chats between named people, beside the user's own
    for s in (s for s in scenarios if s.topic == "corrected-same-day"):  # said and corrected in one day
        days = [f"{x.date:%Y-%m-%d}" for x in s.sessions if x.session_id not in s.fillers]
        assert len(days) == 1 or len(set(days)) < len(days), s.id


def test_a_scenario_that_cannot_measure_is_refused_naming_it(tmp_path):
    data = json.loads(suite_path().read_text())
    broken = copy.deepcopy(data)
    question = broken["scenarios"][0]["questions"][0]
    assert question["kind"] == "current"
    question["stale"] = ["Reykjavik"]  # never said in the history: nothing could present it as current
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    with pytest.raises(InputError, match=rf"broken.json, record '{broken['scenarios'][0]['id']}': question q1: a current-value"):
        load_suite(tmp_path / "broken.json")
    filler = copy.deepcopy(data)
    filler["fillers"]["pasta"][0]["content"] += " We ate it in Lisbon."  # a filler now says the answer
    (tmp_path / "filler.json").write_text(json.dumps(filler))
    with pytest.raises(InputError, match="a filler session says the answer"):
        load_suite(tmp_path / "filler.json")
    del data["scenarios"][1]["sessions"][0]["date"]
    (tmp_path / "undated.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match=rf"record '{data['scenarios'][1]['id']}': malformed scenario: KeyError\('date'\)"):
        load_suite(tmp_path / "undated.json")


# --- the scoring --------------------------------------------------------------------------------------------------


def test_stance_reads_the_answer_nodes_headings_and_a_generative_replys_words():
    quote = '\n- 2023-05-20, you said: "I don\'t have a car anymore."'  # the user's words never decide the stance
    assert stance(NOT_FOUND_REPLY) == stance(NOT_FOUND_REPLY + " The closest sessions: 2023-05-20.") == NOT_FOUND
    assert stance(UNCLEAR + quote) == HEDGED and stance(QUOTED + quote) == ASSERTS
    assert stance("You never mentioned your landlord's name.") == stance("") == NOT_FOUND
    assert stance("It seems you live in Lisbon, but I'm not sure.") == HEDGED
    assert stance("You live in Lisbon.") == ASSERTS


def test_leading_with_the_current_value_and_presenting_a_stale_one_as_current():
    current, stale = ["Lisbon"], ["Porto"]
    latest_first = QUOTED + '\n- latest, 2023-05-20, you said: "We moved to Lisbon."\n- earlier, 2023-01-12, you said: "I live in Porto."'
    assert leads_with_current(latest_first, current, stale) and not stale_as_current(latest_first, stale, current)
    by_score = QUOTED + '\n- 2023-01-12, you said: "I live in Porto."\n- 2023-05-20, you said: "We moved to Lisbon."'
    assert not leads_with_current(by_score, current, stale) and stale_as_current(by_score, stale, current)
    unmarked_after = QUOTED + '\n- 2023-05-20, you said: "We moved to Lisbon."\n- 2023-01-12, you said: "I live in Porto."'
    assert not leads_with_current(unmarked_after, current, stale)  # the stale quote, last, still reads as current
    assert leads_with_current("You moved from Porto to Lisbon in May.", current, stale)  # one sentence states the change
    assert leads_with_current("You live in Lisbon. Before that you lived in Porto.", current, stale)
    assert not leads_with_current("You live in Porto. You moved to Lisbon later.", current, stale)
    assert not leads_with_current(NOT_FOUND_REPLY, current, stale) and not stale_as_current(NOT_FOUND_REPLY, stale, current)
    assert mentions("rent: $1,550 a month", ["1,550"]) and not mentions("11 houseplants", ["1"])
    assert doctest.testmod(answers).failed == 0


# --- the graph on the suite -----------------------------------------------------------------------------------------


def test_every_question_gets_a_reply_and_small_memories_disclose_their_evidence(replies):
    current = [r for r in replies if r["kind"] == "current"]
    assert len(current) >= 48 and all(r["reply"].strip() for r in replies)
    figures = suite_figures(current)
    assert figures["evidence_recall"] >= 0.9, figures  # measured 1.000 before issue 29's reply changes


def test_the_reply_leads_with_the_current_value(replies):
    current = [r for r in replies if r["kind"] == "current"]
    failing = [r["question_id"] for r in current if not r["leads_with_current"]]
    assert 1 - len(failing) / len(current) >= GOAL_LEADS, failing


def test_a_stale_value_is_never_presented_as_current(replies):
    assert [r["question_id"] for r in replies if r["kind"] == "current" and r["stale_as_current"]] == []


@REPLY_BEHAVIOUR
def test_what_was_never_said_is_not_in_memory(replies):
    never = [r for r in replies if r["kind"] == "never"]
    failing = [r["question_id"] for r in never if r["stance"] != NOT_FOUND]
    assert 1 - len(failing) / len(never) >= GOAL_NOT_IN_MEMORY, failing
