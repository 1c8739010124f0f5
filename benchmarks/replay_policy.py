"""Replay the deterministic disclosure policy on the queries of an earlier eval run, without any model call.

With `--ablation no-reflection`, which sessions the controller opens depends only on what its searches found:
the question and the sub-queries `decompose` wrote (recorded in the run's `results.jsonl` as `searched`),
each searched with the question's date ranges and rescored by the cross-encoder. This script ingests the
dataset (raw L0), searches and rescores those queries as the `search` node does, and asks `policy.wanted` what
it would open, for several values of `policy.HEAD`. It prints evidence recall among the opened sessions and the
share of sessions opened, overall and per question type: minutes instead of the half hour of a full
`--stop-after-disclosure` run.

For the queries the controller searches with no model at all (the question and its deterministic events), and each
lever of retrieval and disclosure on and off, see `benchmarks/ablation.py`. `--types` keeps some question types.

Date ranges come from the deterministic parser only (the model fallback of `normalize_dates` is not replayed).

    LANGSMITH_TRACING=false .venv/bin/python benchmarks/replay_policy.py \\
        ../shared/data/longmemeval/longmemeval_s_dev.json.gz --results reports/run/no-reflection-local-disclosure/results.jsonl
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
from apdmem.memory.time_expressions import resolve_relative_dates
from apdmem.nodes.decompose import usable
from apdmem.nodes.search import collect
from apdmem.tools import search_memory

TYPE_NAMES = {"knowledge-update": "update", "multi-session": "multi", "single-session-assistant": "assistant",
              "single-session-preference": "preference", "single-session-user": "user", "temporal-reasoning": "temporal"}


def candidates_of(memory, queries: list[str], ranges, top_k: int, seconds: list[float], cache: dict) -> dict[str, dict]:
    """What the `search` node finds for these queries; the time of each search with its rescoring goes to `seconds`.
    Hits are kept in `cache` (per query), so that variants sharing a query search it once."""
    found: dict[str, dict] = {}
    for query in queries:
        if query not in cache:
            started = time.perf_counter()
            cache[query] = search_memory(memory, query, k=top_k, date_range=ranges, reranker=get_reranker())
            seconds.append(time.perf_counter() - started)
        collect(found, query, cache[query])
    return found


def replayed(case, recorded: dict[str, list[str]]) -> list[str]:
    """The queries to replay for a question: the recorded run's, as `decompose` keeps them today (the run may
    predate a stricter filter)."""
    return [case.question] + [q for q in recorded[case.question_id][1:] if usable(q, case.question)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", help="LongMemEval files")
    parser.add_argument("--results", required=True, help="results.jsonl of an `apdmem eval longmemeval` run (for its sub-queries)")
    parser.add_argument("--head", type=float, nargs="+", default=[0.15, 0.2, 0.225, 0.25, 0.275, 0.3, 0.35],
                        help="values of policy.HEAD to try (default %(default)s)")
    parser.add_argument("--top-k", type=int, default=Context.top_k, help="sessions per search (default %(default)s)")
    parser.add_argument("--types", nargs="+", help="only these question types (LongMemEval's names or the table's: "
                        + ", ".join(TYPE_NAMES.values()) + ")")
    args = parser.parse_args()
    with open(args.results, encoding="utf-8") as f:
        recorded = {r["question_id"]: r["searched"] for r in map(json.loads, f)}
    states, seconds = [], []  # (case, sessions in the haystack, policy state)
    for dataset in args.datasets:
        _, conversations, cases = load_cases(dataset)
        cases = [c for c in cases if c.question_id in recorded]
        if args.types:
            cases = [c for c in cases if c.type in args.types or TYPE_NAMES.get(c.type) in args.types]
        with tempfile.TemporaryDirectory(prefix="apdmem-replay-") as directory:
            memories, _ = ingest({c.user: conversations[c.user] for c in cases}, directory, l0_mode="raw")
            for case in cases:
                hints = resolve_relative_dates(case.question, case.question_date.date())
                ranges = [(h.start, h.end) for h in hints] or None
                memory, cache = memories[case.user], {}
                queries = replayed(case, recorded)
                found = candidates_of(memory, queries, ranges, args.top_k, seconds, cache)
                states.append((case, len(memory.manifest["sessions"]), {"question": case.question, "searched": queries, "candidates": found}))
    print(f"{len(states)} questions; search and rescoring of {args.top_k} sessions per query: median "
          f"{statistics.median(seconds) * 1000:.0f} ms, max {max(seconds) * 1000:.0f} ms over {len(seconds)} queries\n")
    print(f"{'HEAD':>5} {'recall':>7} {'opened':>7} {'count':>6}   recall (opened, questions) per type")
    for value in args.head:
        policy.HEAD = value
        rows, by_type = [], defaultdict(list)
        for case, haystack, state in states:
            opened = set(policy.wanted(state))
            row = (len(opened & case.gold_sessions) / len(case.gold_sessions), len(opened) / haystack, len(opened))
            rows.append(row)
            by_type[case.type].append(row)
        types = "  ".join(f"{TYPE_NAMES.get(t, t)} {mean([r[0] for r in v]):.3f} ({mean([r[1] for r in v]):.1%}, n={len(v)})"
                          for t, v in sorted(by_type.items()))
        print(f"{value:>5.3f} {mean([r[0] for r in rows]):>7.3f} {mean([r[1] for r in rows]):>7.1%} {mean([r[2] for r in rows]):>6.2f}   {types}")


if __name__ == "__main__":
    main()
