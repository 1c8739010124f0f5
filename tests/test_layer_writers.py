"""Layers keyed to their writer: every cached L1/L2 records the model (and prompt) that wrote it, or "extractive";
a layer another writer cached (or one cached before writers were recorded) is never served: it is made again when
read (in memory only on a read-only store), and `apdmem reindex --layers` (`Memory.rebuild_layers`) makes them all
again at once; on both stores. The generative writer is the embedded SmolLM2 (slow tests)."""

import uuid

import pytest
from conftest import HISTORY, make_session
from test_integrity import files, read_only_mounts, run_read_only, snapshot, sql

from apdmem.cli import main
from apdmem.memory import Memory
from apdmem.memory.layers import key_sentences, turn_sentences, with_dates, writer
from apdmem.models import EXTRACTIVE, LOCAL_CHAT

SMOLLM2_L1 = writer(LOCAL_CHAT, "L1")
INVENTED = "Biscuit is a golden retriever who loves opera."  # said by no one: what a model might write


def plant(memory: Memory, session_id: str, *, l1_writer: str | None, l2_writer: str | None) -> None:
    """Cache L1 and L2 of a session as another writer would have (None: as apdmem did before writers were
    recorded, a bare list of facts and bare notes by turn)."""
    facts, notes = [INVENTED], {"0": [INVENTED], "2": [INVENTED]}
    memory.store.put_json({
        f"sessions/{session_id}/L1.json": facts if l1_writer is None else {"writer": l1_writer, "facts": facts},
        f"sessions/{session_id}/L2.json": notes if l2_writer is None else {"writer": l2_writer, "notes": notes},
    })


@pytest.fixture
def stored(store_location, history, embeddings, monkeypatch) -> str:
    for name in ("APDMEM_CHAT_MODEL", "APDMEM_L0_MODE", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    Memory("alice", store=store_location, l0_mode="raw").ingest(history)
    return store_location


@pytest.mark.parametrize("other", [SMOLLM2_L1, "extractive (layers-2)", None],
                         ids=["another model", "an earlier builder", "no writer recorded"])
def test_a_layer_another_writer_cached_is_made_again_when_read(stored, history, other):
    memory = Memory("alice", store=stored)
    plant(memory, "s-dog", l1_writer=other, l2_writer=other)
    dog = next(s for s in history if s.session_id == "s-dog")
    assert memory.facts("s-dog") == key_sentences(dog)  # the session's own sentences, not the cached text
    assert memory.notes("s-dog", [0, 2]) == {0: turn_sentences(dog.turns[0]), 2: turn_sentences(dog.turns[2])}
    assert INVENTED not in memory.read("s-dog", "L1") + memory.read("s-dog", "L2")
    # ... and cached again under its writer: the next reader takes it as it is
    assert memory.store.get_json("sessions/s-dog/L1.json") == {"writer": writer(EXTRACTIVE, "L1"), "facts": with_dates(dog, key_sentences(dog))}
    assert memory.store.get_json("sessions/s-dog/L2.json")["writer"] == writer(EXTRACTIVE, "L2")
    assert Memory("alice", store=stored).facts("s-dog") == key_sentences(dog)


def test_reindex_layers_makes_every_other_writers_layer_again(stored, history, capsys):
    memory = Memory("alice", store=stored)
    plant(memory, "s-dog", l1_writer=SMOLLM2_L1, l2_writer=None)
    plant(memory, "s-job", l1_writer=None, l2_writer=writer(LOCAL_CHAT, "L2"))
    memory.facts("s-knee")  # cached by this writer: kept as it is
    kept = memory.store.get("sessions/s-knee/L1.json")

    capsys.readouterr()
    code = main(["reindex", "--layers", "--user", "alice", "--store", stored, "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "user 'alice': L1 of 2 and L2 of 2 session(s) written by another writer made again by 'extractive (layers-3)'" in out
    for sid in ("s-dog", "s-job"):
        session = next(s for s in history if s.session_id == sid)
        l1, l2 = (memory.store.get_json(f"sessions/{sid}/{name}") for name in ("L1.json", "L2.json"))
        assert l1 == {"writer": writer(EXTRACTIVE, "L1"), "facts": with_dates(session, key_sentences(session))}
        assert l2 == {"writer": writer(EXTRACTIVE, "L2"),
                      "notes": {str(t): with_dates(session, turn_sentences(session.turns[t])) for t in (0, 2)}}
        assert INVENTED not in memory.store.get_text(f"sessions/{sid}/L1.md") + memory.store.get_text(f"sessions/{sid}/L2.md")
    assert memory.store.get("sessions/s-knee/L1.json") == kept
    main(["reindex", "--layers", "--user", "alice", "--store", stored, "--quiet"])
    assert "every cached L1/L2 was written by 'extractive (layers-3)'; nothing to make again" in capsys.readouterr().out
    again = Memory("alice", store=stored).rebuild_layers()
    assert (again.l1, again.l2, again.usage.calls) == ([], {}, 0)  # nothing left to make


@pytest.mark.skipif(not read_only_mounts(), reason="needs unshare and mount (root in a mount namespace)")
def test_a_read_only_store_serves_the_layer_made_again_without_writing(tmp_path, history, embeddings, monkeypatch):
    monkeypatch.delenv("APDMEM_CHAT_MODEL", raising=False)
    directory = tmp_path / "memory"
    memory = Memory("alice", store=str(directory), l0_mode="raw")
    memory.ingest(history)
    plant(memory, "s-dog", l1_writer=SMOLLM2_L1, l2_writer=SMOLLM2_L1)
    before = files(directory)
    code, out, err = run_read_only(directory, "show", "s-dog", "--layer", "L1", "--user", "alice", "--store", str(directory))
    assert code == 0 and "Biscuit" in out and INVENTED not in out, err
    assert files(directory) == before


def test_a_select_only_postgres_role_serves_the_layer_made_again_without_writing(postgres_url, postgres, history,
                                                                                  embeddings, monkeypatch, capsys):
    monkeypatch.delenv("APDMEM_CHAT_MODEL", raising=False)
    memory = Memory("alice", store=postgres_url, l0_mode="raw")
    memory.ingest(history)
    plant(memory, "s-dog", l1_writer=SMOLLM2_L1, l2_writer=None)
    suffix = uuid.uuid4().hex[:8]
    postgres.psql(f"CREATE ROLE reader_{suffix} LOGIN")
    sql(postgres_url, f"GRANT SELECT ON langchain_key_value_stores TO reader_{suffix}")
    reader = postgres_url.replace("postgresql://apdmem@", f"postgresql://reader_{suffix}:pw@")
    before = snapshot(postgres_url)
    for layer in ("L1", "L2"):
        capsys.readouterr()
        code = main(["show", "s-dog", "--layer", layer, "--user", "alice", "--store", reader])
        out, err = capsys.readouterr()
        assert code == 0 and "Biscuit" in out and INVENTED not in out, err
    assert snapshot(postgres_url) == before


@pytest.mark.slow
def test_layers_of_the_embedded_model_are_never_shown_by_the_default_and_back(tmp_path, embeddings, monkeypatch):
    """SmolLM2 writes L1 and L2; the default ("local": no model) never shows them and makes its own; SmolLM2, the
    configured writer again, does not take the extractive ones for its own either."""
    monkeypatch.delenv("APDMEM_CHAT_MODEL", raising=False)
    store = str(tmp_path / "memory")
    texts = HISTORY["s-dog"][1]
    session = make_session("s-dog", HISTORY["s-dog"][0], texts)
    model = Memory("alice", store=store, l0_mode="raw", chat_model=LOCAL_CHAT)
    model.ingest([session])
    written = model.facts("s-dog"), model.notes("s-dog", [0])
    assert model.store.get_json("sessions/s-dog/L1.json")["writer"] == SMOLLM2_L1 and model.usage.calls >= 2

    default = Memory("alice", store=store)
    assert default.facts("s-dog") == key_sentences(session) and default.notes("s-dog", [0]) == {0: turn_sentences(session.turns[0])}
    assert default.usage.calls == 0  # no model was asked
    model_only = {f for f in written[0] if f not in texts} | {n for n in written[1][0] if n not in texts}
    shown = default.read("s-dog", "L1") + default.read("s-dog", "L2")
    assert not any(text in shown for text in model_only)

    again = Memory("alice", store=store, l0_mode="raw", chat_model=LOCAL_CHAT)
    report = again.rebuild_layers()
    assert (report.l1, report.l2) == (["s-dog"], {"s-dog": list(range(6))}) and report.usage.calls >= 2  # read() cached every turn
    assert again.store.get_json("sessions/s-dog/L1.json")["writer"] == SMOLLM2_L1
