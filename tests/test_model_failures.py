"""No silent fallback: a configured chat model that cannot be reached, or whose server fails, is a one-line error
(`ModelError`; exit code 2 from the command line), never an extractive reply in its place. Output a model does
give but that is unusable still falls back (test_graph_routing.py). The models here are real LangChain OpenAI
clients calling real servers on loopback: a closed port, and an HTTP server that answers 500."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from graph_helpers import ScriptedChatModel, clean_environment, free_port, run_graph

from apdmem.cli import main
from apdmem.errors import ModelError
from apdmem.graph import Context, Settings
from apdmem.memory import Memory

QUESTION = "What is my dog's name?"


class Failing(BaseHTTPRequestHandler):
    """An OpenAI-compatible server whose every completion fails with 500 (and counts the requests)."""

    requests = 0

    def do_POST(self):  # noqa: N802 - http.server's name
        type(self).requests += 1
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps({"error": {"message": "the model crashed", "type": "server_error"}}).encode()
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def failing_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Failing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


@pytest.fixture(params=["closed port", "server error"])
def unreachable(request, failing_server, monkeypatch) -> tuple[str, str]:
    """(base URL, what the one-line error must say) of a model server that refuses, or answers 500."""
    clean_environment(monkeypatch)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    if request.param == "closed port":
        return f"http://127.0.0.1:{free_port()}/v1", "Connection error"
    return failing_server, "the model crashed"


@pytest.fixture
def stored(tmp_path, history, embeddings) -> str:
    """A memory of the history, ingested with the defaults (no model)."""
    store = str(tmp_path / "memory")
    Memory("alice", store=store, l0_mode="raw").ingest(history)
    return store


def test_ask_with_an_unreachable_chat_model_exits_2_in_one_line(unreachable, stored, capsys):
    url, reason = unreachable
    capsys.readouterr()
    code = main(["ask", QUESTION, "--user", "alice", "--store", stored, "--chat-model", "openai:apdmem-test", "--base-url", url])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and err.startswith(f"apdmem: error: chat model 'apdmem-test' at {url} failed") and reason in err
    assert "mode: extractive" not in out and "Biscuit" not in out  # no reply was made without the model


def test_the_python_api_raises_for_an_unreachable_model(unreachable, stored):
    url, reason = unreachable
    memory = Memory("alice", store=stored, chat_model="openai:apdmem-test", base_url=url, l0_mode="raw")
    settings = Settings(store=stored, chat_model="openai:apdmem-test", base_url=url)
    with pytest.raises(ModelError, match=reason):
        run_graph(QUESTION, Context(user_id="alice"), settings=settings, memory=memory)
    with pytest.raises(ModelError, match=reason):  # a first read of L1 asks the model
        memory.facts("s-dog")
    assert memory.store.get("sessions/s-dog/L1.json") is None  # nothing was cached in its place


def test_ingesting_with_an_unreachable_model_changes_nothing(unreachable, stored, history):
    url, reason = unreachable
    memory = Memory("alice", store=stored, chat_model="openai:apdmem-test", base_url=url, l0_mode="llm")
    before = memory.manifest
    new = history[0].__class__("s-new", history[0].date, history[0].turns)
    with pytest.raises(ModelError, match=reason):  # L0 in llm mode is the model's summary: never the raw window instead
        memory.ingest([new])
    memory.refresh()
    assert memory.manifest == before and "s-new" not in memory.session_ids()


def test_a_server_error_is_retried_then_surfaces(failing_server, stored, monkeypatch):
    clean_environment(monkeypatch)
    Failing.requests = 0
    memory = Memory("alice", store=stored, chat_model="openai:apdmem-test", base_url=failing_server, l0_mode="raw")
    with pytest.raises(ModelError):
        memory.facts("s-dog")
    assert Failing.requests > 1  # transient by its status: tried again before giving up


def test_an_exception_of_any_model_surfaces_where_unusable_output_falls_back(make_memory, history, monkeypatch):
    """Routing only (a scripted model): the notes and answer nodes raise what the model raised, while an empty
    reply (unusable) still falls back to the evidence and the draft."""
    clean_environment(monkeypatch)
    memory = make_memory()
    memory.ingest(history)
    model = ScriptedChatModel(script={"answer": [RuntimeError("server down")]})
    with pytest.raises(ModelError, match=r"chat model 'ScriptedChatModel' failed \(RuntimeError\): server down"):
        run_graph(QUESTION, Context(), settings=Settings(chat_model=model), memory=memory)
    model = ScriptedChatModel(script={"answer": [""], "notes": [""]})
    final, _ = run_graph(QUESTION, Context(), settings=Settings(chat_model=model), memory=memory)
    assert final["notes"].startswith("## Evidence") and final["answer"] == "scripted draft"
