"""Questions as users type them: pages long, or with bytes that are not UTF-8. Every model reads what fits its
window (the cross-encoder the query's head and the unit's head), and invalid bytes become U+FFFD where a
question enters apdmem (the command line, the graph's input)."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from graph_helpers import ScriptedChatModel, clean_environment, run_graph

from apdmem.graph import Context, Settings
from apdmem.memory import Memory
from apdmem.memory.records import readable
from apdmem.models import get_reranker

ROOT = Path(__file__).resolve().parents[1]
QUESTION_DATE = "2024/06/01 (Sat) 10:00"
# A long preamble of the kind people write before they ask; it names nothing in the memory.
RAMBLE = ("Sorry for the long message, I am writing this on my phone while waiting for the bus and my thoughts keep "
          "wandering around, so please bear with me while I explain everything that has been going on lately. ")


def long_question(words: int, head: str = "What is my dog's name?") -> str:
    """`head`, then the preamble repeated up to about `words` words."""
    filler = RAMBLE.split()
    return head + " " + " ".join(filler[i % len(filler)] for i in range(words - len(head.split())))


def cli(*args, timeout: float = 900) -> subprocess.CompletedProcess:
    """`python -m apdmem.cli ARGS` as a user's shell runs it (bytes arguments pass through undecoded)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("APDMEM_") and k != "OPENAI_BASE_URL"}
    env.update(LANGSMITH_TRACING="false", HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "apdmem.cli", *args], cwd=ROOT, env=env, capture_output=True, timeout=timeout)


def test_readable_replaces_lone_surrogates_only():
    assert readable("caf\udcff au lait \ud800") == "caf\ufffd au lait \ufffd"
    assert readable("déjà vu 🐶") == "déjà vu 🐶"
    readable("caf\udcff").encode("utf-8")  # encodable: no UnicodeEncodeError


def test_the_cross_encoder_reads_the_head_of_a_long_query():
    """A 2,000-word query (about 2,600 tokens, ten times the window) is scored, not refused; its head still
    decides: the unit about the dog outranks the others."""
    units = ["I adopted a beagle puppy from the shelter and named her Biscuit.",
             "I bought a used Yamaha acoustic guitar and started weekly lessons.",
             "I've started baking sourdough bread at home. My starter is called Bubbles."]
    query = long_question(2000)
    scores = get_reranker("local").score([(query, unit) for unit in units])
    assert len(scores) == 3 and np.isfinite(scores).all()
    assert scores[0] == max(scores)
    # a long unit too: both sides are cut to fit the window together
    (both_long,) = get_reranker("local").score([(query, " ".join([units[0]] * 200))])
    assert np.isfinite(both_long)


def test_memory_search_and_the_tools_take_lone_surrogates(make_memory, history):
    """Python callers and agents' tool calls reach `Memory.search` without the CLI or the graph in between."""
    from apdmem.tools import make_memory_tools

    memory = make_memory()
    memory.ingest(history)
    assert memory.search("my beagle Biscuit \udcff", k=1)[0].metadata["session_id"] == "s-dog"
    search_tool = next(t for t in make_memory_tools(memory) if t.name == "search_memory")
    assert "s-dog" in str(search_tool.invoke({"query": "my beagle Biscuit \ud800"}))


def test_cli_search_with_invalid_utf8_bytes(tmp_path, history):
    store = tmp_path / "mem"
    Memory("alice", store=str(store), l0_mode="raw").ingest(history)
    run = cli(b"search", b"my beagle Biscuit caf\xff\xfe", b"--user", b"alice", b"--store", str(store).encode(), b"-k", b"2")
    assert run.returncode == 0, run.stderr.decode(errors="replace")[-2000:]
    assert b"Traceback" not in run.stderr and b"s-dog" in run.stdout.splitlines()[0]


def test_the_graph_reads_a_question_with_lone_surrogates(make_memory, history, monkeypatch):
    """A graph input string with lone surrogates (a JSON escape can carry one): every model is handed the
    question with U+FFFD in their place; the real embedder and cross-encoder search with it."""
    clean_environment(monkeypatch)
    model = ScriptedChatModel()
    memory = make_memory(chat_model=model)
    memory.ingest(history)
    context = Context(tmax=3, reflection=False)
    final, events = run_graph("What is my dog\udcff\udcfes name? \ud800", context, QUESTION_DATE,
                              settings=Settings(chat_model=model), memory=memory)
    assert final["answer"] == "scripted answer" and "s-dog" in final["opened"]
    asked = [p for kind in ("SubQueries", "notes", "answer") for p in model.prompts_of(kind)]
    assert len(asked) == 3 and all("dog\ufffd\ufffds name? \ufffd" in p for p in asked)
    assert not any("\ud800" <= c <= "\udfff" for _, p in model.calls for c in p)
    assert events[0]["queries"][0] == "What is my dog\ufffd\ufffds name? \ufffd"


@pytest.mark.slow
def test_cli_ask_answers_a_2000_word_question_with_invalid_bytes(tmp_path, history):
    """`apdmem ask` on the embedded models (SmolLM2 generating) with a 2,000-word question holding bytes that are
    not UTF-8: every step runs (date cues, decomposition, search and rescoring, reads, notes, answer, each prompt
    cut to the model's window) and an answer is printed. The extractive default is asked the same question on
    the server (test_auth.py)."""
    store = tmp_path / "mem"
    Memory("alice", store=str(store), l0_mode="raw").ingest(history[:3])
    question = long_question(2000, head="What is my dog's name? I think the shelter told me last spring, caf\udcff.")
    argv = [b"ask", question.encode("utf-8", "surrogateescape"), b"--user", b"alice", b"--store", str(store).encode(),
            b"--date", b"2024-06-01", b"--no-reflection", b"--tmax", b"3", b"--top-k", b"3", b"--drill-width", b"1",
            b"--chat-model", b"local:smollm2"]  # a generative model: its prompts hold the question (cut to its window)
    assert len(argv[1].split()) >= 2000 and b"\xff" in argv[1]
    run = cli(*argv)
    out, err = run.stdout.decode(), run.stderr.decode(errors="replace")
    assert run.returncode == 0, err[-3000:]
    assert "Traceback" not in err and "[step 1] search" in out
    assert out.strip().splitlines()[-1].strip()  # the answer
