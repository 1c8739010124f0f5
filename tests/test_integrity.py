"""A user's memory under what a service does to it: real processes writing one user at once, a reader searching
while a writer commits, damaged and planted files, hostile input on the command line, the leftovers of a kill,
and case-insensitive file systems."""

import dataclasses
import hashlib
import json
import logging
import os
import random
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import faiss
import numpy as np
import pytest
from conftest import HISTORY, make_session

from apdmem.cli import main
from apdmem.memory import Memory, load_longmemeval
from apdmem.memory.backends import open_store
from apdmem.memory.store import InMemoryStore, UserStore, session_key

ROOT = Path(__file__).resolve().parents[1]
S_DEV = ROOT.parent / "shared" / "data" / "longmemeval" / "longmemeval_s_dev.json.gz"
ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("APDMEM_")}, "LANGSMITH_TRACING": "false",
       "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module")
def real_sessions():
    """Distinct real LongMemEval sessions (the haystacks of the dev file), in file order, each cut to its first
    six turns (two L0 windows). What these tests exercise is writers and readers overlapping, each in a process of
    its own; whole sessions (four windows and 11,000 characters on average) only made each ingestion slower."""
    if not S_DEV.exists():
        pytest.skip(f"LongMemEval dev data not present at {S_DEV}")
    seen = {}
    for item in load_longmemeval(S_DEV):
        for session in item.sessions:
            seen.setdefault(session.session_id, dataclasses.replace(session, turns=session.turns[:6]))
    return list(seen.values())


def write_file(path: Path, sessions) -> Path:
    path.write_text(json.dumps([{"session_id": s.session_id, "date": s.date.isoformat(),
                                 "messages": [{"role": t.role, "content": t.content} for t in s.turns]} for s in sessions]))
    return path


def apdmem(*args: str) -> subprocess.Popen:
    """The real command line in a process of its own."""
    return subprocess.Popen([sys.executable, "-m", "apdmem.cli", *args], cwd=ROOT, env=ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(process: subprocess.Popen, timeout: float = 600) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


def probe(session) -> str:
    """A query only this session should answer: the start of its longest turn."""
    return max((t.content for t in session.turns), key=len)[:300]


def files(directory: Path) -> dict[str, str]:
    """Hash of every file under a directory (lock files aside: they hold no data)."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file() and p.name != ".lock"}


def containing(location: str | Path, needle: bytes) -> list[str]:
    """Every stored value holding `needle`: files under a directory, or rows of a PostgreSQL store."""
    if str(location).startswith("postgresql://"):
        from sqlalchemy import text

        with open_store(str(location)).engine.connect() as connection:
            rows = connection.execute(text("SELECT namespace || '/' || key FROM langchain_key_value_stores "
                                           "WHERE position(:needle IN value) > 0"), {"needle": needle})
            return [row[0] for row in rows]
    directory = Path(location)
    return [str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file() and needle in p.read_bytes()]


# ---------------------------------------------------------------------------------------- concurrent writers


@pytest.mark.slow
def test_concurrent_ingest_processes_lose_nothing(tmp_path, real_sessions, store_location):
    writers, per_writer, rounds = 4, 8, 3
    store, done = store_location, []
    for round_ in range(rounds):
        batches = []
        for w in range(writers):
            start = (round_ * writers + w) * per_writer
            batches.append(real_sessions[start : start + per_writer])
        processes = [apdmem("ingest", str(write_file(tmp_path / f"r{round_}w{w}.json", batch)), "--user", "carol",
                            "--store", str(store), "--l0-mode", "raw", "--quiet") for w, batch in enumerate(batches)]
        for process, batch in zip(processes, batches):
            code, out, err = finish(process)
            assert code == 0, err
            assert out.startswith(f"{len(batch)} added, 0 updated, 0 unchanged")
        done += [s for batch in batches for s in batch]

    memory = Memory("carol", store=str(store), l0_mode="raw")
    assert sorted(memory.session_ids()) == sorted(s.session_id for s in done)
    assert {u.session_id for u in memory.index.units} == {s.session_id for s in done}
    assert len(memory.index.units) == sum(m["units"] for m in memory.manifest["sessions"].values())
    for session in done:
        assert session.session_id in [d.metadata["session_id"] for d in memory.search(probe(session), k=10)]


@pytest.mark.slow
def test_ingest_and_forget_together_keep_the_store_usable(tmp_path, real_sessions, store_location):
    store = store_location
    first, second = real_sessions[:12], real_sessions[12:40]
    Memory("dave", store=str(store), l0_mode="raw").ingest(first)
    doomed = [s.session_id for s in first[:2]]
    ingest = apdmem("ingest", str(write_file(tmp_path / "second.json", second)), "--user", "dave", "--store", str(store),
                    "--l0-mode", "raw", "--quiet")
    for sid in doomed:  # one after another while the ingestion runs
        assert finish(apdmem("forget", sid, "--user", "dave", "--store", str(store)))[0] == 0
    code, out, err = finish(ingest)
    assert code == 0, err

    expected = sorted(s.session_id for s in first[2:] + second)
    code, out, err = finish(apdmem("sessions", "--user", "dave", "--store", str(store)))
    assert code == 0 and sorted(line.split("\t")[0] for line in out.splitlines()) == expected
    memory = Memory("dave", store=str(store), l0_mode="raw")
    assert sorted(memory.session_ids()) == expected
    for session in first[:2]:  # no byte of a forgotten session anywhere in the store
        assert containing(store, probe(session)[:120].encode()) == []
        assert session.session_id not in [d.metadata["session_id"] for d in memory.search(probe(session), k=10)]
    # every command still works
    assert finish(apdmem("search", probe(second[0]), "--user", "dave", "--store", str(store)))[0] == 0
    assert finish(apdmem("forget", second[0].session_id, "--user", "dave", "--store", str(store)))[0] == 0
    assert finish(apdmem("ingest", str(write_file(tmp_path / "third.json", real_sessions[40:42])), "--user", "dave",
                         "--store", str(store), "--l0-mode", "raw", "--quiet"))[0] == 0


SEARCHER = """
import json, sys, time
from apdmem.memory import Memory
store, stop, out = sys.argv[1:4]
memory = Memory("erin", store=store, l0_mode="raw")
seen, errors, searches = set(), [], 0
while True:
    finished = __import__("os").path.exists(stop)
    try:
        docs = memory.search("what did I say about my plans", k=5)
        generation = memory.generations.current  # what that search read
        listed = {s for s, m in generation.manifest["sessions"].items() if m["units"]}
        indexed = {u.session_id for u in generation.index.units} if generation.index else set()
        if indexed != listed or any(d.metadata["session_id"] not in listed for d in docs):
            errors.append(f"generation {generation.number}: index {len(indexed)} sessions, listing {len(listed)}")
        seen.add(generation.number)
        searches += 1
    except Exception as exc:
        errors.append(repr(exc))
    if finished:
        break
json.dump({"generations": sorted(seen), "errors": errors, "searches": searches}, open(out, "w"))
"""


@pytest.mark.slow
def test_searches_during_ingestion_always_read_a_complete_generation(tmp_path, real_sessions, store_location):
    store, stop, report = store_location, tmp_path / "stop", tmp_path / "searcher.json"
    Memory("erin", store=str(store), l0_mode="raw").ingest(real_sessions[:3])
    (tmp_path / "searcher.py").write_text(SEARCHER)
    searcher = subprocess.Popen([sys.executable, str(tmp_path / "searcher.py"), str(store), str(stop), str(report)],
                                cwd=ROOT, env=ENV, stderr=subprocess.PIPE, text=True)
    for i in range(4):  # four commits, each a new generation, while the reader searches in a loop
        batch = real_sessions[3 + 8 * i : 11 + 8 * i]
        code, _, err = finish(apdmem("ingest", str(write_file(tmp_path / f"b{i}.json", batch)), "--user", "erin",
                                     "--store", str(store), "--l0-mode", "raw", "--quiet"))
        assert code == 0, err
    stop.touch()
    _, err = searcher.communicate(timeout=120)
    result = json.loads(report.read_text())
    assert result["errors"] == [], err
    assert result["searches"] > 20 and len(result["generations"]) >= 3


# ------------------------------------------------------------------------------------------- damaged files


@pytest.fixture
def stored(tmp_path, embeddings):
    """A file store holding alice's synthetic history; returns (memory directory, alice's folder)."""
    directory = tmp_path / "mem"
    Memory("alice", store=str(directory), l0_mode="raw").ingest([make_session(s, d, t) for s, (d, t) in HISTORY.items()])
    return directory, directory / "users" / "alice"


def generation_of(folder: Path) -> int:
    return json.loads((folder / "manifest.json").read_text())["generation"]


def edit_listing(folder: Path, change) -> None:
    """Change the listing of a user's memory of one segment (one commit) in place: `change(entries, segment)`."""
    (number,) = json.loads((folder / "manifest.json").read_text())["segments"]
    path = folder / "index" / str(number) / "segment.json"
    segment = json.loads(path.read_text())
    change(segment["sessions"], segment)
    path.write_text(json.dumps(segment))


def cli(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def plant_on_disk_faiss(path: Path, target: Path) -> None:
    """A FAISS index of an on-disk type whose inverted lists live in `target`, outside the memory directory."""
    vectors = np.random.default_rng(0).normal(size=(100, 384)).astype(np.float32)
    quantizer = faiss.IndexFlatL2(384)  # every FAISS object referenced until the end: SWIG does not own them
    ivf = faiss.IndexIVFFlat(quantizer, 384, 2)
    ivf.train(vectors)
    lists = faiss.OnDiskInvertedLists(2, ivf.code_size, str(target))
    ivf.replace_invlists(lists, False)
    ivf.add(vectors)
    faiss.write_index(ivf, str(path))
    del ivf, lists, quantizer


def test_a_planted_faiss_file_never_reaches_outside_the_memory_directory(stored, tmp_path, capsys, monkeypatch):
    directory, folder = stored
    target = tmp_path / "outside" / "victim.bin"
    target.parent.mkdir()
    number = generation_of(folder)
    plant_on_disk_faiss(folder / "index" / str(number) / "vectors.f32", target)
    plant_on_disk_faiss(folder / "index" / "dense.faiss", target)  # where apdmem 0.1 kept its FAISS file
    before = (target.read_bytes(), target.stat().st_mtime_ns)

    def refuse(*args, **kwargs):
        raise AssertionError("a FAISS reader was called on stored data")

    monkeypatch.setattr(faiss, "read_index", refuse)
    monkeypatch.setattr(faiss, "deserialize_index", refuse)
    code, out, err = cli(capsys, "search", "What is my dog's name?", "--user", "alice", "--store", str(directory))
    assert code == 0 and out.startswith("1. s-dog")
    assert "repaired the memory of user 'alice'" in err and "index of generation" in err
    code, _, _ = cli(capsys, "ingest", str(write_file(tmp_path / "more.json", [make_session("s-new", "2024-06-01T10:00", ["I learned to juggle.", "Nice!"])])),
                     "--user", "alice", "--store", str(directory), "--l0-mode", "raw", "--quiet")
    assert code == 0
    assert (target.read_bytes(), target.stat().st_mtime_ns) == before
    assert not (folder / "index" / "dense.faiss").exists()  # not a key of this format: swept as a stale index file
    vectors = folder / "index" / str(generation_of(folder)) / "vectors.f32"
    assert vectors.stat().st_size % (4 * 384) == 0  # plain float32 vectors again


DAMAGE = {
    "garbage unit table": lambda f, n: (f / "index" / str(n) / "segment.json").write_bytes(b"\x00\x01garbage"),
    "truncated vectors": lambda f, n: (f / "index" / str(n) / "vectors.f32").write_bytes((f / "index" / str(n) / "vectors.f32").read_bytes()[:999]),
    "empty unit table": lambda f, n: (f / "index" / str(n) / "segment.json").write_bytes(b""),
    "unit table of the wrong shape": lambda f, n: (f / "index" / str(n) / "segment.json").write_text('{"dimension": 384, "units": 7}'),
    "deeply nested unit table": lambda f, n: (f / "index" / str(n) / "segment.json").write_bytes(b"[" * 100_000 + b"]" * 100_000),
    "index files gone": lambda f, n: [p.unlink() for p in (f / "index" / str(n)).iterdir()],
    "garbage manifest": lambda f, n: (f / "manifest.json").write_bytes(b"{not json"),
    "manifest of the wrong shape": lambda f, n: (f / "manifest.json").write_text('{"format": 2, "generation": 3, "sessions": [1, 2]}'),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_damaged_derived_files_are_rebuilt_with_one_warning(stored, capsys, damage):
    directory, folder = stored
    DAMAGE[damage](folder, generation_of(folder))
    code, out, err = cli(capsys, "search", "What is my dog's name?", "--user", "alice", "--store", str(directory))
    assert code == 0 and out.startswith("1. s-dog"), err
    assert len(err.strip().splitlines()) == 1 and err.startswith("apdmem: repaired the memory of user 'alice'")
    code, out, err = cli(capsys, "sessions", "--user", "alice", "--store", str(directory))
    assert (code, err) == (0, "") and [line.split("\t")[0] for line in out.splitlines()] == list(HISTORY)
    assert Memory("alice", store=str(directory), l0_mode="raw").search("sourdough starter", k=1)[0].metadata["session_id"] == "s-bread"


def test_a_listed_session_without_its_files_is_reported_and_dropped(stored, capsys):
    directory, folder = stored
    for path in (folder / "sessions" / "s-dog").iterdir():
        path.unlink()
    code, out, err = cli(capsys, "sessions", "--user", "alice", "--store", str(directory))
    assert code == 0 and "s-dog" not in out and len(out.splitlines()) == len(HISTORY) - 1
    assert len(err.strip().splitlines()) == 1 and "dropped from the listing: s-dog" in err
    assert "saved index kept" in err  # nothing re-embedded for a listing fix
    code, out, _ = cli(capsys, "search", "What is my dog's name?", "-k", "10", "--user", "alice", "--store", str(directory))
    assert code == 0 and "s-dog" not in out


@pytest.mark.parametrize("content", ['{"a": 1}', "[1, 2]", '[{"session_id": "s-dog"}]', "garbage"])
def test_an_unreadable_l0_is_rebuilt_from_the_messages(stored, capsys, content):
    directory, folder = stored
    (folder / "sessions" / "s-dog" / "L0.json").write_text(content)
    code, out, err = cli(capsys, "show", "s-dog", "--layer", "L0", "--user", "alice", "--store", str(directory))
    assert code == 0 and "## Turns 1-4" in out and "Biscuit" in out
    assert "L0 of session 's-dog'" in err and len(err.strip().splitlines()) == 1
    assert json.loads((folder / "sessions" / "s-dog" / "L0.json").read_text())[0]["session_id"] == "s-dog"  # written back
    (folder / "index" / str(generation_of(folder)) / "segment.json").write_bytes(b"")  # a rebuild reads every L0
    (folder / "sessions" / "s-bread" / "L0.json").write_text(content)
    code, out, _ = cli(capsys, "search", "sourdough starter rye flour", "--user", "alice", "--store", str(directory))
    assert code == 0 and out.startswith("1. s-bread")


def test_an_unreadable_session_json_is_rebuilt_from_its_l3_and_nothing_is_deleted(stored, capsys):
    directory, folder = stored
    bob_unchanged = beside_bob(directory)
    l3 = (folder / "sessions" / "s-job" / "L3.md").read_bytes()
    (folder / "sessions" / "s-job" / "session.json").write_text('{"session_id": 5}')
    code, out, err = cli(capsys, "show", "s-job", "--layer", "L3", "--user", "alice", "--store", str(directory))
    assert code == 0 and out.strip() == l3.decode().strip(), err
    assert "rebuilt from its L3.md" in err and len(err.strip().splitlines()) == 1
    assert (folder / "sessions" / "s-job" / "L3.md").read_bytes() == l3  # the surviving layer is kept
    assert json.loads((folder / "sessions" / "s-job" / "session.json").read_text())["session_id"] == "s-job"  # written back
    memory = Memory("alice", store=str(directory), l0_mode="raw")
    assert memory.session_ids() == list(HISTORY) and memory.session("s-job").turns == make_session("s-job", *HISTORY["s-job"]).turns
    assert bob_unchanged()


def test_a_session_with_no_readable_layer_is_unlisted_and_its_files_kept(stored, capsys):
    directory, folder = stored
    bob_unchanged = beside_bob(directory)
    (folder / "sessions" / "s-job" / "session.json").write_text('{"session_id": 5}')
    (folder / "sessions" / "s-job" / "L3.md").write_text("garbage")
    code, _, err = cli(capsys, "show", "s-job", "--layer", "L3", "--user", "alice", "--store", str(directory))
    assert code == 2 and err.strip().splitlines()[-1] == "apdmem: error: no session 's-job' in this user's memory"
    assert "dropped from the listing: s-job" in err
    assert "s-job" not in Memory("alice", store=str(directory), l0_mode="raw").session_ids()
    assert (folder / "sessions" / "s-job" / "L0.json").exists()  # not provably debris: never deleted
    assert bob_unchanged()


def test_nothing_outside_the_users_namespace_is_read(stored):
    directory, folder = stored
    store = open_store(directory)
    Memory("bob", store=store, l0_mode="raw").ingest([make_session("s-secret", "2024-01-01T00:00", ["My PIN is 4921.", "Noted."])])

    def plant(entries, segment):
        for sid in ("../bob/sessions/s-secret", "../../users/bob", "/etc/passwd", ".", "users/bob"):
            entries[sid] = {**entries["s-dog"], "units": 0}

    edit_listing(folder, plant)
    read = []
    mget = store.mget
    store.mget = lambda keys: read.extend(keys) or mget(keys)
    memory = Memory("alice", store=store, l0_mode="raw")
    for question in ("What is my PIN?", "What is my dog's name?"):
        assert all("PIN" not in d.page_content for d in memory.search(question, k=10))
    assert read and all(k.startswith("users/alice/") for k in read)
    assert memory.session_ids() == sorted(HISTORY, key=lambda s: HISTORY[s][0])  # the planted entries were dropped


# ------------------------------------------------------------------------------------- leftovers of a kill


def test_temporary_files_of_a_killed_write_are_removed_and_forget_leaves_no_byte(stored, capsys):
    directory, folder = stored
    secret = "Her first vet appointment with Dr. Alvarez".encode()
    (folder / "sessions" / "s-dog" / ".tmp-k1ll3d").write_bytes(b"half of session.json: " + secret)
    (folder / ".tmp-manifest").write_bytes(b"{")
    code, _, err = cli(capsys, "sessions", "--user", "alice", "--store", str(directory))  # any start-up cleans
    assert code == 0 and "removed 2 temporary file(s)" in err
    assert not list(folder.rglob(".tmp-*"))
    (folder / "sessions" / "s-dog" / ".tmp-again").write_bytes(secret)
    code, out, _ = cli(capsys, "forget", "s-dog", "--user", "alice", "--store", str(directory))
    assert code == 0 and containing(directory, secret) == [] and containing(directory, b"Biscuit") == []
    assert not (folder / "sessions" / "s-dog").exists()


# ---------------------------------------------------------------------------------------------- bad input


@pytest.fixture
def hashed(stored):
    """(directory, function that asserts the store is byte for byte what it was when the fixture ran)."""
    directory, _ = stored
    before = files(directory)
    return directory, lambda: files(directory) == before


def one_line_error(code: int, out: str, err: str) -> bool:
    return code == 2 and out == "" and len(err.strip().splitlines()) == 1 and err.startswith("apdmem")


def test_hostile_files_are_refused_in_one_line_and_change_nothing(hashed, tmp_path, capsys):
    directory, unchanged = hashed
    good = {"session_id": "fine", "date": "2024-06-01T10:00", "messages": [{"role": "user", "content": "hello"}]}
    cases = {
        "lone surrogate in content": '[%s, {"session_id": "bad", "date": "2024-06-01T10:00", "messages": '
                                     '[{"role": "user", "content": "x \\ud800 y"}]}]' % json.dumps(good),
        "lone surrogate in id": '[%s, {"session_id": "\\udc80", "date": "2024-06-01T10:00", "messages": '
                                '[{"role": "user", "content": "x"}]}]' % json.dumps(good),
        "id over 200 characters": json.dumps([good, {**good, "session_id": "s" * 201}]),
        "nested 100,000 deep": "[" * 100_000 + "]" * 100_000,
    }
    for name, text in cases.items():
        path = tmp_path / "bad.json"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        result = cli(capsys, "ingest", str(path), "--user", "alice", "--store", str(directory), "--quiet")
        assert one_line_error(*result), (name, result)
        assert str(path) in result[2], name
        assert unchanged(), name


@pytest.mark.parametrize("args", [
    ["search", "dog", "-k", "-1"],
    ["search", "dog", "-k", "0"],
    ["ask", "", "--date", "2024-06-01"],
    ["ask", "   "],
    ["ask", "What is my dog's name?", "--date", "not-a-date"],
    ["sessions", "--user", "\udc80"],
    ["sessions", "--user", "a" * 201],
    ["show", "s-dog", "--layer", "L9"],
    ["forget", "no-such-session"],
])
def test_bad_options_are_refused_in_one_line_and_change_nothing(hashed, capsys, args):
    directory, unchanged = hashed
    started = time.monotonic()
    result = cli(capsys, *args, "--store", str(directory), *(["--user", "alice"] if "--user" not in args else []))
    assert one_line_error(*result), result
    assert time.monotonic() - started < 30  # refused before any model runs
    assert unchanged()


def test_a_memory_directory_that_is_a_file_is_refused(tmp_path, capsys):
    path = tmp_path / "not-a-directory"
    path.write_text("precious")
    result = cli(capsys, "sessions", "--user", "alice", "--store", str(path))
    assert one_line_error(*result) and "is a file, not a directory" in result[2]
    assert path.read_text() == "precious"


def test_output_closed_early_is_one_line_and_changes_nothing(hashed):
    directory, unchanged = hashed
    long = make_session("s-long", "2024-06-02T10:00", [f"Line {i} of a long story about the lighthouse." * 40 for i in range(60)])
    Memory("alice", store=str(directory), l0_mode="raw").ingest([long])
    before = files(directory)
    shell = (f"{sys.executable} -m apdmem.cli show s-long --layer L3 --user alice --store {directory} 2>{directory.parent / 'err'} "
             f"| head -c 10 >/dev/null; echo ${{PIPESTATUS[0]}}")
    code = subprocess.run(["bash", "-c", shell], cwd=ROOT, env=ENV, capture_output=True, text=True).stdout.strip()
    err = (directory.parent / "err").read_text()
    assert code == "2" and len(err.strip().splitlines()) == 1 and "broken pipe" in err
    assert files(directory) == before


def test_long_and_non_ascii_ids_are_stored_inside_the_memory_directory(tmp_path, capsys, embeddings):
    directory = tmp_path / "mem"
    user, session = "é" * 64, "é" * 64 + ":séance"  # hex-encoded they would be over 255 bytes long
    path = write_file(tmp_path / "h.json", [make_session(session, "2024-06-01T10:00", ["I repaired my bicycle.", "Well done."])])
    assert cli(capsys, "ingest", str(path), "--user", user, "--store", str(directory), "--quiet")[0] == 0
    code, out, _ = cli(capsys, "search", "bicycle repair", "--user", user, "--store", str(directory))
    assert code == 0 and session in out
    assert all(len(p.name.encode()) < 150 for p in directory.rglob("*"))
    assert cli(capsys, "forget", session, "--user", user, "--store", str(directory))[0] == 0


# ------------------------------------------------------------------------------ case-insensitive file systems


class CaseInsensitiveStore(InMemoryStore):
    """A store that, like the default file systems of macOS and Windows, does not tell upper from lower case."""

    def mget(self, keys):
        return super().mget([k.lower() for k in keys])

    def mset(self, pairs):
        super().mset([(k.lower(), v) for k, v in pairs])

    def mdelete(self, keys):
        super().mdelete([k.lower() for k in keys])

    def yield_keys(self, *, prefix=None):
        return super().yield_keys(prefix=prefix.lower() if prefix else None)


def test_ids_differing_in_case_never_share_a_folder(embeddings):
    store = CaseInsensitiveStore()
    for user in ("Alice", "alice", "ALICE", "x-616c696365"):  # the last one is the hex form of "alice"
        Memory(user, store=store, l0_mode="raw").ingest([make_session(f"S-{user}", "2024-06-01T10:00", [f"I am {user}.", "Hi!"]),
                                                         make_session(f"s-{user}", "2024-06-02T10:00", [f"Still {user}.", "Hi!"])])
    for user in ("Alice", "alice", "ALICE", "x-616c696365"):
        assert Memory(user, store=store, l0_mode="raw").session_ids() == [f"S-{user}", f"s-{user}"]
    rng = random.Random(0)
    alphabet = "aAbBxX-_.é0123456789:"
    ids = {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6))) for _ in range(5000)}
    ids = {i for i in ids if i.strip(" ") == i and ".." not in i}
    keys = {session_key(i).casefold() for i in ids}
    assert len(keys) == len(ids)
    assert all(session_key(i) == i for i in ("s1", "answer_4be1b6b4_1", "conv-26_session_1"))


def test_user_store_keys_stay_in_the_namespace():
    store = InMemoryStore()
    alice = UserStore(store, "alice")
    alice.put({"k": b"1"})
    assert list(store.yield_keys()) == ["users/alice/k"]


# ------------------------------------------------------------------ round two: lost listings, links, migrate


def snapshot(location: str | Path, user: str | None = None) -> dict[str, str]:
    """Hash of every value of one user (or, for a directory, every file of the store, locks aside), files or rows."""
    if str(location).startswith("postgresql://"):
        from sqlalchemy import create_engine, text

        engine = create_engine(str(location).replace("postgresql://", "postgresql+psycopg://", 1))
        try:
            with engine.connect() as connection:
                rows = connection.execute(text("SELECT namespace, key, value FROM langchain_key_value_stores"))
                return {f"{ns}/{k}": hashlib.sha256(v).hexdigest() for ns, k, v in rows
                        if user is None or ns == f"users/{session_key(user)}"}
        finally:
            engine.dispose()
    folder = Path(location) / "users" / session_key(user) if user else Path(location)
    return files(folder) if folder.exists() else {}


def sql(location: str, statement: str, **params) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(location.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.begin() as connection:
            connection.execute(text(statement), params)
    finally:
        engine.dispose()


def ingest_two_users(store_location: str) -> str:
    """alice (the synthetic history) and bob (two sessions) in one store."""
    Memory("alice", store=store_location, l0_mode="raw").ingest([make_session(s, d, t) for s, (d, t) in HISTORY.items()])
    Memory("bob", store=store_location, l0_mode="raw").ingest([make_session("b-1", "2024-01-01T00:00", ["My PIN is 4921.", "Noted."]),
                                                               make_session("b-2", "2024-01-02T00:00", ["I sold my car.", "OK."])])
    return store_location


@pytest.fixture
def two_users(store_location, embeddings):
    """`ingest_two_users` on each backend."""
    return ingest_two_users(store_location)


def beside_bob(directory: Path):
    """Put bob beside alice in a file store; returns a check that bob's files are what they were."""
    Memory("bob", store=str(directory), l0_mode="raw").ingest([make_session("b-1", "2024-01-01T00:00", ["My PIN is 4921.", "Noted."])])
    before = files(directory / "users" / "bob")
    return lambda: files(directory / "users" / "bob") == before


def listed(capsys, store, user="alice") -> tuple[int, list[str], str]:
    code, out, err = cli(capsys, "sessions", "--user", user, "--store", str(store))
    return code, [line.split("\t")[0] for line in out.splitlines()], err


def test_a_missing_manifest_lists_every_session_again(two_users, capsys):
    store = two_users
    bob = snapshot(store, "bob")
    if store.startswith("postgresql://"):
        sql(store, "DELETE FROM langchain_key_value_stores WHERE namespace = 'users/alice' AND key = 'manifest.json'")
    else:
        (Path(store) / "users" / "alice" / "manifest.json").unlink()
    code, sessions, err = listed(capsys, store)
    assert code == 0 and sessions == list(HISTORY), err
    assert len(err.strip().splitlines()) == 1 and "manifest.json is missing" in err and "listed again" in err
    code, out, _ = cli(capsys, "search", "What is my dog's name?", "--user", "alice", "--store", store)
    assert code == 0 and out.startswith("1. s-dog")
    assert listed(capsys, store) == (0, list(HISTORY), "")  # repaired once, then read as it is
    assert snapshot(store, "bob") == bob


def test_an_intact_session_missing_from_a_readable_listing_is_listed_again(stored, capsys):
    directory, folder = stored
    bob_unchanged = beside_bob(directory)

    def unlist(entries, segment):  # e.g. an index restored from an older backup
        del entries["s-dog"]
        rows = segment["vector_units"]
        kept = [i for i, unit in enumerate(segment["units"]) if unit["session_id"] != "s-dog"]
        path = folder / "index" / str(generation_of(folder)) / "vectors.f32"
        vectors = np.frombuffer(path.read_bytes(), "<f4").reshape(len(rows), -1)
        path.write_bytes(vectors[[r in kept for r in rows]].tobytes())
        segment["vector_units"] = [kept.index(r) for r in rows if r in kept]
        segment["units"], segment["tokens"] = [segment["units"][i] for i in kept], [segment["tokens"][i] for i in kept]

    edit_listing(folder, unlist)
    code, sessions, err = listed(capsys, directory)
    assert code == 0 and sessions == list(HISTORY) and "listed again: s-dog" in err and len(err.strip().splitlines()) == 1
    code, out, _ = cli(capsys, "search", "What is my dog's name?", "--user", "alice", "--store", str(directory))
    assert code == 0 and out.startswith("1. s-dog")
    assert bob_unchanged()


@pytest.mark.parametrize("number", [10**400, -5, 2.5, "7", True])
def test_a_manifest_naming_an_impossible_generation_is_repaired(stored, capsys, number):
    directory, folder = stored
    bob_unchanged = beside_bob(directory)
    text = (folder / "manifest.json").read_text()
    manifest = json.loads(text)
    (folder / "manifest.json").write_text(text.replace(f'"generation": {manifest["generation"]}', f'"generation": {json.dumps(number)}'))
    code, sessions, err = listed(capsys, directory)
    assert code == 0 and sessions == list(HISTORY), err
    assert len(err.strip().splitlines()) == 1 and "manifest.json names no valid generation" in err
    assert 0 < generation_of(folder) < 100
    code, out, _ = cli(capsys, "search", "What is my dog's name?", "--user", "alice", "--store", str(directory))
    assert code == 0 and out.startswith("1. s-dog")
    assert bob_unchanged()


def test_an_index_of_another_dimension_is_rebuilt(stored, capsys):
    directory, folder = stored
    bob_unchanged = beside_bob(directory)
    index = folder / "index" / str(generation_of(folder))
    table = json.loads((index / "segment.json").read_text())
    table["dimension"] = 8
    (index / "segment.json").write_text(json.dumps(table))
    (index / "vectors.f32").write_bytes(np.ones((len(table["vector_units"]), 8), "<f4").tobytes())
    code, out, err = cli(capsys, "search", "What is my dog's name?", "--user", "alice", "--store", str(directory))
    assert code == 0 and out.startswith("1. s-dog"), err
    assert len(err.strip().splitlines()) == 1 and "dimension 8" in err
    assert bob_unchanged()


def plant_links(directory: Path, outside: Path) -> dict[str, tuple[Path, str]]:
    """Links planted in alice's folder: to bob's files, to a folder of bob's, and out of the store."""
    alice, bob = directory / "users" / "alice", directory / "users" / "bob"
    return {
        "index file to bob's manifest": (alice / "index" / "dense.faiss", "../../bob/manifest.json"),
        "layer file out of the store": (alice / "sessions" / "s-dog" / "L1.json", str(outside / "victim.json")),
        "session folder to bob's": (alice / "sessions" / "s-evil", "../../bob/sessions/b-1"),
        "index folder to bob's": (alice / "index", "../bob/index"),
        "manifest to bob's": (alice / "manifest.json", "../bob/manifest.json"),
        "user folder out of the store": (directory / "users" / "zz", str(outside)),
        "lock file to bob's manifest": (alice / ".lock", "../bob/manifest.json"),
    }


@pytest.mark.parametrize("plant", ["index file to bob's manifest", "layer file out of the store", "session folder to bob's",
                                   "index folder to bob's", "manifest to bob's", "user folder out of the store",
                                   "lock file to bob's manifest"])
def test_a_planted_link_is_never_followed(tmp_path, embeddings, capsys, plant):
    directory, outside = tmp_path / "mem", tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.json").write_text('["a fact planted from outside"]')
    Memory("alice", store=str(directory), l0_mode="raw").ingest([make_session(s, d, t) for s, (d, t) in HISTORY.items()])
    Memory("bob", store=str(directory), l0_mode="raw").ingest([make_session("b-1", "2024-01-01T00:00", ["My PIN is 4921.", "Noted."])])
    link, target = plant_links(directory, outside)[plant]
    if link.is_dir() and not link.is_symlink():
        shutil.rmtree(link)
    elif link.exists():
        link.unlink()
    link.symlink_to(target)
    bob, beyond = files(directory / "users" / "bob"), files(outside)
    code, sessions, err = listed(capsys, directory)
    assert code == 0 and sessions == list(HISTORY), err
    for args in (["search", "What is my PIN?", "-k", "10"], ["show", "s-dog", "--layer", "L3"], ["show", "s-hiking", "--layer", "L0"]):
        code, out, err = cli(capsys, *args, "--user", "alice", "--store", str(directory))
        assert code == 0 and "4921" not in out and "planted from outside" not in out, (args, err)
    path = write_file(tmp_path / "more.json", [make_session("s-new", "2024-06-01T10:00", ["I learned to juggle.", "Nice!"])])
    assert cli(capsys, "ingest", str(path), "--user", "alice", "--store", str(directory), "--l0-mode", "raw", "--quiet")[0] == 0
    assert cli(capsys, "forget", "s-new", "--user", "alice", "--store", str(directory))[0] == 0
    assert files(directory / "users" / "bob") == bob and files(outside) == beyond  # never read through, written or deleted
    assert listed(capsys, directory, "bob")[1] == ["b-1"]
    if plant != "user folder out of the store":  # alice's own link is damage her writer removed (the link itself)
        assert not link.is_symlink()
    assert listed(capsys, directory)[1] == list(HISTORY)


def test_a_read_of_a_user_without_memory_says_so_and_creates_nothing(stored, capsys, caplog):
    directory, _ = stored
    before = {str(p.relative_to(directory)) for p in directory.rglob("*")}, files(directory)
    for args in (["search", "hiking"], ["sessions"], ["show", "s-dog"]):
        code, out, err = cli(capsys, *args, "--user", "nobody", "--store", str(directory))
        said = "no session 's-dog'" if args[0] == "show" else "user 'nobody' has no memory in this store"
        assert (code, out) == (2 if args[0] == "show" else 0, "") and said in err, (args, err)
        assert len(err.strip().splitlines()) == 1
    assert Memory("nobody", store=str(directory), l0_mode="raw").search("hiking") == []
    assert "user 'nobody' has no memory in this store" in caplog.text  # what a graph's log shows
    assert ({str(p.relative_to(directory)) for p in directory.rglob("*")}, files(directory)) == before
    assert "'default'" in subprocess.run([sys.executable, "-m", "apdmem.cli", "search", "--help"], cwd=ROOT, env=ENV,
                                         capture_output=True, text=True).stdout


@pytest.mark.parametrize("store", ["mysql://u:secret@host/x", "", "  ", "redis://h:6379"])
def test_an_unknown_store_url_or_an_empty_store_is_an_error_that_creates_nothing(tmp_path, capsys, monkeypatch, store):
    monkeypatch.chdir(tmp_path)
    for command in (["sessions"], ["search", "dog"]):
        result = cli(capsys, *command, "--user", "alice", "--store", store)
        assert one_line_error(*result) and "secret" not in result[2], result
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------------------- read-only stores


def run_read_only(directory: Path, *args: str) -> tuple[int, str, str]:
    """The command line in a mount namespace of its own where `directory` is a read-only bind of itself."""
    script = f'mount --bind -o ro "$1" "$1" && shift && exec {sys.executable} -m apdmem.cli "$@"'
    result = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", str(directory), *args], cwd=ROOT, env=ENV,
                            capture_output=True, text=True, timeout=600)
    return result.returncode, result.stdout, result.stderr


def read_only_mounts() -> bool:
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount --bind -o ro / /"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not read_only_mounts(), reason="needs unshare and mount (root in a mount namespace)")
def test_a_read_only_directory_serves_reads_and_refuses_writes_in_one_line(stored, tmp_path):
    directory, folder = stored
    (folder / "index" / str(generation_of(folder)) / "segment.json").write_bytes(b"garbage")  # a reader repairs in memory
    before = files(directory)
    store = ["--user", "alice", "--store", str(directory)]
    code, out, err = run_read_only(directory, "sessions", *store)
    assert code == 0 and [line.split("\t")[0] for line in out.splitlines()] == list(HISTORY), err
    assert "in memory only" in err
    code, out, err = run_read_only(directory, "search", "What is my dog's name?", *store)
    assert code == 0 and out.startswith("1. s-dog"), err
    code, out, err = run_read_only(directory, "show", "s-dog", "--layer", "L3", *store)
    assert code == 0 and "Biscuit" in out, err
    path = write_file(tmp_path / "more.json", [make_session("s-new", "2024-06-01T10:00", ["I learned to juggle.", "Nice!"])])
    for args in (["ingest", str(path), "--l0-mode", "raw", "--quiet"], ["forget", "s-dog"]):
        code, out, err = run_read_only(directory, *args, *store)
        last = err.strip().splitlines()[-1]  # after the warning of the in-memory repair
        assert code == 2 and last.startswith("apdmem: error: ") and "Read-only file system" in last, (args, err)
        assert "Traceback" not in err
    assert files(directory) == before


def chattr(flag: str, directory: Path) -> bool:
    return subprocess.run(["chattr", "-R", flag, str(directory)], capture_output=True).returncode == 0


def test_an_immutable_directory_serves_reads_and_refuses_writes_in_one_line(stored, tmp_path, capsys):
    directory, folder = stored
    if not chattr("+i", directory):
        pytest.skip("chattr +i is not supported here")
    try:
        before = files(directory)
        for args in (["sessions"], ["search", "What is my dog's name?"], ["show", "s-dog", "--layer", "L3"]):
            code, out, err = cli(capsys, *args, "--user", "alice", "--store", str(directory))
            assert code == 0 and out and err == "", (args, err)
        path = write_file(tmp_path / "more.json", [make_session("s-new", "2024-06-01T10:00", ["I learned to juggle.", "Nice!"])])
        result = cli(capsys, "ingest", str(path), "--user", "alice", "--store", str(directory), "--l0-mode", "raw", "--quiet")
        assert one_line_error(*result) and "Operation not permitted" in result[2], result
        assert files(directory) == before
    finally:
        chattr("-i", directory)


def test_a_damaged_immutable_store_is_repaired_in_memory_with_one_warning_per_process(stored, caplog):
    """Issue 30 item 5: each open of a read-only store repaired the damage in memory again, and warned again."""
    directory, folder = stored
    (folder / "index" / str(generation_of(folder)) / "segment.json").write_bytes(b"garbage")
    if not chattr("+i", directory):
        pytest.skip("chattr +i is not supported here")
    try:
        for _ in range(3):
            memory = Memory("alice", store=str(directory), l0_mode="raw")
            assert memory.search("What is my dog's name?", k=1)[0].metadata["session_id"] == "s-dog"
        warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warned) == 1 and "in memory only: cannot write in the memory directory" in warned[0], warned
    finally:
        chattr("-i", directory)


def test_a_postgres_role_without_rights_is_one_line_and_a_select_only_role_serves_reads(postgres_url, capsys, postgres, tmp_path,
                                                                                        embeddings):
    store = ingest_two_users(postgres_url)
    suffix = uuid.uuid4().hex[:8]
    postgres.psql(f"CREATE ROLE nobody_{suffix} LOGIN; CREATE ROLE reader_{suffix} LOGIN")
    sql(store, f"GRANT SELECT ON langchain_key_value_stores TO reader_{suffix}")
    before = snapshot(store)
    as_role = lambda role: store.replace("postgresql://apdmem@", f"postgresql://{role}_{suffix}:pw{suffix}@")  # noqa: E731
    result = cli(capsys, "sessions", "--user", "alice", "--store", as_role("nobody"))
    assert one_line_error(*result) and "permission denied" in result[2], result
    assert "SELECT" not in result[2] and f"pw{suffix}" not in result[2]
    reader = ["--user", "alice", "--store", as_role("reader")]
    assert listed(capsys, as_role("reader"))[:2] == (0, list(HISTORY))
    code, out, _ = cli(capsys, "search", "What is my dog's name?", *reader)
    assert code == 0 and out.startswith("1. s-dog")
    assert cli(capsys, "show", "s-dog", "--layer", "L3", *reader)[0] == 0
    path = write_file(tmp_path / "more.json", [make_session("s-new", "2024-06-01T10:00", ["I learned to juggle.", "Nice!"])])
    for args in (["ingest", str(path), "--l0-mode", "raw", "--quiet"], ["forget", "s-dog"]):
        result = cli(capsys, *args, *reader)
        assert one_line_error(*result) and "permission denied" in result[2] and f"pw{suffix}" not in result[2], result
    assert snapshot(store) == before


# ------------------------------------------------------------------------------------------------- migrate


def test_migrate_from_postgres_refuses_a_traversal_namespace_and_changes_nothing(postgres_url, tmp_path, capsys, embeddings):
    Memory("alice", store=postgres_url, l0_mode="raw").ingest([make_session(s, d, t) for s, (d, t) in HISTORY.items()])
    target = tmp_path / "target"
    Memory("bob", store=str(target), l0_mode="raw").ingest([make_session("b-1", "2024-01-01T00:00", ["My PIN is 4921.", "Noted."])])
    manifest = json.loads(UserStore(open_store(postgres_url), "alice").get("manifest.json"))
    sql(postgres_url, "INSERT INTO langchain_key_value_stores (namespace, key, value) VALUES (:ns, 'manifest.json', :v)",
        ns="users/zz/../bob", v=json.dumps({**manifest, "user_id": "bob", "sessions": {}}).encode())
    sql(postgres_url, "INSERT INTO langchain_key_value_stores (namespace, key, value) VALUES ('users/alice', :k, 'planted')",
        k="sessions/s-dog/../../../bob/sessions/b-1/L3.md")  # a key of alice's that names a path out of her folder
    before, source = files(target), snapshot(postgres_url)
    result = cli(capsys, "migrate", "--from", postgres_url, "--to", str(target), "--quiet")
    assert one_line_error(*result) and "nothing was copied" in result[2], result
    assert files(target) == before and snapshot(postgres_url) == source
    assert listed(capsys, target, "bob")[1] == ["b-1"]
    sql(postgres_url, "DELETE FROM langchain_key_value_stores WHERE namespace = 'users/zz/../bob'")
    code, out, err = cli(capsys, "migrate", "--from", postgres_url, "--to", str(target), "--quiet")
    assert code == 0 and out.startswith("alice: ") and "verified" in out and "1 user(s) copied" in out, err
    assert {k: v for k, v in files(target).items() if k.startswith("users/bob/")} == before  # only alice was written
    assert listed(capsys, target)[1] == list(HISTORY) and listed(capsys, target, "bob")[1] == ["b-1"]
    assert b"planted" not in b"".join(p.read_bytes() for p in target.rglob("*") if p.is_file())


HOSTILE_SOURCES = {
    "link out of the store": lambda users, outside: (users / "alice" / "sessions" / "s-dog" / "L1.json").symlink_to(outside / "victim.json"),
    "user folder linked out of the store": lambda users, outside: (users / "zz").symlink_to(outside),
    "garbage manifest": lambda users, outside: (users / "alice" / "manifest.json").write_bytes(b"{not json"),
    "manifest [1, 2]": lambda users, outside: (users / "alice" / "manifest.json").write_text("[1, 2]"),
    "deeply nested manifest": lambda users, outside: (users / "alice" / "manifest.json").write_bytes(b"[" * 100_000 + b"]" * 100_000),
    "folder claiming another user": lambda users, outside: shutil.copytree(users / "alice", users / "mallory"),
    "manifest of another user": lambda users, outside: (users / "alice" / "manifest.json").write_text(
        (users / "alice" / "manifest.json").read_text().replace('"user_id": "alice"', '"user_id": "bob"')),
}


@pytest.mark.parametrize("hostile", HOSTILE_SOURCES)
def test_migrate_from_a_hostile_file_store_fails_in_one_line_and_copies_nothing(tmp_path, capsys, embeddings, hostile):
    source, target, outside = tmp_path / "source", tmp_path / "target", tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.json").write_text('["planted"]')
    for user in ("alice", "carol"):
        Memory(user, store=str(source), l0_mode="raw").ingest([make_session(s, d, t) for s, (d, t) in list(HISTORY.items())[:3]])
    Memory("bob", store=str(target), l0_mode="raw").ingest([make_session("b-1", "2024-01-01T00:00", ["My PIN is 4921.", "Noted."])])
    HOSTILE_SOURCES[hostile](source / "users", outside)
    before, source_before, beyond = files(target), files(source), files(outside)
    result = cli(capsys, "migrate", "--from", str(source), "--to", str(target), "--quiet")
    assert one_line_error(*result) and "nothing was copied" in result[2], result
    assert files(target) == before and files(source) == source_before and files(outside) == beyond


def test_migrate_from_a_missing_directory_is_an_error_that_creates_nothing(tmp_path, capsys):
    result = cli(capsys, "migrate", "--from", str(tmp_path / "nonexistent"), "--to", str(tmp_path / "target"), "--quiet")
    assert one_line_error(*result) and "no memory directory" in result[2], result
    assert list(tmp_path.iterdir()) == []


def test_migrate_copies_valid_users_and_verifies_each_against_its_source(tmp_path, capsys, embeddings):
    source, target = tmp_path / "source", tmp_path / "target"
    Memory("alice", store=str(source), l0_mode="raw").ingest([make_session(s, d, t) for s, (d, t) in HISTORY.items()])
    Memory("bob@example.com", store=str(source), l0_mode="raw").ingest([make_session("b-1", "2024-01-01T00:00", ["My PIN is 4921.", "Noted."])])
    (source / "users" / "alice" / "index" / "dense.faiss").write_bytes(b"debris of apdmem 0.1")  # not copied
    before = files(source)
    code, out, err = cli(capsys, "migrate", "--from", str(source), "--to", str(target), "--quiet")
    assert code == 0 and out.count("verified") == 2, err
    assert files(source) == before
    assert not (target / "users" / "alice" / "index" / "dense.faiss").exists()
    assert Memory("alice", store=str(target), l0_mode="raw").session_ids() == list(HISTORY)


def test_migrate_refuses_a_user_the_target_holds_unless_told_to_replace_it(tmp_path, capsys, embeddings):
    """Issue 30 item 7: the target's own session of alice was deleted and "verified" printed."""
    source, target = tmp_path / "source", tmp_path / "target"
    Memory("alice", store=str(source), l0_mode="raw").ingest([make_session(s, d, t) for s, (d, t) in HISTORY.items()])
    Memory("carol", store=str(source), l0_mode="raw").ingest([make_session("c-1", "2024-01-01T00:00", ["I sing.", "Nice."])])
    Memory("alice", store=str(target), l0_mode="raw").ingest([make_session("t-1", "2024-01-01T00:00", ["My PIN is 4921.", "Noted."])])
    before = files(target)
    result = cli(capsys, "migrate", "--from", str(source), "--to", str(target), "--quiet")
    assert one_line_error(*result) and "the target already holds user(s) alice; nothing was copied" in result[2], result
    assert files(target) == before and listed(capsys, target)[1] == ["t-1"]  # carol was not copied either
    code, out, err = cli(capsys, "migrate", "--from", str(source), "--to", str(target), "--quiet", "--replace")
    assert code == 0 and "alice: " in out and "(replaced in the target)" in out and out.count("verified") == 2, err
    assert listed(capsys, target)[1] == list(HISTORY) and listed(capsys, target, "carol")[1] == ["c-1"]


def test_migrate_refuses_the_source_as_its_own_target(tmp_path, capsys, embeddings):
    """The same directory, by its path, with a trailing "/./", through a link, or through a parent's link."""
    source = tmp_path / "source"
    Memory("alice", store=str(source), l0_mode="raw").ingest([make_session(s, d, t) for s, (d, t) in HISTORY.items()])
    (tmp_path / "link").symlink_to(source)
    (tmp_path / "parent-link").symlink_to(tmp_path)
    before = files(source)
    for target in (source, f"{source}/./", tmp_path / "link", tmp_path / "parent-link" / "source", f"file://{source}"):
        result = cli(capsys, "migrate", "--from", str(source), "--to", str(target), "--quiet", "--replace")
        assert one_line_error(*result) and "the source and the target are the same store" in result[2], (target, result)
    assert files(source) == before


def test_migrate_refuses_one_database_as_source_and_target(postgres_url, capsys, embeddings):
    Memory("alice", store=postgres_url, l0_mode="raw").ingest([make_session(s, d, t) for s, (d, t) in HISTORY.items()])
    before = snapshot(postgres_url)
    for target in (postgres_url, postgres_url.replace("postgresql://", "postgres://", 1) + "?application_name=copy"):
        result = cli(capsys, "migrate", "--from", postgres_url, "--to", target, "--quiet", "--replace")
        assert one_line_error(*result) and "the source and the target are the same store" in result[2], (target, result)
    assert snapshot(postgres_url) == before


def test_migrate_copies_a_memory_without_a_link_table_and_the_copy_rebuilds_it(tmp_path, capsys, embeddings):
    """The link table is derived data: a memory written before links existed (or whose table was lost) has none.
    Migrate copies the rest, and the copy builds its table when it is first opened."""
    source, target = tmp_path / "source", tmp_path / "target"
    memory = Memory("alice", store=str(source), l0_mode="raw")
    memory.ingest([make_session(s, d, t) for s, (d, t) in HISTORY.items()])
    expected = memory.links()
    edit_listing(source / "users" / "alice", lambda entries, segment: segment.pop("links"))
    before = files(source)
    code, out, err = cli(capsys, "migrate", "--from", str(source), "--to", str(target), "--quiet")
    assert code == 0 and out.count("verified") == 1, err
    assert files(source) == before
    copy = Memory("alice", store=str(target), l0_mode="raw")
    assert copy.session_ids() == list(HISTORY) and copy.links() == expected
    (segment,) = (target / "users" / "alice" / "index").glob("*/segment.json")
    assert json.loads(segment.read_text())["links"]["threshold"] == copy.generations.link_threshold  # built again


# ------------------------------------------------------------------------ round three (issue 30): planted files


PLANTED_DIRECTORIES = {  # where a directory is planted, in alice's folder
    "segment.json": lambda folder: folder / "index" / str(generation_of(folder)) / "segment.json",
    "session.json": lambda folder: folder / "sessions" / "s-dog" / "session.json",
    "manifest.json": lambda folder: folder / "manifest.json",
    ".lock": lambda folder: folder / ".lock",
}


@pytest.mark.parametrize("planted", PLANTED_DIRECTORIES)
def test_a_directory_planted_where_a_file_belongs_is_rebuilt_or_named_in_one_line(stored, capsys, tmp_path, planted):
    """Issue 30 item 6: each bricked alice ("Is a directory") for good. Now a segment of the index, derived, is rebuilt
    (the planted folder goes with its old generation); a session.json or a manifest, which are not, are read
    around (the session from its L3.md, the listing from the sessions) and a write fails in one line naming the
    folder, which is never deleted. bob, beside her, reads and writes throughout."""
    directory, folder = stored
    bob_unchanged = beside_bob(directory)
    links = Memory("alice", store=str(directory), l0_mode="raw").links()
    path = PLANTED_DIRECTORIES[planted](folder)
    path.unlink(missing_ok=True)
    path.mkdir()
    (path / "note.txt").write_text("planted")
    code, out, err = cli(capsys, "sessions", "--user", "alice", "--store", str(directory))
    assert code == 0 and [line.split("\t")[0] for line in out.splitlines()] == list(HISTORY), err
    code, out, err = cli(capsys, "search", "What is my dog's name?", "--user", "alice", "--store", str(directory))
    assert code == 0 and out.startswith("1. s-dog"), err
    more = write_file(tmp_path / "more.json", [make_session("s-new", "2024-06-01T10:00", ["I learned to juggle.", "Nice!"])])
    result = cli(capsys, "ingest", str(more), "--user", "alice", "--store", str(directory), "--l0-mode", "raw", "--quiet")
    if planted == "segment.json":
        assert result[0] == 0 and not path.exists(), result
        assert listed(capsys, directory)[1] == [*HISTORY, "s-new"]
        assert {(l.session_id, l.other) for l in links} <= {(l.session_id, l.other) for l in Memory("alice", store=str(directory), l0_mode="raw").links()}
    else:
        assert one_line_error(*result) and f"{str(path)!r} is a folder where apdmem keeps a file" in result[2], result
        assert (path / "note.txt").read_text() == "planted"
    assert bob_unchanged() and listed(capsys, directory, "bob")[1] == ["b-1"]
    result = cli(capsys, "ingest", str(more), "--user", "bob", "--store", str(directory), "--l0-mode", "raw", "--quiet")
    assert result[0] == 0 and listed(capsys, directory, "bob")[1] == ["b-1", "s-new"], result


def test_a_hard_link_planted_in_a_users_folder_is_never_read_nor_deleted(stored, capsys, caplog):
    """Issue 30 item 8: a hard link in alice's folder to bob's link table read bob's links. A file with more than
    one name is read by nobody (its other name may be another user's): alice never sees bob's session through
    one, and nothing deletes either name (deleting the real one would lose data), until the operator removes
    the planted one; then bob reads his memory whole again."""
    directory, folder = stored
    beside_bob(directory)
    bob = directory / "users" / "bob"
    bob_files = files(bob)
    (folder / "sessions" / "b-1").mkdir()
    for name in ("session.json", "L3.md", "L0.json"):
        os.link(bob / "sessions" / "b-1" / name, folder / "sessions" / "b-1" / name)
    table = folder / "index" / str(generation_of(folder)) / "segment.json"
    table.unlink()
    os.link(next(bob.glob("index/*/segment.json")), table)
    for _ in range(2):  # opened twice: a writer's repair and sweep run, and still nothing of bob's is read
        memory = Memory("alice", store=str(directory), l0_mode="raw")
        assert memory.session_ids() == list(HISTORY)
        assert "4921" not in " ".join(d.page_content for d in memory.search("What is my PIN?", k=10))
        assert all(link.session_id in HISTORY and link.other in HISTORY for link in memory.links())
    assert "hard link" in caplog.text and (folder / "sessions" / "b-1" / "session.json").exists()
    assert files(bob) == bob_files  # neither name deleted, nothing written through
    for name in ("session.json", "L3.md", "L0.json"):
        (folder / "sessions" / "b-1" / name).unlink()
    assert listed(capsys, directory, "bob")[1] == ["b-1"]
    assert "4921" in cli(capsys, "show", "b-1", "--layer", "L3", "--user", "bob", "--store", str(directory))[1]
