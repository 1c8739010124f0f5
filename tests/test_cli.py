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


def test_forget_several_sessions_or_those_dated_before_a_date_all_or_none(apdmem, history_file):
    assert apdmem("ingest", str(history_file), "--l0-mode", "raw", "--quiet")[0] == 0
    code, out, err = apdmem("forget", "s-dog", "s-nope", "s-bread")
    assert (code, out, err) == (2, "", "apdmem: error: no session 's-nope' in this user's memory\n")
    assert listed(apdmem("sessions")[1]) == list(HISTORY)  # none of them forgotten
    assert apdmem("forget", "s-dog", "s-bread") == (0, "forgot 2 sessions: s-dog, s-bread\n", "")
    # s-guitar (2024-04-20T20:45) is not before 2024-04-20 (its midnight); s-knee is named as well.
    assert apdmem("forget", "s-knee", "--before", "2024-04-20") == (0, "forgot 3 sessions: s-knee, s-hiking, s-job\n", "")
    assert listed(apdmem("sessions")[1]) == ["s-guitar", "s-japan"]
    assert apdmem("forget", "--before", "2024-01-01") == (0, "no session is dated before 2024-01-01: nothing forgotten\n", "")
    code, out, err = apdmem("forget", "--before", "last week")
    assert (code, out) == (2, "") and err.startswith("apdmem: error: --before: unrecognized date 'last week': expected ")
    assert apdmem("forget")[::2] == (2, "apdmem: error: forget needs session ids, or --before DATE for the sessions dated "
                                        "before it\n")
    assert listed(apdmem("sessions")[1]) == ["s-guitar", "s-japan"]


def test_search_date_range_and_a_bad_one_in_one_line(apdmem, history_file):
    from apdmem.errors import InputError
    from apdmem.memory import Memory

    assert apdmem("ingest", str(history_file), "--l0-mode", "raw", "--quiet")[0] == 0
    assert apdmem("search", "What did I do?", "-k", "1")[1].startswith("1. s-bread ")
    assert apdmem("search", "What did I do?", "-k", "1", "--date-range", "2024-05-20")[1].startswith("1. s-knee ")
    for bad in ("May 2024", "2024-05-01..2024-13-01", "2024-05-01 2024-05-31"):
        assert apdmem("search", "What did I do?", "--date-range", bad) == (
            2, "", f"apdmem: error: date range: expected START..END as ISO dates, e.g. 2023-05-01..2023-05-31 (one day: "
                   f"2023-05-01); got {bad!r}\n")
    memory = Memory("alice", store=str(history_file.parent / "memory"))
    for bad in ("2024-05", ("2024-05-01",), [("2024-05-01", "soon")], 20240501):
        with pytest.raises(InputError, match=r"^date_range: expected a \(start, end\) pair of ISO dates, e\.g\. "
                                             r"\('2023-05-01', '2023-05-31'\), or a list of such pairs; got "):
            memory.search("What did I do?", date_range=bad)


@pytest.mark.parametrize(
    "content, reason",
    [
        ('[{"session_id": "s-new", "date": "2024-06-01", "messages": [', "malformed JSON at line 1"),
        ('[{"session_id": "s-new", "date": "2024-06-01", "messages": [{"role": "user", "content": "hi"}]},'
         ' {"session_id": "s-bad", "date": "yesterday", "messages": [{"role": "user", "content": "hi"}]}]',
         "record 's-bad': unrecognized date 'yesterday'"),
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
    empty = "apdmem: user 'bob' has no memory in this store\n"  # said on stderr, nothing created
    assert apdmem("sessions", user="bob") == (0, "", empty)
    assert apdmem("search", "What is my dog's name?", user="bob") == (0, "", empty)
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


# --- help, README and behaviour agree ----------------------------------------------------------------------------


def test_json_lines_for_scripts(apdmem, history_file):
    """`--json`: search hits, sessions and ask's disclosure and answer as JSON lines, the fields the Python API and
    the server give."""
    assert apdmem("ingest", str(history_file), "--l0-mode", "raw", "--quiet")[0] == 0
    code, out, _ = apdmem("search", "What is my dog's name?", "-k", "3", "--json")
    hits = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(hits) == 3 and hits[0]["session_id"] == "s-dog" and "Biscuit" in hits[0]["text"]
    assert hits[0]["date"] == "2024-03-10T18:30:00" and isinstance(hits[0]["score"], float) and len(hits[0]["span"]) == 2

    code, out, _ = apdmem("sessions", "--json")
    listing = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [s["session_id"] for s in listing] == list(HISTORY)
    assert listing[1] == {"session_id": "s-dog", "date": "2024-03-10T18:30:00", "turns": 6, "units": 2}

    code, out, _ = apdmem("ask", "What is my dog's name?", "--date", "2024-06-01", "--json")
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [e["event"] for e in lines][0] == "search" and "drill" in [e["event"] for e in lines]
    answer = lines[-1]
    assert answer["event"] == "answer" and answer["answer_mode"] == "extractive" and "Biscuit" in answer["answer"]
    assert "s-dog" in answer["opened"] and {e["session_id"] for e in answer["evidence"]} >= {"s-dog"}
    assert apdmem("sessions", "--json", user="nobody")[1] == ""  # no memory: no line (the warning goes to stderr)


def test_search_default_and_min_score(apdmem, history_file):
    from apdmem.memory import Memory
    from apdmem.memory.retriever import SEARCH_K
    from apdmem.tools import make_memory_tools, search_memory

    assert apdmem("ingest", str(history_file), "--l0-mode", "raw", "--quiet")[0] == 0
    code, out, _ = apdmem("search", "What is my dog's name?")
    ranked = [line for line in out.splitlines() if line[:1].isdigit()]
    assert code == 0 and len(ranked) == SEARCH_K == 5  # one default: the command, Memory.search, its retriever, the tool
    defaults = [Memory.search.__defaults__[0], Memory.as_retriever.__defaults__[0], search_memory.__defaults__[0],
                {t.name: t for t in make_memory_tools(None)}["search_memory"].args["k"]["default"]]
    assert defaults == [SEARCH_K] * 4
    scores = [float(line.rsplit("score ", 1)[1]) for line in ranked]
    cut = (scores[0] + scores[1]) / 2  # between the best and the second
    code, out, err = apdmem("search", "What is my dog's name?", "--min-score", str(cut))
    assert (code, err) == (0, "") and [line for line in out.splitlines() if line[:1].isdigit()] == ranked[:1]
    code, out, err = apdmem("search", "What is my dog's name?", "--min-score", "5")
    assert (code, out) == (0, "") and err == f"apdmem: no session scores at least 5.0 (the best scores {scores[0]:.4f})\n"


def help_of(*command: str, capsys) -> str:
    capsys.readouterr()
    assert main([*command, "--help"]) == 0
    return " ".join(capsys.readouterr().out.split())


def test_help_names_what_the_options_take(capsys):
    for command in (["ingest"], ["search"], ["ask"], ["demo"], ["eval", "longmemeval"], ["eval", "locomo"]):
        text = help_of(*command, capsys=capsys)
        assert "any LangChain '<provider>:<model>'" in text and "anthropic:claude-sonnet-4-5" in text, command
        if command[0] == "eval":  # a benchmark's memories are its own
            assert "where the benchmark's memories are kept between runs (default: a 'memory' directory in the output" in text
        else:
            assert "a directory or a postgresql:// URL (default $APDMEM_STORE" in text, command
    assert "how many sessions (default 5)" in help_of("search", capsys=capsys)
    assert "--min-score MIN_SCORE leave out sessions scoring below this" in help_of("search", capsys=capsys)
    assert "(default $APDMEM_TOP_K, else 20; the policy's threshold was set with 20)" in help_of("ask", capsys=capsys)
    assert "always so with the embedded chat models, local and local:smollm2" in help_of("demo", capsys=capsys)
    bench = help_of("bench", "retrieval", capsys=capsys)
    assert "--store" not in bench and "fresh temporary store" in bench


def test_bench_retrieval_takes_no_store_and_says_where_its_report_went(tmp_path, capsys, embeddings):
    from importlib.resources import files

    dataset = str(files("apdmem") / "data" / "longmemeval_demo.json")
    assert main(["bench", "retrieval", dataset, "--store", str(tmp_path / "s")]) == 2
    assert "unrecognized arguments: --store" in capsys.readouterr().err and not (tmp_path / "s").exists()
    report = tmp_path / "r" / "retrieval.json"
    assert main(["bench", "retrieval", dataset, "--output", str(report)]) == 0
    out = capsys.readouterr().out
    assert f"report: {report} (JSON, every question's ranking); table: {report.with_suffix('.md')}" in out
    assert json.loads(report.read_text())["questions"] == 1 and report.with_suffix(".md").read_text().startswith("type ")


def readme_commands() -> list[list[str]]:
    """Every `apdmem ...` command of the shell blocks of the README and docs/ (continuation lines joined, comments
    cut)."""
    import shlex

    from test_docs import DOC_PAGES, fenced_blocks

    commands = []
    for page in DOC_PAGES:
        for language, _, block in fenced_blocks(page):
            for line in block.replace("\\\n", " ").splitlines() if language == "bash" else []:
                words = shlex.split(line, comments=True)
                if words[:1] == ["apdmem"]:
                    commands.append(words[1:])
    return commands


def test_every_command_of_the_readme_parses():
    from apdmem.cli import build_parser

    commands = readme_commands()
    assert len(commands) >= 15 and {c[0] for c in commands} >= {"ingest", "search", "show", "ask", "demo", "bench", "eval", "migrate"}
    for command in commands:
        build_parser().parse_args(command)  # a usage error exits: the README shows an option the command lacks
