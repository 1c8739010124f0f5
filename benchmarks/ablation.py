"""One ablation table of the retrieval and disclosure levers, on LongMemEval files ingested once (raw L0).

Each question is searched as the controller's `search` node searches it, with no model: the question and its
events (`decompose.events`, the deterministic split), each query on its own, `Context.top_k` sessions per query,
each query's hits rescored by the cross-encoder; then
the disclosure policy (`policy.wanted`) decides what to open. The first row keeps the defaults; every other row
flips one lever:

- ``rrf fusion``: Reciprocal Rank Fusion instead of score-aware fusion (`retriever.fuse`);
- ``dates preferred``: sessions in the question's date ranges preferred (`Memory.search`'s ``date_range``; the
  controller does not);
- ``no date cover``: no session dated near each of the question's dates is lifted into its ranking and opened
  (`policy.lift`, `policy.wanted`);
- ``no rescoring``: the first pass alone (`Memory.search`), without the cross-encoder;
- ``whole units``: the cross-encoder reads each unit whole (up to its window), not the unit's `retriever.passage`;
- ``rescore top 10`` (or ``rescore all``): the cross-encoder reads the first 10 hits of each search (`retriever.rerank`'s
  ``depth``), or all of them;
- ``no split``: the question alone, without its events;
- ``links lifted`` (or ``no links``, when the default lifts them): `Context.follow_links` flipped.

Columns: the question's own ranking, with the sessions lifted into it (links, dates; any@1: an evidence session
first; all@5, all@10: every evidence session in the top 5, 10); the policy's evidence recall, share of sessions opened
and sessions opened per question; recall on the multi-session and temporal-reasoning questions; the median time of a search (`Memory.search`, query embedding
included) and of the rescoring of its hits (in the first row to read these passages of these hits: the
cross-encoder's logits are cached for the other rows). Abstention questions are skipped (no evidence sessions).

    LANGSMITH_TRACING=false .venv/bin/python benchmarks/ablation.py \\
        ../shared/data/longmemeval/longmemeval_s_dev.json.gz ../shared/data/longmemeval/longmemeval_s_dev2.json.gz

`--store DIR` keeps the ingested memories there and reuses them on the next run (ingestion is most of the time).
`--reranker` rescores with another reranker (default: APDMEM_RERANKER_MODEL, else the embedded cross-encoder), e.g. a
rerank endpoint: ``--reranker http://127.0.0.1:8089/rerank`` (`python tests/rerank_server.py` serves the embedded
cross-encoder there, which must reproduce the defaults).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from functools import partial
from unittest import mock

from langchain_core.documents import Document
from tqdm.auto import tqdm

from apdmem.errors import ApdmemError
from apdmem.eval.metrics import mean, recall_all, recall_any
from apdmem.eval.retrieval import Case, load_cases
from apdmem.graph.context import Context
from apdmem.memory import Memory
from apdmem.memory.backends import open_store
from apdmem.memory.retriever import PASSAGE_WORDS, RERANK_DEPTH, rank_sessions, rerank
from apdmem.nodes import policy
from apdmem.memory.time_expressions import resolve_relative_dates
from apdmem.nodes.decompose import events
from apdmem.nodes.search import collect, linked
from apdmem.settings import Settings

DEFAULTS = {"fusion": "score", "dates": False, "date cover": True, "rescoring": True, "depth": RERANK_DEPTH, "passages": True,
            "split": True, "links": Context.follow_links, "head": policy.HEAD}
ROWS = {
    "defaults": {},
    "rrf fusion": {"fusion": "rrf"},
    "dates preferred": {"dates": True},
    "no date cover": {"date cover": False},
    "no rescoring": {"rescoring": False},
    "whole units": {"passages": False},
    ("rescore all" if RERANK_DEPTH else "rescore top 10"): {"depth": None if RERANK_DEPTH else 10},
    "no split": {"split": False},
    ("no links" if DEFAULTS["links"] else "links lifted"): {"links": not DEFAULTS["links"]},
}
WIDTH = 26  # of the row names
TYPES = {"multi": "multi-session", "temporal": "temporal-reasoning"}


@dataclass
class Timings:
    """Milliseconds per search and per rescoring of its hits."""

    search: list[float] = field(default_factory=list)
    rescoring: list[float] = field(default_factory=list)


class CachedReranker:
    """The cross-encoder, remembering each (query, passage) pair's logit: the rows share most of their pairs."""

    def __init__(self, reranker):
        self.reranker, self.logits = reranker, {}

    def score(self, pairs: list[tuple[str, str]]) -> list[float]:
        missing = [p for p in dict.fromkeys(pairs) if p not in self.logits]
        self.logits.update(zip(missing, self.reranker.score(missing) if missing else []))
        return [self.logits[p] for p in pairs]


def first_pass(memory: Memory, query: str, ranges, fusion: str, k: int) -> list[Document]:
    """`Memory.search` for one query, with the fusion chosen (Memory.search itself always fuses by score)."""
    with mock.patch("apdmem.memory.memory.rank_sessions", partial(rank_sessions, fusion=fusion)):
        return memory.search(query, k=k, date_range=ranges)


def replay(memory: Memory, case: Case, lever: dict, reranker: CachedReranker, timings: Timings, k: int) -> dict:
    """What the controller's searches and its disclosure policy do for one question under these levers."""
    hints = resolve_relative_dates(case.question, case.question_date.date())
    ranges = [(h.start, h.end) for h in hints]
    queries = [case.question, *(events(case.question) if lever["split"] else [])]
    candidates = {}
    for query in queries:
        started = time.perf_counter()
        docs = first_pass(memory, query, ranges if lever["dates"] else None, lever["fusion"], k)
        searched = time.perf_counter()
        timings.search.append((searched - started) * 1000)
        if lever["rescoring"]:
            docs = rerank(query, docs, reranker, passage_words=PASSAGE_WORDS if lever["passages"] else None, depth=lever["depth"])
            timings.rescoring.append((time.perf_counter() - searched) * 1000)
        collect(candidates, query, docs)
    links = linked(memory, list(candidates)) if lever["links"] and policy.follows_links(case.question) else {}
    date_ranges = [[f"{start}", f"{end}"] for start, end in ranges] if lever["date cover"] else []
    policy.lift(candidates, case.question, links, date_ranges)
    ranked = policy.ranking(candidates, case.question)
    state = {"question": case.question, "searched": queries, "candidates": candidates, "date_ranges": date_ranges,
             "memory_sessions": len(memory.manifest["sessions"])}
    policy.HEAD = lever["head"]
    opened = set(policy.wanted(state))
    gold = case.gold_sessions
    return {"type": case.type, "any@1": recall_any(ranked, gold, 1), "all@5": recall_all(ranked, gold, 5),
            "all@10": recall_all(ranked, gold, 10), "recall": len(opened & gold) / len(gold),
            "opened": len(opened) / len(memory.manifest["sessions"]), "sessions": len(opened)}


def row(name: str, records: list[dict], timings: Timings, fresh: bool) -> str:
    by_type = {short: [r for r in records if r["type"] == full] for short, full in TYPES.items()}
    cells = [f"{mean([r[k] for r in records]):>7.3f}" for k in ("any@1", "all@5", "all@10", "recall")]
    cells += [f"{mean([r['opened'] for r in records]):>7.1%}", f"{mean([r['sessions'] for r in records]):>8.2f}"]
    cells += [f"{mean([r['recall'] for r in rs]):>9.3f}" for rs in by_type.values()]
    cells.append(f"{statistics.median(timings.search):>10.1f}")
    cells.append(f"{statistics.median(timings.rescoring):>10.0f}" if fresh and timings.rescoring else f"{'-':>10}")
    return f"{name:<{WIDTH}}" + " ".join(cells)


def per_type(records: list[dict]) -> str:
    grouped = defaultdict(list)
    for r in records:
        grouped[r["type"]].append(r)
    return "  ".join(f"{t}: recall {mean([r['recall'] for r in rs]):.3f}, {mean([r['opened'] for r in rs]):.1%} opened, "
                     f"all@5 {mean([r['all@5'] for r in rs]):.3f} (n={len(rs)})" for t, rs in sorted(grouped.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", help="LongMemEval files")
    parser.add_argument("--store", help="keep the ingested memories in this folder and reuse them (default: a temporary one)")
    parser.add_argument("--embeddings", default="local", help="the embedding model of the ingest (default %(default)s)")
    parser.add_argument("--reranker", default=None, help="the reranker, as APDMEM_RERANKER_MODEL names it (default: that "
                        "variable, else 'local')")
    parser.add_argument("--top-k", type=int, default=Context.top_k, help="sessions per search (default %(default)s)")
    parser.add_argument("--head", type=float, action="append", default=[], help="another value of policy.HEAD (repeat "
                        "for more): a row for each, with the links option as by default and flipped")
    parser.add_argument("--rows", nargs="+", choices=list(ROWS), help="only these rows (default: all)")
    args = parser.parse_args()
    cases, conversations = [], {}
    for dataset in args.datasets:
        try:
            _, found, more = load_cases(dataset)
        except ApdmemError as exc:
            parser.error(str(exc))
        conversations.update(found)
        cases += more
    links_row = next(name for name, change in ROWS.items() if "links" in change)
    rows = {**ROWS, **{f"{name}, HEAD {h}": {**ROWS[name], "head": h} for h in args.head for name in ("defaults", links_row)}}
    rows = {name: change for name, change in rows.items() if not args.rows or name.split(",")[0] in args.rows}
    with tempfile.TemporaryDirectory(prefix="apdmem-ablation-") as scratch:
        store = open_store(args.store or scratch)
        memories = {}
        for user, sessions in tqdm(conversations.items(), desc="ingest"):
            memories[user] = Memory(user, store=store, l0_mode="raw", embeddings=args.embeddings)
            memories[user].ingest(sessions)  # sessions already stored are skipped
        cross_encoder, caches, timings, table, fresh = Settings(reranker_model=args.reranker).reranker(), {}, {name: Timings() for name in rows}, {}, set()
        for name, change in rows.items():
            lever = {**DEFAULTS, **change}
            reading = (lever["passages"], lever["depth"])
            if lever["rescoring"] and reading not in caches:  # the first row to read these passages of these hits
                fresh.add(name)
            reranker = caches.setdefault(reading, CachedReranker(cross_encoder))
            table[name] = [replay(memories[c.user], c, lever, reranker, timings[name], args.top_k)
                           for c in tqdm(cases, desc=name, leave=False)]
    print(f"{len(cases)} questions, {args.top_k} sessions per search, embeddings {args.embeddings}, reranker "
          f"{Settings(reranker_model=args.reranker).reranker_model}; defaults: "
          + ", ".join(f"{k} {v}" for k, v in DEFAULTS.items()) + "\n")
    print(f"{'':<{WIDTH}}" + " ".join(f"{h:>7}" for h in ("any@1", "all@5", "all@10", "recall", "opened")) + f"{'sessions':>9}"
          + "".join(f"{h:>10}" for h in TYPES) + f"{'search ms':>11}{'rescore ms':>11}")
    for name, records in table.items():
        print(row(name, records, timings[name], fresh=name in fresh))
    if "defaults" in table:
        print("\ndefaults by type: " + per_type(table["defaults"]))


if __name__ == "__main__":
    main()
