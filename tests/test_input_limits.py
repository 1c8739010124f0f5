"""Hostile input, in process (issue 30, items 2, 3, 4 and ids in errors): dates outside the calendar, graph
inputs and run contexts of the wrong type, sizes past the documented limits (`apdmem.limits`), and ids with
newlines or ten thousand characters. Each fails in one line naming the field, or, for a date, is ignored with
its reason; nothing is stored. The same through `langgraph dev` is in test_service_server.py."""

import re
import tracemalloc
from datetime import date

import pytest
from conftest import make_session
from graph_helpers import clean_environment, run_graph
from test_questions import cli

from apdmem import Context
from apdmem.errors import ConfigError, InputError, InvalidIdError, LimitError
from apdmem.graph import build_graph
from apdmem.graph.service import build_service_graph
from apdmem.limits import MAX_QUESTION_CHARS, MAX_REMEMBER_SESSIONS, MAX_TURNS_PER_READ
from apdmem.memory import Memory
from apdmem.memory.layers import parse_l3, render_l3
from apdmem.nodes.decompose import events
from apdmem.nodes.dates import resolve_relative_dates
from apdmem.tools import make_memory_tools

# Sessions on the first and the last day of the calendar.
FIRST = make_session("s-first", "0001-01-01T00:00", ["I planted an olive tree in my garden today.", "They live for centuries."])
LAST = make_session("s-last", "9999-12-31T23:59", ["I sold my vintage bicycle to a neighbour.", "Hope it gets good use."])
NEWLINES = "a\n" * 5_000  # a session id of 10,000 characters, newlines included


@pytest.fixture
def edges(make_memory):
    memory = make_memory()  # the default install's models: L1/L2 are the session's own sentences
    memory.ingest([FIRST, LAST])
    return memory


def snapshot(memory) -> dict:
    keys = memory.store.keys()
    return dict(zip(keys, memory.store.get_many(keys)))


# --- item 2: dates outside years 1-9999 ---------------------------------------------------------------------


@pytest.mark.parametrize(("today", "question", "expression"), [
    (date(2023, 5, 30), "What did I do 1000000 days ago?", "1000000 days ago"),
    (date(2023, 5, 30), "What did I do in the last 99999999999999999999 years?", "in the last 99999999999999999999 years"),
    (date(9999, 12, 31), "What will I sell tomorrow?", "tomorrow"),
    (date(9999, 12, 30), "What is planned for next week?", "next week"),
    (date(9999, 12, 31), "Any plans this weekend?", "this weekend"),
    (date(1, 1, 1), "What did I plant yesterday?", "yesterday"),
    (date(1, 1, 3), "What did I plant last week?", "last week"),
    (date(2023, 5, 30), "What did I do 5000 years ago?", "5000 years ago"),
])
def test_a_date_outside_the_calendar_is_ignored_with_its_reason(today, question, expression):
    ignored: list[str] = []
    assert resolve_relative_dates(question, today, ignored) == []
    assert len(ignored) == 1 and ignored[0].startswith(repr(expression)) and "out" in ignored[0]


def test_dates_at_the_ends_of_the_calendar_still_resolve():
    (hint,) = resolve_relative_dates("What did I plant yesterday?", date(1, 1, 2))
    assert (hint.start, hint.describe()) == (date(1, 1, 1), '"yesterday" = 0001-01-01 (Monday)')
    assert resolve_relative_dates("What did I plant?", date(1, 1, 1)) == []  # no expression, no error
    ignored: list[str] = []
    hints = resolve_relative_dates("Did I sell it yesterday or tomorrow?", date(9999, 12, 31), ignored)
    assert [h.expression for h in hints] == ["yesterday"] and ignored == ["'tomorrow': outside the years 1-9999"]


def test_the_graph_answers_at_the_ends_of_the_calendar(edges, monkeypatch):
    """The question that raised OverflowError is answered; the stream says which date was ignored and why; a
    session dated in year 1 keeps a heading its L3 page can be read back from."""
    clean_environment(monkeypatch)
    final, stream = run_graph("What did I do 1000000 days ago?", Context(), "2023-05-30", memory=edges)
    assert final["answer"] and stream[0] == {"event": "dates", "today": "2023-05-30", "dates": [],
                                              "ignored": ["'1000000 days ago': outside the years 1-9999"]}
    final, stream = run_graph("What did I sell tomorrow?", Context(), "9999-12-31T12:00", memory=edges)
    assert "s-last" in {e["session_id"] for e in final["evidence"]} and stream[0]["ignored"] == ["'tomorrow': outside the years 1-9999"]
    final, _ = run_graph("What did I plant yesterday?", Context(), "0001-01-02", memory=edges)
    assert "olive" in final["answer"]
    # A day named by its distance is taken as precise to a quarter of it: 2 days before year 1 begins, here.
    final, _ = run_graph("What did I plant 8 days ago?", Context(), "0001-01-09", memory=edges)
    assert "olive" in final["answer"]
    assert render_l3(FIRST).startswith("# L3 raw messages: session s-first (0001-01-01 00:00, Monday)")
    assert parse_l3(render_l3(FIRST)) == FIRST


def test_the_cli_answers_a_date_beyond_the_calendar_and_refuses_a_question_past_the_limit(tmp_path):
    """`apdmem ask "What did I do 1000000 days ago?"` printed a traceback; a question past the limit is one line."""
    store = str(tmp_path / "mem")
    Memory("alice", store=store, l0_mode="raw").ingest([FIRST, LAST])
    common = ["--user", "alice", "--store", store, "--no-reflection", "--tmax", "3"]
    run = cli("ask", "What did I do 1000000 days ago?", "--date", "2023-05-30", *common)
    out, err = run.stdout.decode(), run.stderr.decode()
    assert run.returncode == 0 and "Traceback" not in err, err[-2000:]
    assert "[dates] ignored: '1000000 days ago': outside the years 1-9999" in out and "(mode: extractive)" in out
    run = cli("ask", "x" * (MAX_QUESTION_CHARS + 1), *common)
    assert (run.returncode, run.stderr.decode()) == (2, "apdmem: error: question: 20,001 characters, over the limit of 20,000\n")


# --- item 3: the graphs' input and context ------------------------------------------------------------------


def test_the_question_is_required_in_the_input_schema():
    assert build_graph().get_input_jsonschema()["required"] == ["question"]
    assert build_service_graph("forget").get_input_jsonschema()["required"] == ["session_ids"]


@pytest.mark.parametrize(("inputs", "error", "message"), [
    ({}, InputError, "question: give the question as non-empty text, got none"),
    ({"question": 5}, InputError, "question: give the question as non-empty text, got int 5"),
    ({"question": ["What", "is"]}, InputError, "question: give the question as non-empty text, got list"),
    ({"question": "   "}, InputError, "question: give the question as non-empty text, got str '   '"),
    ({"question": "x" * (MAX_QUESTION_CHARS + 1)}, LimitError, "question: 20,001 characters, over the limit of 20,000"),
    ({"question": "Where?", "question_date": 5}, InputError, "question_date: date must be a string, got int 5"),
    ({"question": "Where?", "question_date": "99999-01-01"}, InputError, "question_date: unrecognized date '99999-01-01'"),
])
def test_a_bad_question_fails_in_one_line_naming_the_field(edges, monkeypatch, inputs, error, message):
    clean_environment(monkeypatch)
    with pytest.raises(error) as failed:
        build_graph(memory=edges).invoke(inputs, context=Context())
    assert str(failed.value).startswith(message) and "\n" not in str(failed.value)


@pytest.mark.parametrize(("context", "message"), [
    ({"layers": 5}, "context field 'layers' must be a string, got int 5"),
    ({"reflection": "false"}, "context field 'reflection' must be true or false, got str 'false'"),
    ({"follow_links": 0}, "context field 'follow_links' must be true or false, got int 0"),
    ({"tmax": "3"}, "context field 'tmax' must be an integer, got str '3'"),
    ({"top_k": True}, "context field 'top_k' must be an integer, got bool True"),
    ({"top_k": 1_000_000}, "context field 'top_k' must be an integer from 1 to 100, got 1000000"),
    ({"drill_width": 17}, "context field 'drill_width' must be an integer from 1 to 16, got 17"),
    ({"user_id": ["alice"]}, "context field 'user_id' must be a string, got list ['alice']"),
    (None, "the run has no context"),
])
def test_a_bad_context_fails_in_one_line_naming_the_field(edges, monkeypatch, context, message):
    clean_environment(monkeypatch)
    with pytest.raises(ConfigError, match=re.escape(message)):
        build_graph(memory=edges).invoke({"question": "What did I plant?"}, context=context)


def test_every_graph_refuses_a_run_without_context(edges):
    for name in ("remember", "forget", "sessions"):
        with pytest.raises(ConfigError, match="the run has no context"):
            build_service_graph(name, memory=edges).invoke({"session_ids": ["s-first"]}, context=None)
    assert edges.session_ids() == ["s-first", "s-last"]


def test_a_boolean_from_the_environment_is_a_boolean_word(monkeypatch):
    clean_environment(monkeypatch)
    monkeypatch.setenv("APDMEM_REFLECTION", "off")
    assert Context().reflection is False
    monkeypatch.setenv("APDMEM_REFLECTION", "flase")
    with pytest.raises(ConfigError, match="APDMEM_REFLECTION='flase' is not a boolean"):
        Context()


# --- item 4: sizes past the limits ------------------------------------------------------------------------


def test_remember_past_its_limits_fails_before_anything_is_parsed_or_stored(edges):
    remember, before = build_service_graph("remember", memory=edges), snapshot(edges)
    record = {"session_id": "s-many", "date": "2024-06-01", "messages": [{"role": "user", "content": "hi"}]}
    too_many = [{**record, "session_id": f"s-{i}"} for i in range(MAX_REMEMBER_SESSIONS + 1)]
    with pytest.raises(LimitError, match=r"^sessions: 101 sessions, over the limit of 100"):
        remember.invoke({"sessions": too_many}, context=Context())
    big = [{"role": "user", "content": "word " * 39_000}] * 60  # each message within its own limit, 11.7 MB in all
    with pytest.raises(LimitError, match=r"^input: 11,70\d,\d+ bytes, over the limit of 10,000,000"):
        remember.invoke({"session_id": "s-big", "messages": big}, context=Context())
    assert snapshot(edges) == before


def test_a_turn_range_past_the_limit_is_one_line_without_listing_it(edges):
    """'1-100000000' grew a server by 3.7 GB (a list of every number) and let MemoryError escape the tool."""
    tools = {t.name: t for t in make_memory_tools(edges)}
    tracemalloc.start()
    try:
        for name in ("read_raw", "read_notes"):
            reply = tools[name].invoke({"session_id": "s-first", "turns": "1-100000000"})
            assert reply == ("Turns: 100,000,000 turns, over the limit of 1,000; session 's-first' has turns 1-2 "
                             "(leave turns empty for all of them).")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50_000_000, peak  # memory, not time: the range is counted, never listed
    within = tools["read_raw"].invoke({"session_id": "s-first", "turns": f"1-{MAX_TURNS_PER_READ}"})
    assert "olive tree" in within and "turns 3-1000 are outside the session" in within


def test_search_memory_past_its_limits(edges):
    search = {t.name: t for t in make_memory_tools(edges)}["search_memory"]
    assert search.invoke({"query": "olive", "k": 51}) == "k must be between 1 and 50, got 51."
    assert search.invoke({"query": "olive " * 4_000}).startswith("The query is 24,000 characters, over the limit of 20,000")


@pytest.mark.parametrize("question", [
    "Which did I do first, " + "a or " * 20_000 + "b?",
    "How much in total did I spend on " + "apples and " * 9_000 + "pears?",
    "How many days between " * 4_500 + "now?",
    "How many days before " + "a before " * 11_000 + "b?",
])
def test_a_crafted_question_of_100000_characters_names_a_few_events(question):
    """These took minutes in `events` (quadratic; benchmarks/bench_crafted_questions.py measures it): now at
    most 8 queries, each made from a part of the question."""
    assert len(question) >= 90_000
    found = events(question)
    assert len(found) <= 8 and all(len(q) < len(question) for q in found)


# --- item 8 (part): ids echoed in errors ------------------------------------------------------------------


def test_an_id_with_newlines_or_10000_characters_is_shown_once_quoted_and_cut(edges):
    remember, forget = build_service_graph("remember", memory=edges), build_service_graph("forget", memory=edges)
    failures = []
    with pytest.raises(InputError) as failed:
        remember.invoke({"session_id": NEWLINES, "messages": [{"role": "user", "content": "hi"}]}, context=Context())
    failures.append(str(failed.value))
    with pytest.raises(InvalidIdError) as failed:
        forget.invoke({"session_ids": [NEWLINES]}, context=Context())
    failures.append(str(failed.value))
    tools = {t.name: t for t in make_memory_tools(edges)}
    failures.append(tools["read_raw"].invoke({"session_id": NEWLINES, "turns": ""}))
    for message in failures:
        assert "\n" not in message and len(message) < 400, message
        assert message.count(repr("a\n" * 40)) == 1 and "... (10,000 characters)" in message, message
