"""The agent-facing memory tools over a raw-mode memory (L1/L2 from a scripted model: offline)."""

import pytest
from conftest import HISTORY, make_session
from graph_helpers import ScriptedChatModel
from langchain.agents import create_agent
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

from apdmem.memory.layers import TURN_CHARS
from apdmem.tools import LISTED_SESSIONS, MAX_RAW_TURNS, make_memory_tools, parse_turns, read_raw


@pytest.fixture
def tools(make_memory, history):
    memory = make_memory(chat_model=ScriptedChatModel())
    memory.ingest(history)
    return {t.name: t for t in make_memory_tools(memory)}


def test_four_tools_with_documented_arguments(tools):
    assert list(tools) == ["search_memory", "read_facts", "read_notes", "read_raw"]
    assert set(tools["search_memory"].args) == {"query", "k", "date_range", "filter"}
    assert set(tools["read_facts"].args) == {"session_id"}
    assert set(tools["read_notes"].args) == set(tools["read_raw"].args) == {"session_id", "turns"}
    assert all(t.description for t in tools.values())


def test_search_memory_names_the_session(tools):
    text = tools["search_memory"].invoke({"query": "What is my dog's name?", "k": 3})
    lines = text.splitlines()
    assert len(lines) == 3 and lines[0].startswith("s-dog (2024-03-10): ")
    assert "Biscuit" in lines[0]


def test_search_memory_prefers_a_date_range_and_names_the_form_of_a_bad_one(tools):
    assert tools["search_memory"].invoke({"query": "What did I do?", "k": 1}).startswith("s-bread ")
    assert tools["search_memory"].invoke({"query": "What did I do?", "k": 1, "date_range": "2024-05-01..2024-05-31"}
                                         ).startswith("s-knee (2024-05-20)")  # of May, it ranked third without
    for bad in ("last May", "2024-05-01..", "2024-02-30"):
        assert tools["search_memory"].invoke({"query": "What did I do?", "date_range": bad}) == (
            f"Not searched: date range: expected START..END as ISO dates, e.g. 2023-05-01..2023-05-31 (one day: "
            f"2023-05-01); got {bad!r}.")


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
    assert parse_turns(text) == expected


@pytest.mark.parametrize("text", ["first", "0", "7-5", "3-", "-2", "1,,2", "2.5"])
def test_a_malformed_turn_list_is_an_error_saying_what_is_expected(text):
    with pytest.raises(ValueError, match="like '3,5-7'"):
        parse_turns(text)


def test_search_memory_on_an_empty_memory(make_memory):
    (search,) = [t for t in make_memory_tools(make_memory("nobody")) if t.name == "search_memory"]
    assert search.invoke({"query": "anything"}) == "This memory holds no sessions yet: there is nothing to search."


# --- bad arguments inside an agent: a message the model can act on, never an exception -------------------------------


class ToolCallingModel(BaseChatModel):
    """A scripted tool-calling model, for routing tests: replies with the messages of `script` in order, then
    "done"; `seen` keeps what it was sent each time. (LangChain's fake chat models cannot bind tools.)"""

    script: list[AIMessage] = Field(default_factory=list)
    seen: list[list] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted-tool-calls"

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        self.seen.append(list(messages))
        reply = self.script.pop(0) if self.script else AIMessage(content="done")
        return ChatResult(generations=[ChatGeneration(message=reply)])


SESSIONS = ", ".join(HISTORY)  # the ids, oldest first, as the tools list them
# (tool, arguments, what the reply must name): an unknown session, malformed turns, turns outside the session
BAD_CALLS = [
    ("read_facts", {"session_id": "s99"}, f"The sessions you may read are: {SESSIONS}."),
    ("read_notes", {"session_id": "s99", "turns": "1"}, f"The sessions you may read are: {SESSIONS}."),
    ("read_raw", {"session_id": "s99"}, f"The sessions you may read are: {SESSIONS}."),
    ("read_raw", {"session_id": "../s-dog"}, f"The sessions you may read are: {SESSIONS}."),
    ("read_notes", {"session_id": "s-dog", "turns": "first"}, "Turns must be 1-based numbers and ranges like '3,5-7', not 'first'; session 's-dog' has turns 1-6"),
    ("read_raw", {"session_id": "s-dog", "turns": "first"}, "Turns must be 1-based numbers and ranges like '3,5-7', not 'first'; session 's-dog' has turns 1-6"),
    ("read_notes", {"session_id": "s-dog", "turns": "9"}, "Turns '9' are outside the session: session 's-dog' has turns 1-6."),
    ("read_raw", {"session_id": "s-dog", "turns": "9"}, "Turns '9' are outside the session: session 's-dog' has turns 1-6."),
    ("search_memory", {"query": "  "}, "The query is empty"),
    ("search_memory", {"query": "my dog", "k": 0}, "k must be between 1 and 50"),
]


def test_bad_arguments_come_back_to_the_agent_as_messages_naming_what_is_valid(tools):
    calls = [{"name": name, "args": args, "id": f"call-{i}", "type": "tool_call"} for i, (name, args, _) in enumerate(BAD_CALLS)]
    model = ToolCallingModel(script=[AIMessage(content="", tool_calls=calls)])
    agent = create_agent(model, list(tools.values()))
    out = agent.invoke({"messages": [HumanMessage("What did I name my dog?")]})
    assert out["messages"][-1].content == "done"  # the loop went on to the model's next turn and finished
    replies = {m.tool_call_id: m for m in out["messages"] if isinstance(m, ToolMessage)}
    for i, (name, args, expected) in enumerate(BAD_CALLS):
        assert expected in replies[f"call-{i}"].content, (name, args, replies[f"call-{i}"].content)
        assert replies[f"call-{i}"].status == "error"
    assert len(model.seen) == 2 and sum(isinstance(m, ToolMessage) for m in model.seen[1]) == len(BAD_CALLS)


def test_turns_partly_outside_a_session_are_read_and_the_rest_named(tools):
    text = tools["read_raw"].invoke({"session_id": "s-dog", "turns": "5-9"})
    lines = text.splitlines()
    assert [line.split("]")[0][-6:] for line in lines[:2]] == ["turn 5", "turn 6"]
    assert lines[2] == "(turns 7-9 are outside the session: session 's-dog' has turns 1-6.)"
    notes = tools["read_notes"].invoke({"session_id": "s-dog", "turns": "6,8"})
    assert notes.splitlines()[-1] == "(turn 8 is outside the session: session 's-dog' has turns 1-6.)"


def test_a_long_read_says_which_turns_to_ask_for_next(make_memory):
    memory = make_memory()
    memory.ingest([make_session("s-long", "2024-06-01T08:00", [f"message {i}" for i in range(1, 31)])])
    (raw,) = [t for t in make_memory_tools(memory) if t.name == "read_raw"]
    lines = raw.invoke({"session_id": "s-long"}).splitlines()
    assert len(lines) == MAX_RAW_TURNS + 1
    assert lines[-1] == f"(showing {MAX_RAW_TURNS} of the 30 turns asked for; session 's-long' has turns 1-30: ask for turns 13-30 next.)"


def test_an_unknown_session_in_a_large_memory_points_to_search(make_memory):
    memory = make_memory()
    memory.ingest([make_session(f"s{n:02}", f"2024-01-{n + 1:02}T08:00", [f"day {n}", "ok"]) for n in range(LISTED_SESSIONS + 1)])
    (facts,) = [t for t in make_memory_tools(memory) if t.name == "read_facts"]
    assert facts.invoke({"session_id": "s99"}) == (f"There is no session 's99'. This memory holds {LISTED_SESSIONS + 1} sessions: "
                                                    "find the ones you need with search_memory, which names each session's id.")
