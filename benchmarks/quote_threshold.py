"""Calibrate the extractive reply: its relevance threshold (`apdmem.nodes.answer.RELEVANT`) and how many sentences it
quotes (`QUOTES`), on LongMemEval files and the evolving-memory suite, with the default models.

Each question is disclosed once through the graph (`apdmem.eval.longmemeval.ask` with ``disclosure_only``: it stops
when disclosure ends) and every disclosed sentence that can be quoted is scored against it once
(`answer.scored_quotes`); the reply is then rebuilt at each threshold and quote count (`answer.quoted_reply`) and
scored as `benchmarks/answers.py` scores it (`apdmem.eval.answers`). A reply is *right* when, for an answerable
question whose gold is quotable, it asserts and holds the gold; for a current-value question of the suite, it leads
with the current value; for an abstention or never-said question, it says the memory does not hold it. The table
gives, per threshold and quote count, the share of right replies averaged over the question groups (LongMemEval
types and suite kinds, each group once) and over the questions.

    LANGSMITH_TRACING=false HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/quote_threshold.py \\
        ../shared/data/longmemeval/longmemeval_s_dev.json.gz ../shared/data/longmemeval/longmemeval_s_dev2.json.gz \\
        --store DIR

`--store DIR` reuses the memories `benchmarks/answers.py --store DIR` ingested (DIR/raw--local).
"""

from __future__ import annotations

import argparse
import tempfile
from collections import defaultdict
from unittest import mock

from tqdm.auto import tqdm

from apdmem.errors import ApdmemError
from apdmem.eval.answers import ASSERTS, NOT_FOUND, extractable, leads_with_current, load_suite, mentions, stance
from apdmem.eval.longmemeval import EvalSettings, ask
from apdmem.eval.metrics import mean
from apdmem.memory import Memory, load_longmemeval
from apdmem.nodes import answer


def right(case: dict, reply: str) -> bool:
    """Whether a reply to a case (``group``, ``kind``, ``answers``, ``stale``) is right (see the module)."""
    if case["kind"] == "never":
        return stance(reply) == NOT_FOUND
    if case["kind"] == "current":
        return leads_with_current(reply, case["answers"], case["stale"])
    return stance(reply) == ASSERTS and mentions(reply, case["answers"])


def disclosed(memory: Memory, question: str, date, settings: EvalSettings, reranker) -> list[answer.Quote]:
    final, _ = ask(memory, question, date, settings)
    return answer.scored_quotes(question, final.get("evidence", []), memory, reranker)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="*", help="LongMemEval files")
    parser.add_argument("--store", help="reuse the memories ingested in this folder (default: a temporary one)")
    parser.add_argument("--thresholds", type=float, nargs="+", default=[-11, -10, -9, -8, -6, -4, -2, 0, 2, 4])
    parser.add_argument("--quotes", type=int, nargs="+", default=[3, 5])
    args = parser.parse_args()
    try:
        items = [item for dataset in args.datasets for item in load_longmemeval(dataset)]
    except ApdmemError as exc:
        parser.error(str(exc))
    with tempfile.TemporaryDirectory(prefix="apdmem-quotes-") as scratch:
        settings = EvalSettings(chat_model="local", embeddings="local", l0_mode="raw", llm_judge=False, disclosure_only=True,
                                cache=args.store or scratch)
        reranker, cases = settings.deployment.reranker(), []
        for item in tqdm(items, desc="longmemeval"):
            if not item.is_abstention and not extractable(item):
                continue  # no reply can quote its gold
            memory = Memory(item.question_id, store=str(settings.cache), l0_mode="raw")
            memory.ingest(item.sessions)  # stored sessions are skipped
            cases.append({"group": "abstention" if item.is_abstention else item.question_type, "stale": [],
                          "kind": "never" if item.is_abstention else "answer", "answers": [item.answer], "question": item.question,
                          "quotes": disclosed(memory, item.question, item.question_date, settings, reranker)})
        for scenario in tqdm(load_suite(), desc="evolving suite"):
            memory = Memory(f"evolving-{scenario.id}", store=str(settings.cache), l0_mode="raw")
            memory.ingest(scenario.sessions)
            for q in scenario.questions:
                cases.append({"group": f"suite {q.kind}", "kind": q.kind, "answers": q.answers, "stale": q.stale,
                              "question": q.question, "quotes": disclosed(memory, q.question, q.date, settings, reranker)})
    print(f"{len(cases)} questions; share of right replies, averaged over question groups / over questions:\n")
    print("quotes  " + "".join(f"{t:>13.1f}" for t in args.thresholds))
    for quotes in args.quotes:
        cells = []
        for threshold in args.thresholds:
            with mock.patch.object(answer, "RELEVANT", threshold), mock.patch.object(answer, "QUOTES", quotes):
                groups = defaultdict(list)
                for case in cases:
                    groups[case["group"]].append(right(case, answer.quoted_reply(case["quotes"], case["question"])))
            cells.append(f"{mean([mean(g) for g in groups.values()]):.3f}/{mean([x for g in groups.values() for x in g]):.3f}")
        print(f"{quotes:<8}" + "".join(f"{c:>13}" for c in cells))


if __name__ == "__main__":
    main()
