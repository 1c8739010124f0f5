"""The command line, in process: ingest, search, show, sessions, forget, and a bad file refused whole."""

import json

import pytest
from conftest import HISTORY

from apdmem.cli import main


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch):
    """Options come from the command line only: no stray model, server, user or mode from the shell."""
    for name in ("APDMEM_CHAT_MODEL", "APDMEM_EMBEDDINGS", "APDMEM_RERANKER_MODEL", "APDMEM_L0_MODE", "APDMEM_USER_ID",
                 "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def apdmem(tmp_path, capsys, embeddings):
    """Run `apdmem <args> --memory-dir <tmp> --user <user>`; returns (exit code, stdout, stderr)."""

    def run(*args: str, user: str = "alice") -> tuple[int, str, str]:
        capsys.readouterr()
        code = main([*args, "--memory-dir", str(tmp_path / "memory"), "--user", user])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def history_file(tmp_path):
    sessions = [
        {"session_id": sid, "date": date, "messages": [{"role": "user" if i % 2 == 0 else "assistant", "content": text}
                                                       for i, text in enumerate(texts)]}
        for sid, (date, texts) in HISTORY.items()
    ]
    path = tmp_path / "history.json"
    path.write_text(json.dumps(sessions))
    return path


def listed(out: str) -> list[str]:
    return [line.split("\t")[0] for line in out.splitlines()]


def test_ingest_search_show_sessions_forget(apdmem, history_file):
    code, out, err = apdmem("ingest", str(history_file), "--l0-mode", "raw", "--quiet")
    assert (code, err) == (0, "")
    assert out.startswith("7 added, 0 updated, 0 unchanged; 42 turns, 14 L0 units")
    assert "model tokens: 0 in, 0 out" in out

    code, out, _ = apdmem("ingest", str(history_file), "--l0-mode", "raw", "--quiet")
    assert code == 0 and out.startswith("0 added, 0 updated, 7 unchanged; 0 turns, 0 L0 units")

    code, out, _ = apdmem("search", "What is my dog's name?", "-k", "3")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("1. s-dog  2024-03-10T18:30  turns ")
    assert "Biscuit" in out and sum(line[:1].isdigit() for line in lines) == 3

    code, out, _ = apdmem("show", "s-dog", "--layer", "L3")
    assert code == 0 and out.startswith("# L3 raw messages: session s-dog (2024-03-10 18:30, Sunday)")
    assert all(text in out for text in HISTORY["s-dog"][1])
    code, out, _ = apdmem("show", "s-dog")  # L0 by default
    assert code == 0 and out.count("## Turns ") == 2

    code, out, _ = apdmem("sessions")
    assert code == 0 and listed(out) == list(HISTORY)
    assert out.splitlines()[1] == "s-dog\t2024-03-10T18:30\t6 turns\t2 units"

    code, out, _ = apdmem("forget", "s-dog")
    assert (code, out) == (0, "forgot session s-dog\n")
    assert listed(apdmem("sessions")[1]) == [s for s in HISTORY if s != "s-dog"]
    assert "s-dog" not in apdmem("search", "What is my dog's name?", "-k", "10")[1]
    code, _, err = apdmem("show", "s-dog", "--layer", "L3")
    assert code == 2 and "no session 's-dog'" in err
    code, _, err = apdmem("forget", "s-dog")
    assert code == 2 and "no session 's-dog'" in err


@pytest.mark.parametrize(
    "content, reason",
    [
        ('[{"session_id": "s-new", "date": "2024-06-01", "messages": [', "malformed JSON at line 1"),
        ('[{"session_id": "s-new", "date": "2024-06-01", "messages": [{"role": "user", "content": "hi"}]},'
         ' {"session_id": "s-bad", "date": "yesterday", "messages": [{"role": "user", "content": "hi"}]}]',
         "record s-bad: unrecognized date 'yesterday'"),
    ],
)
def test_a_bad_file_is_refused_whole_and_changes_nothing(apdmem, history_file, tmp_path, content, reason):
    assert apdmem("ingest", str(history_file), "--l0-mode", "raw", "--quiet")[0] == 0
    before = apdmem("sessions")[1]
    bad = tmp_path / "broken-export.json"
    bad.write_text(content)
    code, out, err = apdmem("ingest", str(bad), "--l0-mode", "raw", "--quiet")
    assert code == 2 and out == ""
    assert err.startswith("apdmem: error: ") and str(bad) in err and reason in err
    assert apdmem("sessions")[1] == before  # s-new of the same file was not stored either
    assert apdmem("search", "What is my dog's name?", "-k", "1")[1].startswith("1. s-dog ")


def test_a_missing_file_and_another_user(apdmem, history_file, tmp_path):
    code, _, err = apdmem("ingest", str(tmp_path / "nope.json"), "--l0-mode", "raw", "--quiet")
    assert code == 2 and f"{tmp_path / 'nope.json'}: no such file" in err
    assert apdmem("ingest", str(history_file), "--l0-mode", "raw", "--quiet")[0] == 0
    assert listed(apdmem("sessions")[1]) == list(HISTORY)
    assert apdmem("sessions", user="bob") == (0, "", "")
    assert apdmem("search", "What is my dog's name?", user="bob") == (0, "", "")
    code, _, err = apdmem("show", "s-dog", "--layer", "L3", user="bob")
    assert code == 2 and "no session 's-dog'" in err


def test_ingest_eager_l1_builds_key_facts_before_any_read(apdmem, history_file, tmp_path):
    # The default chat model ("local") builds L1 from the user's own sentences: no model call. (That eager L1
    # runs a model's calls side by side and skips built sessions is tested in test_concurrency.py.)
    code, out, err = apdmem("ingest", str(history_file), "--l0-mode", "raw", "--eager-l1", "--quiet")
    assert code == 0, err
    assert "L1 key facts built now: 0 model call(s)" in out
    built = {p.parent.name: p.stat().st_mtime_ns for p in (tmp_path / "memory").rglob("L1.json")}
    assert sorted(built) == sorted(HISTORY)
    assert apdmem("show", "s-dog", "--layer", "L1")[1].splitlines()[2] == "- " + HISTORY["s-dog"][1][0]
    code, out, _ = apdmem("ingest", str(history_file), "--l0-mode", "raw", "--eager-l1", "--quiet")
    assert code == 0 and {p.parent.name: p.stat().st_mtime_ns for p in (tmp_path / "memory").rglob("L1.json")} == built
