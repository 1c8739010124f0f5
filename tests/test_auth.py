"""Server auth that cannot be skipped: apdmem tokens (signed, at most a year long, revocable by a not-before
time) are the only way in when APDMEM_AUTH_SECRET is set; Studio's LangSmith login, a missing header and every
forged token get nothing of any user, asserted on the real HTTP responses of `langgraph dev`."""

import asyncio
import base64
import hashlib
import hmac
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import Auth
from test_servers import QUESTION, QUESTION_DATE, QUICK, langgraph_dev
from test_questions import long_question

from apdmem.auth import MAX_DAYS, NOT_BEFORE_ENV, SECRET_ENV, authenticate, make_token, not_before, verify_token
from apdmem.errors import ConfigError
from apdmem.memory import Memory

ROOT = Path(__file__).resolve().parents[1]
SECRET = "a-test-secret-of-some-length"
NOW = time.time()
# Revoked: every token issued more than ten minutes before the tests started, and bob's of the minute before.
NOT_BEFORE = {"*": NOW - 600, "bob": NOW - 60}
# One worker runs the whole file (`make test` runs `--dist loadgroup`): its module fixture starts a server.
pytestmark = pytest.mark.xdist_group("auth-server")


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def signed(payload: str, secret: str = SECRET) -> str:
    """`payload` with its HMAC-SHA256 signature, as a token is built (written here again so that a token the
    module would refuse to make can be made)."""
    mac = base64.urlsafe_b64encode(hmac.new(secret.encode(), payload.encode(), hashlib.sha256).digest()).decode().rstrip("=")
    return f"{payload}.{mac}"


def forged_tokens() -> dict[str, str]:
    """Tokens an attacker or an old client might send, each naming alice (or bob) and each to be refused."""
    now = int(time.time())
    alice = b64("alice")
    good = make_token("alice", SECRET)
    return {
        "bad signature": make_token("alice", "another-secret-entirely"),
        "signature of another payload": good.rsplit(".", 1)[0].replace(alice, b64("bob")) + "." + good.rsplit(".", 1)[1],
        "expired": make_token("alice", SECRET, days=1, now=now - 2 * 86400),
        "other version (apdmem1, no issue time)": signed(f"apdmem1.{alice}.{now + 86400}"),
        "lifetime beyond the cap": signed(f"apdmem2.{alice}.{now}.{now + (MAX_DAYS + 1) * 86400}"),
        "issued in the future": signed(f"apdmem2.{alice}.{now + 86400}.{now + 2 * 86400}"),
        "revoked for everyone": make_token("alice", SECRET, now=NOW - 3600),
        "revoked for bob": make_token("bob", SECRET, now=NOW - 120),
        "garbage": "not-a-token",
        "garbage with dots": "apdmem2.a.b.c.d",
        "empty": "",
    }


# --- tokens ---------------------------------------------------------------------------------------------


def test_a_token_names_its_user_and_nothing_forged_passes():
    assert verify_token(make_token("alice", SECRET), SECRET, not_before(json.dumps(NOT_BEFORE))) == "alice"
    assert verify_token(make_token("bob", SECRET), SECRET, not_before(json.dumps(NOT_BEFORE))) == "bob"
    for name, token in forged_tokens().items():
        assert verify_token(token, SECRET, not_before(json.dumps(NOT_BEFORE))) is None, name


def test_the_lifetime_is_capped():
    make_token("alice", SECRET, days=MAX_DAYS)
    for days in (MAX_DAYS + 1, 100000000000, 0, -1):
        with pytest.raises(ConfigError, match=f"1 to {MAX_DAYS} days"):
            make_token("alice", SECRET, days=days)


def test_not_before_forms():
    assert not_before(None) == {} and not_before(" ") == {}
    assert not_before("2023-11-14T22:13:20Z") == {"*": 1700000000.0} == not_before("2023-11-14T22:13:20")
    assert not_before('{"*": 5, "alice": "2023-11-14T23:13:20+01:00"}') == {"*": 5.0, "alice": 1700000000.0}
    for bad in ("yesterday", '{"alice": "soon"}'):
        with pytest.raises(ConfigError, match=NOT_BEFORE_ENV):
            not_before(bad)


def authenticated(authorization: str | None, monkeypatch, **env: str):
    """What the server's `authenticate` makes of an Authorization header under `env`."""
    monkeypatch.setenv(SECRET_ENV, SECRET)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return asyncio.run(authenticate(authorization))


def test_a_malformed_not_before_admits_nobody(monkeypatch):
    token = f"Bearer {make_token('alice', SECRET)}"
    assert authenticated(token, monkeypatch)["identity"] == "alice"
    with pytest.raises(Auth.exceptions.HTTPException) as refused:
        authenticated(token, monkeypatch, **{NOT_BEFORE_ENV: "last tuesday"})
    assert refused.value.status_code == 401 and NOT_BEFORE_ENV in refused.value.detail


class StoredUser(dict):
    """A user as the server rebuilds it from a stored run or cron: a dict with attribute access."""

    identity = property(lambda self: self["identity"])
    is_authenticated = property(lambda self: self.get("is_authenticated", True))


def test_a_studio_user_has_no_identity_with_auth_on(monkeypatch):
    """The second lock behind `disable_studio_auth`: Studio's user (the object, or the dict a stored run keeps)
    is nobody to the handlers and to the graphs; a token's user (or a cron's, rebuilt from its id) is itself."""
    from langgraph.runtime import Runtime, ServerInfo
    from langgraph_sdk.auth.types import StudioUser

    from apdmem.auth import token_user
    from apdmem.graph import Context
    from apdmem.nodes.common import authenticated_user, open_memory

    studio = [StudioUser("langgraph-studio-user", is_authenticated=True),
              StoredUser(kind="StudioUser", identity="langgraph-studio-user")]
    monkeypatch.setenv(SECRET_ENV, SECRET)
    alice = StoredUser(authenticated(f"Bearer {make_token('alice', SECRET)}", monkeypatch))
    assert [token_user(u) for u in studio] == [None, None]
    assert token_user(alice) == "alice" and token_user(StoredUser(alice, is_authenticated=False)) is None

    def runtime(user):
        return Runtime(context=Context(user_id="alice"), server_info=ServerInfo(assistant_id="a", graph_id="apdmem", user=user))

    for user in [*studio, None]:
        with pytest.raises(ConfigError, match="carries no apdmem token's user"):
            open_memory(runtime(user), settings=None)  # refused before any store is opened
    assert authenticated_user(runtime(alice)) == "alice"
    monkeypatch.delenv(SECRET_ENV)
    assert all(authenticated_user(runtime(user)) is None for user in studio)  # a laptop server: the context names the user


def test_a_stored_user_is_refused_once_its_token_would_be(monkeypatch):
    """What a cron's or a background run's user carries (the token's times, the secret's name) is checked again
    at every run: a bare identity (a run stored by an older apdmem), a forged claim, a revocation, an expiry or
    a new secret refuse it, as they refuse the token itself."""
    from apdmem.auth import token_user

    monkeypatch.setenv(SECRET_ENV, SECRET)
    now = int(time.time())
    alice = authenticated(f"Bearer {make_token('alice', SECRET, days=1, now=now - 100)}", monkeypatch)
    assert set(alice) == {"identity", "issued", "expires", "secret_id"} and SECRET not in json.dumps(alice)
    assert token_user(StoredUser(alice)) == "alice"
    refused = {"bare identity": StoredUser(identity="alice"), "forged issue time": StoredUser(alice, issued=str(now)),
               "forged secret name": StoredUser(alice, secret_id="x"),
               "expired": StoredUser(alice, expires=now - 1, issued=now - 86400)}
    assert {name: token_user(user) for name, user in refused.items()} == dict.fromkeys(refused)
    monkeypatch.setenv(NOT_BEFORE_ENV, json.dumps({"bob": now}))
    assert token_user(StoredUser(alice)) == "alice"  # another user's revocation
    for revocation in (json.dumps({"alice": now}), str(now), "not a time"):
        monkeypatch.setenv(NOT_BEFORE_ENV, revocation)
        assert token_user(StoredUser(alice)) is None, revocation
    monkeypatch.delenv(NOT_BEFORE_ENV)
    monkeypatch.setenv(SECRET_ENV, "another-secret-of-some-length")
    assert token_user(StoredUser(alice)) is None


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("APDMEM_")}
    return subprocess.run([sys.executable, "-m", "apdmem.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**environment, "LANGSMITH_TRACING": "false", **env}, timeout=120)


def test_cli_token_lifetime():
    run = run_cli("token", "alice", "--days", "100000000000", APDMEM_AUTH_SECRET=SECRET)
    assert run.returncode == 2 and run.stdout == "" and len(run.stderr.strip().splitlines()) == 1
    assert f"1 to {MAX_DAYS} days" in run.stderr and "Traceback" not in run.stderr
    run = run_cli("token", "alice", "--days", str(MAX_DAYS), APDMEM_AUTH_SECRET=SECRET)
    assert run.returncode == 0 and verify_token(run.stdout.strip(), SECRET) == "alice"


# --- through langgraph dev -----------------------------------------------------------------------------------

MEMORY_WORDS = ("Biscuit", "beagle", "s-dog", "Rainier", "s-hiking", "Yamaha", "s-guitar")


@pytest.fixture(scope="module")
def server(tmp_path_factory, history):
    """`langgraph dev` with auth on (and a not-before list) over alice's and bob's memories, with a thread of
    alice's that has a run's state (her evidence) in it. Yields (url, alice's thread id)."""
    memory_dir = tmp_path_factory.mktemp("auth")
    Memory("alice", store=str(memory_dir), l0_mode="raw").ingest(history[:4])
    Memory("bob", store=str(memory_dir), l0_mode="raw").ingest(history[4:])
    with langgraph_dev(memory_dir, APDMEM_AUTH_SECRET=SECRET, APDMEM_AUTH_NOT_BEFORE=json.dumps(NOT_BEFORE)) as url:
        alice = httpx.Client(base_url=url, headers=bearer("alice"), timeout=600)
        thread = alice.post("/threads", json={}).json()["thread_id"]
        done = alice.post(f"/threads/{thread}/runs/wait", json={"assistant_id": "apdmem", "context": QUICK,
                                                                 "input": {"question": QUESTION, "question_date": QUESTION_DATE}})
        assert done.status_code == 200 and "Biscuit" in done.text, done.text[-2000:]
        yield url, thread


def bearer(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {make_token(user, SECRET)}"}


def probes(thread: str) -> list[tuple[str, str, dict | None]]:
    """Every way into a user's threads, state and memory: list, read, state, history, runs naming alice (on her
    thread and stateless), the server's store."""
    run = {"assistant_id": "apdmem", "input": {"question": QUESTION, "question_date": QUESTION_DATE},
           "context": {**QUICK, "user_id": "alice"}}
    return [
        ("POST", "/threads/search", {}),
        ("GET", f"/threads/{thread}", None),
        ("GET", f"/threads/{thread}/state", None),
        ("POST", f"/threads/{thread}/history", {}),
        ("GET", f"/threads/{thread}/runs", None),
        ("POST", f"/threads/{thread}/runs/wait", run),
        ("POST", "/runs/wait", run),
        ("POST", "/store/items/search", {"namespace_prefix": []}),
        ("POST", "/store/namespaces", {}),
        # the service graphs, which read and write memory through the same identity check
        ("POST", "/runs/wait", {"assistant_id": "sessions", "input": {}, "context": {"user_id": "alice"}}),
        ("POST", "/runs/wait", {"assistant_id": "forget", "input": {"session_ids": ["s-dog"]}, "context": {"user_id": "alice"}}),
        ("POST", "/runs/wait", {"assistant_id": "remember", "context": {"user_id": "alice"},
                                "input": {"session_id": "planted", "messages": [{"role": "user", "content": "My dog is Rex."}]}}),
        ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        # apdmem.graph.mcp_results answers tools/call itself: only behind the server's auth
        ("POST", "/mcp", {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "sessions", "arguments": {}}}),
    ]


@pytest.mark.slow
def test_no_token_no_memory(server):
    """Studio's header without a token (langgraph-api's StudioUser before `disable_studio_auth`), no header
    at all, a LangSmith-looking key, another scheme, and each forged token: 401 on every probe, and no
    response names anything of alice's or bob's."""
    url, thread = server
    attempts = {"x-auth-scheme: langsmith": {"x-auth-scheme": "langsmith"},
                "x-auth-scheme: langsmith with an x-api-key": {"x-auth-scheme": "langsmith", "x-api-key": "lsv2_pt_fake"},
                "no header": {},
                "basic auth": {"Authorization": "Basic YWxpY2U6"},
                "bearer without a token": {"Authorization": "Bearer"}}
    attempts |= {f"forged: {name}": {"Authorization": f"Bearer {token}".strip(), "x-auth-scheme": "langsmith"}
                 for name, token in forged_tokens().items()}
    with httpx.Client(base_url=url, timeout=120) as http:
        for name, headers in attempts.items():
            for method, path, body in probes(thread):
                response = http.request(method, path, json=body, headers=headers)
                assert response.status_code == 401, (name, method, path, response.status_code, response.text[:300])
                assert not any(word in response.text for word in MEMORY_WORDS) and thread not in response.text, (name, path)


@pytest.mark.slow
def test_a_token_reaches_only_its_own_threads(server):
    url, thread = server
    with httpx.Client(base_url=url, headers=bearer("alice"), timeout=120) as alice, \
            httpx.Client(base_url=url, headers=bearer("bob"), timeout=120) as bob:
        assert thread in {t["thread_id"] for t in alice.post("/threads/search", json={}).json()}
        assert "Biscuit" in alice.get(f"/threads/{thread}/state").text
        assert thread not in {t["thread_id"] for t in bob.post("/threads/search", json={}).json()}
        for method, path, body in probes(thread)[1:6]:  # alice's thread, its state, history, runs
            response = bob.request(method, path, json=body)
            assert response.status_code == 404, (method, path, response.status_code)
        # bob naming alice in a run of his own is refused inside the graph, with nothing of hers
        response = bob.post("/runs/wait", json=probes(thread)[6][2])
        assert "cannot read the memory of 'alice'" in response.text and not any(w in response.text for w in MEMORY_WORDS)
        # nor can he list, forget or write her sessions through the service graphs
        for graph, body in (("sessions", {}), ("forget", {"session_ids": ["s-dog"]}),
                            ("remember", {"session_id": "planted", "messages": [{"role": "user", "content": "My dog is Rex."}]})):
            response = bob.post("/runs/wait", json={"assistant_id": graph, "input": body, "context": {"user_id": "alice"}})
            assert "cannot read the memory of 'alice'" in response.text and "s-dog" not in response.text, (graph, response.text[:300])
        listed = alice.post("/runs/wait", json={"assistant_id": "sessions", "input": {}, "context": {}}).json()
        assert [s["session_id"] for s in listed["sessions"]] == ["s-hiking", "s-dog", "s-bread", "s-job"]
        # a Studio header does not change who a token names
        studio = alice.post("/runs/wait", json=probes(thread)[6][2], headers={"x-auth-scheme": "langsmith"})
        assert studio.status_code == 200 and "Biscuit" in studio.text


@pytest.mark.slow
def test_what_apdmem_does_not_use_is_refused_to_token_users(server):
    """Assistants are read by everyone and written by nobody; the server's store is refused; crons are their
    creator's: an uncovered resource would be open to every token (langgraph-api lets unhandled ones through)."""
    url, thread = server
    with httpx.Client(base_url=url, headers=bearer("alice"), timeout=120) as alice:
        assistants = alice.post("/assistants/search", json={})
        assert assistants.status_code == 200 and "apdmem" in {a["graph_id"] for a in assistants.json()}
        refused = [
            alice.post("/assistants", json={"graph_id": "apdmem", "context": {"user_id": "bob"}}),
            alice.patch(f"/assistants/{assistants.json()[0]['assistant_id']}", json={"context": {"user_id": "bob"}}),
            alice.delete(f"/assistants/{assistants.json()[0]['assistant_id']}"),
            alice.put("/store/items", json={"namespace": ["alice"], "key": "k", "value": {"v": 1}}),
            alice.post("/store/items/search", json={"namespace_prefix": []}),
        ]
        assert [r.status_code for r in refused] == [403] * 5, [(r.request.url.path, r.status_code, r.text[:200]) for r in refused]
        assert alice.post("/assistants/search", json={}).json() == assistants.json()  # nothing was changed
    with httpx.Client(base_url=url, headers=bearer("bob"), timeout=120) as bob:
        # crons are their creator's (the service graphs may be scheduled): none on another user's thread
        cron = bob.post(f"/threads/{thread}/runs/crons", json={"assistant_id": "sessions", "schedule": "0 0 1 1 *", "input": {}})
        assert cron.status_code == 404 and bob.post("/runs/crons/search", json={}).json() == []


@pytest.mark.slow
def test_the_server_answers_a_2000_word_question(server):
    """Issue 15 item 5 on the server: a 2,000-word question ran into "An internal error occurred" (the
    cross-encoder refused a query longer than its window); now it is answered from alice's memory."""
    url, _ = server
    with httpx.Client(base_url=url, headers=bearer("alice"), timeout=900) as alice:
        response = alice.post("/runs/wait", json={"assistant_id": "apdmem",
                                                  "input": {"question": long_question(2000), "question_date": QUESTION_DATE},
                                                  "context": {"tmax": 3, "top_k": 3, "drill_width": 1, "reflection": False}})
    assert response.status_code == 200, response.text[-2000:]
    out = response.json()
    assert "__error__" not in out and isinstance(out.get("answer"), str) and out["answer"].strip(), str(out)[-2000:]
    assert out["evidence"] and {e["session_id"] for e in out["evidence"]} <= {"s-hiking", "s-dog", "s-bread", "s-job"}


@pytest.mark.slow
def test_a_cron_is_its_creators_and_runs_as_them(server):
    """Last in the module (it writes a session into alice's memory). alice's cron writes her memory and only
    she sees it; bob's cron naming alice fails in the graph. Crons fire on the minute: up to two are waited for."""
    from langgraph_sdk import get_sync_client

    url, _ = server
    alice, bob = (get_sync_client(url=url, headers=bearer(user)) for user in ("alice", "bob"))
    note = {"session_id": "cron-note", "date": "2024-06-01T07:00", "messages": [{"role": "user", "content": "Repot the basil."}]}
    threads = {"alice": alice.threads.create()["thread_id"], "bob": bob.threads.create()["thread_id"]}
    crons = {"alice": alice.crons.create_for_thread(threads["alice"], "remember", schedule="* * * * *", input=note),
             "bob": bob.crons.create_for_thread(threads["bob"], "remember", schedule="* * * * *",
                                                input={**note, "session_id": "cron-bob"}, context={"user_id": "alice"})}
    try:
        assert {c["cron_id"] for c in bob.crons.search()} == {crons["bob"]["cron_id"]}
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and not all(client.runs.list(threads[name]) for name, client in (("alice", alice), ("bob", bob))):
            time.sleep(3)
        status = {}
        for name, client in (("alice", alice), ("bob", bob)):
            run = client.runs.list(threads[name])[0]
            client.runs.join(threads[name], run["run_id"])
            status[name] = client.runs.get(threads[name], run["run_id"])["status"]
    finally:
        alice.crons.delete(crons["alice"]["cron_id"])
        bob.crons.delete(crons["bob"]["cron_id"])
    assert status == {"alice": "success", "bob": "error"}
    listed = {name: {s["session_id"] for s in client.runs.wait(None, "sessions", input={}, context={})["sessions"]}
              for name, client in (("alice", alice), ("bob", bob))}
    assert "cron-note" in listed["alice"] and "cron-bob" not in listed["alice"] | listed["bob"]


# --- revocation reaches what a token scheduled ------------------------------------------------------------------


def runs_since(client, thread: str, moment: float) -> list[dict]:
    """The runs of a thread created after `moment` (Unix seconds), each waited for."""
    from datetime import datetime

    runs = [r for r in client.runs.list(thread) if datetime.fromisoformat(r["created_at"]).timestamp() > moment]
    for run in runs:
        client.runs.join(thread, run["run_id"])
    return [client.runs.get(thread, r["run_id"]) for r in runs]


def wait_for_a_run(client, thread: str, moment: float, timeout: float = 200) -> dict:
    """The first run of a thread created after `moment` (a cron fires on the minute), waited for."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if runs := runs_since(client, thread, moment):
            return runs[0]
        time.sleep(3)
    pytest.fail(f"no run on thread {thread} within {timeout:.0f}s")


@pytest.mark.slow
def test_revoking_tokens_or_changing_the_secret_stops_the_crons_they_made(tmp_path, history):
    """Issue 30 item 1, with `langgraph dev` restarted over its kept crons and runs: after APDMEM_AUTH_NOT_BEFORE
    revokes alice's tokens her cron writes nothing more, nor does the background run she queued before (bob's
    cron, scheduled alike, still runs), and after the secret changes neither does bob's (carol's, made with the
    new secret, runs). A new token of alice's sees her cron, to delete it."""
    from langgraph_sdk import get_sync_client

    memory_dir = tmp_path / "memory"
    Memory("alice", store=str(memory_dir), l0_mode="raw").ingest(history[:1])

    def client(user: str, secret: str = SECRET, now: float | None = None):
        return get_sync_client(url=url, headers={"Authorization": f"Bearer {make_token(user, secret, now=now)}"})

    def cron_note(user: str) -> dict:
        return {"session_id": f"cron-{user}", "date": "2024-06-01T07:00",
                "messages": [{"role": "user", "content": f"{user} waters the basil."}]}

    while time.time() % 60 > 40:  # the crons are made and the server stopped before they first fire
        time.sleep(1)
    threads, crons = {}, {}
    with langgraph_dev(memory_dir, APDMEM_AUTH_SECRET=SECRET) as url:
        for user in ("alice", "bob"):
            threads[user] = client(user).threads.create()["thread_id"]
            crons[user] = client(user).crons.create_for_thread(threads[user], "remember", schedule="* * * * *",
                                                               input=cron_note(user))["cron_id"]
        queued = client("alice").runs.create(threads["alice"], "remember", after_seconds=45,
                                             input={**cron_note("alice"), "session_id": "queued-alice"})
    assert time.time() % 60 > 1  # no minute began meanwhile: neither cron has run yet

    time.sleep(1.1)  # revocation is by whole seconds: a token issued in the same second as it would stay valid
    revoked_at = int(time.time())
    with langgraph_dev(memory_dir, APDMEM_AUTH_SECRET=SECRET, **{NOT_BEFORE_ENV: json.dumps({"alice": revoked_at})}) as url:
        assert wait_for_a_run(client("bob"), threads["bob"], revoked_at)["status"] == "success"
        alice = client("alice", now=revoked_at + 1)  # a token issued after the revocation
        assert [c["cron_id"] for c in alice.crons.search()] == [crons["alice"]]  # hers, to delete
        fired = runs_since(alice, threads["alice"], revoked_at)
        assert all(run["status"] == "error" for run in fired), [(r["status"], r["run_id"]) for r in fired]
        alice.runs.join(threads["alice"], queued["run_id"])  # queued before the revocation, run after it
        assert alice.runs.get(threads["alice"], queued["run_id"])["status"] == "error"
    listed = Memory("alice", store=str(memory_dir), l0_mode="raw").session_ids()
    assert not {"cron-alice", "queued-alice"} & set(listed)
    assert "cron-bob" in Memory("bob", store=str(memory_dir), l0_mode="raw").session_ids()

    Memory("bob", store=str(memory_dir), l0_mode="raw").forget("cron-bob")
    new_secret = "another-secret-of-some-length"
    changed_at = time.time()
    with langgraph_dev(memory_dir, APDMEM_AUTH_SECRET=new_secret) as url:
        carol = client("carol", new_secret)
        thread = carol.threads.create()["thread_id"]
        carol.crons.create_for_thread(thread, "remember", schedule="* * * * *", input=cron_note("carol"))
        assert wait_for_a_run(carol, thread, changed_at)["status"] == "success"
        bob = client("bob", new_secret)
        fired = runs_since(bob, threads["bob"], changed_at)
        assert all(run["status"] == "error" for run in fired), [(r["status"], r["run_id"]) for r in fired]
    assert "cron-bob" not in Memory("bob", store=str(memory_dir), l0_mode="raw").session_ids()
    assert "cron-carol" in Memory("carol", store=str(memory_dir), l0_mode="raw").session_ids()
