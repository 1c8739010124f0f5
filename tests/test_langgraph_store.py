"""LangGraph's store API over apdmem memories (`ApdmemStore`): the BaseStore operations, sync and async, on a real
file store; then LangGraph's own agent and LangMem's memory tools, switched to apdmem by the store they are given.
The chat model only scripts the tool calls; the store, the memories and the models that rank are real."""

import asyncio
import json

import pytest
from conftest import HISTORY, make_session
from graph_helpers import ScriptedToolModel, clean_environment
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.prebuilt import create_react_agent
from langgraph.store.base import InvalidNamespaceError
from langmem import create_manage_memory_tool, create_search_memory_tool

from apdmem import ApdmemStore, Memory, Settings
from apdmem.errors import InputError

ALICE, BOB = ("memories", "alice"), ("memories", "bob")


@pytest.fixture(autouse=True)
def environment(monkeypatch):
    clean_environment(monkeypatch)


@pytest.fixture
def store(tmp_path):
    """An ApdmemStore over a file store in which alice's memory holds the tests' history."""
    Memory("alice", store=str(tmp_path), l0_mode="raw").ingest([make_session(s, d, t) for s, (d, t) in HISTORY.items()])
    return ApdmemStore(Settings(store=str(tmp_path), l0_mode="raw"))


def test_put_get_search_delete_and_list_namespaces_act_on_apdmem_memories(store, tmp_path):
    store.put(ALICE, "fact-cat", {"content": "My cat is called Miso and she loves tuna."})
    store.put(ALICE, "chat-1", {"messages": [{"role": "user", "content": "I switched my commute to cycling."},
                                             {"role": "assistant", "content": "Good for your knee too!"}],
                                "date": "2024-06-02T08:00"})
    item = store.get(ALICE, "fact-cat")
    assert item.key == "fact-cat" and tuple(item.namespace) == ALICE
    assert item.value["content"] == "My cat is called Miso and she loves tuna." and item.value["messages"][0]["role"] == "user"
    assert store.get(ALICE, "chat-1").value["content"] == ("user: I switched my commute to cycling.\n"
                                                           "assistant: Good for your knee too!")
    assert store.get(ALICE, "chat-1").created_at.isoformat().startswith("2024-06-02T08:00")
    # The items are the memory's sessions, as apdmem's own API sees them.
    memory = Memory("alice", store=str(tmp_path), l0_mode="raw")
    assert {"fact-cat", "chat-1", "s-dog"} <= set(memory.session_ids())

    hits = store.search(ALICE, query="What is my cat's name?", limit=3)
    assert [h.key for h in hits][0] == "fact-cat" and len(hits) == 3
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True) and hits[0].score > hits[1].score
    assert [h.key for h in store.search(ALICE, query="What is my cat's name?", limit=2, offset=1)] == [h.key for h in hits[1:3]]
    assert [h.key for h in store.search(ALICE, query="my commute", filter={"date": "2024-06-02T08:00:00"})] == ["chat-1"]
    listed = store.search(ALICE, limit=100)  # no query: every session, oldest first, unscored
    assert [h.key for h in listed] == memory.session_ids() and all(h.score is None for h in listed)

    store.put(ALICE, "fact-cat", {"content": "My cat is called Mochi now."})  # the same key again: replaced
    assert store.get(ALICE, "fact-cat").value["content"] == "My cat is called Mochi now."
    store.delete(ALICE, "fact-cat")
    store.delete(ALICE, "fact-cat")  # deleting what is not there changes nothing
    assert store.get(ALICE, "fact-cat") is None and "fact-cat" not in Memory("alice", store=str(tmp_path), l0_mode="raw").session_ids()

    # One user per namespace: bob sees none of alice's sessions, and no namespace spans users.
    store.put(BOB, "fact-bike", {"text": "I ride a red bike."})
    assert [h.key for h in store.search(BOB, query="What is my cat's name?")] == ["fact-bike"]
    assert store.get(BOB, "chat-1") is None
    assert store.list_namespaces() == [ALICE, BOB] and store.list_namespaces(suffix=("bob",)) == [BOB]
    assert store.list_namespaces(prefix=("memories", "*")) == [ALICE, BOB] and store.list_namespaces(prefix=("other",)) == []
    with pytest.raises(InvalidNamespaceError, match=r"one user per namespace, \('memories', '<user_id>'\)"):
        store.search(("memories",), query="cat")
    with pytest.raises(InputError, match=r"namespace \('memories', 'alice'\), record 'x': the value needs 'content', 'text' or 'messages'"):
        store.put(ALICE, "x", {"note": "no content"})
    assert store.get(ALICE, "x") is None


def test_the_async_operations(store):
    async def work():
        await store.aput(ALICE, "fact-tea", {"content": "My favourite tea is lapsang souchong."})
        found = await store.asearch(ALICE, query="Which tea do I like?", limit=1)
        got = await store.aget(ALICE, "fact-tea")
        await store.adelete(ALICE, "fact-tea")
        return found, got, await store.aget(ALICE, "fact-tea"), await store.alist_namespaces()

    found, got, gone, namespaces = asyncio.run(work())
    assert [h.key for h in found] == ["fact-tea"] and got.value["content"] == "My favourite tea is lapsang souchong."
    assert gone is None and namespaces == [ALICE]


def test_langgraph_agent_with_langmem_tools_remembers_updates_searches_and_forgets_in_apdmem(store, tmp_path):
    """LangMem's tools find the store the agent was compiled with; the namespace template names the user."""
    namespace = ("memories", "{langgraph_user_id}")
    tools = [create_manage_memory_tool(namespace), create_search_memory_tool(namespace)]

    def agent(*replies):
        return create_react_agent(ScriptedToolModel(messages=iter(replies)), tools, store=store)

    def call(name, args):
        return AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"call-{name}"}])

    def tool_reply(result) -> str:
        return next(m for m in result["messages"] if isinstance(m, ToolMessage)).content

    alice = {"configurable": {"langgraph_user_id": "alice"}}
    said = agent(call("manage_memory", {"content": "My cat is called Miso."}), AIMessage("Noted."))
    created = tool_reply(said.invoke({"messages": [HumanMessage("My cat is called Miso.")]}, alice))
    key = created.removeprefix("created memory ")
    assert created.startswith("created memory ") and store.get(ALICE, key).value["content"] == "My cat is called Miso."

    update = call("manage_memory", {"content": "My cat Miso is three years old.", "action": "update", "id": key})
    assert tool_reply(agent(update, AIMessage("Updated.")).invoke({"messages": [HumanMessage("Miso turned three.")]}, alice)) \
        == f"updated memory {key}"
    asked = agent(call("search_memory", {"query": "How old is my cat?", "limit": 2}), AIMessage("Three."))
    hits = json.loads(tool_reply(asked.invoke({"messages": [HumanMessage("How old is my cat?")]}, alice)))
    assert hits[0]["key"] == key and hits[0]["value"]["content"] == "My cat Miso is three years old."
    assert len(hits) == 2 and hits[0]["score"] > hits[1]["score"]  # apdmem's ranked sessions, with their scores
    assert Memory("alice", store=str(tmp_path), l0_mode="raw").session(key).turns[0].content == "My cat Miso is three years old."

    # Given the store, the tools work outside an agent too (no key, no model).
    direct = json.loads(create_search_memory_tool(ALICE, store=store).invoke({"query": "How old is my cat?", "limit": 1}))
    assert [hit["key"] for hit in direct] == [key]

    bob = {"configurable": {"langgraph_user_id": "bob"}}
    asked = agent(call("search_memory", {"query": "How old is my cat?"}), AIMessage("I don't know."))
    assert json.loads(tool_reply(asked.invoke({"messages": [HumanMessage("How old is my cat?")]}, bob))) == []

    forget = call("manage_memory", {"action": "delete", "id": key})
    assert tool_reply(agent(forget, AIMessage("Forgotten.")).invoke({"messages": [HumanMessage("Forget my cat.")]}, alice)) \
        == f"Deleted memory {key}"
    assert store.get(ALICE, key) is None and key not in Memory("alice", store=str(tmp_path), l0_mode="raw").session_ids()
