"""The PostgreSQL backend on a real throwaway server on loopback: the store contract, memories identical to the
file store's, one transaction per writer (a killed writer changes nothing), readers that never wait, the
per-worker cache, migration from files, clear errors, and the graph served by `langgraph dev` over it.
(The concurrency tests of test_integrity.py run on both backends.)"""

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import text
from conftest import HISTORY, QUESTIONS, make_session
from test_integrity import ENV, ROOT, apdmem, finish

from apdmem.cli import main
from apdmem.errors import ConfigError
from apdmem.memory import Memory, open_memory
from apdmem.memory.migrate import migrate
from apdmem.memory.backends import open_store
from apdmem.memory.generations import Generations
from apdmem.memory.postgres import KEY_ORDER_INDEX, PostgresStore
from apdmem.memory.store import UserStore


@pytest.fixture
def history_sessions():
    return [make_session(s, d, t) for s, (d, t) in HISTORY.items()]


def answers(memory: Memory) -> list:
    return [[(d.metadata["session_id"], d.metadata["span"], round(d.metadata["score"], 9), d.page_content)
             for d in memory.search(q, k=5)] for q in QUESTIONS]


def test_namespaces_are_isolated_and_key_listings_take_prefixes_literally(postgres_url):
    store = open_store(postgres_url)
    a_b, axb = UserStore(store, "a_b"), UserStore(store, "axb")  # "_" is a wildcard to SQL's LIKE
    a_b.put({"sessions/s1/L3.md": b"a_b's", "sessions/s%/L3.md": b"percent"})
    axb.put({"sessions/s1/L3.md": b"axb's", "sessions/sx/L3.md": b"x"})
    assert a_b.keys() == ["sessions/s%/L3.md", "sessions/s1/L3.md"]
    assert a_b.keys("sessions/s%") == ["sessions/s%/L3.md"] and axb.keys("sessions/s_") == []
    assert (a_b.get("sessions/s1/L3.md"), axb.get("sessions/s1/L3.md")) == (b"a_b's", b"axb's")
    a_b.delete(a_b.keys())
    assert a_b.keys() == [] and axb.keys() == ["sessions/s1/L3.md", "sessions/sx/L3.md"]
    assert store.namespaces("users/") == ["users/axb"]


def test_key_listings_are_ranges_of_an_index_that_a_worker_adds_to_a_table_made_without_it(postgres_url, caplog):
    owner = PostgresStore(postgres_url)
    users = UserStore(owner, "u")
    keys = ["index/1/segment.json", "index0", "index\U0010ffff/x", "index\U0010ffff\U0010ffff", "indexé/a", "indey",
            "sessions/s\ud7ff/L3.md", "sessions/s\ue000/L3.md"]
    users.put({k: b"v" for k in keys})
    for prefix in ["index/", "index", "index\U0010ffff", "index\U0010ffff\U0010ffff", "indexé", "sessions/s\ud7ff", ""]:
        assert sorted(users.keys(prefix)) == sorted(k for k in keys if k.startswith(prefix)), prefix
    lister = "lister_" + postgres_url.rsplit("/", 1)[1]
    with owner.engine.begin() as connection:  # a table made before the index, and a role that does not own it
        connection.execute(text(f"DROP INDEX {KEY_ORDER_INDEX}"))
        connection.execute(text(f"CREATE ROLE {lister} LOGIN; GRANT SELECT, INSERT, UPDATE, DELETE ON langchain_key_value_stores TO {lister}"))
    with caplog.at_level(logging.WARNING, logger="apdmem"):
        as_lister = UserStore(PostgresStore(postgres_url.replace("apdmem@", f"{lister}@")), "u")
    assert KEY_ORDER_INDEX in caplog.text and as_lister.keys("index/") == ["index/1/segment.json"]
    PostgresStore(postgres_url)  # its owner's next worker adds it
    with owner.engine.connect() as connection:
        assert connection.execute(text("SELECT to_regclass(:name)::text"), {"name": KEY_ORDER_INDEX}).scalar() == KEY_ORDER_INDEX
    assert users.keys("indexé") == ["indexé/a"]


def test_a_memory_in_postgres_answers_as_the_file_store_does(postgres_url, tmp_path, history_sessions):
    files = Memory("alice", store=str(tmp_path / "mem"), l0_mode="raw")
    pg = Memory("alice", store=postgres_url, l0_mode="raw")
    for memory in (files, pg):
        memory.ingest(history_sessions)
        memory.ingest([make_session("s-dog", "2024-03-10T18:30", ["My greyhound is called Comet.", "Lovely!"])])
        memory.forget("s-knee")
    assert answers(pg) == answers(files)
    reopened = Memory("alice", store=postgres_url, l0_mode="raw")
    assert reopened.session_ids() == files.session_ids() and answers(reopened) == answers(files)
    assert reopened.read("s-dog", "L3") == files.read("s-dog", "L3")
    assert "Biscuit" not in json.dumps(answers(reopened))


KILLED_WRITER = """
import sys, time
from apdmem.memory import Memory
from apdmem.memory.generations import Generations as M
from conftest import HISTORY, make_session
commit = M.commit
def stall(self, generation):
    out = commit(self, generation)  # written inside the writer's transaction, not committed yet
    open(sys.argv[2], "w").close()
    time.sleep(120)
M.commit = stall
Memory("alice", store=sys.argv[1], l0_mode="raw").ingest([make_session("s-new", "2024-07-01T10:00", ["I moved to Lisbon.", "Exciting!"])])
"""


def test_a_writer_killed_before_its_transaction_ends_changes_nothing(postgres_url, tmp_path, history_sessions):
    memory = Memory("alice", store=postgres_url, l0_mode="raw")
    memory.ingest(history_sessions)
    before = {k: v for k, v in zip(memory.store.keys(), memory.store.get_many(memory.store.keys()))}
    marker = tmp_path / "committed-inside"
    child = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, postgres_url, str(marker)],
                             cwd=ROOT / "tests", env={**ENV, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), child.stderr.read()
    started = time.monotonic()
    reader = Memory("alice", store=postgres_url, l0_mode="raw")  # a reader does not wait for the writer
    assert reader.session_ids() == memory.session_ids() and time.monotonic() - started < 10
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    after = {k: v for k, v in zip(memory.store.keys(), memory.store.get_many(memory.store.keys()))}
    assert after == before  # not one row of the killed writer's generation
    memory.ingest([make_session("s-new", "2024-07-01T10:00", ["I moved to Lisbon.", "Exciting!"])])  # the lock is free
    assert "s-new" in Memory("alice", store=postgres_url, l0_mode="raw").session_ids()


def test_a_worker_reloads_a_users_index_only_when_its_generation_changes(postgres_url, history_sessions, monkeypatch):
    shared = open_memory("alice", store=postgres_url)
    assert open_memory("alice", store=postgres_url) is shared
    Memory("alice", store=postgres_url, l0_mode="raw").ingest(history_sessions)  # another writer (process or worker)
    loads = []
    generation = Generations._generation
    monkeypatch.setattr(Generations, "_generation", lambda self, *args: (self is shared.generations and loads.append(1)) or generation(self, *args))
    assert shared.search("What is my dog's name?", k=1)[0].metadata["session_id"] == "s-dog"
    for question in QUESTIONS:
        shared.search(question, k=3)
    assert len(loads) == 1  # one reload for the new generation, then none
    Memory("alice", store=postgres_url, l0_mode="raw").forget("s-dog")
    assert "s-dog" not in [d.metadata["session_id"] for d in shared.search("What is my dog's name?", k=10)]
    assert len(loads) == 2


def test_migrate_copies_a_file_store_into_postgres_and_checks_it(postgres_url, tmp_path, capsys, history_sessions):
    directory = tmp_path / "mem"
    Memory("alice", store=str(directory), l0_mode="raw").ingest(history_sessions)
    Memory("bob@example.com", store=str(directory), l0_mode="raw").ingest(history_sessions[:2])
    code = main(["migrate", "--from", str(directory), "--to", postgres_url, "--quiet"])
    out = capsys.readouterr().out
    assert code == 0 and "alice: " in out and "bob@example.com: " in out and out.count("verified") == 2
    for user in ("alice", "bob@example.com"):
        assert answers(Memory(user, store=postgres_url, l0_mode="raw")) == answers(Memory(user, store=str(directory), l0_mode="raw"))
    with pytest.raises(ConfigError, match="the target already holds user.s. alice; nothing was copied"):
        migrate(str(directory), postgres_url, users=["alice"])  # again: refused ...
    report = migrate(str(directory), postgres_url, users=["alice"], replace=True)  # ... unless asked: replaces, does not duplicate
    assert [m.user_id for m in report] == ["alice"] and report[0].verified and report[0].replaced
    with pytest.raises(ConfigError, match="no memory of user"):
        migrate(str(directory), postgres_url, users=["carol"])


def test_bad_or_unreachable_servers_are_one_line_errors_without_the_password(capsys, postgres):
    code = main(["sessions", "--user", "alice", "--store", "postgresql://apdmem:hunter2@127.0.0.1:1/nowhere"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "cannot use PostgreSQL" in err and "hunter2" not in err


@pytest.mark.slow
def test_the_graph_served_by_langgraph_dev_over_postgres(postgres_url, history_sessions):
    from test_servers import QUICK, langgraph_dev
    from langgraph_sdk import get_sync_client

    Memory("alice", store=postgres_url, l0_mode="raw").ingest(history_sessions)
    empty = Path(os.environ.get("TMPDIR", "/tmp")) / f"apdmem-unused-{os.getpid()}"
    with langgraph_dev(empty, APDMEM_STORE=postgres_url) as url:
        out = get_sync_client(url=url).runs.wait(None, "apdmem", input={"question": "What is my dog's name?",
                                                                        "question_date": "2024/06/01 (Sat) 10:00"},
                                                 context={**QUICK, "user_id": "alice"})
    assert "s-dog" in {e["session_id"] for e in out["evidence"]}
    assert not empty.exists()  # memories came from PostgreSQL, not the directory


def test_the_command_line_over_postgres(postgres_url, tmp_path):
    path = tmp_path / "h.json"
    path.write_text(json.dumps([{"session_id": s, "date": d, "messages": [{"role": "user" if i % 2 == 0 else "assistant", "content": t}
                                                                          for i, t in enumerate(texts)]} for s, (d, texts) in HISTORY.items()]))
    code, out, err = finish(apdmem("ingest", str(path), "--user", "alice", "--store", postgres_url, "--l0-mode", "raw", "--quiet"))
    assert code == 0 and out.startswith("7 added"), err
    code, out, _ = finish(subprocess.Popen([sys.executable, "-m", "apdmem.cli", "search", "What is my dog's name?", "--user", "alice"],
                                           cwd=ROOT, env={**ENV, "APDMEM_STORE": postgres_url}, text=True,
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    assert code == 0 and out.startswith("1. s-dog")
