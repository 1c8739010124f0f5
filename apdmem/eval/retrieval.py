"""`apdmem bench retrieval`: session-level retrieval quality and speed of the substrate on LongMemEval.

Each question's haystack is ingested into its own namespace of a fresh on-disk store; once all are
ingested, each question is asked once (query embedding included in the timing) and the ranked sessions are scored.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from tqdm.auto import tqdm

from apdmem.eval.metrics import mean, ndcg_any, percentile, recall_all, recall_any
from apdmem.memory import Memory, load_longmemeval
from apdmem.memory.store import open_store

CUTOFFS = {"recall_any": (1, 3, 5, 10), "recall_all": (5, 10), "ndcg_any": (5, 10)}
METRICS = {"recall_any": recall_any, "recall_all": recall_all, "ndcg_any": ndcg_any}


def score(ranked: list[str], gold: set[str]) -> dict[str, float]:
    """Every metric at every cutoff for one question."""
    return {f"{name}@{k}": METRICS[name](ranked, gold, k) for name, ks in CUTOFFS.items() for k in ks}


def run(dataset: str, *, l0_mode: str = "raw", chat_model: str = "local", embeddings: str = "local",
        limit: int | None = None, output: str | None = None, progress: bool = True) -> dict:
    """Run the benchmark and return (and optionally write) the JSON report."""
    items = load_longmemeval(dataset)[:limit]
    per_question, turns, ingest_seconds, latencies, disk = [], 0, 0.0, [], 0
    with tempfile.TemporaryDirectory(prefix="apdmem-bench-") as directory:
        store, memories = open_store(directory), []
        for item in tqdm(items, desc="ingest", disable=not progress):
            memory = Memory(item.question_id, store=store, l0_mode=l0_mode, chat_model=chat_model, embeddings=embeddings)
            report = memory.ingest(item.sessions)
            turns += report.turns
            ingest_seconds += report.seconds
            disk += _directory_bytes(Path(directory) / memory.store.root)
            if not item.is_abstention:
                memories.append((item, memory))
        # Searches run after all ingestion, so that the disk writeback of the last ingest is not timed as search.
        for item, memory in tqdm(memories, desc="search", disable=not progress):
            started = time.perf_counter()
            docs = memory.search(item.question, k=10)
            latencies.append((time.perf_counter() - started) * 1000)
            ranked = [d.metadata["session_id"] for d in docs]
            per_question.append({"question_id": item.question_id, "type": item.question_type, "ranked": ranked,
                                 "gold": item.answer_session_ids, **score(ranked, set(item.answer_session_ids))})
    by_type = defaultdict(list)
    for q in per_question:
        by_type[q["type"]].append(q)
    keys = [f"{n}@{k}" for n, ks in CUTOFFS.items() for k in ks]
    result = {
        "dataset": dataset,
        "l0_mode": l0_mode,
        "questions": len(per_question),
        "overall": {k: mean([q[k] for q in per_question]) for k in keys},
        "by_type": {t: {"n": len(qs), **{k: mean([q[k] for q in qs]) for k in keys}} for t, qs in sorted(by_type.items())},
        "ingest_turns_per_second": turns / ingest_seconds if ingest_seconds else 0.0,
        "index_bytes_per_question": disk / max(len(items), 1),
        "search_ms": {"median": percentile(latencies, 50), "p95": percentile(latencies, 95)},
        "per_question": per_question,
    }
    if output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text(json.dumps(result, indent=2))
    return result


def _directory_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def format_report(result: dict) -> str:
    """A compact text table of a report."""
    keys = list(result["overall"])
    lines = [f"{'type':<28}{'n':>4} " + " ".join(f"{k:>13}" for k in keys)]
    rows = [("overall", {"n": result["questions"], **result["overall"]}), *result["by_type"].items()]
    lines += [f"{name:<28}{row['n']:>4} " + " ".join(f"{row[k]:>13.3f}" for k in keys) for name, row in rows]
    lines.append(
        f"ingest {result['ingest_turns_per_second']:.0f} turns/s; index {result['index_bytes_per_question'] / 1e6:.2f} MB/question; "
        f"search median {result['search_ms']['median']:.1f} ms, p95 {result['search_ms']['p95']:.1f} ms"
    )
    return "\n".join(lines)
