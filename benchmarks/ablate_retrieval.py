"""Ablation of the first-pass retrieval: score-aware fusion (vs Reciprocal Rank Fusion) and the date preference,
each on and off, on a LongMemEval or LoCoMo file (the conversations are ingested once, in raw L0 mode).

The rankings come from `rank_sessions` over each memory's index, as `Memory.search` computes them; the row
with every change on is also run through `Memory.search` itself and must agree.

    LANGSMITH_TRACING=false .venv/bin/python benchmarks/ablate_retrieval.py ../shared/data/longmemeval/longmemeval_s_dev.json.gz
"""

from __future__ import annotations

import argparse
import itertools
import tempfile

from apdmem.eval.retrieval import load_cases, ingest, score, search, summarize
from apdmem.memory.retriever import rank_sessions
from apdmem.models import embed_array
from apdmem.nodes.dates import resolve_relative_dates

SHOWN = ("recall_any@1", "recall_all@5", "recall_all@10", "ndcg_any@10", "turn_recall@10")


def records(memories, cases, *, fusion: str, dates: bool) -> list[dict]:
    out = []
    for case in cases:
        memory = memories[case.user]
        hints = resolve_relative_dates(case.question, case.question_date.date()) if dates else []
        session_dates = {sid: meta["date"] for sid, meta in memory.manifest["sessions"].items()}
        hits = rank_sessions(memory.index, [case.question], embed_array(memory.embeddings, [case.question]), 10,
                             date_range=[(h.start, h.end) for h in hints] or None, session_dates=session_dates, fusion=fusion)
        units = [memory.index.units[h.row] for h in hits]
        ranked = [h.session_id for h in hits]
        out.append({"type": case.type, **score(ranked, case.gold_sessions, [(u.session_id, u.start, u.end) for u in units], case.gold_turns)})
    return out


def row(name: str, summary: dict) -> str:
    worst = min(summary["by_type"].items(), key=lambda kv: kv[1]["recall_all@10"])
    cells = " ".join(f"{summary['overall'][k]:>14.3f}" for k in SHOWN)
    return f"{name:<24}{cells}   {worst[1]['recall_all@10']:.3f} ({worst[0]})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args()
    kind, conversations, cases = load_cases(args.dataset, args.limit)
    with tempfile.TemporaryDirectory(prefix="apdmem-ablate-") as directory:
        memories, _ = ingest(conversations, directory, l0_mode="raw")
        print(f"{kind}: {len(cases)} questions\n")
        print(f"{'fusion, dates':<24}" + " ".join(f"{k:>14}" for k in SHOWN) + "   worst type at recall_all@10")
        for fusion, dates in itertools.product(("rrf", "score"), (False, True)):
            print(row(f"{fusion}, {'on' if dates else 'off'}", summarize(records(memories, cases, fusion=fusion, dates=dates))), flush=True)
        searched, _ = search(memories, cases, progress=False)
        print(row("Memory.search (default)", summarize(searched)))


if __name__ == "__main__":
    main()
