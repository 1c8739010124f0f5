"""The agent-facing memory tools over a raw-mode memory (L1/L2 from a scripted model: offline)."""

import pytest
from conftest import HISTORY, make_session
from graph_helpers import ScriptedChatModel

from apdmem.memory.layers import TURN_CHARS
from apdmem.tools import MAX_RAW_TURNS, _turns, make_memory_tools, read_raw


@pytest.fixture
def tools(make_memory, history):
    memory = make_memory(chat_model=ScriptedChatModel())
    memory.ingest(history)
    return {t.name: t for t in make_memory_tools(memory)}


def test_four_tools_with_documented_arguments(tools):
    assert list(tools) == ["search_memory", "read_facts", "read_notes", "read_raw"]
    assert set(tools["search_memory"].args) == {"query", "k"}
    assert set(tools["read_facts"].args) == {"session_id"}
    assert set(tools["read_notes"].args) == set(tools["read_raw"].args) == {"session_id", "turns"}
    assert all(t.description for t in tools.values())


def test_search_memory_names_the_session(tools):
    text = tools["search_memory"].invoke({"query": "What is my dog's name?", "k": 3})
    lines = text.splitlines()
    assert len(lines) == 3 and lines[0].startswith("s-dog (2024-03-10): ")
    assert "Biscuit" in lines[0]


def test_read_raw_returns_turns_verbatim(tools):
    text = tools["read_raw"].invoke({"session_id": "s-dog", "turns": "1-2"})
    first, second = HISTORY["s-dog"][1][:2]
    assert text.splitlines() == [
        f"[2024-03-10 18:30 | s-dog | L3 turn 1] user: {first}",
        f"[2024-03-10 18:30 | s-dog | L3 turn 2] assistant: {second}",
    ]


def test_read_facts_and_notes(tools):
    facts = tools["read_facts"].invoke({"session_id": "s-guitar"})
    assert facts == "[2024-04-20 20:45 | s-guitar | L1] L1 fact: " + HISTORY["s-guitar"][1][0]
    notes = tools["read_notes"].invoke({"session_id": "s-guitar", "turns": "3,5"})
    assert notes.splitlines() == [
        "[2024-04-20 20:45 | s-guitar | L2 turn 3] L2 note of turn 3",
        "[2024-04-20 20:45 | s-guitar | L2 turn 5] L2 note of turn 5",
    ]


def test_read_raw_bounds(make_memory):
    long_turn = "x" * (TURN_CHARS * 3)
    session = make_session("s-long", "2024-06-01T08:00", [long_turn] + [f"message {i}" for i in range(1, 20)])
    memory = make_memory()
    memory.ingest([session])
    items = read_raw(memory, "s-long")
    assert len(items) == MAX_RAW_TURNS and [e["turn"] for e in items] == list(range(MAX_RAW_TURNS))
    assert items[0]["text"] == "user: " + "x" * (TURN_CHARS * 2) + " [...]"
    assert [e["turn"] for e in read_raw(memory, "s-long", [18, 19, 20, -1])] == [18, 19]  # out of range dropped


@pytest.mark.parametrize(("text", "expected"), [
    ("1", [0]),
    ("1-2", [0, 1]),
    ("3,5-7", [2, 4, 5, 6]),
    (" 2 , 4 - 5 ", [1, 3, 4]),
    ("", None),
    ("   ", None),
    (None, None),
])
def test_turn_ranges_are_one_based(text, expected):
    assert _turns(text) == expected


def test_bad_turn_range_is_an_error():
    with pytest.raises(ValueError):
        _turns("first")


def test_search_memory_on_an_empty_memory(make_memory):
    (search,) = [t for t in make_memory_tools(make_memory("nobody")) if t.name == "search_memory"]
    assert search.invoke({"query": "anything"}) == "no sessions found"
