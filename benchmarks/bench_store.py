"""The memory store on files and on PostgreSQL (loopback), side by side: ingestion throughput, cold open,
warm and cold search, and concurrent writers.

    python benchmarks/bench_store.py                           # starts a throwaway PostgreSQL cluster itself
    python benchmarks/bench_store.py --postgres postgresql://user@127.0.0.1:5432/db

For each backend:
- ingest: the haystacks of the 50 dev questions (raw L0), each into its own user; turns per second;
- cold open: a new `Memory` over one stored haystack (the embedding model already loaded), and over a
  500-session memory; median of several opens;
- search: warm = on an open memory, query embedding included (the embedding cache is emptied first);
  cold = open + first search; p50 and p95 over the dev questions;
- writers: 4 processes ingesting disjoint sessions into one user at once; total turns per second, and whether
  every session is listed afterwards.
Prints a table and writes a JSON report.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the throwaway-cluster helper the tests use

from pg_cluster import UNAVAILABLE, start_cluster  # noqa: E402

from apdmem.eval.metrics import percentile  # noqa: E402
from apdmem.memory import Memory, load_longmemeval  # noqa: E402
from apdmem.models import get_embeddings  # noqa: E402

DEV = ROOT.parent / "shared" / "data" / "longmemeval" / "longmemeval_s_dev.json.gz"
OPENS = 7


def timed(function) -> tuple[float, object]:
    started = time.perf_counter()
    value = function()
    return (time.perf_counter() - started) * 1000, value


def bench_backend(location: str, items, big_sessions, writer_files: list[Path]) -> dict:
    embeddings = get_embeddings("local")
    turns, seconds = 0, 0.0
    for item in items:
        report = Memory(item.question_id, store=location, l0_mode="raw").ingest(item.sessions)
        turns, seconds = turns + report.turns, seconds + report.seconds
    big = Memory("five-hundred", store=location, l0_mode="raw")
    big.ingest(big_sessions)

    def open_ms(user: str) -> float:
        return statistics.median(timed(lambda: Memory(user, store=location, l0_mode="raw"))[0] for _ in range(OPENS))

    answerable = [i for i in items if not i.is_abstention]
    embeddings._cache.clear()
    memories = {i.question_id: Memory(i.question_id, store=location, l0_mode="raw") for i in answerable}
    warm = [timed(lambda i=i: memories[i.question_id].search(i.question, k=10))[0] for i in answerable]
    embeddings._cache.clear()
    cold = [timed(lambda i=i: Memory(i.question_id, store=location, l0_mode="raw").search(i.question, k=10))[0] for i in answerable]

    started = time.perf_counter()
    processes = [subprocess.Popen([sys.executable, "-m", "apdmem.cli", "ingest", str(f), "--user", "writers", "--store", location,
                                   "--l0-mode", "raw", "--quiet"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env={**os.environ, "LANGSMITH_TRACING": "false"}, text=True) for f in writer_files]
    outputs = [p.communicate() for p in processes]
    wall = time.perf_counter() - started
    failed = [err for p, (_, err) in zip(processes, outputs) if p.returncode != 0]
    expected = {s["session_id"] for f in writer_files for s in json.loads(f.read_text())}
    listed = set(Memory("writers", store=location, l0_mode="raw").session_ids())
    writer_turns = sum(len(s["messages"]) for f in writer_files for s in json.loads(f.read_text()))
    return {
        "ingest_turns_per_second": turns / seconds,
        "cold_open_haystack_ms": statistics.median(open_ms(i.question_id) for i in items[:5]),
        "cold_open_500_sessions_ms": open_ms("five-hundred"),
        "warm_search_ms": {"p50": percentile(warm, 50), "p95": percentile(warm, 95)},
        "cold_search_ms": {"p50": percentile(cold, 50), "p95": percentile(cold, 95)},
        "writers": {"processes": len(writer_files), "turns_per_second": writer_turns / wall, "seconds": wall,
                    "sessions": len(expected), "listed": len(listed & expected), "lost": len(expected - listed),
                    "failed": failed},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--postgres", default=None, help="a PostgreSQL URL (default: start a throwaway cluster)")
    parser.add_argument("--dataset", default=str(DEV))
    parser.add_argument("--output", default="reports/bench_store.json")
    args = parser.parse_args()
    items = load_longmemeval(args.dataset)
    unique = list({s.session_id: s for item in items for s in item.sessions}.values())
    big_sessions = unique[:500]
    cluster = None if args.postgres else start_cluster(durable=True)
    if not args.postgres and cluster is None:
        sys.exit(f"cannot start PostgreSQL: {UNAVAILABLE[-1]}")
    results = {}
    try:
        with tempfile.TemporaryDirectory(prefix="apdmem-bench-store-") as scratch:
            scratch = Path(scratch)
            writer_files = []
            for w in range(4):
                part = unique[500 + 40 * w : 540 + 40 * w]
                path = scratch / f"writer{w}.json"
                path.write_text(json.dumps([{"session_id": s.session_id, "date": s.date.isoformat(), "messages":
                                             [{"role": t.role, "content": t.content} for t in s.turns]} for s in part]))
                writer_files.append(path)
            backends = {"files": str(scratch / "files"), "postgres": args.postgres or cluster.url}
            for name, location in backends.items():
                print(f"benchmarking {name} ...", flush=True)
                results[name] = bench_backend(location, items, big_sessions, writer_files)
    finally:
        if cluster is not None:
            cluster.stop()
    files, pg = results["files"], results["postgres"]
    rows = [
        ("ingest, 50 haystacks (turns/s)", files["ingest_turns_per_second"], pg["ingest_turns_per_second"], "{:.0f}"),
        ("cold open, one haystack (ms)", files["cold_open_haystack_ms"], pg["cold_open_haystack_ms"], "{:.1f}"),
        ("cold open, 500 sessions (ms)", files["cold_open_500_sessions_ms"], pg["cold_open_500_sessions_ms"], "{:.1f}"),
        ("warm search p50 (ms)", files["warm_search_ms"]["p50"], pg["warm_search_ms"]["p50"], "{:.1f}"),
        ("warm search p95 (ms)", files["warm_search_ms"]["p95"], pg["warm_search_ms"]["p95"], "{:.1f}"),
        ("cold search p50 (ms)", files["cold_search_ms"]["p50"], pg["cold_search_ms"]["p50"], "{:.1f}"),
        ("cold search p95 (ms)", files["cold_search_ms"]["p95"], pg["cold_search_ms"]["p95"], "{:.1f}"),
        ("4 writers, total (turns/s)", files["writers"]["turns_per_second"], pg["writers"]["turns_per_second"], "{:.0f}"),
        ("4 writers, sessions lost", files["writers"]["lost"], pg["writers"]["lost"], "{}"),
    ]
    print(f"\n{'':34}{'files':>12}{'postgres':>12}")
    for label, a, b, fmt in rows:
        print(f"{label:34}{fmt.format(a):>12}{fmt.format(b):>12}")
    ratio = pg["warm_search_ms"]["p50"] / files["warm_search_ms"]["p50"]
    print(f"warm search p50, postgres / files: {ratio:.2f}x; load average {os.getloadavg()[0]:.2f}")
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps({**results, "load_average": os.getloadavg()}, indent=2))
    print(f"report: {args.output}")


if __name__ == "__main__":
    main()
