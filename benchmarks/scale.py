"""What one user's memory costs as it grows: users of 100, 1,000, 5,000 ... sessions, on the file store and on PostgreSQL.

The sessions are real LongMemEval sessions (the haystacks of the files given, each session once), repeated with
fresh ids ("r<k>-<id>") when a size needs more. For each store and size, a fresh user is built by one `ingest` of
all its sessions (raw L0, the embedded models), then measured:

- the bulk `ingest` itself: seconds, and how long it held the user's writer lock (in how many commits, the longest);
- p50/p95 of a one-session `remember` and the bytes it wrote (all the store's writes of that call), beside the bytes
  of that session's own files: the same `ONE_SESSION_REMEMBERS` sessions at every size (the pool's last ones, under
  fresh ids), so that sizes compare the same commits;
- p50 of `search` (k=10) and of the rescored search (``rerank=True``) over LongMemEval questions;
- `forget` of one session;
- RSS of a fresh process that opened the user and searched once (the embedded models included: the line above
  each table gives it for a user of one session), and `Memory.nbytes`, the estimate the process cache budgets by.

Embedding is most of the cost of building big users and says nothing about the store: the embedded model is
deterministic per text, and `LocalEmbeddings` caches vectors per text, so repeated sessions cost nothing to embed;
`--vectors-from DIR` also fills that cache from a store that already holds these sessions (e.g. the ablation's
`--store`), so that no text is embedded twice across runs. The output says how many texts were embedded.

    LANGSMITH_TRACING=false .venv/bin/python benchmarks/scale.py \\
        ../shared/data/longmemeval/longmemeval_s_dev.json.gz ../shared/data/longmemeval/longmemeval_s_dev2.json.gz \\
        --sizes 100 1000 5000 --stores files postgres --vectors-from STORE
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from apdmem.memory import Memory, load_longmemeval
from apdmem.memory.backends import open_store
from apdmem.memory.generations import Damaged, Generations
from apdmem.memory.migrate import stored_users
from apdmem.memory.records import Session
from apdmem.memory.store import UserStore
from apdmem.models import get_embeddings

# One-session commits per size: the pool's last sessions, outside every bulk ingest of fewer sessions than the pool
# less these (6,665 of the dev files'), and the same at every size, so that sizes differ by the history only.
ONE_SESSION_REMEMBERS = 15
QUESTIONS = 20  # searched per size (the rescored search: the first 10)


def pool(paths: list[str]) -> tuple[list[Session], list[str]]:
    """Every haystack session of the files once (by id), and their questions."""
    sessions: dict[str, Session] = {}
    questions = []
    for path in paths:
        for item in load_longmemeval(path):
            questions.append(item.question)
            for session in item.sessions:
                sessions.setdefault(session.session_id, session)
    return list(sessions.values()), questions


def sessions_for(sessions: list[Session], n: int, offset: int = 0) -> list[Session]:
    """`n` sessions from the pool starting at `offset`, repeated with fresh ids beyond its end."""
    out = []
    for i in range(offset, offset + n):
        session = sessions[i % len(sessions)]
        rounds = i // len(sessions)
        out.append(dataclasses.replace(session, session_id=f"r{rounds}-{session.session_id}") if rounds else session)
    return out


def seed_vectors(root: str) -> int:
    """Fill the embedded model's per-text cache from a file store of the same space: the vectors of each user's index,
    matched to their texts through the units of its sessions' L0.json (the index leaves the texts out)."""
    embeddings, seeded = get_embeddings("local", None), 0
    store = open_store(root, existing=True)
    for user_id in stored_users(root):
        user = UserStore(store, user_id)
        raw = user.get("manifest.json")
        generations = Generations(user, space=embeddings.model.space, lexical="auto", dimension=None, embed=None,
                                  window=4, stride=2, reindexing=True)
        if not generations.own_space(json.loads(raw)):
            continue
        try:
            generation = generations.read(raw, need_links=False)
        except Damaged:
            continue
        index, texts = generation.index, {}
        for sid in generation.manifest["sessions"] if index is not None else ():
            for unit in generations.read_units(sid, repair=False):
                texts[(unit.session_id, unit.start, unit.end)] = unit.embed_texts
        # Each unit's vectors follow one another, in the order of its embed_texts (as `UnitIndex.add` adds them).
        previous, k = None, 0
        for vector, row in zip(index.dense.vectors(), index.dense.rows.tolist()):
            k = k + 1 if row == previous else 0
            previous, unit = row, index.units[row]
            own = texts.get((unit.session_id, unit.start, unit.end), [])
            if k < len(own):
                embeddings._cache[hashlib.blake2b(own[k].encode(), digest_size=16).digest()] = vector.copy()
                seeded += 1
    return seeded


class Meter:
    """Counts what the store is asked to write and how long the writer lock is held."""

    def __init__(self) -> None:
        self.written, self.session_bytes, self.holds = 0, 0, []
        put, writer = UserStore.put, Generations.writer
        meter = self

        def counted(store, items):
            meter.written += sum(len(v) for v in items.values())
            meter.session_bytes += sum(len(v) for k, v in items.items() if k.startswith("sessions/"))
            return put(store, items)

        @contextmanager
        def timed(generations):
            started = time.perf_counter()
            try:
                with writer(generations) as current:
                    yield current
            finally:
                meter.holds.append(time.perf_counter() - started)

        UserStore.put, Generations.writer = counted, timed

    def reset(self) -> None:
        self.written, self.session_bytes, self.holds = 0, 0, []


def rss_of_holder(location: str, user: str) -> float:
    """MB of RSS of a fresh process that opened the user and searched once."""
    code = ("import sys; from apdmem.memory import Memory; m = Memory(sys.argv[2], store=sys.argv[1]); "
            "m.search('what did I buy'); print(open('/proc/self/status').read().split('VmRSS:')[1].split()[0])")
    out = subprocess.run([sys.executable, "-c", code, location, user], capture_output=True, text=True, check=True,
                         env={**os.environ, "LANGSMITH_TRACING": "false"})
    return int(out.stdout.split()[-1]) / 1024


def measure(location: str, pool_sessions: list[Session], questions: list[str], n: int, meter: Meter) -> dict:
    user = f"scale-{n}-{uuid.uuid4().hex[:6]}"
    memory = Memory(user, store=location, l0_mode="raw")
    meter.reset()
    started = time.perf_counter()
    memory.ingest(sessions_for(pool_sessions, n))
    row = {"sessions": n, "bulk s": time.perf_counter() - started, "lock s": sum(meter.holds),
           "commits": len(meter.holds), "longest hold s": max(meter.holds)}
    times, written, own = [], [], []
    for i, session in enumerate(pool_sessions[-ONE_SESSION_REMEMBERS:]):
        session = dataclasses.replace(session, session_id=f"new{i}-{session.session_id}")
        meter.reset()
        started = time.perf_counter()
        memory.ingest([session])
        times.append(time.perf_counter() - started)
        written.append(meter.written)
        own.append(meter.session_bytes)
    row.update({"remember p50 s": statistics.median(times), "remember p95 s": float(np.percentile(times, 95)),
                "written KB": statistics.median(written) / 1024, "own files KB": statistics.median(own) / 1024})
    searches, rescored = [], []
    for i, question in enumerate(questions[:QUESTIONS]):
        started = time.perf_counter()
        memory.search(question, k=10)
        searches.append(time.perf_counter() - started)
        if i < QUESTIONS // 2:
            started = time.perf_counter()
            memory.search(question, k=10, rerank=True)
            rescored.append(time.perf_counter() - started)
    started = time.perf_counter()
    memory.forget(session.session_id)
    row.update({"search p50 ms": 1000 * statistics.median(searches), "rescored p50 ms": 1000 * statistics.median(rescored),
                "forget s": time.perf_counter() - started, "RSS MB": rss_of_holder(location, user),
                "nbytes MB": memory.nbytes() / 2**20})
    return row


@contextmanager
def postgres_database():
    """A database in a throwaway cluster (as the tests start one)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from pg_cluster import UNAVAILABLE, start_cluster

    cluster = start_cluster()
    if cluster is None:
        raise SystemExit(f"no PostgreSQL: {UNAVAILABLE[-1]}")
    try:
        cluster.psql("CREATE DATABASE scale")
        yield cluster.url.rsplit("/", 1)[0] + "/scale"
    finally:
        cluster.stop()


@contextmanager
def file_store():
    with tempfile.TemporaryDirectory(prefix="apdmem-scale-") as folder:
        yield folder


COLUMNS = ["sessions", "bulk s", "lock s", "commits", "longest hold s", "remember p50 s", "remember p95 s", "written KB",
           "own files KB", "search p50 ms", "rescored p50 ms", "forget s", "RSS MB", "nbytes MB"]


def machine() -> str:
    """The processor, its cores and the memory of this machine (Linux names them; elsewhere the architecture)."""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
        memory = int(next(line.split()[1] for line in open("/proc/meminfo") if line.startswith("MemTotal"))) / 2**20
    except (OSError, StopIteration, ValueError):
        return f"{platform.machine()}, {os.cpu_count()} cores"
    return f"{cpu}, {os.cpu_count()} cores, {memory:.0f} GB"


def _shown(value: float | int) -> str:
    return f"{value:.0f}" if isinstance(value, int) or value >= 100 else f"{value:.3g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", help="LongMemEval files")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--stores", nargs="+", choices=["files", "postgres"], default=["files", "postgres"])
    parser.add_argument("--vectors-from", help="a file store holding these sessions embedded by the embedded model")
    args = parser.parse_args()
    pool_sessions, questions = pool(args.datasets)
    embeddings = get_embeddings("local", None)
    seeded = seed_vectors(args.vectors_from) if args.vectors_from else 0
    cached = len(embeddings._cache)
    print(f"{len(pool_sessions)} distinct sessions in {len(args.datasets)} file(s); per-text vector cache seeded with "
          f"{seeded} vectors from {args.vectors_from or 'nothing'}")
    print(f"machine: {machine()}, load {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    meter = Meter()
    for kind in args.stores:
        with (file_store() if kind == "files" else postgres_database()) as location:
            Memory("models-only", store=location, l0_mode="raw").ingest(pool_sessions[:1])
            print(f"\n{kind} (RSS of a process holding a user of one session: {rss_of_holder(location, 'models-only'):.0f} MB)"
                  f"\n" + " | ".join(COLUMNS), flush=True)
            for n in args.sizes:
                row = measure(location, pool_sessions, questions, n, meter)
                print(" | ".join(_shown(row[c]) for c in COLUMNS), flush=True)
    print(f"\ntexts embedded by the model in this run: {len(embeddings._cache) - cached} (the others came from the cache)")


if __name__ == "__main__":
    main()
