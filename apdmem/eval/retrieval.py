"""`apdmem bench retrieval`: first-pass retrieval quality and speed of the substrate, on LongMemEval or LoCoMo.

Each conversation is ingested into its own namespace of a fresh on-disk store (one per LongMemEval question,
one per LoCoMo sample); once all are ingested, each question is asked once (query embedding included in the
timing) and the ranked sessions are scored. With `dates`, relative dates in the question ("10 days ago") are
resolved against the question date by the controller's deterministic parser and passed to the search as a date
range (the controller does not: see `apdmem.nodes.search`).

Evidence: LongMemEval's `answer_session_ids` and `has_answer` turns (abstention questions are skipped);
LoCoMo's `evidence` dia_ids and the sessions holding them (questions without resolvable evidence are skipped).
Turn recall@k is the share of evidence turns inside the spans of the units returned with the top k sessions.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from tqdm.auto import tqdm

from apdmem.eval.metrics import mean, ndcg_any, percentile, recall_all, recall_any, turn_recall
from apdmem.memory import Memory, Session
from apdmem.memory.loaders import _parse, _in_file
from apdmem.memory.backends import open_store
from apdmem.memory.time_expressions import resolve_relative_dates

CUTOFFS = {"recall_any": (1, 3, 5, 10), "recall_all": (5, 10), "ndcg_any": (5, 10), "turn_recall": (5, 10)}
METRICS = {"recall_any": recall_any, "recall_all": recall_all, "ndcg_any": ndcg_any}
LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


@dataclass
class Case:
    """One question to retrieve for: the namespace holding its conversation and its evidence."""

    question_id: str
    type: str
    user: str
    question: str
    question_date: datetime
    gold_sessions: set[str]
    gold_turns: set[tuple[str, int]]  # (session id, 0-based turn)


def score(ranked: list[str], gold: set[str], spans: list[tuple[str, int, int]] | None = None,
          gold_turns: set[tuple[str, int]] | None = None) -> dict[str, float]:
    """Every metric at every cutoff for one question; turn recall needs the returned spans and gold turns."""
    out = {f"{name}@{k}": METRICS[name](ranked, gold, k) for name, ks in CUTOFFS.items() if name in METRICS for k in ks}
    if gold_turns:
        out.update({f"turn_recall@{k}": turn_recall(spans or [], gold_turns, k) for k in CUTOFFS["turn_recall"]})
    return out


def load_cases(dataset: str, limit: int | None = None) -> tuple[str, dict[str, list[Session]], list[Case]]:
    """The format's name, the sessions of each namespace, and the questions, from a LongMemEval or LoCoMo file."""
    with _in_file(dataset):
        kind, records = _parse(dataset)
    if kind == "LongMemEval":
        records = records[:limit]
        conversations = {item.question_id: item.sessions for item in records}
        cases = [
            Case(item.question_id, item.question_type, item.question_id, item.question, item.question_date,
                 set(item.answer_session_ids),
                 {(s.session_id, i) for s in item.sessions if s.session_id in item.answer_session_ids
                  for i, t in enumerate(s.turns) if t.has_answer})
            for item in records if not item.is_abstention
        ]
    elif kind == "LoCoMo":
        conversations, cases = {}, []
        for sample in records:
            conversations[sample.sample_id] = sample.sessions
            where = {t.turn_id: (s.session_id, i) for s in sample.sessions for i, t in enumerate(s.turns)}
            last = max(s.date for s in sample.sessions)  # LoCoMo questions have no date: asked after the last session
            for n, q in enumerate(sample.questions):
                turns = {where[d.strip()] for item in q.evidence for d in item.split(";") if d.strip() in where}
                if turns:
                    cases.append(Case(f"{sample.sample_id}#{n}", LOCOMO_CATEGORIES.get(q.category, "other"), sample.sample_id,
                                      q.question, last, {sid for sid, _ in turns}, turns))
        cases = cases[:limit]
        conversations = {user: conversations[user] for user in dict.fromkeys(c.user for c in cases)}
    else:
        raise ValueError(f"{dataset}: bench retrieval needs a LongMemEval or LoCoMo file, not {kind} sessions")
    return kind, conversations, cases


def ingest(conversations: dict[str, list[Session]], directory: str, *, progress: bool = True, **options) -> tuple[dict[str, Memory], dict]:
    """One memory per namespace under `directory`; returns them and the ingest figures."""
    store, memories, turns, seconds = open_store(directory), {}, 0, 0.0
    for user, sessions in tqdm(conversations.items(), desc="ingest", disable=not progress):
        memory = memories[user] = Memory(user, store=store, **options)
        report = memory.ingest(sessions)
        turns, seconds = turns + report.turns, seconds + report.seconds
    disk = sum(p.stat().st_size for p in Path(directory).rglob("*") if p.is_file())
    return memories, {"ingest_turns_per_second": turns / seconds if seconds else 0.0,
                      "index_bytes_per_conversation": disk / max(len(memories), 1)}


def search(memories: dict[str, Memory], cases: list[Case], *, dates: bool = False, progress: bool = True) -> tuple[list[dict], list[float]]:
    """Ask every question once: per-question records and search latencies (ms)."""
    records, latencies = [], []
    for case in tqdm(cases, desc="search", disable=not progress):
        hints = resolve_relative_dates(case.question, case.question_date.date()) if dates else []
        started = time.perf_counter()
        docs = memories[case.user].search(case.question, k=10, date_range=[(h.start, h.end) for h in hints] or None)
        latencies.append((time.perf_counter() - started) * 1000)
        ranked = [d.metadata["session_id"] for d in docs]
        spans = [(d.metadata["session_id"], *d.metadata["span"]) for d in docs]
        records.append({"question_id": case.question_id, "type": case.type, "ranked": ranked, "gold": sorted(case.gold_sessions),
                        "date_ranges": [[f"{h.start}", f"{h.end}"] for h in hints],
                        **score(ranked, case.gold_sessions, spans, case.gold_turns)})
    return records, latencies


def summarize(records: list[dict]) -> dict:
    """Mean of every metric, overall and per question type."""
    keys = [k for k in dict.fromkeys(k for r in records for k in r) if "@" in k]
    by_type = defaultdict(list)
    for r in records:
        by_type[r["type"]].append(r)

    def means(rows: list[dict]) -> dict:
        return {k: mean([r[k] for r in rows if k in r]) for k in keys}

    return {"overall": means(records), "by_type": {t: {"n": len(rs), **means(rs)} for t, rs in sorted(by_type.items())}}


def run(dataset: str, *, l0_mode: str = "raw", chat_model: str = "local", embeddings: str = "local", base_url: str | None = None,
        limit: int | None = None, output: str | None = None, progress: bool = True, dates: bool = False) -> dict:
    """Run the benchmark and return (and optionally write) the JSON report."""
    kind, conversations, cases = load_cases(dataset, limit)
    with tempfile.TemporaryDirectory(prefix="apdmem-bench-") as directory:
        memories, figures = ingest(conversations, directory, progress=progress, l0_mode=l0_mode, chat_model=chat_model, embeddings=embeddings,
                                     base_url=base_url)
        # Searches run after all ingestion, so that the disk writeback of the last ingest is not timed as search.
        records, latencies = search(memories, cases, dates=dates, progress=progress)
    result = {
        "dataset": dataset,
        "format": kind,
        "l0_mode": l0_mode,
        "dates": dates,
        "questions": len(records),
        **summarize(records),
        **figures,
        "search_ms": {"median": percentile(latencies, 50), "p95": percentile(latencies, 95)},
        "per_question": records,
    }
    if output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text(json.dumps(result, indent=2))
    return result


def format_report(result: dict) -> str:
    """A compact text table of a report: overall, then one row per question type (or LoCoMo category)."""
    keys = list(result["overall"])
    lines = [f"{'type':<28}{'n':>4} " + " ".join(f"{k:>13}" for k in keys)]
    rows = [("overall", {"n": result["questions"], **result["overall"]}), *result["by_type"].items()]
    lines += [f"{name:<28}{row['n']:>4} " + " ".join(f"{row[k]:>13.3f}" for k in keys) for name, row in rows]
    lines.append(
        f"ingest {result['ingest_turns_per_second']:.0f} turns/s; index {result['index_bytes_per_conversation'] / 1e6:.2f} MB/conversation; "
        f"search median {result['search_ms']['median']:.1f} ms, p95 {result['search_ms']['p95']:.1f} ms"
    )
    return "\n".join(lines)
