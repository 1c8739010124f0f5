"""What the user reads, measured without a model as judge: the whole graph's replies to LongMemEval questions and to
the evolving-memory suite (`apdmem/eval/data/evolving.json`), per question type.

The default models always answer (no generative model: extractive replies); when a chat model is configured
(``--chat-model`` or ``APDMEM_CHAT_MODEL``) it answers the same questions too, and both tables are printed.
Scoring (`apdmem.eval.answers`), per LongMemEval type (abstention questions, ids ending in ``_abs``, in a row of
their own) and per suite question kind:

- ``quotable``: answerable questions whose normalized gold answer occurs in a turn of an evidence session; the
  next four figures are over them. ``contained``: the normalized gold occurs in the reply. ``conf.right`` /
  ``conf.wrong``: the reply asserts (neither "not in memory" nor hedged: `stance`) and holds / does not hold
  the gold. ``hedged``: the reply hedges or says the memory does not hold it.
- ``not in mem``: abstention (never-said) questions whose reply says the memory does not hold the answer.
- ``recall``, ``opened``: evidence sessions among the opened ones; share of the history's sessions opened.
- suite only, on current-value questions: ``leads`` (the reply leads with the current value:
  `leads_with_current`) and ``stale cur.`` (it presents a replaced value as current: `stale_as_current`).

    LANGSMITH_TRACING=false HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/answers.py \\
        ../shared/data/longmemeval/longmemeval_s_dev.json.gz ../shared/data/longmemeval/longmemeval_s_dev2.json.gz \\
        --store DIR

`--store DIR` keeps the ingested memories (raw L0) in DIR/raw--local, as `apdmem eval longmemeval --store DIR`
does, so memories `benchmarks/ablation.py --store DIR/raw--local` ingested are reused. A configured chat model
answers on memories of its own (DIR/<model>/raw--local, ingested again): the L1/L2 a model writes are cached in the
store, and must not reach the default's replies. Without datasets (or with `--suite-only`) only the suite runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
from pathlib import Path

from tqdm.auto import tqdm

from apdmem.errors import ApdmemError
from apdmem.eval.answers import (COLUMNS, SUITE_COLUMNS, answer_longmemeval, by_group, load_suite, longmemeval_group, run_suite,
                                 suite_figures, table)
from apdmem.eval.longmemeval import TYPES, EvalSettings, select
from apdmem.memory import load_longmemeval

KEPT = ("question_id", "question_type", "kind", "question", "answer", "stale", "hypothesis", "reply", "stance", "quotable",
        "contained", "leads_with_current", "stale_as_current", "answer_session_ids", "opened", "latency_s")


def answer_with(model: str, args, items: list, store: Path) -> dict:
    """Every LongMemEval item and the suite, answered by the graph driven by `model`: figures and records."""
    cache = store if model == "local" else store / re.sub(r"[^A-Za-z0-9_.-]+", "-", model)
    settings = EvalSettings(chat_model=model, controller_model=model, generator_model=model, embeddings=args.embeddings,
                            base_url=args.base_url, l0_mode="raw", llm_judge=False, cache=cache)
    records = [answer_longmemeval(item, settings) for item in tqdm(items, desc=f"longmemeval ({model})")]
    suite = run_suite(load_suite(args.suite), store=str(settings.cache), settings=settings, progress=True)
    return {
        "longmemeval": {"by_type": by_group(records, longmemeval_group), "records": [_kept(r) for r in records]},
        "suite": {"by_kind": by_group(suite, lambda r: r["kind"], suite_figures), "records": [_kept(r) for r in suite]},
    }


def _kept(record: dict) -> dict:
    return {k: record[k] for k in KEPT if k in record}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="*", help="LongMemEval files")
    parser.add_argument("--store", help="keep the ingested memories in this folder and reuse them (default: a temporary one)")
    parser.add_argument("--limit", type=int, help="at most N LongMemEval questions (file order)")
    parser.add_argument("--types", nargs="+", choices=TYPES, help="only LongMemEval questions of these types")
    parser.add_argument("--suite-only", action="store_true", help="the evolving-memory suite alone")
    parser.add_argument("--suite", help="another suite file (default: the one shipped with apdmem)")
    parser.add_argument("--chat-model", default=os.environ.get("APDMEM_CHAT_MODEL"),
                        help="a LangChain chat model ('<provider>:<model>') answering beside the default models "
                             "(default: APDMEM_CHAT_MODEL, if set)")
    parser.add_argument("--base-url", default=None, help="the chat model's server (default: OPENAI_BASE_URL)")
    parser.add_argument("--embeddings", default="local", help="the embeddings of the ingest (default %(default)s)")
    parser.add_argument("--output", default="reports/answers.json", help="the JSON report (default %(default)s)")
    args = parser.parse_args()
    try:
        items = [] if args.suite_only else [i for d in args.datasets for i in load_longmemeval(d)]
        items = select(items, types=args.types, limit=args.limit)
        load_suite(args.suite)  # a bad suite file fails before any question is asked
    except ApdmemError as exc:
        parser.error(str(exc))
    models = ["local"] + ([args.chat_model] if args.chat_model and args.chat_model != "local" else [])
    with tempfile.TemporaryDirectory(prefix="apdmem-answers-") as scratch:
        store = Path(args.store or scratch)
        report = {"datasets": args.datasets, "questions": len(items), "models": {m: answer_with(m, args, items, store) for m in models}}
    for model, result in report["models"].items():
        if items:
            print(f"\nLongMemEval, {len(items)} questions, chat model {model}:")
            print(table(result["longmemeval"]["by_type"], COLUMNS))
        print(f"\nEvolving-memory suite, chat model {model}:")
        print(table(result["suite"]["by_kind"], SUITE_COLUMNS))
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(report, indent=1, ensure_ascii=False))
    print(f"\nreport: {args.output}")


if __name__ == "__main__":
    main()
