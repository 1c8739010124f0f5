"""Memory: ingest and search, idempotence, replacement, forgetting, persistence, stale indexes, layers, per-user
isolation, interrupted runs (in process and a SIGKILLed child), and L1/L2/L0 from the embedded generative chat
model, "local:smollm2" (slow; the extractive default is tested in test_extractive.py)."""

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from conftest import HISTORY, QUESTIONS, make_session
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from apdmem.errors import ConfigError, UnknownSessionError
from apdmem.memory import Memory, Session
from apdmem.memory.backends import open_store
from apdmem.memory.generations import Generations
from apdmem.memory.store import UserStore, memory_store
from apdmem.models import LOCAL_CHAT, get_reranker
from apdmem.tools import search_memory

NEW_DOG = ["We gave Biscuit to my parents; I now foster a greyhound called Comet.",
           "Greyhounds are gentle. How is Comet settling in?",
           "Comet sleeps all day and sprints in the park at dusk.",
           "Sounds like a typical greyhound!"]  # four turns: one unit, where the old version had two


@pytest.fixture(scope="module")
def alice(embeddings, history) -> Memory:
    """A read-only memory holding the synthetic history (tests that change a memory build their own)."""
    memory = Memory("alice", store=memory_store(), l0_mode="raw")
    memory.ingest(history)
    return memory


def top(docs: list[Document]) -> list[str]:
    return [d.metadata["session_id"] for d in docs]


def answers(memory: Memory) -> list[tuple]:
    """Everything search returns for every question, to compare two memories."""
    return [(q, top(docs), [d.metadata["score"] for d in docs], [d.page_content for d in docs])
            for q in QUESTIONS for docs in [memory.search(q, k=5)]]


def snapshot(store) -> dict[str, bytes]:
    keys = sorted(store.yield_keys())
    return dict(zip(keys, store.mget(keys)))


# -------------------------------------------------------------------------------------------- ingest, search


@pytest.mark.parametrize("question, session_id", QUESTIONS.items())
def test_search_finds_the_session(alice, question, session_id):
    docs = alice.search(question, k=3)
    assert top(docs)[0] == session_id
    assert len(docs) == 3 and len(set(top(docs))) == 3


def test_ingest_report_and_manifest(make_memory, history):
    memory = make_memory()
    report = memory.ingest(history)
    assert report.added == list(HISTORY) and report.updated == report.unchanged == []
    assert report.turns == 6 * len(HISTORY) and report.units == 2 * len(HISTORY) == len(memory.index)
    assert report.usage.calls == 0 and memory.usage.calls == 0  # raw mode: no model call
    assert memory.session_ids() == list(HISTORY)  # oldest first
    assert memory.manifest["sessions"]["s-dog"] == {
        "date": "2024-03-10T18:30:00", "turns": 6, "hash": history[1].content_hash(), "units": 2}


def test_sub_queries_and_empty_queries(alice):
    assert set(top(alice.search(["my dog's name", "which mountain did I hike"], k=2))) == {"s-dog", "s-hiking"}
    assert alice.search("", k=3) == [] and alice.search(["  ", ""], k=3) == []
    assert len(alice.search("anything", k=100)) == len(HISTORY)


def test_search_of_an_empty_memory(make_memory):
    assert make_memory().search("What is my dog's name?") == []


def test_hybrid_retriever_returns_documents(alice):
    retriever = alice.as_retriever(k=3)
    assert isinstance(retriever, BaseRetriever)
    docs = retriever.invoke("What is my dog's name?")
    assert len(docs) == 3 and all(isinstance(d, Document) for d in docs)
    first = docs[0]
    assert first.metadata["session_id"] == "s-dog" and first.metadata["date"] == "2024-03-10T18:30:00"
    spans = {(u.start, u.end): u for u in alice.units("s-dog")}
    assert tuple(first.metadata["span"]) in spans
    assert first.page_content == spans[tuple(first.metadata["span"])].summary and "Biscuit" in first.page_content
    scores = [d.metadata["score"] for d in docs]
    assert all(isinstance(s, float) and s > 0 for s in scores) and scores == sorted(scores, reverse=True)


def test_search_and_retriever_can_rescore_with_the_cross_encoder(alice):
    """`rerank=True`: the sessions of the controller's pool (20) rescored as the controller's searches are (same
    scores as `search_memory` with the configured reranker), the k best kept; the first-pass score stays in the
    metadata."""
    question = "When is my puppy's first vet appointment?"
    first_pass = alice.search(question, k=20)
    rescored = alice.search(question, k=4, rerank=True)
    assert rescored == search_memory(alice, question, k=20, reranker=get_reranker())[:4]
    assert {d.metadata["session_id"] for d in rescored} <= {d.metadata["session_id"] for d in first_pass}
    assert {d.metadata["search_score"] for d in rescored} <= {d.metadata["score"] for d in first_pass}
    assert rescored[0].metadata["session_id"] == "s-dog" and "rerank_score" in rescored[0].metadata
    assert alice.as_retriever(k=4, rerank=True).invoke(question) == rescored
    assert alice.as_retriever(k=4).invoke(question) == first_pass[:4]
    with pytest.raises(ValueError, match="one query"):
        alice.search(["dog", "vet"], rerank=True)


# ------------------------------------------------------------------------------------ idempotence, replacement


def test_reingesting_the_same_sessions_is_a_no_op(make_memory, history):
    store = memory_store()
    memory = make_memory(store=store)
    memory.ingest(history)
    before, generation, size = snapshot(store), memory.manifest["generation"], len(memory.index)
    report = memory.ingest([Session.from_json(s.to_json()) for s in history])  # equal copies, not the same objects
    assert report.unchanged == list(HISTORY) and report.added == report.updated == []
    assert (report.turns, report.units) == (0, 0)
    assert len(memory.index) == len(memory.index.units) == size
    assert memory.manifest["generation"] == generation and snapshot(store) == before


def test_changed_content_replaces_the_session(make_memory, history, tmp_path):
    memory = make_memory(store=open_store(tmp_path))
    memory.ingest(history)
    memory.store.put_json({"sessions/s-dog/L1.json": ["a cached fact about Biscuit"]})  # as if read before
    changed = make_session("s-dog", "2024-03-10T18:30", NEW_DOG)
    report = memory.ingest([changed])
    assert report.updated == ["s-dog"] and report.added == [] and report.units == 1

    assert memory.session_ids() == list(HISTORY)  # still once, in its place
    assert memory.manifest["sessions"]["s-dog"]["units"] == 1
    assert len(memory.index) == len(memory.index.units) == 2 * len(HISTORY) - 1
    assert [u.session_id for u in memory.index.units].count("s-dog") == 1
    assert memory.session("s-dog") == changed
    assert "Comet" in memory.read("s-dog", "L3") and "Biscuit sleeps" not in memory.read("s-dog", "L3")
    assert memory.store.get("sessions/s-dog/L1.json") is None  # facts of the old version are gone
    assert top(memory.search("What is my greyhound called?", k=1)) == ["s-dog"]
    assert "Comet" in memory.search("What is my greyhound called?", k=1)[0].page_content

    reopened = make_memory(store=open_store(tmp_path))
    assert answers(reopened) == answers(memory)


def test_a_session_given_twice_in_one_call_keeps_the_later_version(make_memory, history):
    memory = make_memory()
    report = memory.ingest([history[1], make_session("s-dog", "2024-03-10T18:30", NEW_DOG)])
    assert report.added == ["s-dog"] and memory.session_ids() == ["s-dog"] and len(memory.index) == 1
    assert "Comet" in memory.read("s-dog", "L3")


# -------------------------------------------------------------------------------------------------- forget


def test_forget_removes_the_session_everywhere(make_memory, history, tmp_path):
    memory = make_memory(store=open_store(tmp_path))
    memory.ingest(history)
    assert memory.store.keys("sessions/s-dog/")
    memory.forget("s-dog")

    assert "s-dog" not in memory.session_ids() and len(memory.session_ids()) == len(HISTORY) - 1
    assert memory.store.keys("sessions/s-dog/") == []
    assert not [k for k in memory.store.keys() if "s-dog" in k]
    assert len(memory.index) == len(memory.index.units) == 2 * (len(HISTORY) - 1)
    for question in QUESTIONS:
        assert "s-dog" not in top(memory.search(question, k=10))
    with pytest.raises(UnknownSessionError):
        memory.session("s-dog")
    with pytest.raises(UnknownSessionError):
        memory.forget("s-dog")

    reopened = make_memory(store=open_store(tmp_path))
    assert reopened.session_ids() == memory.session_ids()
    assert answers(reopened) == answers(memory)
    assert "s-dog" not in top(reopened.search("What is my dog's name?", k=10))


# ----------------------------------------------------------------------------------------------- persistence


def test_reopened_memory_gives_identical_results_without_rebuilding(make_memory, history, tmp_path, monkeypatch):
    memory = make_memory(store=open_store(tmp_path))
    memory.ingest(history)
    repaired = []
    monkeypatch.setattr(Generations, "repair", lambda self, raw, damage: repaired.append(damage))
    reopened = make_memory(store=open_store(tmp_path))
    assert repaired == []  # loaded from the saved index
    assert reopened.session_ids() == memory.session_ids()
    assert [u.to_json() | {"embed_texts": []} for u in reopened.index.units] == [u.to_json() | {"embed_texts": []} for u in memory.index.units]
    assert answers(reopened) == answers(memory)


@pytest.mark.parametrize("damage", ["no table", "no vectors", "a segment not there", "a segment named twice"])
def test_stale_index_is_rebuilt_on_open(make_memory, history, tmp_path, monkeypatch, damage):
    memory = make_memory(store=open_store(tmp_path))
    memory.ingest(history)
    user = UserStore(open_store(tmp_path), "alice")
    manifest = user.get_json("manifest.json")
    (number,) = manifest["segments"]
    if damage == "no table":
        user.delete([f"index/{number}/segment.json"])
    elif damage == "no vectors":
        user.delete([f"index/{number}/vectors.f32"])
    else:  # the manifest names a segment that is not there (e.g. copied from elsewhere), or one segment twice
        manifest["generation"] += 1
        manifest["segments"].append(number + 1 if damage == "a segment not there" else number)
        user.put_json({"manifest.json": manifest})
    repaired, repair = [], Generations.repair
    monkeypatch.setattr(Generations, "repair", lambda self, raw, why: repaired.append(why) or repair(self, raw, why))
    reopened = make_memory(store=open_store(tmp_path))
    assert len(repaired) == 1 and ("index segment" in repaired[0] or "manifest.json is unreadable" in repaired[0])
    assert answers(reopened) == answers(memory)
    assert sorted(user.keys("index/")) == [f"index/{reopened.manifest['generation']}/{name}"
                                           for name in ("segment.json", "vectors.f32")]


def test_other_embeddings_are_refused(make_memory, history, tmp_path, monkeypatch):
    make_memory(store=open_store(tmp_path)).ingest(history)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")  # the client is built, never called
    with pytest.raises(ConfigError, match="was embedded with 'local:bge-small'; this configuration uses 'openai:text-embedding-3-small'"):
        make_memory(store=open_store(tmp_path), embeddings="openai:text-embedding-3-small")
    UserStore(open_store(tmp_path), "alice").put_json({"manifest.json": {"format": 99, "generation": 1, "sessions": {}}})
    with pytest.raises(ConfigError, match="format 99"):
        make_memory(store=open_store(tmp_path))


# ---------------------------------------------------------------------------------------------------- layers


def test_l3_is_every_turn_verbatim_and_l0_one_section_per_unit(alice):
    for sid, (_, texts) in HISTORY.items():
        l3 = alice.read(sid, "L3")
        assert l3.startswith(f"# L3 raw messages: session {sid} (")
        assert all(f"## Turn {i + 1} ({'user' if i % 2 == 0 else 'assistant'})\n{text}\n" in l3 for i, text in enumerate(texts))
        assert l3.count("\n## Turn ") == len(texts)

        units = alice.units(sid)
        l0 = alice.read(sid, "L0")
        assert l0.count("\n## Turns ") == len(units) == alice.manifest["sessions"][sid]["units"] == 2
        assert "\n## Turns 1-4\n" in l0 and "\n## Turns 3-6\n" in l0
        assert all(u.summary in l0 for u in units)
    one_turn = alice.read("s-dog", "L3", turns=[2])
    assert one_turn.count("## Turn ") == 1 and "## Turn 3 (user)\n" + HISTORY["s-dog"][1][2] in one_turn
    with pytest.raises(ValueError, match="unknown layer"):
        alice.read("s-dog", "L4")
    with pytest.raises(UnknownSessionError):
        alice.read("s-nope", "L3")


# ----------------------------------------------------------------------------------------------- isolation


@pytest.mark.parametrize("kind", ["files", "memory"])
def test_users_sharing_a_store_and_session_ids_are_isolated(make_memory, history, tmp_path, kind):
    store = open_store(tmp_path) if kind == "files" else memory_store()
    alice = make_memory("alice", store=store)
    alice.ingest(history)
    # Bob has the same session ids with other content: his "s-bread" is about the dog, and so on.
    sids = list(HISTORY)
    bob_history = [make_session(sid, HISTORY[sid][0], HISTORY[sids[(i + 1) % len(sids)]][1]) for i, sid in enumerate(sids)]
    bob = make_memory("bob", store=store)
    bob.ingest(bob_history)

    assert top(alice.search("What is my dog's name?", k=1)) == ["s-dog"]
    assert top(bob.search("What is my dog's name?", k=1)) == ["s-hiking"]  # bob's s-hiking holds the dog turns
    assert "Biscuit" not in alice.read("s-hiking", "L3") and "Biscuit" in bob.read("s-hiking", "L3")

    bob_before, bob_answers = {k: bob.store.get(k) for k in bob.store.keys()}, answers(bob)
    alice.forget("s-hiking")
    assert "s-hiking" not in alice.session_ids() and "s-hiking" in bob.session_ids()
    assert {k: bob.store.get(k) for k in bob.store.keys()} == bob_before
    assert answers(bob) == bob_answers
    assert answers(make_memory("bob", store=store)) == bob_answers  # and so does a fresh view of bob's memory
    assert top(make_memory("alice", store=store).search("Which mountain did I hike with my sister?", k=10)).count("s-hiking") == 0


# ------------------------------------------------------------------------------- interrupted runs, in process


class Killed(Exception):
    """Stands for the process dying at that point: nothing after it runs."""


def die(*args, **kwargs):
    raise Killed


def test_replacement_killed_midway_leaves_a_readable_memory(make_memory, history, tmp_path, monkeypatch):
    memory = make_memory(store=open_store(tmp_path))
    memory.ingest(history)
    changed = make_session("s-dog", "2024-03-10T18:30", NEW_DOG)
    put = memory.store.put
    # Dies after the new L0 and L3 files are written, before the session.json that says the session is whole.
    monkeypatch.setattr(memory.store, "put", lambda items: die() if any(k.endswith("/session.json") for k in items) else put(items))
    with pytest.raises(Killed):
        memory.ingest([changed])

    reopened = make_memory(store=open_store(tmp_path))
    assert_readable(reopened)
    assert reopened.session_ids() == [s for s in HISTORY if s != "s-dog"]  # unlisted until the run is repeated
    assert reopened.ingest([changed]).added == ["s-dog"]
    assert_readable(reopened)
    assert reopened.session("s-dog") == changed and top(reopened.search("my greyhound Comet", k=1)) == ["s-dog"]


def test_forget_killed_while_saving_keeps_the_session(make_memory, history, tmp_path, monkeypatch):
    memory = make_memory(store=open_store(tmp_path))
    memory.ingest(history)
    expected = answers(memory)
    monkeypatch.setattr(memory.store, "put", die)
    with pytest.raises(Killed):
        memory.forget("s-dog")
    reopened = make_memory(store=open_store(tmp_path))
    assert_readable(reopened)
    assert reopened.session_ids() == list(HISTORY) and answers(reopened) == expected


def test_forget_killed_before_deleting_files_forgets_and_leftovers_never_resurface(make_memory, history, tmp_path, monkeypatch):
    memory = make_memory(store=open_store(tmp_path))
    memory.ingest(history)
    memory.store.put_json({"sessions/s-dog/L1.json": ["Biscuit is a beagle"]})
    monkeypatch.setattr(memory.store, "delete", die)
    with pytest.raises(Killed):
        memory.forget("s-dog")
    reopened = make_memory(store=open_store(tmp_path))
    assert_readable(reopened)
    assert "s-dog" not in reopened.session_ids() and "s-dog" not in top(reopened.search("What is my dog's name?", k=10))
    reopened.ingest([make_session("s-dog", "2024-03-10T18:30", NEW_DOG)])  # a new session under the old id
    assert reopened.store.get("sessions/s-dog/L1.json") is None  # the old version's facts are not served for it


def assert_readable(memory: Memory) -> None:
    """Every listed session is whole, and the index holds exactly the listed sessions' units."""
    expected_units = 0
    for sid in memory.session_ids():
        meta = memory.manifest["sessions"][sid]
        session = memory.session(sid)
        assert (len(session.turns), session.content_hash()) == (meta["turns"], meta["hash"])
        assert len(memory.units(sid)) == meta["units"] and memory.read(sid, "L3") and memory.read(sid, "L0")
        expected_units += meta["units"]
    live = [u for u, ok in zip(memory.index.units, memory.index.alive) if ok]
    assert len(live) == expected_units
    assert sorted((u.session_id, u.start) for u in live) == sorted({(u.session_id, u.start) for u in live})  # no duplicates
    assert {u.session_id for u in live} == set(memory.session_ids())


# -------------------------------------------------------------------------------- interrupted run, SIGKILL

CHILD = """
import json, sys, time
from pathlib import Path
import apdmem.memory.memory as memory_module
from apdmem.memory import Memory, Session
from apdmem.memory.backends import open_store

memory_module.CHECKPOINT_SECONDS = 0  # checkpoint after every chunk of 32 sessions
sessions_file, directory, marker = sys.argv[1:4]
saves = []
from apdmem.memory.generations import Generations
commit = Generations.commit
Generations.commit = lambda self, generation: (commit(self, generation), saves.append(1))[0]
write = Generations.write_sessions


def write_then_stall(self, sessions):
    write(self, sessions)
    if saves:  # the second chunk's layers are written, its checkpoint not yet: the parent kills us here
        Path(marker).touch()
        time.sleep(120)


Generations.write_sessions = write_then_stall
sessions = [Session.from_json(s) for s in json.load(open(sessions_file))]
Memory("alice", store=open_store(directory), l0_mode="raw").ingest(sessions)
print("finished")
"""

TOPIC_WORDS = ["kayak", "violin", "tomato", "rocket", "glacier", "pottery", "chess", "orchid", "falcon", "lantern"]


def many_sessions(n: int) -> list[Session]:
    """n sessions of 4, 6 or 8 turns (1-3 units); each names its own project, "zephyrNN"."""
    sessions = []
    for i in range(n):
        word = TOPIC_WORDS[i % len(TOPIC_WORDS)]
        texts = []
        for j in range(2 + i % 3):
            texts += [f"Update {j} on project zephyr{i:02d}: the {word} part needs {j + i} more days.",
                      f"Noted, zephyr{i:02d} is about {word}s. Anything else?"]
        date = (datetime(2023, 1, 1) + timedelta(days=i)).isoformat()
        sessions.append(make_session(f"p-{i:02d}", date, texts))
    return sessions


def test_ingestion_killed_by_sigkill_resumes_without_duplicates(make_memory, tmp_path):
    sessions = many_sessions(40)
    (tmp_path / "sessions.json").write_text(json.dumps([s.to_json() for s in sessions]))
    (tmp_path / "child.py").write_text(CHILD)
    directory = tmp_path / "mem"
    manifest = directory / "users" / "alice" / "manifest.json"
    stalled = tmp_path / "stalled"
    command = [sys.executable, str(tmp_path / "child.py"), str(tmp_path / "sessions.json"), str(directory), str(stalled)]
    with open(tmp_path / "child.log", "wb") as log:
        child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=Path(__file__).parents[1],
                                 env={**os.environ, "LANGSMITH_TRACING": "false"})
        deadline = time.monotonic() + 120
        for ready in (manifest, stalled):  # the first checkpoint is written, then the child stalls in chunk 2
            while not ready.exists() and child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    log_text = (tmp_path / "child.log").read_text()
    assert manifest.exists(), log_text
    killed = child.returncode == -signal.SIGKILL
    assert killed or child.returncode == 0, log_text

    leftovers = list((directory / "users" / "alice" / "sessions" / "p-35").glob("*"))
    memory = make_memory(store=open_store(directory))
    assert_readable(memory)
    listed = memory.session_ids()
    if killed:  # the stall makes this the usual case: first chunk checkpointed, second one written but not listed
        assert listed == [s.session_id for s in sessions[:32]]
        assert leftovers and memory.store.keys("sessions/p-35/") == []  # the unfinished chunk's files: removed at start-up
    assert top(memory.search("project zephyr05 pottery", k=1)) == ["p-05"]

    report = memory.ingest(sessions)
    assert sorted(report.unchanged) == listed and len(report.added) == 40 - len(listed) and report.updated == []
    for reader in (memory, make_memory(store=open_store(directory))):
        assert_readable(reader)
        assert reader.session_ids() == [s.session_id for s in sessions]
        assert len(reader.index) == len(reader.index.units) == sum(m["units"] for m in reader.manifest["sessions"].values())
        assert sum(m["units"] for m in reader.manifest["sessions"].values()) == sum(1 + i % 3 for i in range(40))
        found = [f"p-{i:02d}" in top(reader.search(f"project zephyr{i:02d} {TOPIC_WORDS[i % 10]}", k=3)) for i in range(40)]
        assert all(found)


# ---------------------------------------------------------------------------- L1, L2, L0 from the chat model

PUPPY = ["I just adopted a beagle puppy named Biscuit.",
         "Congratulations! Beagles are friendly dogs.",
         "She is ten weeks old and sees the vet on Friday.",
         "Remember to ask the vet about vaccinations."]


@pytest.fixture
def puppy_store():
    return memory_store()


@pytest.fixture
def puppy_memory(embeddings, puppy_store) -> Memory:
    memory = Memory("alice", store=puppy_store, l0_mode="raw", chat_model=LOCAL_CHAT)
    memory.ingest([make_session("puppy", "2024-03-02T10:00", PUPPY)])
    return memory


@pytest.mark.slow
def test_facts_come_from_the_chat_model_once_then_from_the_cache(puppy_memory, puppy_store):
    facts = puppy_memory.facts("puppy")
    calls = puppy_memory.usage.calls
    assert calls >= 1 and puppy_memory.usage.input_tokens > 0
    assert 1 <= len(facts) <= 25 and all(isinstance(f, str) and f.strip() for f in facts)
    assert puppy_memory.facts("puppy") == facts and puppy_memory.usage.calls == calls  # cached: no model call

    l1 = puppy_memory.read("puppy", "L1")
    assert puppy_memory.usage.calls == calls
    heading, _, body = l1.partition("\n\n")
    assert heading == "# L1 key facts: session puppy (2024-03-02 10:00, Saturday)"
    assert body.splitlines() == [f"- {f}" for f in facts]

    again = Memory("alice", store=puppy_store, l0_mode="raw", chat_model=LOCAL_CHAT)
    assert again.facts("puppy") == facts and again.usage.calls == 0  # the cache is in the store


@pytest.mark.slow
def test_notes_cover_every_turn_once_then_from_the_cache(puppy_memory):
    notes = puppy_memory.notes("puppy")
    calls = puppy_memory.usage.calls
    assert calls >= 1 and sorted(notes) == [0, 1, 2, 3]
    assert all(n and all(isinstance(x, str) and x.strip() for x in n) for n in notes.values())
    assert puppy_memory.notes("puppy") == notes and puppy_memory.notes("puppy", turns=[2]) == {2: notes[2]}
    l2 = puppy_memory.read("puppy", "L2")
    assert puppy_memory.usage.calls == calls  # all from the cache
    assert [line for line in l2.splitlines() if line.startswith("## ")] == [
        "## Turn 1 (user)", "## Turn 2 (assistant)", "## Turn 3 (user)", "## Turn 4 (assistant)"]
    assert all(f"- {n}" in l2 for turn in notes.values() for n in turn)


@pytest.mark.slow
def test_llm_mode_ingest_summarizes_windows_with_the_chat_model(embeddings):
    memory = Memory("alice", store=memory_store(), l0_mode="llm", chat_model=LOCAL_CHAT)
    report = memory.ingest([make_session("puppy", "2024-03-02T10:00", PUPPY)])
    units = memory.units("puppy")
    assert len(units) == report.units == 1 and (units[0].start, units[0].end) == (0, 4)
    assert all(u.summary.strip() and u.embed_texts and all(t.strip() for t in u.embed_texts) for u in units)
    assert memory.usage.input_tokens > 0 and memory.usage.calls >= 1
    assert report.usage.input_tokens == memory.usage.input_tokens and report.usage.calls == memory.usage.calls
    assert top(memory.search("What is my puppy's name?", k=1)) == ["puppy"]


def test_a_process_keeps_loaded_users_within_cache_mb_and_drops_the_least_recently_used(history, tmp_path, monkeypatch):
    from apdmem.memory import open_memory

    store = str(tmp_path / "store")
    for user, sessions in (("alice", history), ("bob", history[:3])):
        Memory(user, store=store, l0_mode="raw").ingest(sessions)
    alice = open_memory("alice", store=store)
    assert alice.nbytes() > open_memory("bob", store=store).nbytes() > 0  # grows with what the user holds
    assert open_memory("alice", store=store) is alice  # the default budget (512 MB) holds both
    # A budget that holds alice alone: opening bob drops alice (the least recently used), then alice drops bob.
    monkeypatch.setenv("APDMEM_CACHE_MB", str((alice.nbytes() + 1) / 2**20))
    bob = open_memory("bob", store=store)
    assert open_memory("alice", store=store) is not alice
    assert open_memory("bob", store=store) is not bob
    # A user larger than the budget is still served (and kept: the one just opened stays).
    monkeypatch.setenv("APDMEM_CACHE_MB", "0")
    assert open_memory("alice", store=store) is open_memory("alice", store=store)
    monkeypatch.setenv("APDMEM_CACHE_MB", "lots")
    with pytest.raises(ConfigError, match="cache_mb \\(APDMEM_CACHE_MB\\) must be a number of megabytes, got 'lots'"):
        open_memory("alice", store=store)
