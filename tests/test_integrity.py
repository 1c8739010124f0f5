"""A user's memory under what a service does to it: real processes writing one user at once, a reader searching
while a writer commits, damaged and planted files, hostile input on the command line, the leftovers of a kill,
and case-insensitive file systems."""

import hashlib
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import faiss
import numpy as np
import pytest
from conftest import HISTORY, make_session

from apdmem.cli import main
from apdmem.memory import Memory, load_longmemeval
from apdmem.memory.store import InMemoryStore, UserStore, open_store, session_key

ROOT = Path(__file__).resolve().parents[1]
S_DEV = ROOT.parent / "shared" / "data" / "longmemeval" / "longmemeval_s_dev.json.gz"
ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("APDMEM_")}, "LANGSMITH_TRACING": "false",
       "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module")
def real_sessions():
    """Distinct real LongMemEval sessions (the haystacks of the dev file), in file order."""
    if not S_DEV.exists():
        pytest.skip(f"LongMemEval dev data not present at {S_DEV}")
    seen = {}
    for item in load_longmemeval(S_DEV):
        for session in item.sessions:
            seen.setdefault(session.session_id, session)
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
@pytest.mark.parametrize("writers", [2, 4])
def test_concurrent_ingest_processes_lose_nothing(tmp_path, real_sessions, writers, store_location):
    per_writer, rounds = 8, 3
    store, done = store_location, []
    offset = 0 if writers == 2 else 100  # other sessions for the other case
    for round_ in range(rounds):
        batches = []
        for w in range(writers):
            start = offset + (round_ * writers + w) * per_writer
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
    doomed = [s.session_id for s in first[:4]]
    ingest = apdmem("ingest", str(write_file(tmp_path / "second.json", second)), "--user", "dave", "--store", str(store),
                    "--l0-mode", "raw", "--quiet")
    for sid in doomed:  # one after another while the ingestion runs
        assert finish(apdmem("forget", sid, "--user", "dave", "--store", str(store)))[0] == 0
    code, out, err = finish(ingest)
    assert code == 0, err

    expected = sorted(s.session_id for s in first[4:] + second)
    code, out, err = finish(apdmem("sessions", "--user", "dave", "--store", str(store)))
    assert code == 0 and sorted(line.split("\t")[0] for line in out.splitlines()) == expected
    memory = Memory("dave", store=str(store), l0_mode="raw")
    assert sorted(memory.session_ids()) == expected
    for session in first[:4]:  # no byte of a forgotten session anywhere in the store
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
        generation = memory._current  # what that search read
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
    for i in range(6):  # six commits, each a new generation, while the reader searches in a loop
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
    "garbage unit table": lambda f, n: (f / "index" / str(n) / "units.json").write_bytes(b"\x00\x01garbage"),
    "truncated vectors": lambda f, n: (f / "index" / str(n) / "vectors.f32").write_bytes((f / "index" / str(n) / "vectors.f32").read_bytes()[:999]),
    "empty unit table": lambda f, n: (f / "index" / str(n) / "units.json").write_bytes(b""),
    "unit table of the wrong shape": lambda f, n: (f / "index" / str(n) / "units.json").write_text('{"dimension": 384, "units": 7}'),
    "deeply nested unit table": lambda f, n: (f / "index" / str(n) / "units.json").write_bytes(b"[" * 100_000 + b"]" * 100_000),
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
    (folder / "index" / str(generation_of(folder)) / "units.json").write_bytes(b"")  # a rebuild reads every L0
    (folder / "sessions" / "s-bread" / "L0.json").write_text(content)
    code, out, _ = cli(capsys, "search", "sourdough starter rye flour", "--user", "alice", "--store", str(directory))
    assert code == 0 and out.startswith("1. s-bread")


def test_an_unreadable_session_is_dropped_when_read(stored, capsys):
    directory, folder = stored
    (folder / "sessions" / "s-job" / "session.json").write_text('{"session_id": 5}')
    code, _, err = cli(capsys, "show", "s-job", "--layer", "L3", "--user", "alice", "--store", str(directory))
    assert code == 2 and err.strip().splitlines()[-1] == "apdmem: error: no session 's-job' in this user's memory"
    assert "dropped from the listing: s-job" in err
    assert "s-job" not in Memory("alice", store=str(directory), l0_mode="raw").session_ids()


def test_nothing_outside_the_users_namespace_is_read(stored):
    directory, folder = stored
    store = open_store(directory)
    Memory("bob", store=store, l0_mode="raw").ingest([make_session("s-secret", "2024-01-01T00:00", ["My PIN is 4921.", "Noted."])])
    manifest = json.loads((folder / "manifest.json").read_text())
    for sid in ("../bob/sessions/s-secret", "../../users/bob", "/etc/passwd", ".", "users/bob"):
        manifest["sessions"][sid] = dict(manifest["sessions"]["s-dog"])
    (folder / "manifest.json").write_text(json.dumps(manifest))
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
    long = make_session("s-long", "2024-06-02T10:00", [f"Line {i} of a long story about the lighthouse." * 40 for i in range(200)])
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
