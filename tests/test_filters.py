"""Search the way users filter: a session's metadata (given to `remember`, or in the file `ingest` reads) is stored
with it, kept when it is extended and copied by `migrate`; `Memory.search` and the agent's search tool keep the
sessions whose metadata and date match a filter; a filter or date range of another form is a one-line error naming
the form; and `Memory.search(rerank=True)` ranks as the controller's search node does, lifts included; on both
stores."""

import json
from types import SimpleNamespace

import pytest
from conftest import HISTORY
from graph_helpers import clean_environment
from test_links import SHOP_1, SHOP_2

from apdmem.cli import main
from apdmem.errors import InputError, QueryError
from apdmem.graph import Context, Settings
from apdmem.graph.service import build_service_graph
from apdmem.memory import Memory
from apdmem.memory.migrate import migrate
from apdmem.nodes import policy
from apdmem.nodes.search import search
from apdmem.tools import make_memory_tools

EMAIL = {"s-dog", "s-job", "s-japan", "s-shop2"}  # the sessions that came by email; the others by chat
QUESTION = "What is my dog's name?"


def messages(texts: list[str]) -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": text} for i, text in enumerate(texts)]


def conversations() -> dict[str, tuple[str, list[str]]]:
    shops = {s.session_id: (s.date.isoformat(), [t.content for t in s.turns]) for s in (SHOP_1, SHOP_2)}
    return {**HISTORY, **shops}


@pytest.fixture(autouse=True)
def environment(monkeypatch):
    clean_environment(monkeypatch)


@pytest.fixture
def alice(store_location, embeddings) -> Memory:
    """Alice's memory of HISTORY and the two shopping sessions, each remembered with its channel."""
    memory = Memory("alice", store=store_location, l0_mode="raw")
    for sid, (date, texts) in conversations().items():
        memory.remember(messages(texts), session_id=sid, date=date, metadata={"channel": "email" if sid in EMAIL else "chat"})
    return memory


def found(docs) -> list[str]:
    return [d.metadata["session_id"] for d in docs]


def test_metadata_is_stored_with_the_session_and_kept_when_it_is_extended(alice, store_location):
    assert alice.manifest["sessions"]["s-dog"]["metadata"] == {"channel": "email"}
    assert alice.session("s-dog").metadata == {"channel": "email"}
    texts = HISTORY["s-dog"][1]
    alice.remember(messages([*texts, "Biscuit now sleeps in her crate."]), session_id="s-dog")  # no metadata: kept
    reopened = Memory("alice", store=store_location, l0_mode="raw")
    assert reopened.session("s-dog").metadata == {"channel": "email"} and len(reopened.session("s-dog").turns) == 7
    reopened.remember(messages(texts), session_id="s-dog", metadata={"channel": "sms", "urgent": True})
    assert reopened.manifest["sessions"]["s-dog"]["metadata"] == {"channel": "sms", "urgent": True}


def test_search_keeps_the_sessions_whose_metadata_and_date_match(alice):
    assert found(alice.search(QUESTION, k=3))[0] == "s-dog"
    assert set(found(alice.search(QUESTION, k=20, filter={"channel": "email"}))) == EMAIL
    chat = found(alice.search(QUESTION, k=3, filter={"channel": "chat"}))
    assert len(chat) == 3 and not set(chat) & EMAIL  # the best chat sessions, however weak
    assert found(alice.search(QUESTION, k=20, filter={"channel": {"$in": ["sms", "chat"]}, "date": {"$lt": "2024-03-18"}})) \
        == ["s-hiking"]
    may = found(alice.search("trip", k=20, filter={"date": {"$gte": "2024-05-01", "$lte": "2024-05-31"}}))
    assert sorted(may) == ["s-japan", "s-knee"]
    assert alice.search(QUESTION, filter={"channel": "fax"}) == []
    assert found(alice.as_retriever(k=20, filter={"channel": "email"}).invoke(QUESTION)) == found(
        alice.search(QUESTION, k=20, filter={"channel": "email"}))
    reply = make_memory_tools(alice)[0].invoke({"query": QUESTION, "k": 20, "filter": {"channel": "email"}})
    assert {line.split(" (")[0] for line in reply.splitlines()} == EMAIL  # the agent's search tool filters alike
    assert make_memory_tools(alice)[0].invoke({"query": QUESTION, "filter": {"channel": "fax"}}).startswith(
        "No conversation matches the filter")


BAD_FILTERS = [{"channel": {"$like": "e%"}}, "email", {"date": {"$gte": "last May"}}, {"channel": {"$in": "email"}},
               {"channel": {}}, {"channel": [1, 2]}]
BAD_RANGES = ["2024-05", ("2024-05-01",), ("May", "June"), 2024]


@pytest.mark.parametrize("bad", BAD_FILTERS)
def test_a_filter_of_another_form_is_a_one_line_error_naming_the_form(alice, bad):
    with pytest.raises(QueryError) as error:
        alice.search(QUESTION, filter=bad)
    message = str(error.value)
    assert message.startswith("filter must be an object of metadata names") and '{"channel": "email"' in message
    assert "\n" not in message and message.endswith(f"got {bad!r}")
    search_tool = make_memory_tools(alice)[0]
    reply = search_tool.invoke({"query": QUESTION, "filter": bad}) if isinstance(bad, dict) else None
    assert reply is None or reply.startswith("filter must be an object")  # the agent reads what is valid


@pytest.mark.parametrize("bad", BAD_RANGES)
def test_a_date_range_of_another_form_is_a_one_line_error_naming_the_form(alice, bad):
    with pytest.raises(InputError, match=r"^date_range: expected a \(start, end\) pair of ISO dates, "
                                         r"e\.g\. \('2023-05-01', '2023-05-31'\)"):
        alice.search(QUESTION, date_range=bad)


def test_bad_metadata_is_refused_in_one_line_and_changes_nothing(alice, store_location, tmp_path, capsys):
    before = alice.manifest
    for bad in ({"channel": ["email"]}, {"date": "2024-01-01"}, "email"):
        with pytest.raises(ValueError, match="metadata") as error:
            alice.remember(messages(["I moved to Lisbon."]), session_id="s-new", metadata=bad)
        assert "\n" not in str(error.value)
    path = tmp_path / "more.json"
    path.write_text(json.dumps([{"session_id": "s-new", "date": "2024-06-01T10:00", "metadata": {"channel": None},
                                 "messages": messages(["I moved to Lisbon."])}]))
    capsys.readouterr()
    code = main(["ingest", str(path), "--user", "alice", "--store", store_location, "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "record 's-new': metadata must be an object of names" in err
    alice.refresh()
    assert alice.manifest == before


def test_ingest_reads_metadata_and_migrate_copies_it(alice, store_location, tmp_path, capsys):
    path = tmp_path / "more.json"
    path.write_text(json.dumps([{"session_id": "s-lisbon", "date": "2024-06-01T10:00", "metadata": {"channel": "email"},
                                 "messages": messages(["I moved to Lisbon for a job at a bakery.", "Exciting!"])}]))
    assert main(["ingest", str(path), "--user", "alice", "--store", store_location, "--quiet"]) == 0
    target = str(tmp_path / "copy")
    [copied] = migrate(store_location, target)
    assert copied.verified
    copy = Memory("alice", store=target, l0_mode="raw")
    expected = EMAIL | {"s-lisbon"}
    assert set(found(copy.search("Where did I move?", k=20, filter={"channel": "email"}))) == expected
    assert found(copy.search("Where did I move?", k=20, filter={"channel": "email"})) == found(
        Memory("alice", store=store_location, l0_mode="raw").search("Where did I move?", k=20, filter={"channel": "email"}))


def controller_ranking(memory: Memory, question: str, date_ranges=()) -> list[str]:
    """The ranking of the controller's search node (default context: 20 sessions, links followed) for a question."""
    runtime = SimpleNamespace(context=Context(user_id="alice"), stream_writer=None)
    state = {"question": question, "queries": [question], "date_ranges": [list(r) for r in date_ranges]}
    out = search(state, runtime, settings=Settings(), memory=memory)
    return policy.ranking(out["candidates"], question)


def test_a_reranked_search_lifts_the_session_of_a_date_as_the_controller_does(alice):
    question = "What did I do with my hobbies?"
    may_5 = ("2024-05-05", "2024-05-05")
    plain = found(alice.search(question, k=9, rerank=True))
    lifted = alice.search(question, k=9, rerank=True, date_range=may_5)
    assert plain == controller_ranking(alice, question) and found(lifted) == controller_ranking(alice, question, [may_5])
    assert plain.index("s-japan") > found(lifted).index("s-japan")  # risen by its date
    japan = next(d for d in lifted if d.metadata["session_id"] == "s-japan")
    assert japan.metadata["via"] == {"date_range": list(may_5)}
    assert found(alice.search(question, k=2, rerank=True, date_range=may_5))[1] == "s-japan"


def test_a_reranked_search_lifts_linked_sessions_as_the_controller_does(alice):
    question = "How many pairs of running shoes did I buy in total?"  # gathers several sessions: links are followed
    assert alice.links("s-shop1")  # the two purchases are linked
    docs = alice.search(question, k=9, rerank=True)
    assert found(docs) == controller_ranking(alice, question) and set(found(docs)[:2]) == {"s-shop1", "s-shop2"}
    for doc in docs:  # every document has its unit and where it is, lifted or not
        assert doc.page_content and len(doc.metadata["span"]) == 2
    # A filter holds over links: a session it leaves out is never lifted in.
    chat_only = found(alice.search(question, k=9, rerank=True, filter={"channel": "chat"}))
    assert "s-shop1" in chat_only and "s-shop2" not in chat_only


def test_the_command_line_filters_and_refuses_a_bad_filter_in_one_line(alice, store_location, capsys):
    def search_cli(*args):
        capsys.readouterr()
        code = main(["search", QUESTION, "-k", "20", "--user", "alice", "--store", store_location, *args])
        return (code, *capsys.readouterr())

    code, out, err = search_cli("--filter", '{"channel": "email"}')
    shown = {line.split()[1] for line in out.splitlines() if line[:1].isdigit()}
    assert code == 0 and shown == EMAIL, err
    assert search_cli("--filter", '{"channel": "fax"}') == (0, "", "apdmem: no session matches the filter\n")
    for bad in ("channel=email", '{"channel": {"$like": "e"}}'):
        code, out, err = search_cli("--filter", bad)
        assert code == 2 and out == "" and err.count("\n") == 1 and "filter" in err and "{\"channel\": \"email\"" in err


def test_a_servers_remember_input_carries_metadata(alice):
    remember = build_service_graph("remember", memory=alice)
    one = {"session_id": "chat-9", "metadata": {"channel": "sms"},
           "messages": [{"role": "user", "content": "My cat is called Miso."}, {"role": "ai", "content": "Cute!"}]}
    several = {"sessions": [{"session_id": "mail-9", "date": "2024-06-02T09:00", "metadata": {"channel": "sms"},
                             "messages": [{"role": "user", "content": "Miso caught a mouse today."}]}]}
    for inputs in (one, several):
        assert remember.invoke(inputs, context=Context(user_id="alice"))["added"]
    assert set(found(alice.search("my cat Miso", k=20, filter={"channel": "sms"}))) == {"chat-9", "mail-9"}

