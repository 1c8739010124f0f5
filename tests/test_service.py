"""Memory as a service, in process: the remember / forget / sessions graphs (all-or-nothing input, extension
of a stored session keeping the L2 notes still valid), async `Memory` methods that leave an event loop free,
and capture from a running agent (`MemoryCapture` and the `remember_fact` tool) with a scripted tool-calling
model. The same graphs behind `langgraph dev`, with auth and over MCP, are in test_service_server.py."""

import asyncio
import logging
import re
import subprocess
import time

import pytest
from conftest import HISTORY, make_session
from graph_helpers import ScriptedChatModel, ScriptedToolModel, clean_environment
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from apdmem import Context, Settings, build_graph
from apdmem.errors import InputError, UnknownSessionError
from apdmem.graph.service import SERVICE_GRAPHS, build_service_graph
from apdmem.memory import Memory
from apdmem.memory.store import memory_store
from apdmem.tools import make_memory_tools
from apdmem.tools.capture import MemoryCapture, conversation, make_remember_tool, remember_fact, save_conversation

# The controller with every model decision off: it searches once, reads L3 and answers (scripted model).
QUICK = {"controller": False, "layers": "L3", "organized_notes": False, "draft_answer": False, "decomposition": False,
         "date_normalization": False, "tmax": 3}


def record(session) -> dict:
    """A Session as the generic format's JSON record (what a client sends to `remember`)."""
    return {"session_id": session.session_id, "date": session.date.isoformat(),
            "messages": [{"role": t.role, "content": t.content} for t in session.turns]}


def snapshot(memory) -> dict:
    keys = memory.store.keys()
    return dict(zip(keys, memory.store.get_many(keys)))


@pytest.fixture
def served(make_memory):
    """(memory, context, graphs): an empty raw-mode memory with a scripted chat model, a run context, and the
    remember / forget / sessions graphs bound to that memory."""
    memory = make_memory(chat_model=ScriptedChatModel())
    return memory, Context(user_id="alice"), {name: build_service_graph(name, memory=memory) for name in SERVICE_GRAPHS}


# --- the graphs --------------------------------------------------------------------------------------------


def test_remember_sessions_and_forget_through_the_graphs(served, history):
    memory, context, graphs = served
    out = graphs["remember"].invoke({"sessions": [record(s) for s in history[:3]]}, context=context)
    assert out == {"added": ["s-hiking", "s-dog", "s-bread"], "updated": [], "unchanged": [], "turns": 18, "units": 6}
    listed = graphs["sessions"].invoke({}, context=context)["sessions"]
    assert listed == [{"session_id": s.session_id, "date": s.date.isoformat(), "turns": 6} for s in history[:3]]
    assert graphs["remember"].invoke({"sessions": [record(history[0])]}, context=context)["unchanged"] == ["s-hiking"]

    one = {"session_id": "chat-1", "messages": [{"role": "user", "content": "My cat is called Miso."},
                                                 {"role": "ai", "content": "Cute name!"}]}
    assert graphs["remember"].invoke(one, context=context)["added"] == ["chat-1"]
    assert memory.search("What is my cat called?", k=1)[0].metadata["session_id"] == "chat-1"

    assert graphs["forget"].invoke({"session_ids": ["s-dog", "chat-1"]}, context=context) == {"forgotten": ["s-dog", "chat-1"]}
    assert memory.session_ids() == ["s-hiking", "s-bread"]
    assert not any("Biscuit" in (v or b"").decode(errors="replace") or "Miso" in (v or b"").decode(errors="replace")
                   for v in snapshot(memory).values())


@pytest.mark.parametrize("bad, message", [
    ({}, "nothing to remember"),
    ({"messages": [{"role": "user", "content": "hi"}]}, "'messages' needs a 'session_id'"),
    ({"sessions": [], "messages": []}, "either 'sessions' or 'messages'"),
    ({"sessions": "s-new"}, "sessions: expected a non-empty list"),
    ({"sessions": [{"session_id": "s-new", "date": "2024-06-01", "messages": [{"role": "user", "content": "hi"}]},
                   {"session_id": "s-late", "messages": [{"role": "user", "content": "hi"}]}]},
     "sessions, record 's-late': missing field 'date'"),
    ({"sessions": [{"session_id": "a/b", "date": "2024-06-01", "messages": [{"role": "user", "content": "hi"}]}]},
     "invalid session id"),
    ({"session_id": "s-dog", "messages": [{"role": "bot", "content": "hi"}]}, "messages, record 's-dog': message 0: unknown role 'bot'"),
    ({"session_id": "s-dog", "messages": [{"role": "user", "content": "hi"}], "date": "someday"}, "unrecognized date 'someday'"),
])
def test_bad_remember_input_fails_in_one_line_and_changes_nothing(served, history, bad, message):
    memory, context, graphs = served
    memory.ingest(history[:2])
    before = snapshot(memory)
    with pytest.raises(InputError, match=message) as failed:
        graphs["remember"].invoke(bad, context=context)
    assert "\n" not in str(failed.value)
    assert snapshot(memory) == before


def test_forget_with_an_unknown_id_forgets_nothing(served, history):
    memory, context, graphs = served
    memory.ingest(history[:2])
    before = snapshot(memory)
    with pytest.raises(UnknownSessionError, match="no session 's-nope'"):
        graphs["forget"].invoke({"session_ids": ["s-dog", "s-nope"]}, context=context)
    for bad in ({}, {"session_ids": []}, {"session_ids": "s-dog"}, {"session_ids": [3]}):
        with pytest.raises(InputError, match="'session_ids' must be a non-empty list"):
            graphs["forget"].invoke(bad, context=context)
    assert snapshot(memory) == before


def test_an_extended_session_keeps_the_l2_notes_of_its_unchanged_turns(served):
    memory, context, graphs = served
    model = memory.chat_model
    texts = HISTORY["s-dog"][1]
    first = {"session_id": "s-dog", "messages": [{"role": "user" if i % 2 == 0 else "assistant", "content": t}
                                                 for i, t in enumerate(texts[:4])]}
    graphs["remember"].invoke(first, context=context)
    date = memory.session("s-dog").date  # no date given: dated now
    memory.notes("s-dog")
    memory.facts("s-dog")
    assert len(model.prompts_of("EvidenceNotes")) == 1 and len(model.prompts_of("KeyFacts")) == 1

    def turns_asked(since: int) -> set[int]:
        """Turns (1-based) whose L2 notes the model was asked for since its `since`-th notes call."""
        return {int(n) for p in model.prompts_of("EvidenceNotes")[since:] for n in re.findall(r"^\[(\d+)\] ", p, re.M)}

    more = [{"role": "user", "content": "Biscuit graduated from puppy school at the Pawsitive Academy."},
            {"role": "assistant", "content": "Well done, Biscuit!"}]
    out = graphs["remember"].invoke({**first, "messages": first["messages"] + more}, context=context)
    assert out["updated"] == ["s-dog"] and out["turns"] == 6
    assert memory.session("s-dog").date == date  # the stored date is kept
    assert sorted(memory.notes("s-dog")) == list(range(6))
    assert turns_asked(1) == {5, 6}  # the notes of the four unchanged turns were kept
    memory.facts("s-dog")
    assert len(model.prompts_of("KeyFacts")) == 2  # L1 covers the whole session: made again
    assert memory.search("Where did my puppy go to school?", k=1)[0].metadata["session_id"] == "s-dog"

    # A corrected turn loses its notes, the others keep theirs; another date invalidates them all.
    corrected = first["messages"] + more
    corrected[2] = {"role": "user", "content": "She's eleven weeks old."}
    graphs["remember"].invoke({**first, "messages": corrected}, context=context)
    asked = len(model.prompts_of("EvidenceNotes"))
    memory.notes("s-dog")
    assert turns_asked(asked) == {3}
    graphs["remember"].invoke({**first, "messages": corrected, "date": "2024-03-11T08:00"}, context=context)
    asked = len(model.prompts_of("EvidenceNotes"))
    memory.notes("s-dog")
    assert turns_asked(asked) == {1, 2, 3, 4, 5, 6}


# --- async -------------------------------------------------------------------------------------------------


def ticks_during(coroutine_factory) -> tuple[int, object]:
    """Run a coroutine beside a ticker that counts how often the event loop let it run meanwhile."""

    async def main():
        ticks, done = 0, asyncio.Event()

        async def ticker():
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.005)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)  # the ticker starts
        started = ticks
        try:
            result = await coroutine_factory()
        finally:
            done.set()
            await task
        return ticks - started, result

    return asyncio.run(main())


def test_async_methods_leave_the_event_loop_free(make_memory, history, monkeypatch):
    clean_environment(monkeypatch)
    memory = make_memory(chat_model=ScriptedChatModel())
    more = [make_session(f"s-extra-{i}", "2024-06-01T10:00", [f"Note {i}: " + " ".join(HISTORY["s-job"][1])] * 12)
            for i in range(12)]

    async def blocking():  # the control: the synchronous call inside a coroutine holds the loop
        return memory.ingest(history[:3])

    blocked, _ = ticks_during(blocking)
    assert blocked == 0
    started = time.perf_counter()
    ticks, report = ticks_during(lambda: memory.aingest(history[3:] + more))
    seconds = time.perf_counter() - started
    assert len(report.added) == 4 + len(more)
    assert ticks >= 3 and ticks >= seconds / 0.005 / 20  # the ticker ran all along, not only at the end

    docs = asyncio.run(memory.asearch("What is my dog's name?", k=1))
    assert docs[0].metadata["session_id"] == "s-dog"
    assert "Biscuit" in asyncio.run(memory.aread("s-dog", "L3"))
    asyncio.run(memory.aremember([{"role": "user", "content": "My cat is called Miso."}], session_id="chat-1"))
    asyncio.run(memory.aforget("s-extra-0"))
    assert "chat-1" in asyncio.run(memory.asession_ids()) and "s-extra-0" not in memory.session_ids()

    graph = build_graph(settings=Settings(chat_model=ScriptedChatModel()), memory=memory)
    inputs = {"question": "What is my dog's name?", "question_date": "2024/06/01 (Sat) 10:00"}
    ticks, out = ticks_during(lambda: graph.ainvoke(inputs, context=Context(**QUICK)))
    assert out["answer"] == "scripted answer" and "s-dog" in out["opened"] and ticks >= 1


# --- capture from a running agent ---------------------------------------------------------------------------


def test_an_agent_saves_its_thread_and_a_stated_fact_once_and_a_later_question_finds_them(make_memory):
    memory = make_memory(chat_model=ScriptedChatModel())
    memory.ingest([make_session(s, d, t) for s, (d, t) in HISTORY.items()])
    fact = "My sister Maya moved to Porto in May and works as a ceramicist."
    model = ScriptedToolModel(messages=iter([
        AIMessage("", tool_calls=[{"name": "remember_fact", "args": {"fact": fact}, "id": "call-1"}]),
        AIMessage("Noted: Maya is in Porto now."),
        AIMessage("Boa sorte with the Portuguese lessons!"),
        # a later thread: the agent searches its memory for the question
        AIMessage("", tool_calls=[{"name": "search_memory", "args": {"query": "Where does my sister live?", "k": 3}, "id": "call-2"}]),
        AIMessage("Your sister Maya lives in Porto."),
    ]))
    agent = create_agent(model, [*make_memory_tools(memory), make_remember_tool(memory)],
                         middleware=[MemoryCapture(memory)], checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t1"}}
    agent.invoke({"messages": [HumanMessage("Big news: " + fact)]}, thread)
    tool_reply = next(m for m in agent.get_state(thread).values["messages"] if isinstance(m, ToolMessage))
    assert tool_reply.content.startswith("Saved to memory as session fact-")
    # Stored once: the captured thread holds the user's statement; the fact's own session was forgotten.
    assert "thread-t1" in memory.session_ids() and not [s for s in memory.session_ids() if s.startswith("fact-")]
    assert [t.role for t in memory.session("thread-t1").turns] == ["user", "assistant"]  # no tool call, no tool result
    agent.invoke({"messages": [HumanMessage("I also started learning Portuguese on Duolingo.")]}, thread)
    saved = memory.session("thread-t1")
    assert [t.content for t in saved.turns] == ["Big news: " + fact, "Noted: Maya is in Porto now.",
                                                "I also started learning Portuguese on Duolingo.",
                                                "Boa sorte with the Portuguese lessons!"]
    assert sum(fact in t.content for s in memory.session_ids() for t in memory.session(s).turns) == 1

    later = agent.invoke({"messages": [HumanMessage("Where does my sister live now?")]}, {"configurable": {"thread_id": "t2"}})
    found = next(m for m in later["messages"] if isinstance(m, ToolMessage)).content
    assert "Porto" in found and "thread-t1" in {line.split(" ")[0] for line in found.splitlines()}
    assert memory.search("Which language am I learning?", k=1)[0].metadata["session_id"] == "thread-t1"


def test_capture_every_n_turns_and_at_the_end_of_a_thread(make_memory):
    memory = make_memory()
    model = ScriptedToolModel(messages=iter([AIMessage(f"reply {i}") for i in range(3)]))
    agent = create_agent(model, [], middleware=[MemoryCapture(memory, every=2)], checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t9"}}
    agent.invoke({"messages": [HumanMessage("I live in Lisbon.")]}, thread)
    assert memory.session_ids() == []
    agent.invoke({"messages": [HumanMessage("I work at a bakery.")]}, thread)
    assert len(memory.session("thread-t9").turns) == 4
    agent.invoke({"messages": [HumanMessage("My bakery opens at six.")]}, thread)
    assert len(memory.session("thread-t9").turns) == 4  # the third turn waits for the fourth ...
    report = save_conversation(memory, agent.get_state(thread).values["messages"], session_id="thread-t9")
    assert report.updated == ["thread-t9"] and len(memory.session("thread-t9").turns) == 6  # ... or the thread's end
    with pytest.raises(ValueError, match="every must be a positive"):
        MemoryCapture(memory, every=0)


def test_a_fact_is_absorbed_only_by_the_conversation_that_recorded_it(make_memory):
    memory = make_memory()
    fact = remember_fact(memory, "I am allergic to  peanuts.")
    save_conversation(memory, [HumanMessage("Hi, I'm back."), AIMessage("Welcome back!")], session_id="thread-a")
    assert fact in memory.session_ids()  # recorded elsewhere: no conversation saved holds it
    call = {"name": "remember_fact", "args": {"fact": "I am allergic to peanuts."}, "id": "c1"}
    save_conversation(memory, [HumanMessage("By the way, I am allergic to peanuts."), AIMessage("", tool_calls=[call]),
                               ToolMessage(f"Saved to memory as session {fact}.", tool_call_id="c1"), AIMessage("Noted.")],
                      session_id="thread-b")
    assert memory.session_ids() == ["thread-a", "thread-b"]


def test_conversation_keeps_what_was_said():
    messages = [HumanMessage("hi"), AIMessage("", tool_calls=[{"name": "t", "args": {}, "id": "1"}]),
                ToolMessage("42", tool_call_id="1"), AIMessage([{"type": "text", "text": "The answer is 42."}])]
    assert conversation(messages) == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "The answer is 42."}]


def test_the_remember_fact_tool_returns_what_went_wrong(make_memory):
    tool = make_remember_tool(make_memory())
    assert tool.invoke({"fact": "  "}).startswith("Not saved: the fact is empty")


def test_without_server_auth_the_run_context_names_the_user(tmp_path, history, monkeypatch):
    clean_environment(monkeypatch)
    settings = Settings(store=str(tmp_path / "mem"))
    graphs = {name: build_service_graph(name, settings=settings) for name in SERVICE_GRAPHS}
    graphs["remember"].invoke({"sessions": [record(history[0])]}, context=Context(user_id="bob"))
    assert graphs["sessions"].invoke({}, context=Context(user_id="bob"))["sessions"][0]["session_id"] == "s-hiking"
    assert graphs["sessions"].invoke({}, context=Context(user_id="alice")) == {"sessions": []}
    with pytest.raises(UnknownSessionError):
        graphs["forget"].invoke({"session_ids": ["s-hiking"]}, context=Context(user_id="alice"))
    assert settings.open_memory("bob").session_ids() == ["s-hiking"]


def test_an_extended_session_summarizes_only_its_new_windows(make_memory):
    summaries = [lambda prompt: {"summary": "A window of the dog conversation.", "keywords": ["dog"], "tags": []}] * 20
    model = ScriptedChatModel(script={"WindowSummary": summaries})
    memory = make_memory(chat_model=model, l0_mode="llm")
    texts = HISTORY["s-dog"][1]
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(texts)]
    memory.remember(messages[:4], session_id="s-dog", date="2024-03-10T18:30")
    assert len(model.prompts_of("WindowSummary")) == 1  # one window: turns 1-4
    memory.remember(messages, session_id="s-dog")
    assert len(model.prompts_of("WindowSummary")) == 2  # turns 3-6 only: the window of turns 1-4 was kept
    assert [(u.start, u.end) for u in memory.units("s-dog")] == [(0, 4), (2, 6)]
    memory.remember(messages, session_id="s-dog", date="2024-03-11T08:00")
    assert len(model.prompts_of("WindowSummary")) == 4  # another date: every window summarized again


def test_capture_on_a_read_only_store_warns_once_and_the_agent_goes_on(tmp_path, caplog):
    """Issue 30 item 5: on an immutable store every turn raised StoreError and left the thread pending (its next
    step the capture). Now the agent answers every turn, its threads finish, and one warning says why nothing
    was saved."""
    directory = tmp_path / "mem"
    Memory("alice", store=str(directory), l0_mode="raw").remember([{"role": "user", "content": "My cat is Miso."}],
                                                                   session_id="s1")
    if subprocess.run(["chattr", "-R", "+i", str(directory)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not supported here")
    try:
        memory = Memory("alice", store=str(directory), l0_mode="raw")
        model = ScriptedToolModel(messages=iter([AIMessage(f"reply {i}") for i in range(3)]))
        agent = create_agent(model, [], middleware=[MemoryCapture(memory)], checkpointer=InMemorySaver())
        for i, (thread, text) in enumerate([("t1", "I live in Lisbon."), ("t1", "I work at a bakery."), ("t2", "Hi.")]):
            config = {"configurable": {"thread_id": thread}}
            assert agent.invoke({"messages": [HumanMessage(text)]}, config)["messages"][-1].content == f"reply {i}"
            assert agent.get_state(config).next == ()  # finished, nothing pending
        warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "MemoryCapture" in r.getMessage()]
        assert len(warned) == 1 and "Operation not permitted" in warned[0] and str(directory) in warned[0], caplog.text
        assert memory.session_ids() == ["s1"]
    finally:
        subprocess.run(["chattr", "-R", "-i", str(directory)], check=True)
