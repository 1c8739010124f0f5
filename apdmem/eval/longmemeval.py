"""`apdmem eval longmemeval`: ask the controller graph every question of a LongMemEval file and judge it.

Each question's haystack is ingested into its own namespace of a cache directory that survives runs; one
JSONL record is appended per question, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from tqdm.auto import tqdm

from apdmem.errors import ConfigError
from apdmem.eval.judge import gold_contained, judge
from apdmem.eval.metrics import mean, percentile
from apdmem.graph.context import Context
from apdmem.memory import Memory, load_longmemeval
from apdmem.memory.records import Usage
from apdmem.models import get_chat_model
from apdmem.settings import Settings

TYPES = ("single-session-user", "single-session-assistant", "single-session-preference", "multi-session",
         "knowledge-update", "temporal-reasoning")

# The paper's ablations (Table 4): context overrides, plus the L0 mode where the ablation changes it.
ABLATIONS: dict[str, dict] = {
    "full": {},
    "no-controller": {"controller": False},
    "raw-rag": {"controller": False, "layers": "L3", "l0_mode": "raw"},
    "no-l1": {"layers": "L2,L3"},
    "no-l2": {"layers": "L1,L3"},
    "no-l3": {"layers": "L1,L2"},
    "no-reflection": {"reflection": False},
    "no-decomposition": {"decomposition": False},
    "no-dates": {"date_normalization": False},
    "no-notes": {"organized_notes": False},
    "no-draft": {"draft_answer": False},
}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")


@dataclass
class EvalSettings:
    """How each question is answered and judged."""

    chat_model: str = "local"
    controller_model: str | None = None
    generator_model: str | None = None
    judge_model: str | None = None
    embeddings: str = "local"
    base_url: str | None = None
    l0_mode: str = "auto"
    tmax: int = 20
    top_k: int = 20
    drill_width: int = 3
    ablation: str = "full"
    disclosure_only: bool = False  # stop when disclosure ends: no notes, answer or judge
    eager_l1: bool = False  # build L1 of every session at ingestion
    cache: Path = Path("reports/longmemeval/memory")
    llm_judge: bool = True  # off: no verdict (benchmarks/answers.py scores replies without a model)

    def __post_init__(self) -> None:
        if self.ablation not in ABLATIONS:
            raise ValueError(f"unknown ablation {self.ablation!r}: choose from {', '.join(ABLATIONS)}")
        self.overrides = dict(ABLATIONS[self.ablation])
        self.l0_mode = self.overrides.pop("l0_mode", self.l0_mode)
        model = self.chat_model if self.l0_mode != "raw" else ""
        self.cache = Path(self.cache) / _slug(f"{self.l0_mode}-{model}-{self.embeddings}")
        self.deployment = Settings(chat_model=self.chat_model, controller_model=self.controller_model,
                                   generator_model=self.generator_model, embeddings=self.embeddings, base_url=self.base_url)
        self.judge = get_chat_model(self.judge_model or self.chat_model, self.base_url) if self.llm_judge else None


def answer_item(item, settings: EvalSettings) -> dict:
    """Ingest the item's haystack (cached), ask the graph, judge the reply: the item's record. With
    `disclosure_only`, the graph stops when disclosure ends and nothing is judged."""
    started = time.perf_counter()
    memory = Memory(item.question_id, store=str(settings.cache), chat_model=settings.chat_model,
                    embeddings=settings.embeddings, base_url=settings.base_url, l0_mode=settings.l0_mode)
    memory.ingest(item.sessions)
    if settings.eager_l1:
        memory.build_facts()
    ingest_s = time.perf_counter() - started
    final, latency = ask(memory, item.question, item.question_date, settings)
    judge_usage, verdict, reply = Usage(), None, final.get("answer", "")
    if not settings.disclosure_only:
        verdict = judge(settings.judge, question_type=item.question_type, question=item.question, answer=item.answer,
                        reply=reply, abstention=item.is_abstention, usage=judge_usage)
    return {
        "question_id": item.question_id, "question_type": item.question_type, "abstention": item.is_abstention,
        "question": item.question, "answer": item.answer, "hypothesis": reply, "verdict": verdict,
        "gold_contained": gold_contained(reply, item.answer),
        "answer_session_ids": item.answer_session_ids, "haystack_sessions": len({s.session_id for s in item.sessions}),
        "searched": final.get("searched", []), "opened": final.get("opened", {}), "drills": final.get("drills", []),
        "step": final.get("step", 0), "stop_reason": final.get("stop_reason", ""), "evidence": final.get("evidence", []),
        "notes": final.get("notes", ""), "draft": final.get("draft", ""),
        "online_usage": final.get("usage", {}), "offline_usage": memory.manifest.get("construction_usage", {}),
        "judge_usage": vars(judge_usage), "latency_s": latency, "ingest_s": ingest_s,
    }


def ask(memory: Memory, question: str, question_date: datetime, settings: EvalSettings) -> tuple[dict, float]:
    """The graph's final state for one question on `memory` (the state when disclosure ends, with
    `disclosure_only`), and the seconds the graph took."""
    from apdmem.graph.builder import build_graph  # here: the command line lists this module's options without LangGraph

    graph = build_graph(settings=settings.deployment, memory=memory)
    context = Context(user_id=memory.user_id, tmax=settings.tmax, top_k=settings.top_k, drill_width=settings.drill_width,
                      **settings.overrides)
    inputs = {"question": question, "question_date": question_date.isoformat()}
    started = time.perf_counter()
    final = disclose(graph, inputs, context) if settings.disclosure_only else graph.invoke(inputs, context=context)
    return final, time.perf_counter() - started


def disclose(graph, inputs: dict, context) -> dict:
    """Run the controller until disclosure ends (`converge` routes to the notes); the state at that point."""
    state: dict = {}
    for state in graph.stream(inputs, context=context, stream_mode="values"):
        if state.get("route") == "synthesize_notes":
            break
    return state


def select(items: list, *, limit: int | None = None, types: list[str] | None = None, per_type: int | None = None) -> list:
    """Items of the given types, at most `per_type` of each (file order), at most `limit` in all."""
    taken: Counter = Counter()
    chosen = []
    for item in items:
        if (types and item.question_type not in types) or (per_type is not None and taken[item.question_type] >= per_type):
            continue
        taken[item.question_type] += 1
        chosen.append(item)
    return chosen[:limit]


def run(dataset: str, *, limit: int | None = None, types: list[str] | None = None, per_type: int | None = None, concurrency: int = 1,
        output_dir: str = "reports/longmemeval", memory_dir: str | None = None, progress: bool = True, **options) -> dict:
    """Run (or resume) the benchmark; returns the report and writes results.jsonl, report.json, report.md, plots.

    `options` are `EvalSettings` fields. `chat_model` builds L0 (llm mode) and, unless `controller_model` /
    `generator_model` say otherwise, drives the controller and writes the answer; the judge defaults to it too.
    """
    settings = EvalSettings(cache=Path(memory_dir or Path(output_dir) / "memory"), **options)
    items = select(load_longmemeval(dataset), limit=limit, types=types, per_type=per_type)
    out = run_directory(output_dir, settings)
    results = out / "results.jsonl"
    drop_torn_line(results)
    done = {r["question_id"] for r in read_records(results)}
    lock = threading.Lock()

    def one(item) -> None:
        record = answer_item(item, settings)
        with lock, results.open("a") as handle:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")

    todo = [i for i in items if i.question_id not in done]
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        list(tqdm(pool.map(one, todo), total=len(todo), desc=f"longmemeval {settings.ablation}", disable=not progress))
    wanted = {i.question_id for i in items}
    report = summarize([r for r in read_records(results) if r["question_id"] in wanted], disclosure_only=settings.disclosure_only)
    report.update(dataset=dataset, ablation=settings.ablation, chat_model=settings.chat_model,
                  judge_model=None if settings.disclosure_only else settings.judge_model or settings.chat_model,
                  l0_mode=settings.l0_mode, eager_l1=settings.eager_l1,
                  wall_s={"this_run": time.perf_counter() - started, "questions_this_run": len(todo)}, output=str(out))
    write_report(report, out)
    return report


def run_directory(output_dir: str, settings: EvalSettings) -> Path:
    out = Path(output_dir) / _slug(f"{settings.ablation}-{settings.chat_model}" + ("-disclosure" if settings.disclosure_only else ""))
    out.mkdir(parents=True, exist_ok=True)
    return out


def run_langsmith(dataset: str, *, limit: int | None = None, types: list[str] | None = None, per_type: int | None = None,
                  memory_dir: str | None = None,
                  output_dir: str = "reports/longmemeval", **options):
    """Upload the questions as a LangSmith dataset and run them through `langsmith.evaluate`, with the judge's
    verdict as the `correct` feedback. Needs LANGSMITH_API_KEY (and network)."""
    import os

    from langsmith import Client, evaluate

    if not os.environ.get("LANGSMITH_API_KEY"):
        raise ConfigError("--langsmith needs LANGSMITH_API_KEY")
    settings = EvalSettings(cache=Path(memory_dir or Path(output_dir) / "memory"), **options)
    items = {i.question_id: i for i in select(load_longmemeval(dataset), limit=limit, types=types, per_type=per_type)}
    client, name = Client(), f"apdmem-longmemeval-{Path(dataset).name.split('.')[0]}-{len(items)}"
    if not client.has_dataset(dataset_name=name):
        created = client.create_dataset(name, description=f"LongMemEval questions from {Path(dataset).name}")
        client.create_examples(
            dataset_id=created.id,
            inputs=[{"question_id": q, "question": i.question, "question_date": i.question_date.isoformat()} for q, i in items.items()],
            outputs=[{"answer": i.answer, "question_type": i.question_type} for i in items.values()],
        )

    def target(inputs: dict) -> dict:
        record = answer_item(items[inputs["question_id"]], settings)
        return {"answer": record["hypothesis"], "verdict": record["verdict"], "opened": record["opened"]}

    def correct(run, example) -> dict:
        return {"key": "correct", "score": int(bool(run.outputs.get("verdict")))}

    return evaluate(target, data=name, evaluators=[correct], experiment_prefix=f"apdmem-{settings.ablation}", client=client)


def drop_torn_line(path: Path) -> None:
    """Cut a last line left unfinished by a killed run, so the next record starts on a line of its own."""
    if path.exists():
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            path.write_bytes(data[: data.rfind(b"\n") + 1])


def read_records(path: Path) -> list[dict]:
    """Records of a results file; a torn last line (a run killed mid-write) is ignored."""
    if not path.exists():
        return []
    records = {}
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        records[record["question_id"]] = record
    return list(records.values())


def _tokens(usage: dict) -> int:
    return int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))


def _calls(record: dict, key: str) -> int:
    """Model calls of a question over all nodes: `calls`, or `critical_calls` (those on its critical path)."""
    return sum(int(u.get(key, u.get("calls", 0))) for u in record["online_usage"].values())


def _spread(values: list[float]) -> dict:
    return {"mean": mean(values), "median": percentile(values, 50), "p95": percentile(values, 95), "max": max(values, default=0)}


def disclosure(records: list[dict]) -> dict:
    """What a group of questions disclosed: evidence sessions among the opened ones (recall, answerable questions
    only), sessions opened, the deepest layer read per opened session, steps, and model calls per question (all,
    and those on the critical path)."""
    answerable = [r for r in records if not r["abstention"] and r["answer_session_ids"]]
    depth = Counter(layer for r in records for layer in r["opened"].values())
    return {
        "n": len(records),
        "evidence_recall_opened": mean([len(set(r["answer_session_ids"]) & set(r["opened"])) / len(r["answer_session_ids"])
                                        for r in answerable]),
        "sessions_accessed_fraction": mean([len(r["opened"]) / r["haystack_sessions"] for r in records if r["haystack_sessions"]]),
        "sessions_accessed_mean": mean([len(r["opened"]) for r in records]),
        "drill_depth_share": {layer: depth[layer] / sum(depth.values()) if depth else 0.0 for layer in ("L1", "L2", "L3")},
        "drills": sum(depth.values()),
        "steps_mean": mean([r["step"] for r in records]),
        "steps_max": max((r["step"] for r in records), default=0),
        "model_calls": _spread([_calls(r, "calls") for r in records]),
        "critical_path_calls": _spread([_calls(r, "critical_calls") for r in records]),
    }


def summarize(records: list[dict], *, disclosure_only: bool = False) -> dict:
    """Every figure of the report from the per-question records (without the answer figures when the run
    stopped after disclosure)."""
    correct = lambda rs: mean([1.0 if r["verdict"] else 0.0 for r in rs])  # noqa: E731 - unjudged counts as wrong
    by_type = defaultdict(list)
    for r in records:
        by_type[r["question_type"]].append(r)
    answerable = [r for r in records if not r["abstention"]]
    latencies = [r["latency_s"] for r in records]
    report = {"questions": len(records), "disclosure_only": disclosure_only}
    if not disclosure_only:
        report.update({
            "accuracy": correct(records),
            "accuracy_by_type": {t: {"n": len(rs), "accuracy": correct(rs)} for t, rs in sorted(by_type.items())},
            "task_averaged_accuracy": mean([correct(rs) for t, rs in by_type.items() if t in TYPES]),
            "abstention_accuracy": correct([r for r in records if r["abstention"]]) if any(r["abstention"] for r in records) else None,
            "unjudged": sum(1 for r in records if r["verdict"] is None),
            "gold_contained_rate (secondary)": mean([1.0 if r["gold_contained"] else 0.0 for r in answerable]),
        })
    report.update({
        **disclosure(records),
        "disclosure_by_type": {t: disclosure(rs) for t, rs in sorted(by_type.items())},
        "offline_tokens_per_question": mean([_tokens(r["offline_usage"]) for r in records]),
        "online_tokens_per_query": mean([sum(_tokens(u) for u in r["online_usage"].values()) for r in records]),
        "online_tokens_by_node": {node: mean([_tokens(r["online_usage"].get(node, {})) for r in records])
                                  for node in sorted({n for r in records for n in r["online_usage"]})},
        "latency_s": {"mean": mean(latencies), "median": percentile(latencies, 50), "p95": percentile(latencies, 95),
                      "sum": sum(latencies)},
    })
    return report


def write_report(report: dict, out: Path) -> None:
    """report.json, report.md and the plots (per-type accuracy unless disclosure only, disclosure depth per type)."""
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str))
    layers = ("L1", "L2", "L3")
    title = "disclosure only" if report["disclosure_only"] else f"judge {report['judge_model']}"
    md = [f"# LongMemEval: {report['ablation']} ({report['chat_model']}, {title}, L0 {report['l0_mode']})", "",
          f"- questions: {report['questions']}"]
    if not report["disclosure_only"]:
        abstention = "n/a" if report["abstention_accuracy"] is None else f"{report['abstention_accuracy']:.3f}"
        md += [
            f"- unjudged: {report['unjudged']}",
            f"- accuracy: {report['accuracy']:.3f}; task-averaged: {report['task_averaged_accuracy']:.3f}; abstention: {abstention}",
            f"- gold answer contained (secondary, deterministic): {report['gold_contained_rate (secondary)']:.3f}",
        ]
    calls, critical = report["model_calls"], report["critical_path_calls"]
    md += [
        f"- evidence sessions among opened sessions (recall): {report['evidence_recall_opened']:.3f}",
        f"- haystack sessions opened: {report['sessions_accessed_fraction']:.1%} (mean {report['sessions_accessed_mean']:.2f} sessions)",
        "- drills stopping at L1/L2/L3: " + " / ".join(f"{report['drill_depth_share'][layer]:.1%}" for layer in layers) + f" of {report['drills']}",
        f"- steps: mean {report['steps_mean']:.1f}, max {report['steps_max']}",
        f"- model calls per question: mean {calls['mean']:.1f}, median {calls['median']:.0f}, max {calls['max']}; "
        f"on the critical path: mean {critical['mean']:.1f}, median {critical['median']:.0f}, max {critical['max']}",
        f"- tokens: offline {report['offline_tokens_per_question']:.0f} per question, online {report['online_tokens_per_query']:.0f} per query",
        f"- latency per query: mean {report['latency_s']['mean']:.1f}s, median {report['latency_s']['median']:.1f}s, "
        f"p95 {report['latency_s']['p95']:.1f}s; sum {report['latency_s']['sum'] / 60:.1f} min",
    ]
    if "wall_s" in report:
        md.append(f"- wall time of this run: {report['wall_s']['this_run'] / 60:.1f} min for {report['wall_s']['questions_this_run']} "
                  f"questions (ingestion included; questions already in results.jsonl are not rerun)")
    accuracy = report.get("accuracy_by_type", {})
    md += ["", "| type | n |" + (" accuracy |" if accuracy else "") + " recall | opened | sessions | L1 | L2 | L3 | steps | calls (median, max) | critical path (median, max) |",
           "| --- " * (11 + bool(accuracy)) + "|"]
    for t, d in report["disclosure_by_type"].items():
        cells = [t, str(d["n"])] + ([f"{accuracy[t]['accuracy']:.3f}"] if accuracy else [])
        cells += [f"{d['evidence_recall_opened']:.3f}", f"{d['sessions_accessed_fraction']:.1%}", f"{d['sessions_accessed_mean']:.2f}"]
        cells += [f"{d['drill_depth_share'][layer]:.2f}" for layer in layers] + [f"{d['steps_mean']:.1f}"]
        cells += [f"{d[k]['mean']:.1f} ({d[k]['median']:.0f}, {d[k]['max']})" for k in ("model_calls", "critical_path_calls")]
        md.append("| " + " | ".join(cells) + " |")
    (out / "report.md").write_text("\n".join(md) + "\n")
    _plots(report, out)


def _plots(report: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    types = list(report["disclosure_by_type"])
    if not report["disclosure_only"]:
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.barh(types, [report["accuracy_by_type"][t]["accuracy"] for t in types], color="#5b6abf")
        ax.set_xlim(0, 1)
        ax.set_xlabel("accuracy")
        ax.set_title(f"LongMemEval accuracy by type ({report['ablation']})")
        fig.tight_layout()
        fig.savefig(out / "accuracy_by_type.png", dpi=100)
        plt.close(fig)
    fig, ax = plt.subplots(figsize=(8, 4))
    left = [0.0] * len(types)
    for layer, color in (("L1", "#9ecae1"), ("L2", "#4292c6"), ("L3", "#08519c")):
        values = [report["disclosure_by_type"][t]["drill_depth_share"][layer] for t in types]
        ax.barh(types, values, left=left, color=color, label=layer)
        left = [a + b for a, b in zip(left, values)]
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of opened sessions by deepest layer read")
    ax.legend(loc="lower right")
    ax.set_title("Disclosure depth by question type")
    fig.tight_layout()
    fig.savefig(out / "disclosure_depth.png", dpi=100)
    plt.close(fig)


def cmd_eval(args) -> None:
    options = dict(chat_model=args.model or args.chat_model, controller_model=args.controller_model,
                   generator_model=args.generator_model, judge_model=args.judge_model, embeddings=args.embeddings,
                   base_url=args.base_url, l0_mode=args.l0_mode or "auto", tmax=args.tmax, top_k=args.top_k, drill_width=args.drill_width,
                   ablation=args.ablation,
                   eager_l1=args.eager_l1)
    if args.langsmith:
        if args.stop_after_disclosure:
            raise ConfigError("--stop-after-disclosure and --langsmith do not go together: LangSmith judges answers")
        run_langsmith(args.dataset, limit=args.limit, types=args.types, per_type=args.per_type, memory_dir=args.store, output_dir=args.output_dir, **options)
        return
    report = run(args.dataset, limit=args.limit, types=args.types, per_type=args.per_type, concurrency=args.concurrency,
                 output_dir=args.output_dir, memory_dir=args.store, disclosure_only=args.stop_after_disclosure, **options)
    out = Path(report["output"])
    print((out / "report.md").read_text())
    print(f"report: {out}/report.json, report.md and plots; records: {out}/results.jsonl")


def add_parser(evals, parents) -> None:
    """`apdmem eval longmemeval` on the CLI's `eval` group."""
    p = evals.add_parser("longmemeval", parents=parents, help="LongMemEval end to end with an LLM judge")
    p.add_argument("dataset")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--types", nargs="+", choices=TYPES, default=None)
    p.add_argument("--per-type", type=int, default=None, help="at most N questions of each type (a stratified sample)")
    p.add_argument("--model", default=None, help="the model for construction, control and answers (default: --chat-model)")
    p.add_argument("--judge-model", default=None, help="default: the answering model")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--ablation", choices=list(ABLATIONS), default="full")
    p.add_argument("--output-dir", default="reports/longmemeval")
    p.add_argument("--stop-after-disclosure", action="store_true",
                   help="measure disclosure only: stop when the controller has read its last layer (no notes, answer or judge)")
    p.add_argument("--eager-l1", action="store_true", help="build L1 of every session at ingestion (first reads cost nothing)")
    p.add_argument("--langsmith", action="store_true", help="upload the questions and run them through langsmith.evaluate")
    p.set_defaults(func=cmd_eval)
