"""`apdmem eval locomo`: question answering on LoCoMo, scored the way LoCoMo results are usually reported.

Each sample's conversation goes into its own namespace (named after the sample) of one on-disk memory, kept
between runs; every question is answered by the controller graph and scored by token F1 on stemmed words,
with the benchmark's per-category rules (see `score_answer`). Results are appended to `results.jsonl` one
question at a time, so an interrupted run continues where it stopped.
"""

from __future__ import annotations

import json
import os
import re
import time
import unicodedata
from collections import Counter
from pathlib import Path

from nltk.stem.porter import PorterStemmer
from tqdm.auto import tqdm

from apdmem.errors import ConfigError
from apdmem.eval.metrics import mean, percentile
from apdmem.graph.context import Context
from apdmem.memory import Memory, load_locomo
from apdmem.settings import Settings

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_STEMMER = PorterStemmer()
# Ways a reply says that the conversations do not hold the answer: the right reply to an adversarial
# question, which asks about something said by the other speaker or never said at all.
_ABSTENTION = re.compile(
    r"(\bnot|\bnever|n't) (been )?(mentioned|discussed|stated|specified|provided|known|available)\b"
    r"|\bno (information|record|mention|details?|evidence)\b"
    r"|\b(don't|do not|doesn't|does not|didn't|did not) (have|say|mention|know)\b"
    r"|\b(cannot|can't|could not|couldn't|unable to) (find|determine|tell|say)\b"
    r"|\bnot in\b|\bunknown\b"
)


# --- scoring ----------------------------------------------------------------------------------------------

def normalize_answer(text: object) -> str:
    """Lower-cased, punctuation removed, articles dropped, whitespace collapsed.

    >>> normalize_answer("The  Red, car!")
    'red car'
    """
    text = "".join(ch for ch in str(text).lower() if not unicodedata.category(ch).startswith("P"))
    return " ".join(_ARTICLES.sub(" ", text).split())


def tokens(text: object) -> list[str]:
    """The normalized words, Porter-stemmed.

    >>> tokens("The runners were running")
    ['runner', 'were', 'run']
    """
    return [_STEMMER.stem(word) for word in normalize_answer(text).split()]


def f1(prediction: object, gold: object) -> float:
    """Token F1 of the stemmed words (a multiset overlap); 0.0 when either side has no words.

    >>> f1("the red car", "a red bicycle")
    0.5
    """
    predicted, expected = tokens(prediction), tokens(gold)
    common = sum((Counter(predicted) & Counter(expected)).values())
    if not predicted or not expected or not common:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


def multi_answer_f1(prediction: object, gold: object) -> float:
    """For answers that list several items: each comma-separated gold item is scored by its best F1
    against any comma-separated part of the prediction, and the item scores are averaged.

    >>> multi_answer_f1("painting, hiking", "hiking, swimming")
    0.5
    """
    parts = str(prediction).split(",")
    items = [g for g in str(gold).split(",") if g.strip()]
    return mean([max(f1(part, item) for part in parts) for item in items])


def abstains(prediction: object) -> bool:
    """Whether the reply says the information is not in the conversations.

    >>> abstains("I don't have that information."), abstains("Berlin")
    (True, False)
    """
    return bool(_ABSTENTION.search(str(prediction).lower().replace("\u2019", "'")))


def score_answer(prediction: object, gold: object, category: int) -> float:
    """The score of a reply in [0, 1], by the question's LoCoMo category.

    1 (multi-hop): `multi_answer_f1`; 3 (open-domain): F1 against the gold before its first ';' (the rest
    is a rationale); 5 (adversarial): 1.0 when the reply `abstains`, whatever the gold; 2 and 4: F1.

    >>> score_answer("Berlin", "Berlin; she said so", 3), score_answer("Berlin", "Berlin", 5)
    (1.0, 0.0)
    """
    if category == 5:
        return float(abstains(prediction))
    if category == 1:
        return multi_answer_f1(prediction, gold)
    if category == 3:
        return f1(prediction, str(gold).split(";")[0])
    return f1(prediction, gold)


def evidence_recall(disclosed_dia_ids: set[str], evidence: list[str]) -> float | None:
    """The fraction of the gold evidence turns (dia_ids) that the controller disclosed; None without evidence.

    An entry holding several ids separated by ';' (the dataset has a few) counts as those ids.

    >>> evidence_recall({"D1:3", "D2:1"}, ["D1:3", "D1:5"]), evidence_recall(set(), [])
    (0.5, None)
    """
    gold = {part.strip() for item in evidence for part in item.split(";") if part.strip()}
    return len(gold & set(disclosed_dia_ids)) / len(gold) if gold else None


def disclosed_dia_ids(evidence: list[dict], memory: Memory) -> set[str]:
    """The dataset ids of the turns behind the turn-level (L2 and L3) evidence the controller read."""
    sessions: dict = {}
    ids = set()
    for item in evidence:
        if item.get("turn") is None or item.get("layer") not in ("L2", "L3"):
            continue
        sid = item["session_id"]
        if sid not in sessions:
            sessions[sid] = memory.session(sid).turns
        if 0 <= item["turn"] < len(sessions[sid]) and sessions[sid][item["turn"]].turn_id:
            ids.add(sessions[sid][item["turn"]].turn_id)
    return ids


# --- the run ------------------------------------------------------------------------------------------------

def run(
    path: str | os.PathLike,
    *,
    limit: int | None = None,
    chat_model: str = "local",
    controller_model: str | None = None,
    generator_model: str | None = None,
    embeddings: str = "local",
    base_url: str | None = None,
    l0_mode: str = "auto",
    tmax: int = 20,
    output_dir: str | os.PathLike = "reports/locomo",
    memory_dir: str | os.PathLike | None = None,
    progress: bool = True,
    context_overrides: dict | None = None,
) -> dict:
    """Answer and score the first `limit` questions of a LoCoMo file (all when None); returns the report.

    Writes `results.jsonl` (one record per question), `report.json` and `report.md` in `output_dir`.
    Questions already in `results.jsonl` are not asked again, and the memory (default `output_dir/memory`)
    is reused, so running the same command again only does what is left. `context_overrides` are further
    `Context` fields (e.g. ablations: ``{"reflection": False}``).

    >>> report = run("locomo10.json", limit=20, chat_model="openai:gpt-4.1-mini")   # doctest: +SKIP
    >>> report["score"], report["by_category"]["4"]["score"]                        # doctest: +SKIP
    """
    samples = load_locomo(path)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / "results.jsonl"
    selected = [(sample, i) for sample in samples for i in range(len(sample.questions))][:limit]
    done = _read_results(results_path)
    for sample, i in selected:
        record = done.get((sample.sample_id, i))
        if record is not None and record["question"] != sample.questions[i].question:
            raise ConfigError(f"{results_path} holds results of another file (sample {sample.sample_id!r}, question "
                              f"{i} differs); use another output directory")

    deployment = Settings(chat_model=chat_model, controller_model=controller_model, generator_model=generator_model,
                          embeddings=embeddings, base_url=base_url)
    bar = tqdm(total=len(selected), desc="locomo", unit="question", disable=not progress)
    bar.update(sum(_key(s, i) in done for s, i in selected))
    with results_path.open("a", encoding="utf-8") as results:
        for sample in samples:
            todo = [i for s, i in selected if s is sample and _key(s, i) not in done]
            if not todo:
                continue
            memory = Memory(sample.sample_id, store=str(memory_dir or out / "memory"), chat_model=chat_model,
                            embeddings=embeddings, base_url=base_url, l0_mode=l0_mode)
            memory.ingest(sample.sessions, progress=progress)  # a no-op for sessions stored by an earlier run
            question_date = max(s.date for s in sample.sessions).isoformat()
            from apdmem.graph.builder import build_graph  # here: the command line lists this module's options without LangGraph

            graph = build_graph(settings=deployment, memory=memory)
            for i in todo:
                context = Context(**{"user_id": sample.sample_id, "tmax": tmax, **(context_overrides or {})})
                record = _answer(graph, memory, context, sample, i, question_date)
                results.write(json.dumps(record, ensure_ascii=False) + "\n")
                results.flush()
                done[_key(sample, i)] = record
                bar.update()
    bar.close()
    records = [done[_key(s, i)] for s, i in selected if _key(s, i) in done]
    settings = dict(chat_model=chat_model, embeddings=embeddings, l0_mode=l0_mode, tmax=tmax, **(context_overrides or {}))
    report = make_report(records, dataset=str(path), settings=settings)
    (out / "report.json").write_text(json.dumps(report, indent=2))
    (out / "report.md").write_text(format_report(report))
    return report


def _key(sample, index: int) -> tuple[str, int]:
    """A question's identity in results.jsonl: its sample and its position in the sample's QA list."""
    return sample.sample_id, index


def _answer(graph, memory: Memory, context: Context, sample, index: int, question_date: str) -> dict:
    """Ask one question through the graph and score the reply."""
    q = sample.questions[index]
    started = time.perf_counter()
    final = graph.invoke({"question": q.question, "question_date": question_date}, context=context)
    latency = time.perf_counter() - started
    prediction = final.get("answer", "")
    disclosed = disclosed_dia_ids(final.get("evidence", []), memory)
    return {
        "sample_id": sample.sample_id,
        "index": index,
        "question": q.question,
        "gold": q.answer,
        "category": q.category,
        "evidence": q.evidence,
        "prediction": prediction,
        "score": score_answer(prediction, q.answer, q.category),
        "evidence_recall": evidence_recall(disclosed, q.evidence),
        "disclosed": sorted(disclosed),
        "opened": final.get("opened", {}),
        "step": final.get("step", 0),
        "stop_reason": final.get("stop_reason", ""),
        "latency_s": round(latency, 3),
    }


def _read_results(path: Path) -> dict[tuple[str, int], dict]:
    """The records of an earlier run by (sample_id, index). A line cut short by a killed run is dropped,
    and the file rewritten without it, so the next record starts on a line of its own."""
    if not path.exists():
        return {}
    text = path.read_text(encoding="utf-8")
    records, broken = {}, bool(text) and not text.endswith("\n")
    for line in text.split("\n"):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            records[(record["sample_id"], record["index"])] = record
        except (json.JSONDecodeError, KeyError, TypeError):
            broken = True
    if broken:
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records.values()), encoding="utf-8")
    return records


# --- the report ---------------------------------------------------------------------------------------------

def make_report(records: list[dict], *, dataset: str = "", settings: dict | None = None) -> dict:
    """Mean score per category and overall, and evidence recall over the questions that have gold evidence."""

    def summary(rows: list[dict]) -> dict:
        recalls = [r["evidence_recall"] for r in rows if r["evidence_recall"] is not None]
        return {"n": len(rows), "score": mean([r["score"] for r in rows]),
                "evidence_recall": mean(recalls) if recalls else None}

    latencies = [r["latency_s"] for r in records]
    overall = summary(records)
    return {
        "dataset": dataset,
        "settings": settings or {},
        "questions": overall["n"],
        "score": overall["score"],
        "evidence_recall": overall["evidence_recall"],
        "by_category": {
            str(c): {"name": CATEGORIES.get(c, "other"), **summary([r for r in records if r["category"] == c])}
            for c in sorted({r["category"] for r in records})
        },
        "latency_s": {"median": percentile(latencies, 50), "p95": percentile(latencies, 95)},
    }


def format_report(report: dict) -> str:
    """The report as Markdown: a line of settings, then one table row per category and one overall."""

    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    settings = ", ".join(f"{k} {v}" for k, v in report["settings"].items())
    lines = [
        f"# LoCoMo: {report['dataset']}", "", f"Settings: {settings}.", "",
        "| category | n | score | evidence recall |", "| --- | ---: | ---: | ---: |",
    ]
    for c, row in report["by_category"].items():
        lines.append(f"| {c} {row['name']} | {row['n']} | {cell(row['score'])} | {cell(row['evidence_recall'])} |")
    lines.append(f"| overall | {report['questions']} | {cell(report['score'])} | {cell(report['evidence_recall'])} |")
    lines += ["", f"Latency per question: median {report['latency_s']['median']:.1f} s, "
                  f"p95 {report['latency_s']['p95']:.1f} s."]
    return "\n".join(lines) + "\n"


# --- command line -------------------------------------------------------------------------------------------

def add_locomo_parser(eval_subparsers, parents: list) -> None:
    """Add `locomo` to the `apdmem eval` group. `parents` give the model, memory, graph (--tmax, --top-k,
    --controller-model, --generator-model) and --l0-mode options."""
    p = eval_subparsers.add_parser("locomo", parents=parents, help="question answering on a LoCoMo file, F1 by category")
    p.add_argument("file", help="a LoCoMo file (e.g. locomo10.json)")
    p.add_argument("--limit", type=int, default=None, help="answer only the first N questions")
    p.add_argument("--output-dir", default="reports/locomo", help="results, reports and (by default) the memory")
    p.set_defaults(func=cmd_locomo)


def cmd_locomo(args) -> None:
    overrides = {"top_k": args.top_k} if getattr(args, "top_k", None) is not None else {}
    report = run(args.file, limit=args.limit, chat_model=args.chat_model, controller_model=args.controller_model,
                 generator_model=args.generator_model, embeddings=args.embeddings,
                 base_url=args.base_url, l0_mode=args.l0_mode,
                 tmax=args.tmax, output_dir=args.output_dir, memory_dir=args.store, context_overrides=overrides)
    print(format_report(report))
    print(f"results: {Path(args.output_dir) / 'results.jsonl'}; report: {Path(args.output_dir) / 'report.md'}")
