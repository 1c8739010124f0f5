"""End to end on the embedded models: the graph in process on the extractive default and on the embedded
generative model ("local:smollm2", SmolLM2-135M on llama.cpp), an llm-mode ingestion and the CLI demo (the
quickstart notebook: tests/test_notebook.py). Slow: each run of the tiny model takes a minute or more."""

import os
import subprocess
from pathlib import Path

import pytest
from conftest import HISTORY, make_session
from graph_helpers import clean_environment, run_graph

from apdmem.graph import Context, Settings
from apdmem.memory import Memory
from apdmem.memory.store import memory_store
from apdmem.models import LOCAL_CHAT

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
GOLD = "answer_82a04f59"
TIMEOUT = 900  # seconds for one whole run of the tiny model on a slow machine


def offline_env() -> dict[str, str]:
    """The environment of a child process: no tracing, no apdmem configuration from the shell."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("APDMEM_") and k != "OPENAI_BASE_URL"}
    return {**env, "LANGSMITH_TRACING": "false", "HF_HUB_OFFLINE": "1"}


def test_graph_on_the_embedded_generative_model(history, monkeypatch):
    """SmolLM2 reflects, builds L1 and writes the answer (what it says is not judged: it has 135M parameters)."""
    clean_environment(monkeypatch)
    memory = Memory("generative", store=memory_store(), l0_mode="raw", chat_model=LOCAL_CHAT)
    memory.ingest(history)
    context = Context(tmax=4, top_k=3, drill_width=1)
    final, events = run_graph("What is my dog's name?", context, settings=Settings(chat_model=LOCAL_CHAT), memory=memory)
    assert final["answer_mode"] == "generative" and isinstance(final["answer"], str) and final["answer"].strip()
    assert "s-dog" in final["opened"] and final["step"] <= 4
    assert all(e["step"] <= 4 for e in events) and events[0]["event"] == "search"
    for node in ("reflect", "answer"):
        assert final["usage"][node]["input_tokens"] > 0 and final["usage"][node]["calls"] >= 1
    # Whatever the tiny model said, L1 was materialized by it and cached by the first read.
    assert memory.usage.calls >= 1 and memory.facts("s-dog") and memory.read("s-dog", "L1").startswith("# L1 key facts: session s-dog")


def test_llm_mode_ingestion_of_one_small_session(embeddings):
    texts = HISTORY["s-dog"][1][:4]  # four turns: one L0 window, one model call (retried at most twice)
    memory = Memory("llm-user", store=memory_store(), l0_mode="llm", chat_model=LOCAL_CHAT)
    report = memory.ingest([make_session("s-dog", "2024-03-10T18:30", texts)])
    assert report.units == 1 and 1 <= report.usage.calls <= 3 and report.usage.input_tokens > 0
    (unit,) = memory.units("s-dog")
    assert unit.summary.strip() and (unit.start, unit.end) == (0, 4)
    assert memory.search("my beagle puppy Biscuit", k=1)[0].metadata["session_id"] == "s-dog"


def test_cli_demo():
    """`make demo`: a whole LongMemEval-S haystack on the default install's models; the evidence session is found
    among 50, and the answer quotes the evidence turn ("I brought 7 shirts ...", reference 7) and says which
    mode answered."""
    run = subprocess.run([str(ROOT / ".venv" / "bin" / "apdmem"), "demo"],
                         cwd=ROOT, env=offline_env(), capture_output=True, text=True, timeout=TIMEOUT)
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    assert "50 sessions, 495 turns" in out and "Sessions searched: 50; the search's best 8 of 20 found, with their rescored scores: " + GOLD in out
    assert f"Evidence session of the benchmark: {GOLD}, opened at L" in out
    assert f"Evidence turn disclosed (session {GOLD}, 2023-05-29, turn 7, read at L" in out
    answer = out.split("\nAnswer (mode: extractive):\n", 1)[1].split("\nReference answer: 7\n", 1)[0]
    # Quotes of several messages: the latest first, marked ("- latest, 2023-05-29, you said: ...").
    assert answer.startswith("From your conversations (quoted, no model wrote this):\n- latest, 2023-05-29, you said: ")
    assert "I brought 7 shirts" in answer and "model calls: 0" in out and "Wall time: " in out
