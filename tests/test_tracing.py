"""LangSmith tracing as a user turns it on: `LANGSMITH_TRACING=true apdmem ask ...`, with the real `langsmith`
client pointed at a loopback endpoint that records what is posted. Checked: one named run per graph node under
one `apdmem` run, the disclosure metadata on them, the models' token usage, and that no secret of the
environment (model API keys, the PostgreSQL password, the auth secret, LangSmith's own key) is in any payload.

The client posts to /runs/multipart (zstd-compressed when the server's /info allows it) or /runs/batch (when
/info says multipart is off); both are exercised. Slow: the embedded chat model answers once per mode."""

import io
import json
import os
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import zstandard

from apdmem.memory import Memory

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
NODES = ("normalize_dates", "decompose", "search", "drill", "reflect", "converge", "synthesize_notes", "answer")
SECRETS = {
    "OPENAI_API_KEY": "sk-planted-openai-key-0123456789",
    "ANTHROPIC_API_KEY": "sk-ant-planted-anthropic-key-0123",
    "APDMEM_AUTH_SECRET": "planted-apdmem-auth-secret-0123456789",
    "LANGSMITH_API_KEY": "lsv2_pt_planted_langsmith_key_0123456789",
}
PG_PASSWORD = "planted-pg-password-0123"
INGEST = {"use_multipart_endpoint": True, "size_limit": 100, "size_limit_bytes": None, "scale_up_nthreads_limit": 16,
          "scale_up_qsize_trigger": 1000, "scale_down_nempty_trigger": 4}
MODES = {  # what the endpoint's /info says, and so how the client sends runs
    "multipart-zstd": {"version": "0.10.0", "instance_flags": {"zstd_compression_enabled": True}, "batch_ingest_config": INGEST},
    "batch": {"version": "0.10.0", "batch_ingest_config": {**INGEST, "use_multipart_endpoint": False}},
}


class Recorder(BaseHTTPRequestHandler):
    """A LangSmith endpoint that answers /info as `self.server.info` and records every request's decoded body."""

    def _body(self) -> bytes:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Content-Encoding") == "zstd":
            self.server.compressed += 1
            body = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body)).read()
        return body

    def _reply(self, payload: dict, status: int = 200) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802 - http.server's naming
        self._reply(self.server.info if self.path.startswith("/info") else {})

    def do_POST(self):  # noqa: N802
        body = self._body()
        with self.server.lock:
            self.server.requests.append((self.command, self.path, self.headers.get("Content-Type", ""), body))
        self._reply({})

    do_PATCH = do_PUT = do_POST

    def log_message(self, *args):  # quiet
        pass


def multipart(body: bytes, content_type: str) -> list[tuple[str, bytes]]:
    """The (name, data) parts of a multipart/form-data body."""
    boundary = re.search(r"boundary=([^;\s]+)", content_type)[1].encode()
    parts = []
    for chunk in body.split(b"--" + boundary):
        chunk = chunk.strip(b"\r\n")
        if not chunk or chunk == b"--":
            continue
        head, _, data = chunk.partition(b"\r\n\r\n")
        parts.append((re.search(rb'name="([^"]+)"', head)[1].decode(), data))
    return parts


def runs_of(requests) -> dict[str, dict]:
    """Every run posted, by id, with its later patches (end time, outputs) merged in."""
    runs: dict[str, dict] = {}
    for method, path, content_type, body in requests:
        if path.startswith("/runs/multipart"):
            for name, data in multipart(body, content_type):
                operation, run_id, *field = name.split(".")
                if operation in ("post", "patch"):
                    slot = runs.setdefault(run_id, {})
                    slot.update({field[0]: json.loads(data)} if field else json.loads(data))
        elif path.startswith("/runs/batch"):
            batch = json.loads(body)
            for run in [*batch.get("post", []), *batch.get("patch", [])]:
                runs.setdefault(str(run["id"]), {}).update(run)
        elif path.rstrip("/") == "/runs" or path.startswith("/runs/"):
            run = json.loads(body)
            runs.setdefault(str(run.get("id") or path.rsplit("/", 1)[-1]), {}).update(run)
    return runs


@pytest.fixture
def endpoint(request):
    """The recording endpoint on loopback, in the mode the test is parametrized with; yields its server."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    server.info, server.requests, server.lock, server.compressed = MODES[request.param], [], threading.Lock(), 0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def traced_ask(url: str, store: str, *, timeout: float = 1200) -> subprocess.CompletedProcess:
    """`apdmem ask` on the embedded models (SmolLM2 as the chat model) with tracing on, and secrets in its
    environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("APDMEM_", "LANGSMITH_", "LANGCHAIN_"))}
    env.update(SECRETS, HF_HUB_OFFLINE="1", LANGSMITH_TRACING="true", LANGSMITH_ENDPOINT=url,
               LANGSMITH_PROJECT="apdmem-tracing-test")
    command = [sys.executable, "-m", "apdmem.cli", "ask", "What is my dog's name?", "--user", "alice", "--store", store,
               "--date", "2024-06-01", "--no-reflection", "--tmax", "3", "--top-k", "3", "--drill-width", "1",
               "--chat-model", "local:smollm2"]  # the embedded generative model: its calls and their tokens are traced
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def store(request, tmp_path, history) -> str:
    """alice's memory (two sessions, raw L0): in PostgreSQL behind a URL with a password for the multipart
    run, in a directory for the batch run."""
    if request.node.callspec.params["endpoint"] == "multipart-zstd":
        url = request.getfixturevalue("postgres_url").replace("apdmem@", f"apdmem:{PG_PASSWORD}@", 1)
    else:
        url = str(tmp_path / "mem")
    Memory("alice", store=url, l0_mode="raw").ingest(history[:2])
    return url


@pytest.mark.parametrize("endpoint", list(MODES), indirect=True)
def test_langsmith_sees_each_node_its_disclosure_and_no_secret(endpoint, store):
    run = traced_ask(f"http://127.0.0.1:{endpoint.server_address[1]}", store)
    assert run.returncode == 0, run.stderr[-3000:]
    with endpoint.lock:
        requests = list(endpoint.requests)
    paths = {path.split("?")[0] for _, path, _, _ in requests}
    if endpoint.info["batch_ingest_config"]["use_multipart_endpoint"]:
        assert "/runs/multipart" in paths and endpoint.compressed >= 1  # /info allowed zstd: the client used it
    else:
        assert "/runs/batch" in paths
    print(f"{len(requests)} requests to {sorted(paths)}, {endpoint.compressed} compressed")

    # No secret anywhere in what was sent (decoded bodies; LangSmith's key travels in a header only).
    sent = b"\n".join(body for *_, body in requests).decode("utf-8", errors="replace")
    for name, secret in {**SECRETS, "PostgreSQL password": PG_PASSWORD}.items():
        assert secret not in sent, f"{name} was sent to LangSmith"
    assert "Settings(" not in sent

    runs = runs_of(requests)
    (root,) = [r for r in runs.values() if r.get("name") == "apdmem" and not r.get("parent_run_id")]
    assert root.get("end_time") and "What is my dog's name?" in json.dumps(root.get("inputs"))
    children = [r for r in runs.values() if r.get("parent_run_id") == root["id"]]
    named = {}
    for r in children:
        named.setdefault(r["name"], []).append(r)
    assert set(NODES) <= set(named), sorted(named)
    # one run per node execution: as many search runs as the command printed searches
    assert len(named["search"]) == run.stdout.count("] search ") >= 1
    assert all(r.get("trace_id") == root["trace_id"] and r.get("end_time") for r in children)

    def metadata(node: str) -> list[dict]:
        return [r.get("extra", {}).get("metadata", {}) for r in named[node]]

    assert all(m["step"] >= 1 and m["queries"] and "s-dog" in m["session_ids"] for m in metadata("search"))
    drills = [tuple(d) for m in metadata("drill") for d in m["drills"]]
    assert ("s-dog", "L1") in drills and all(m["step"] >= 1 for m in metadata("drill"))
    assert all(m["route"] and m["reason"] for m in metadata("converge"))
    # a round's step as reflect left it is the step converge decides on (no reflection model: no step spent)
    assert [m["step"] for m in metadata("reflect")] == [m["step"] for m in metadata("converge")]
    assert all(m["queries"] for m in metadata("decompose"))
    (answered,) = metadata("answer")
    assert "s-dog" in answered["sessions"] and set(answered["layers"]) <= {"L1", "L2", "L3"} and answered["answer_mode"]

    # token usage: the chat model's runs carry it, and each node's output counts its own
    llm = [r for r in runs.values() if r.get("run_type") == "llm"]
    assert llm and all(usage_of(r)["input_tokens"] > 0 for r in llm)
    assert named["answer"][0]["outputs"]["usage"]["answer"]["input_tokens"] > 0
    print({name: len(rs) for name, rs in named.items()}, f"{len(llm)} model runs, usage {[usage_of(r) for r in llm]}")


def usage_of(run: dict) -> dict:
    """The token usage LangSmith reads from a chat model's run (its message's `usage_metadata`)."""
    found = re.search(r'"usage_metadata":\s*(\{[^{}]*\})', json.dumps(run.get("outputs")))
    assert found, f"no usage in the outputs of {run.get('name')}"
    return json.loads(found[1])
