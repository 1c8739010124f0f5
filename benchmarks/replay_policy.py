"""Replay the deterministic disclosure policy on recorded or deterministic queries, without any model call.

With `--ablation no-reflection`, which sessions the controller opens depends only on what its searches found:
the question and the sub-queries `decompose` wrote (recorded in the run's `results.jsonl` as `searched`),
each searched with the question's date ranges and rescored by the cross-encoder. This script ingests the
dataset (raw L0), searches and rescores those queries as the `search` node does, and asks `policy.wanted` what
it would open, for several values of `policy.HEAD`. It prints evidence recall among the opened sessions and the
share of sessions opened, overall and per question type: minutes instead of the half hour of a full
`--stop-after-disclosure` run.

With `--deterministic` no eval run is needed: the queries are the question plus `decompose.events` (what
`decompose` searches with no generative model), and the table has one row per value of `policy.HEAD` with the
event split on and one with it off (the question alone): an ablation from one run. `--links` adds a row with the
split and cross-session links followed (`Context.follow_links`: the links of what was found go into the state for the
questions that `policy.follows_links`). `--types` keeps some question types (e.g. `--types multi-session temporal`).

Date ranges come from the deterministic parser only (the model fallback of `normalize_dates` is not replayed).

    LANGSMITH_TRACING=false .venv/bin/python benchmarks/replay_policy.py \\
        ../shared/data/longmemeval/longmemeval_s_dev.json.gz --results reports/run/no-reflection-local-disclosure/results.jsonl
    LANGSMITH_TRACING=false .venv/bin/python benchmarks/replay_policy.py --deterministic \\
        ../shared/data/longmemeval/longmemeval_s_dev.json.gz ../shared/data/longmemeval/longmemeval_s_dev2.json.gz
    LANGSMITH_TRACING=false .venv/bin/python benchmarks/replay_policy.py ../shared/data/longmemeval/longmemeval_s_dev.json.gz \\
        --deterministic --links --types multi-session temporal-reasoning
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
from apdmem.nodes.decompose import events, usable
from apdmem.nodes.search import collect, linked
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


def variants(case, recorded: dict[str, list[str]] | None, links: bool = False) -> dict[str, list[str]]:
    """The query lists to replay for a question, by name: the recorded run's sub-queries (as `decompose` keeps them
    today: the run may predate a stricter filter), or with `--deterministic` the question with and without its
    events (and with `links`, the split again, its links followed: the name ends in "+links")."""
    if recorded is not None:
        return {"run": [case.question] + [q for q in recorded[case.question_id][1:] if usable(q, case.question)]}
    split = [case.question, *events(case.question)]
    return {"split": split, "no-split": [case.question], **({"split+links": split} if links else {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", help="LongMemEval files")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--results", help="results.jsonl of an `apdmem eval longmemeval` run (for its sub-queries)")
    source.add_argument("--deterministic", action="store_true", help="the question plus its events, split on and off")
    parser.add_argument("--head", type=float, nargs="+", help="values of policy.HEAD to try (default: "
                        "0.15 to 0.35 with --results, the policy's own with --deterministic)")
    parser.add_argument("--split-only", action="store_true", help="with --deterministic, only the questions that name "
                        "events (the others search the same queries either way): a cheaper ablation")
    parser.add_argument("--top-k", type=int, default=Context.top_k, help="sessions per search (default %(default)s)")
    parser.add_argument("--links", action="store_true", help="with --deterministic, a row with the split and the "
                        "cross-session links followed (Context.follow_links)")
    parser.add_argument("--types", nargs="+", help="only these question types (LongMemEval's names or the table's: "
                        + ", ".join(TYPE_NAMES.values()) + ")")
    args = parser.parse_args()
    heads = args.head or ([policy.HEAD] if args.deterministic else [0.15, 0.2, 0.225, 0.25, 0.275, 0.3, 0.35])
    recorded = None
    if args.results:
        with open(args.results, encoding="utf-8") as f:
            recorded = {r["question_id"]: r["searched"] for r in map(json.loads, f)}
    states, seconds = [], []  # (variant, case, sessions in the haystack, policy state)
    for dataset in args.datasets:
        _, conversations, cases = load_cases(dataset)
        cases = [c for c in cases if recorded is None or c.question_id in recorded]
        if args.split_only:
            cases = [c for c in cases if events(c.question)]
        if args.types:
            cases = [c for c in cases if c.type in args.types or TYPE_NAMES.get(c.type) in args.types]
        with tempfile.TemporaryDirectory(prefix="apdmem-replay-") as directory:
            memories, _ = ingest({c.user: conversations[c.user] for c in cases}, directory, l0_mode="raw")
            for case in cases:
                hints = resolve_relative_dates(case.question, case.question_date.date())
                ranges = [(h.start, h.end) for h in hints] or None
                memory, cache = memories[case.user], {}
                for name, queries in variants(case, recorded, args.links).items():
                    found = candidates_of(memory, queries, ranges, args.top_k, seconds, cache)
                    follow = name.endswith("+links") and policy.follows_links(case.question)
                    states.append((name, case, len(memory.manifest["sessions"]), {
                        "question": case.question, "searched": queries, "candidates": found,
                        **({"links": linked(memory, list(found))} if follow else {})}))
    questions = len({case.question_id for _, case, _, _ in states})
    print(f"{questions} questions; search and rescoring of {args.top_k} sessions per query: median "
          f"{statistics.median(seconds) * 1000:.0f} ms, max {max(seconds) * 1000:.0f} ms over {len(seconds)} queries\n")
    print(f"{'queries':<11} {'HEAD':>5} {'recall':>7} {'opened':>7} {'count':>6}   recall (opened, questions) per type")
    for name in dict.fromkeys(name for name, *_ in states):
        for value in heads:
            policy.HEAD = value
            rows, by_type = [], defaultdict(list)
            for _, case, haystack, state in (s for s in states if s[0] == name):
                opened = set(policy.wanted(state))
                row = (len(opened & case.gold_sessions) / len(case.gold_sessions), len(opened) / haystack, len(opened))
                rows.append(row)
                by_type[case.type].append(row)
            types = "  ".join(f"{TYPE_NAMES.get(t, t)} {mean([r[0] for r in v]):.3f} ({mean([r[1] for r in v]):.1%}, n={len(v)})"
                              for t, v in sorted(by_type.items()))
            print(f"{name:<11} {value:>5.3f} {mean([r[0] for r in rows]):>7.3f} {mean([r[1] for r in rows]):>7.1%} "
                  f"{mean([r[2] for r in rows]):>6.2f}   {types}")


if __name__ == "__main__":
    main()
