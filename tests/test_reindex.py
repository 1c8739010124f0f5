"""Embedding spaces: each memory records the model that embedded it, a memory of another space is refused in one
line naming `apdmem reindex` (and the store is left as it was), and `apdmem reindex` re-embeds it under the
writer lock, keeping every layer; on both stores. The memories re-embedded here were embedded in another space
(`Rotated`: the embedded model's vectors turned by a fixed rotation, as a provider's model of the same dimension
would give), or record the retired all-MiniLM-L6-v2."""

import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import QUESTIONS
from langchain_core.embeddings import Embeddings
from test_integrity import ENV, ROOT, snapshot

from apdmem.cli import main
from apdmem.errors import ConfigError, OtherSpaceError
from apdmem.graph import Context, build_graph
from apdmem.memory import Memory
from apdmem.memory.backends import open_store
from apdmem.memory.links import threshold
from apdmem.memory.store import UserStore
from apdmem.models import embed_array, embeddings_id, get_embeddings
from apdmem.settings import Settings
from apdmem.tools import make_memory_tools

BGE = "local:bge-small"
OTHER = "Rotated"  # the space of `Rotated` (an embeddings object's space is its class name)
REFUSAL = ("memory of user 'alice' was embedded with '{recorded}'; this configuration uses '{configured}': "
           "run `apdmem reindex --user alice` to re-embed it")


def cli(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def layers_of(location: str) -> dict[str, str]:
    """Hash of every layer file of alice (everything but the manifest and the index)."""
    return {k: v for k, v in snapshot(location, "alice").items() if "sessions/" in k}


class Rotated(Embeddings):
    """Another embedding space: the embedded model's vectors turned by a fixed rotation. Cosines, and so rankings,
    are the embedded model's; the vectors are not."""

    rotation = np.linalg.qr(np.random.default_rng(7).normal(size=(384, 384)))[0]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return (embed_array(get_embeddings(BGE), texts) @ self.rotation).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


@pytest.fixture
def stored(store_location, history) -> str:
    """A store (files or PostgreSQL) holding alice's history, ingested in the `Rotated` space, with the L1 facts and
    L2 notes of two sessions built (the extractive ones: no generative model)."""
    memory = Memory("alice", store=store_location, l0_mode="raw", embeddings=Rotated())
    memory.ingest(history)
    for sid in ("s-dog", "s-job"):
        memory.facts(sid), memory.notes(sid)
    return store_location


def test_the_embedded_model_names_its_space_and_the_retired_one_is_refused_by_name():
    assert embeddings_id("local") == embeddings_id(BGE) == BGE
    assert embeddings_id(BGE, "http://127.0.0.1:9/v1") == BGE  # the server is the providers', not the embedded models'
    assert get_embeddings("local") is get_embeddings(BGE)  # one model under both names
    assert embeddings_id(get_embeddings(BGE)) == BGE  # an embedded model passed as an object is in its own space
    assert embeddings_id(Rotated()) == OTHER
    with pytest.raises(ConfigError, match="unknown embedded embeddings 'local:bge'"):
        get_embeddings("local:bge")
    with pytest.raises(ConfigError, match=r"^embeddings 'local:minilm' \(all-MiniLM-L6-v2\) are no longer shipped: use "
                                          r"'local' \(= 'local:bge-small'\) and `apdmem reindex` the memories they embedded$"):
        get_embeddings("local:minilm")
    texts = ["I adopted a beagle puppy and named her Biscuit.", "What is my dog's name?", "I bake sourdough bread."]
    bge, other = get_embeddings(BGE).embed(texts), embed_array(Rotated(), texts)
    for vectors in (bge, other):
        assert vectors.shape == (3, 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
        assert vectors[1] @ vectors[0] > vectors[1] @ vectors[2]  # the question is nearer its answer
    assert float(np.max(np.abs(np.sum(bge * other, axis=1)))) < 0.5  # two spaces


def test_a_memory_of_another_space_is_refused_in_one_line_and_nothing_changes(stored, capsys, tmp_path):
    before = snapshot(stored, "alice")
    new = tmp_path / "new.json"
    new.write_text(json.dumps([{"session_id": "s-new", "date": "2024-07-01T10:00",
                                "messages": [{"role": "user", "content": "I moved to Lisbon."}]}]))
    refusal = REFUSAL.format(recorded=OTHER, configured=BGE)
    with pytest.raises(OtherSpaceError) as caught:
        Memory("alice", store=stored)
    assert str(caught.value) == refusal
    for command in (["search", "my dog"], ["show", "s-dog"], ["sessions"], ["forget", "s-dog"], ["ingest", str(new)],
                    ["ask", "What is my dog's name?", "--no-reflection"]):
        code, out, err = cli(capsys, *command, "--user", "alice", "--store", stored)
        assert (code, out, err) == (2, "", f"apdmem: error: {refusal}\n"), command
    graph = build_graph(settings=Settings(store=stored))
    with pytest.raises(OtherSpaceError, match="apdmem reindex --user alice"):
        graph.invoke({"question": "What is my dog's name?", "question_date": "2024-06-01"}, context=Context(user_id="alice"))
    assert snapshot(stored, "alice") == before


def test_reindex_re_embeds_every_unit_and_keeps_every_layer(stored, capsys):
    layers, listing = layers_of(stored), Memory("alice", store=stored, embeddings=Rotated()).manifest["sessions"]
    opened = Memory("alice", store=stored, embeddings=Rotated())  # opened before the reindex, as a server's worker would be
    search_tool = make_memory_tools(opened)[0]

    code, out, err = cli(capsys, "reindex", "--user", "alice", "--store", stored)
    assert code == 0, err
    assert out.startswith(f"user 'alice': 7 sessions, 14 L0 units re-embedded with '{BGE}' (was '{OTHER}')")

    assert layers_of(stored) == layers  # L0 to L3 byte for byte
    manifest = json.loads(UserStore(open_store(stored), "alice").get("manifest.json"))
    memory = Memory("alice", store=stored, embeddings=BGE)
    assert manifest["embeddings"] == BGE and memory.manifest["sessions"] == listing
    (segment,) = manifest["segments"]  # the whole index written again, in one segment
    assert sorted(UserStore(open_store(stored), "alice").keys("index/")) == [f"index/{segment}/{name}"
                                                                             for name in ("segment.json", "vectors.f32")]
    links_table = json.loads(UserStore(open_store(stored), "alice").get(f"index/{segment}/segment.json"))["links"]
    assert links_table["threshold"] == threshold(BGE) != threshold(OTHER)  # linked again at bge's threshold
    assert memory.index.dimension == 384 and len(memory.index) == 14
    vectors = memory.index.dense.vectors()
    stored_units = {(u.session_id, u.start): u for sid in memory.session_ids() for u in memory.units(sid)}  # L0, with texts
    texts = [t for u in memory.index.units for t in stored_units[u.session_id, u.start].embed_texts]
    assert np.allclose(vectors, get_embeddings(BGE).embed(texts), atol=0.02)  # bge's vectors, not rotated ones
    for question, session_id in QUESTIONS.items():
        assert memory.search(question, k=1)[0].metadata["session_id"] == session_id, question

    refusal = REFUSAL.format(recorded=BGE, configured=OTHER)
    with pytest.raises(OtherSpaceError, match="^" + refusal.replace("(", r"\(").replace(")", r"\)") + "$"):
        Memory("alice", store=stored, embeddings=Rotated())
    with pytest.raises(OtherSpaceError, match="apdmem reindex --user alice"):  # a memory opened before sees it too
        search_tool.invoke({"query": "my dog"})

    before = snapshot(stored, "alice")
    code, out, _ = cli(capsys, "reindex", "--user", "alice", "--store", stored, "--embeddings", BGE)
    assert (code, out) == (0, f"user 'alice': already embedded with '{BGE}'; nothing to do\n")
    assert snapshot(stored, "alice") == before
    report = Memory.reindex("alice", store=stored, embeddings=Rotated())  # and back, from Python
    assert report.reindexed and (report.recorded, report.space, report.units) == (BGE, OTHER, 14)
    assert layers_of(stored) == layers
    again = Memory("alice", store=stored, embeddings=Rotated())
    assert again.search("What is my dog's name?", k=1)[0].metadata["session_id"] == "s-dog"


def test_reindex_all_users_re_embeds_each_and_a_user_without_memory_is_left_alone(stored, history, capsys):
    Memory("bob", store=stored, l0_mode="raw", embeddings=Rotated()).ingest(history[:2])
    code, out, err = cli(capsys, "reindex", "--all-users", "--store", stored, "--embeddings", BGE, "--quiet")
    assert code == 0, err
    assert [line.split(":")[0] for line in out.splitlines()] == ["user 'alice'", "user 'bob'"]
    assert f"user 'bob': 2 sessions, 4 L0 units re-embedded with 'local:bge-small' (was '{OTHER}')" in out
    assert Memory("bob", store=stored, embeddings=BGE).search("What is my dog's name?", k=1)[0].metadata["session_id"] == "s-dog"
    before = snapshot(stored)
    code, out, err = cli(capsys, "reindex", "--user", "nobody", "--store", stored, "--embeddings", BGE)
    assert (code, out) == (0, "user 'nobody': no memory in this store; nothing to do\n") and "no memory" in err
    assert snapshot(stored) == before  # nothing created for nobody


@pytest.mark.parametrize("legacy", ["local", json.dumps(["local", "http://127.0.0.1:9/v1"])])
def test_a_memory_of_the_retired_minilm_is_refused_by_name_and_reindexed(stored, legacy, capsys):
    """Memories embedded by all-MiniLM-L6-v2, the embedded default before bge-small, record "local:minilm", or "local"
    when written before spaces named their model."""
    user = UserStore(open_store(stored), "alice")
    manifest = json.loads(user.get("manifest.json"))
    user.put_json({"manifest.json": {**manifest, "embeddings": legacy}})  # as apdmem wrote it before spaces named models
    before = snapshot(stored, "alice")
    refusal = REFUSAL.format(recorded="local:minilm", configured=BGE)
    with pytest.raises(OtherSpaceError, match="^" + refusal.replace("(", r"\(").replace(")", r"\)") + "$"):
        Memory("alice", store=stored)
    assert cli(capsys, "sessions", "--user", "alice", "--store", stored) == (2, "", f"apdmem: error: {refusal}\n")
    assert snapshot(stored, "alice") == before  # refused as it is, not rewritten
    assert cli(capsys, "reindex", "--user", "alice", "--store", stored)[1].startswith(
        "user 'alice': 7 sessions, 14 L0 units re-embedded with 'local:bge-small' (was 'local:minilm')")
    memory = Memory("alice", store=stored)
    for question, session_id in QUESTIONS.items():
        assert memory.search(question, k=1)[0].metadata["session_id"] == session_id
    assert memory.read("s-dog", "L1")


KILLED_REINDEX = """
import sys, time
from pathlib import Path
from apdmem.memory import Memory
from apdmem.memory.generations import Generations

def stall(self, generation):  # the new index is written (in PostgreSQL, inside the writer's transaction)
    Path(sys.argv[2]).touch()
    time.sleep(120)

Generations._save_manifest = stall
Memory.reindex("alice", store=sys.argv[1], embeddings="local:bge-small")
"""


def staged(values: dict[str, str]) -> set[str]:
    """The keys of vectors a reindex saved (``reindex/<space>/<session>``) in a snapshot."""
    return {k for k in values if k.startswith("reindex/") or "/reindex/" in k}


def without_staged(values: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in values.items() if k not in staged(values)}


def killed(script: str, stored: str, marker) -> None:
    """Run `script` on alice's store in a process of its own, and kill -9 it once it touched `marker`."""
    child = subprocess.Popen([sys.executable, "-c", script, stored, str(marker)], cwd=ROOT / "tests",
                             env={**ENV, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), child.stderr.read()
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)


def test_a_reindex_killed_while_it_writes_leaves_the_old_memory_readable(stored, tmp_path, capsys):
    before, layers = snapshot(stored, "alice"), layers_of(stored)
    marker = tmp_path / "index-written"
    killed(KILLED_REINDEX, stored, marker)
    if not stored.startswith("postgresql://"):  # on files the new generation's index was on disk, not yet current
        assert len(without_staged(snapshot(stored, "alice"))) == len(before) + 2  # segment.json, vectors.f32

    memory = Memory("alice", store=stored, embeddings=Rotated())  # the old generation, as it was; the killed writer's files swept
    assert memory.search("What is my dog's name?", k=1)[0].metadata["session_id"] == "s-dog"
    assert without_staged(snapshot(stored, "alice")) == before and len(staged(snapshot(stored, "alice"))) == 7
    with pytest.raises(OtherSpaceError):
        Memory("alice", store=stored, embeddings=BGE)
    code, out, _ = cli(capsys, "reindex", "--user", "alice", "--store", stored, "--embeddings", BGE, "--quiet")
    assert code == 0 and out.endswith("; 7 sessions' vectors kept from an interrupted reindex\n"), out
    assert layers_of(stored) == layers and not staged(snapshot(stored, "alice"))  # the saved vectors went with the commit
    assert Memory("alice", store=stored, embeddings=BGE).search("What is my dog's name?", k=1)[0].metadata["session_id"] == "s-dog"


KILLED_WHILE_EMBEDDING = """
import sys, time
from pathlib import Path
from apdmem.memory import Memory, generations
from apdmem.memory.store import UserStore

generations.REEMBED_CHUNK = 2
put, saved = UserStore.put, []

def put_then_stall(self, items):
    put(self, items)
    saved.extend(k for k in items if k.startswith("reindex/"))
    if len(saved) == 4:  # two chunks of two sessions saved (in PostgreSQL, each committed on its own)
        Path(sys.argv[2]).touch()
        time.sleep(120)

UserStore.put = put_then_stall
Memory.reindex("alice", store=sys.argv[1], embeddings="local:bge-small")
"""


def test_a_reindex_saves_each_chunk_and_run_again_after_kill_9_embeds_only_the_rest(stored, tmp_path, capsys):
    """Issue 30 item 8: a reindex held one PostgreSQL transaction for the whole user, so a kill lost all of it.
    Each chunk's vectors are now a write of their own (committed in PostgreSQL: seen here by another
    connection after the kill), the memory stays as it was, and the next reindex reuses them."""
    before, layers = snapshot(stored, "alice"), layers_of(stored)
    killed(KILLED_WHILE_EMBEDDING, stored, tmp_path / "two-chunks-saved")
    assert len(staged(snapshot(stored, "alice"))) == 4 and without_staged(snapshot(stored, "alice")) == before
    memory = Memory("alice", store=stored, embeddings=Rotated())  # still the old memory, read as it was
    assert memory.search("What is my dog's name?", k=1)[0].metadata["session_id"] == "s-dog"
    code, out, err = cli(capsys, "reindex", "--user", "alice", "--store", stored, "--embeddings", BGE, "--quiet")
    assert code == 0 and out.startswith("user 'alice': 7 sessions, 14 L0 units re-embedded with 'local:bge-small'"), err
    assert out.endswith("; 4 sessions' vectors kept from an interrupted reindex\n"), out
    assert layers_of(stored) == layers and not staged(snapshot(stored, "alice"))
    memory = Memory("alice", store=stored, embeddings=BGE)
    for question, session_id in QUESTIONS.items():
        assert memory.search(question, k=1)[0].metadata["session_id"] == session_id, question
    texts = {(u.session_id, u.start): u.embed_texts for sid in memory.session_ids() for u in memory.units(sid)}
    expected = get_embeddings(BGE).embed([t for u in memory.index.units for t in texts[u.session_id, u.start]])
    assert np.allclose(memory.index.dense.vectors(), expected, atol=0.02)  # the kept vectors are bge's of the same texts


def test_reindex_reports_what_a_repair_rebuilt_and_why(stored, capsys):
    """Issue 30 item 8: a memory of another space with a damaged index was repaired (re-embedded) on opening and
    the report said "already embedded; nothing to do"."""
    user = UserStore(open_store(stored), "alice")
    manifest = json.loads(user.get("manifest.json"))
    (segment,) = manifest["segments"]
    user.put({f"index/{segment}/segment.json": b"garbage"})
    code, out, err = cli(capsys, "reindex", "--user", "alice", "--store", stored, "--embeddings", BGE, "--quiet")
    assert code == 0, err
    assert out.splitlines() == [
        f"repaired the memory of user 'alice' (index segment {segment} is damaged: Expecting value: line 1 column 1 "
        f"(char 0)): index rebuilt from 7 sessions, embedded with '{BGE}' (was '{OTHER}'); listed again: "
        + ", ".join(sorted(k.split("/")[-2] for k in layers_of(stored) if k.endswith("/session.json"))),
        f"user 'alice': now embedded with '{BGE}'; nothing to do"]
    assert Memory("alice", store=stored, embeddings=BGE).search("What is my dog's name?", k=1)[0].metadata["session_id"] == "s-dog"
