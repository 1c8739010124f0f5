"""Replay the deterministic disclosure policy on the queries of an earlier eval run, without any model call.

With `--ablation no-reflection`, which sessions the controller opens depends only on what its searches found:
the question and the sub-queries `decompose` wrote (recorded in the run's `results.jsonl` as `searched`),
each searched with the question's date ranges and rescored by the cross-encoder. This script ingests the
dataset (raw L0), searches and rescores those queries as the `search` node does, and asks `policy.wanted` what
it would open, for several values of `policy.HEAD`. It prints evidence recall among the opened sessions and the
share of sessions opened, overall and per question type: minutes instead of the half hour of a full
`--stop-after-disclosure` run.

Date ranges come from the deterministic parser only (the model fallback of `normalize_dates` is not replayed).

    LANGSMITH_TRACING=false .venv/bin/python benchmarks/replay_policy.py \\
        ../shared/data/longmemeval/longmemeval_s_dev.json.gz reports/run/no-reflection-local-disclosure/results.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import defaultdict

from apdmem.eval.metrics import mean
from apdmem.eval.retrieval import ingest, load_cases
from apdmem.graph.context import Context
from apdmem.models import get_reranker
from apdmem.nodes import policy
from apdmem.nodes.dates import resolve_relative_dates
from apdmem.nodes.decompose import usable
from apdmem.nodes.search import collect
from apdmem.tools import search_memory

TYPE_NAMES = {"knowledge-update": "update", "multi-session": "multi", "single-session-assistant": "assistant",
              "single-session-preference": "preference", "single-session-user": "user", "temporal-reasoning": "temporal"}


def candidates_of(memory, queries: list[str], ranges, top_k: int, seconds: list[float]) -> dict[str, dict]:
    """What the `search` node finds for these queries; the time of each search with its rescoring goes to `seconds`."""
    found: dict[str, dict] = {}
    for query in queries:
        started = time.perf_counter()
        docs = search_memory(memory, query, k=top_k, date_range=ranges, reranker=get_reranker())
        seconds.append(time.perf_counter() - started)
        collect(found, query, docs)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("results", help="results.jsonl of an `apdmem eval longmemeval` run (for its sub-queries)")
    parser.add_argument("--head", type=float, nargs="+", default=[0.15, 0.2, 0.225, 0.25, 0.275, 0.3, 0.35], help="values of policy.HEAD to try")
    parser.add_argument("--top-k", type=int, default=Context.top_k, help="sessions per search (default %(default)s)")
    args = parser.parse_args()
    with open(args.results, encoding="utf-8") as f:
        searched = {r["question_id"]: r["searched"] for r in map(json.loads, f)}
    _, conversations, cases = load_cases(args.dataset)
    cases = [c for c in cases if c.question_id in searched]
    with tempfile.TemporaryDirectory(prefix="apdmem-replay-") as directory:
        memories, _ = ingest({c.user: conversations[c.user] for c in cases}, directory, l0_mode="raw")
        states, seconds = [], []
        for case in cases:
            hints = resolve_relative_dates(case.question, case.question_date.date())
            memory = memories[case.user]
            # Sub-queries as `decompose` keeps them today (the run may predate a stricter filter).
            queries = [case.question] + [q for q in searched[case.question_id][1:] if usable(q, case.question)]
            states.append((case, len(memory.manifest["sessions"]), {
                "question": case.question, "searched": queries,
                "candidates": candidates_of(memory, queries, [(h.start, h.end) for h in hints] or None, args.top_k, seconds)}))
    print(f"{len(cases)} questions; search and rescoring of {args.top_k} sessions per query: median "
          f"{statistics.median(seconds) * 1000:.0f} ms, max {max(seconds) * 1000:.0f} ms over {len(seconds)} queries\n")
    print(f"{'HEAD':>5} {'recall':>7} {'opened':>7} {'count':>6}   recall per type")
    for value in args.head:
        policy.HEAD = value
        rows, by_type = [], defaultdict(list)
        for case, haystack, state in states:
            opened = set(policy.wanted(state))
            row = (len(opened & case.gold_sessions) / len(case.gold_sessions), len(opened) / haystack, len(opened))
            rows.append(row)
            by_type[case.type].append(row[0])
        types = "  ".join(f"{TYPE_NAMES.get(t, t)} {mean(v):.3f}" for t, v in sorted(by_type.items()))
        print(f"{value:>5.3f} {mean([r[0] for r in rows]):>7.3f} {mean([r[1] for r in rows]):>7.1%} {mean([r[2] for r in rows]):>6.2f}   {types}")


if __name__ == "__main__":
    main()
