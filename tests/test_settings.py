"""One resolution of the deployment settings: `Memory`, the graph, the tools and the command line all find memories
where `APDMEM_STORE` says, and nothing lands in ~/.apdmem."""

import json
import os
import subprocess
import sys

import pytest
from conftest import HISTORY
from graph_helpers import clean_environment

from apdmem import Context, Memory, Settings, build_graph
from apdmem.errors import ConfigError
from apdmem.eval.longmemeval import disclose
from apdmem.memory.backends import open_store
from apdmem.tools import make_memory_tools

# The controller without model calls: one search, then the raw messages of what stands out (embeddings and the
# cross-encoder only); `disclose` stops before the notes and the answer.
QUICK = {"controller": False, "layers": "L3", "decomposition": False, "date_normalization": False, "tmax": 3}


@pytest.fixture(params=["directory", "postgres"])
def deployment(request, tmp_path, monkeypatch):
    """A home directory of its own and APDMEM_STORE set to a new directory or PostgreSQL database; yields
    (store location, home)."""
    clean_environment(monkeypatch)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    location = str(tmp_path / "store") if request.param == "directory" else request.getfixturevalue("postgres_url")
    monkeypatch.setenv("APDMEM_STORE", location)
    return location, home


def cli(*args: str) -> subprocess.CompletedProcess:
    """`python -m apdmem.cli` in a child process with this test's environment (APDMEM_STORE, HOME)."""
    run = subprocess.run([sys.executable, "-m", "apdmem.cli", *args], env=dict(os.environ), capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    return run


def test_memory_graph_tools_and_cli_share_the_store_of_apdmem_store(deployment, history, tmp_path, embeddings):
    location, home = deployment
    memory = Memory("maya")  # no argument: the store, the models and the L0 mode all come from the settings
    memory.ingest(history[:4])
    assert Memory("maya", store=location).session_ids() == ["s-hiking", "s-dog", "s-bread", "s-job"]

    # The graph and the tools read what Memory wrote.
    final = disclose(build_graph(), {"question": "What is my dog's name?", "question_date": "2024/06/01 (Sat) 10:00"},
                     Context(user_id="maya", **QUICK))
    assert "s-dog" in final["opened"] and any("Biscuit" in e["text"] for e in final["evidence"])
    tools = {t.name: t for t in make_memory_tools(Memory("maya"))}
    assert tools["search_memory"].invoke({"query": "my sourdough starter"}).startswith("s-bread (2024-03-18)")

    # The command line writes there too, and reads what Memory wrote.
    sid = "s-guitar"
    path = tmp_path / "more.json"
    path.write_text(json.dumps([{"session_id": sid, "date": HISTORY[sid][0], "messages": [
        {"role": "user" if i % 2 == 0 else "assistant", "content": text} for i, text in enumerate(HISTORY[sid][1])]}]))
    assert cli("ingest", str(path), "--user", "maya", "--quiet").stdout.startswith("1 added")
    assert memory.session_ids()[-1] == sid  # Memory sees what the command line wrote
    assert cli("search", "What song am I learning on the guitar?", "--user", "maya", "-k", "1").stdout.startswith(f"1. {sid} ")
    assert cli("sessions", "--user", "maya").stdout.count("\n") == 5

    assert not (home / ".apdmem").exists() and not [p for p in home.rglob("*") if "apdmem" in p.name]


def test_settings_resolve_each_field_once(monkeypatch, tmp_path):
    clean_environment(monkeypatch)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert Settings().store == str(tmp_path / ".apdmem")
    monkeypatch.setenv("APDMEM_MEMORY_DIR", "/srv/old-name")  # the older variable still counts, below APDMEM_STORE
    assert Settings().store == "/srv/old-name"
    monkeypatch.setenv("APDMEM_STORE", "postgresql://apdmem@db/apdmem")
    monkeypatch.setenv("APDMEM_CHAT_MODEL", "openai:gpt-4.1-mini")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    settings = Settings()
    assert (settings.store, settings.controller_model, settings.generator_model, settings.base_url, settings.l0_mode) == (
        "postgresql://apdmem@db/apdmem", "openai:gpt-4.1-mini", "openai:gpt-4.1-mini", "http://127.0.0.1:9/v1", "auto")
    monkeypatch.setenv("APDMEM_STORE", str(tmp_path / "s0"))
    assert open_store().root_path == tmp_path / "s0"  # the store's own default is the same resolution
    # What is passed in wins over the environment, even a value equal to the default.
    explicit = Settings(store=str(tmp_path / "s"), chat_model="local", base_url="http://127.0.0.1:8/v1")
    assert (explicit.store, explicit.chat_model, explicit.base_url) == (str(tmp_path / "s"), "local", "http://127.0.0.1:8/v1")
    monkeypatch.setenv("APDMEM_L0_MODE", "summaries")
    assert Settings().l0_mode == "summaries"  # checked where it is used, not when apdmem is imported
    with pytest.raises(ConfigError, match="unknown l0_mode 'summaries'"):
        Memory("maya", store=str(tmp_path / "s"))
