"""Memory as a service behind `langgraph dev` with auth on (one server for the module): alice's token writes,
asks, extends and forgets through the `remember`, `apdmem`, `forget` and `sessions` graphs, in the
foreground and in the background; bob's token cannot touch her memory; bad input fails the run in one line
and changes nothing; and a real MCP client (Streamable HTTP, bearer token) lists the graphs as tools and
calls them. Slow: starts a server."""

import asyncio
import json

import httpx
import pytest
from conftest import HISTORY
from test_servers import QUESTION_DATE, QUICK, SECRET, client_of, langgraph_dev, sessions_read

from apdmem.auth import make_token
from apdmem.memory import Memory
from apdmem.memory.store import session_key

# One worker runs the whole file (`make test` runs `--dist loadgroup`): its module fixtures are costly.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("service-server")]

DOG_SCHOOL = "Biscuit graduated from puppy school at the Pawsitive Academy on Elm Street."


def generic(session_id: str) -> dict:
    """A session of the shared history as the generic format's record."""
    date, texts = HISTORY[session_id]
    return {"session_id": session_id, "date": date,
            "messages": [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(texts)]}


def ask(client, question: str) -> dict:
    return client.runs.wait(None, "apdmem", input={"question": question, "question_date": QUESTION_DATE}, context=QUICK)


def listed(client) -> dict[str, int]:
    return {s["session_id"]: s["turns"] for s in client.runs.wait(None, "sessions", input={})["sessions"]}


def stored_text(memory_dir, user: str) -> str:
    """Every byte stored for `user`, as text (to show that a forgotten session left nothing behind)."""
    return "\n".join(p.read_bytes().decode(errors="replace") for p in (memory_dir / "users").rglob("*")
                     if p.is_file() and user in str(p.relative_to(memory_dir)))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`langgraph dev` with auth on over an empty memory directory; yields (url, memory directory)."""
    memory_dir = tmp_path_factory.mktemp("service")
    with langgraph_dev(memory_dir, APDMEM_AUTH_SECRET=SECRET) as url:
        yield url, memory_dir


def test_alice_writes_asks_extends_and_forgets_over_the_server(server):
    url, memory_dir = server
    alice = client_of(url, "alice")
    out = alice.runs.wait(None, "remember", input={"sessions": [generic(s) for s in ("s-hiking", "s-dog", "s-bread")]})
    assert out == {"added": ["s-hiking", "s-dog", "s-bread"], "updated": [], "unchanged": [], "turns": 18, "units": 6}
    assert listed(alice) == {"s-hiking": 6, "s-dog": 6, "s-bread": 6}
    assert "s-dog" in sessions_read(ask(alice, "What is my dog's name?"))

    # One conversation, in the background (no waiting): a run started now, joined later.
    thread = alice.threads.create()
    run = alice.runs.create(thread["thread_id"], "remember", input={
        "session_id": "chat-cat", "date": "2024-05-30T08:00",
        "messages": [{"role": "user", "content": "My cat Miso hides under the sofa."}, {"role": "assistant", "content": "Cats love that."}]})
    alice.runs.join(thread["thread_id"], run["run_id"])
    assert alice.runs.get(thread["thread_id"], run["run_id"])["status"] == "success"
    assert listed(alice)["chat-cat"] == 2

    # Extending s-dog: the same id, its messages and new ones; its date stays, the new content is found.
    dog = generic("s-dog")
    more = [{"role": "user", "content": DOG_SCHOOL}, {"role": "assistant", "content": "Congratulations to Biscuit!"}]
    out = alice.runs.wait(None, "remember", input={"session_id": "s-dog", "messages": dog["messages"] + more})
    assert out["updated"] == ["s-dog"] and listed(alice)["s-dog"] == 8
    assert Memory("alice", store=str(memory_dir)).session("s-dog").date.isoformat().startswith(dog["date"])
    school = ask(alice, "Where did my dog go to puppy school?")
    assert any("Pawsitive Academy" in e["text"] for e in school["evidence"] if e["session_id"] == "s-dog")

    # Forgetting s-bread: gone from the listing, from search, and from the store.
    assert "Bubbles" in stored_text(memory_dir, "alice")
    assert alice.runs.wait(None, "forget", input={"session_ids": ["s-bread"]}) == {"forgotten": ["s-bread"]}
    assert "s-bread" not in listed(alice)
    assert "s-bread" not in sessions_read(ask(alice, "What flour do I feed my sourdough starter?"))
    assert "Bubbles" not in stored_text(memory_dir, "alice")
    assert not any(session_key("s-bread") in str(p) for p in memory_dir.rglob("*"))


def test_bob_cannot_write_read_or_forget_alices_sessions(server):
    url, memory_dir = server
    alice, bob = client_of(url, "alice"), client_of(url, "bob")
    alice.runs.wait(None, "remember", input={"sessions": [generic("s-japan")]})
    before = stored_text(memory_dir, "alice")
    refused = "authenticated as 'bob' and cannot read the memory of 'alice'"
    attempts = [
        ("remember", {"sessions": [generic("s-knee")]}),
        ("remember", {"session_id": "s-japan", "messages": [{"role": "user", "content": "I cancelled Japan."}]}),
        ("forget", {"session_ids": ["s-japan"]}),
        ("sessions", {}),
        ("apdmem", {"question": "Where will I stay in Japan?"}),
    ]
    for graph, inputs in attempts:
        with pytest.raises(Exception, match=refused) as failed:
            bob.runs.wait(None, graph, input=inputs, context={**QUICK, "user_id": "alice"})
        assert "ryokan" not in str(failed.value)
    # Without naming alice, bob's runs act on bob's own (empty) memory.
    with pytest.raises(Exception, match="no session 's-japan' in this user's memory"):
        bob.runs.wait(None, "forget", input={"session_ids": ["s-japan"]})
    assert listed(bob) == {}
    assert not sessions_read(ask(bob, "Where will I stay in Japan?"))
    with pytest.raises(httpx.HTTPStatusError, match="401"):
        client_of(url, None).runs.wait(None, "remember", input={"sessions": [generic("s-knee")]})
    assert stored_text(memory_dir, "alice") == before and "s-japan" in listed(alice)


def test_a_malformed_remember_input_fails_in_one_line_and_changes_nothing(server):
    url, memory_dir = server
    alice = client_of(url, "alice")
    alice.runs.wait(None, "remember", input={"sessions": [generic("s-guitar")]})
    before = stored_text(memory_dir, "alice")
    broken = {"sessions": [generic("s-knee"), {**generic("s-job"), "messages": [{"role": "user"}]}]}
    with pytest.raises(Exception) as failed:
        alice.runs.wait(None, "remember", input=broken)
    message = str(failed.value)
    assert "sessions, record 's-job': message 0: missing field 'content'" in message and "\n" not in message
    with pytest.raises(Exception, match="nothing to remember"):
        alice.runs.wait(None, "remember", input={"sesions": [generic("s-knee")]})
    assert stored_text(memory_dir, "alice") == before and "s-knee" not in listed(alice)


def test_hostile_inputs_fail_the_run_in_one_short_line_and_dates_beyond_the_calendar_are_ignored(server):
    """Issue 30 on the server: a date beyond year 9999 answered "OverflowError: An internal error occurred"; a
    missing question, `layers=5` and a 100,000-character question ended in KeyError, AttributeError or minutes of
    decomposition; a session id of 10,000 characters with newlines came back twice, 25,000 characters long."""
    url, memory_dir = server
    alice = client_of(url, "alice")
    alice.runs.wait(None, "remember", input={"sessions": [generic("s-hiking")]})
    before = stored_text(memory_dir, "alice")
    far = alice.runs.wait(None, "apdmem", input={"question": "Where did I hike 1000000 days ago?", "question_date": QUESTION_DATE},
                          context={**QUICK, "date_normalization": True})
    assert "s-hiking" in sessions_read(far)
    refused = [
        ({"question_date": QUESTION_DATE}, QUICK, "InputError: question: give the question as non-empty text, got none"),
        ({"question": "Where did I hike?"}, {**QUICK, "layers": 5}, "ConfigError: context field 'layers' must be a string, got int 5"),
        ({"question": "x " * 50_000}, QUICK, "LimitError: question: 100,000 characters, over the limit of 20,000"),
    ]
    for inputs, context, message in refused:
        with pytest.raises(Exception) as failed:
            alice.runs.wait(None, "apdmem", input=inputs, context=context)
        assert str(failed.value) == message
    with pytest.raises(Exception) as failed:
        alice.runs.wait(None, "remember", input={"session_id": "a\n" * 5_000, "messages": generic("s-dog")["messages"]})
    message = str(failed.value)
    assert message.startswith("InputError: messages: invalid session id 'a\\na\\n") and len(message) < 400
    assert message.count(repr("a\n" * 40)) == 1 and "... (10,000 characters)" in message and "\n" not in message
    assert stored_text(memory_dir, "alice") == before


# --- MCP ---------------------------------------------------------------------------------------------------


async def mcp_session(url: str, user: str, work):
    """Run `work(session)` in an MCP session over Streamable HTTP at `url`/mcp with `user`'s bearer token."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers = {"Authorization": f"Bearer {make_token(user, SECRET)}"}
    async with create_mcp_http_client(headers=headers) as http, streamable_http_client(f"{url}/mcp", http_client=http) as streams:
        async with ClientSession(*streams[:2]) as session:
            await session.initialize()
            return await work(session)


def test_an_mcp_client_lists_the_graphs_as_tools_and_calls_remember_then_apdmem(server):
    url, _ = server

    async def work(session):
        tools = {t.name: t for t in (await session.list_tools()).tools}
        remembered = await session.call_tool("remember", {
            "session_id": "mcp-chat", "date": "2024-05-31T18:00",
            "messages": [{"role": "user", "content": "My favourite tea is a smoky lapsang souchong from Fujian."},
                         {"role": "assistant", "content": "A bold choice!"}]})
        answered = await session.call_tool("apdmem", {"question": "Which tea do I like best?", "question_date": QUESTION_DATE})
        bad = await session.call_tool("remember", {"messages": [{"role": "user", "content": "hi"}]})
        return tools, remembered, answered, bad

    tools, remembered, answered, bad = asyncio.run(mcp_session(url, "carol", work))
    assert {"apdmem", "remember", "forget", "sessions"} <= set(tools)
    assert "Save conversations" in tools["remember"].description and "extends" in tools["remember"].description
    assert "long-term memory" in tools["apdmem"].description and "Delete sessions" in tools["forget"].description
    schema = tools["remember"].input_schema
    assert schema["type"] == "object" and {"sessions", "messages", "session_id", "date"} <= set(schema["properties"])
    assert schema["$defs"]["Message"]["required"] == ["role", "content"]
    assert tools["forget"].input_schema["required"] == ["session_ids"]
    assert "question" in tools["apdmem"].input_schema["properties"]["question"]["description"]
    assert tools["apdmem"].input_schema["required"] == ["question"]

    # Results are JSON (apdmem.graph.mcp_results), as text and as structured content, not Python reprs.
    assert not remembered.is_error and json.loads(remembered.content[0].text) == remembered.structured_content == {
        "added": ["mcp-chat"], "updated": [], "unchanged": [], "turns": 2, "units": 1}
    answer = json.loads(answered.content[0].text)
    assert not answered.is_error and answer == answered.structured_content and "lapsang" in answer["answer"]
    assert {e["session_id"] for e in answer["evidence"]} == {"mcp-chat"} and answer["answer_mode"] == "extractive"
    # A failed call says what failed in one line, as the REST API does (langgraph_api alone gives "InputError").
    assert bad.is_error and bad.content[0].text == "InputError: <input>: 'messages' needs a 'session_id'"
    # carol's token wrote carol's memory, nobody else's
    assert listed(client_of(url, "carol")) == {"mcp-chat": 2} and "mcp-chat" not in listed(client_of(url, "alice"))


