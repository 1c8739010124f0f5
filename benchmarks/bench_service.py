"""Memory as a service under load: two `langgraph dev` workers on loopback over one throwaway PostgreSQL,
with auth on, and concurrent clients that write, ask and forget.

    python benchmarks/bench_service.py                       # 8 clients, a few minutes on two cores
    python benchmarks/bench_service.py --clients 12 --time-limit 300

Each client has its own user and a token for it, and a token of one user that all clients share. Clients
alternate between the two workers. Each one, in order: writes `--sessions` sessions of its own with
`remember` (one topic of the test history each, under its own ids), writes `--shared` sessions into the
shared user's memory (every client at once: writers of one user on two workers), asks `--asks` questions
about its own sessions with `apdmem` (the embedded default models: no network; the controller's quick
path, one search and the raw messages, as the server tests ask), then forgets one of its sessions with
`forget`. No client starts an operation after `--time-limit` seconds. Then every user's sessions are
listed, through the server and straight from PostgreSQL, and compared with what was written and not
forgotten.

Prints operations per second, p50/p95 latency of writes, asks and forgets, errors, asks that read the session
they asked about, and sessions lost (listed nowhere though written and not forgotten) or left behind
(forgotten but still listed). The workers' first runs (loading the models) are made before the clock starts.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from langgraph_sdk import get_sync_client

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the throwaway-cluster helper and the history the tests use

from conftest import HISTORY, QUESTIONS  # noqa: E402
from pg_cluster import UNAVAILABLE, start_cluster  # noqa: E402

from apdmem.auth import make_token  # noqa: E402
from apdmem.eval.metrics import percentile  # noqa: E402
from apdmem.memory import Memory  # noqa: E402

TOPICS = list(HISTORY)
QUESTION_OF = {session: question for question, session in QUESTIONS.items()}
# The controller's quick path: one search, the raw messages of what stands out, the answer.
QUICK = {"controller": False, "layers": "L3", "organized_notes": False, "draft_answer": False, "decomposition": False,
         "date_normalization": False, "tmax": 3}
SHARED = "team"


def worker_config(directory: Path) -> Path:
    """A copy of langgraph.json in `directory` with absolute paths, so that each worker keeps its own
    runtime state (`.langgraph_api`) in its own directory."""
    config = json.loads((ROOT / "langgraph.json").read_text())
    config["dependencies"] = [str(ROOT)]
    for graph in config["graphs"].values():
        graph["path"] = str(ROOT / graph["path"])
    config["auth"]["path"] = str(ROOT / config["auth"]["path"])
    path = directory / "langgraph.json"
    path.write_text(json.dumps(config))
    return path


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_worker(directory: Path, env: dict[str, str], jobs: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    log = (directory / "server.log").open("w")
    process = subprocess.Popen(
        [str(ROOT / ".venv" / "bin" / "langgraph"), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1", "--port",
         str(port), "--n-jobs-per-worker", str(jobs), "--config", str(worker_config(directory))],
        cwd=directory, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    return process, f"http://127.0.0.1:{port}"


def wait_up(process: subprocess.Popen, url: str, directory: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"a worker exited with {process.returncode}:\n{(directory / 'server.log').read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/ok", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    sys.exit(f"a worker was not up after {timeout:.0f}s")


def stop_worker(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def session_record(session_id: str, topic: str) -> dict:
    date, texts = HISTORY[topic]
    return {"session_id": session_id, "date": date,
            "messages": [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(texts)]}


class Load:
    """What the clients did: latencies per kind of operation, errors, what each user should hold."""

    def __init__(self, time_limit: float):
        self.started, self.time_limit = time.monotonic(), time_limit
        self.latency: dict[str, list[float]] = {"write": [], "ask": [], "forget": []}
        self.errors: list[str] = []
        self.skipped = 0
        self.asks_on_target = 0
        self.written: dict[str, set[str]] = {}
        self.forgotten: dict[str, set[str]] = {}
        self.lock = threading.Lock()

    def run(self, kind: str, operation) -> object | None:
        """`operation()` timed as `kind`; None when it failed (counted) or the time limit has passed."""
        if time.monotonic() - self.started > self.time_limit:
            with self.lock:
                self.skipped += 1
            return None
        started = time.perf_counter()
        try:
            value = operation()
        except Exception as error:  # a failed run, an HTTP error: counted and shown, the client goes on
            with self.lock:
                self.errors.append(f"{kind}: {type(error).__name__}: {str(error)[:200]}")
            return None
        with self.lock:
            self.latency[kind].append(time.perf_counter() - started)
        return value

    def record(self, table: dict[str, set[str]], user: str, session_id: str) -> None:
        with self.lock:
            table.setdefault(user, set()).add(session_id)


def client(index: int, url: str, secret: str, args, load: Load) -> None:
    user = f"user{index}"
    own = get_sync_client(url=url, headers={"Authorization": f"Bearer {make_token(user, secret)}"})
    shared = get_sync_client(url=url, headers={"Authorization": f"Bearer {make_token(SHARED, secret)}"})
    topics = [TOPICS[(index + k) % len(TOPICS)] for k in range(args.sessions)]
    for topic in topics:
        sid = f"{user}-{topic}"
        if load.run("write", lambda: own.runs.wait(None, "remember", input={"sessions": [session_record(sid, topic)]})):
            load.record(load.written, user, sid)
    for k in range(args.shared):
        sid, topic = f"{user}-shared-{k}", TOPICS[(index + k) % len(TOPICS)]
        if load.run("write", lambda: shared.runs.wait(None, "remember", input={"sessions": [session_record(sid, topic)]})):
            load.record(load.written, SHARED, sid)
    for topic in topics[: args.asks]:
        question = QUESTION_OF[topic]
        out = load.run("ask", lambda: own.runs.wait(None, "apdmem", input={"question": question, "question_date": "2024/06/01 (Sat) 10:00"},
                                                     context=QUICK))
        if isinstance(out, dict) and f"{user}-{topic}" in {e["session_id"] for e in out.get("evidence", [])}:
            with load.lock:
                load.asks_on_target += 1
    gone = f"{user}-{topics[-1]}"
    if load.run("forget", lambda: own.runs.wait(None, "forget", input={"session_ids": [gone]})) is not None:
        load.record(load.forgotten, user, gone)


def check(urls: list[str], store: str, secret: str, load: Load) -> tuple[int, int, int]:
    """(sessions lost, sessions left behind, listings that differ between the server and the store)."""
    lost = left = differ = 0
    for user in sorted(set(load.written) | set(load.forgotten)):
        expected = load.written.get(user, set()) - load.forgotten.get(user, set())
        server = get_sync_client(url=urls[0], headers={"Authorization": f"Bearer {make_token(user, secret)}"})
        served = {s["session_id"] for s in server.runs.wait(None, "sessions", input={})["sessions"]}
        stored = set(Memory(user, store=store, l0_mode="raw").session_ids())
        lost += len(expected - (served & stored))
        left += len(load.forgotten.get(user, set()) & (served | stored))
        differ += served != stored
    return lost, left, differ


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--sessions", type=int, default=3, help="sessions each client writes for its own user")
    parser.add_argument("--shared", type=int, default=2, help="sessions each client writes for the shared user")
    parser.add_argument("--asks", type=int, default=2, help="questions each client asks")
    parser.add_argument("--jobs", type=int, default=4, help="concurrent runs per worker (--n-jobs-per-worker)")
    parser.add_argument("--time-limit", type=float, default=360, help="no operation starts after this many seconds")
    parser.add_argument("--report", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args()
    if not 1 <= args.asks <= args.sessions:
        parser.error("--asks must be between 1 and --sessions")

    begun = time.monotonic()
    cluster = start_cluster()
    if cluster is None:
        sys.exit(f"no PostgreSQL: {UNAVAILABLE[-1]}")
    secret = secrets.token_urlsafe(32)
    env = {k: v for k, v in os.environ.items() if not k.startswith("APDMEM_") and k != "OPENAI_BASE_URL"}
    env.update(LANGSMITH_TRACING="false", HF_HUB_OFFLINE="1", LANGGRAPH_CLI_NO_ANALYTICS="1",
               APDMEM_STORE=cluster.url, APDMEM_AUTH_SECRET=secret)
    directories = [Path(tempfile.mkdtemp(prefix=f"apdmem-worker{i}-")) for i in range(2)]
    workers = []
    try:
        workers = [start_worker(d, env, args.jobs) for d in directories]
        for (process, url), directory in zip(workers, directories):
            wait_up(process, url, directory)
        urls = [url for _, url in workers]
        started_up = time.monotonic() - begun
        for url in urls:  # the models load on a worker's first runs: before the clock starts
            warm = get_sync_client(url=url, headers={"Authorization": f"Bearer {make_token('warm-up', secret)}"})
            warm.runs.wait(None, "remember", input={"sessions": [session_record("warm", TOPICS[0])]})
            warm.runs.wait(None, "apdmem", input={"question": "hiking"}, context=QUICK)

        load = Load(args.time_limit)
        with ThreadPoolExecutor(max_workers=args.clients) as pool:
            list(pool.map(lambda i: client(i, urls[i % 2], secret, args, load), range(args.clients)))
        wall = time.monotonic() - load.started
        lost, left, differ = check(urls, cluster.url, secret, load)
    finally:
        for process, _ in workers:
            stop_worker(process)
        for directory in directories:
            shutil.rmtree(directory, ignore_errors=True)
        cluster.stop()

    operations = sum(len(v) for v in load.latency.values())
    figures = {
        "clients": args.clients, "workers": 2, "jobs_per_worker": args.jobs, "start_up_s": round(started_up, 1),
        "wall_s": round(wall, 1), "operations": operations, "operations_per_s": round(operations / wall, 2),
        "writes_per_s": round(len(load.latency["write"]) / wall, 2),
        **{f"{kind}_p50_s": round(percentile(v, 50), 2) for kind, v in load.latency.items() if v},
        **{f"{kind}_p95_s": round(percentile(v, 95), 2) for kind, v in load.latency.items() if v},
        "asks": len(load.latency["ask"]), "asks_reading_their_session": load.asks_on_target,
        "errors": len(load.errors), "not_started_at_time_limit": load.skipped,
        "sessions_written": sum(map(len, load.written.values())), "sessions_lost": lost, "forgotten_left_behind": left,
        "listings_differing": differ, "total_s": round(time.monotonic() - begun, 1),
    }
    print(f"two langgraph dev workers ({args.jobs} jobs each) over PostgreSQL on loopback, {args.clients} clients, "
          f"auth on; start-up {figures['start_up_s']} s, load {figures['wall_s']} s, total {figures['total_s']} s")
    print("| | p50 | p95 | count |\n| --- | --- | --- | --- |")
    for kind, values in load.latency.items():
        if values:
            print(f"| {kind} | {percentile(values, 50):.2f} s | {percentile(values, 95):.2f} s | {len(values)} |")
    print(f"throughput: {figures['operations_per_s']} operations/s ({figures['writes_per_s']} writes/s); "
          f"asks that read the session they asked about: {load.asks_on_target} of {len(load.latency['ask'])}")
    print(f"errors: {len(load.errors)}; operations not started (time limit): {load.skipped}; sessions written: "
          f"{figures['sessions_written']}; sessions lost: {lost}; forgotten but still listed: {left}; "
          f"users whose listing differs between server and store: {differ}")
    for error in load.errors[:10]:
        print("  ", error)
    if args.report:
        args.report.write_text(json.dumps(figures, indent=2))
    if load.errors or lost or left or differ:
        sys.exit(1)


if __name__ == "__main__":
    main()
