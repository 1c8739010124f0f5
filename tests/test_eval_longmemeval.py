"""The LongMemEval harness: metrics against hand-computed values, judge parsing, report figures, resume."""

import json
import math
from pathlib import Path

import pytest

from apdmem.eval import longmemeval
from apdmem.eval.judge import gold_contained, judge_prompt, parse_verdict
from apdmem.eval.metrics import ndcg_any, percentile, recall_all, recall_any
from apdmem.eval.retrieval import score
from apdmem.nodes.answer import NOT_FOUND, QUOTED, UNCLEAR
from apdmem.nodes.reckon import COMPUTED, UNDATED

DEV = str(Path(__file__).resolve().parents[2] / "shared" / "data" / "longmemeval" / "longmemeval_oracle_dev.json.gz")


def test_recall_and_ndcg_by_hand():
    ranked, gold = ["a", "x", "b", "y"], {"a", "b"}
    assert recall_any(ranked, gold, 1) == 1.0
    assert recall_all(ranked, gold, 2) == 0.0
    assert recall_all(ranked, gold, 3) == 1.0
    # DCG = 1/log2(2) + 1/log2(4) = 1.5; IDCG = 1 + 1/log2(3)
    assert ndcg_any(ranked, gold, 3) == pytest.approx(1.5 / (1 + 1 / math.log2(3)))
    assert ndcg_any(["x", "a"], {"a"}, 2) == pytest.approx(1 / math.log2(3))
    assert ndcg_any(["x"], {"a"}, 1) == 0.0
    assert score(["x", "a"], {"a"})["recall_any@1"] == 0.0 and score(["x", "a"], {"a"})["recall_any@3"] == 1.0


def test_percentile_interpolates():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([10], 95) == 10
    assert percentile([], 50) == 0.0


@pytest.mark.parametrize(
    "text, verdict",
    [("yes", True), ("Yes.", True), ("no", False), ("No, it does not.", False), ("**yes** it matches", True),
     ("I think the answer is correct", None), ("", None), ("Noted: yes", True)],
)
def test_parse_verdict(text, verdict):
    assert parse_verdict(text) is verdict


def test_judge_prompt_uses_the_type_criterion():
    assert "off-by-one" in judge_prompt("temporal-reasoning", "q", "a", "r", abstention=False)
    assert "updated answer" in judge_prompt("knowledge-update", "q", "a", "r", abstention=False)
    assert "rubric" in judge_prompt("single-session-preference", "q", "a", "r", abstention=False)
    assert "not available" in judge_prompt("multi-session", "q", "a", "r", abstention=True)


def test_gold_contained():
    assert gold_contained("You packed 7 shirts.", "7")
    assert not gold_contained("You packed 17 shirts.", "7")
    assert gold_contained("It was Blue Bottle Coffee!", "blue bottle coffee")


def _record(qid, qtype, verdict, opened, *, abstention=False, gold=("s1",), haystack=10, step=3, latency=2.0):
    return {"question_id": qid, "question_type": qtype, "abstention": abstention, "verdict": verdict,
            "gold_contained": verdict, "answer_session_ids": list(gold), "haystack_sessions": haystack, "opened": opened,
            "step": step, "offline_usage": {"input_tokens": 100, "output_tokens": 10},
            "online_usage": {"reflect": {"input_tokens": 50, "output_tokens": 5}, "answer": {"input_tokens": 20, "output_tokens": 5}},
            "latency_s": latency}


def test_summarize_by_hand():
    records = [
        _record("q1", "multi-session", True, {"s1": "L1", "s2": "L1"}),
        _record("q2", "multi-session", False, {"s3": "L3"}, step=7),
        _record("q3", "temporal-reasoning", True, {"s1": "L2"}),
        _record("q4_abs", "temporal-reasoning", None, {}, abstention=True, gold=()),
    ]
    report = longmemeval.summarize(records)
    assert report["accuracy"] == 0.5  # unjudged counts as wrong
    assert report["accuracy_by_type"]["multi-session"] == {"n": 2, "accuracy": 0.5}
    assert report["task_averaged_accuracy"] == pytest.approx((0.5 + 0.5) / 2)
    assert report["abstention_accuracy"] == 0.0
    assert report["unjudged"] == 1
    assert report["evidence_recall_opened"] == pytest.approx((1 + 0 + 1) / 3)
    assert report["sessions_accessed_fraction"] == pytest.approx((0.2 + 0.1 + 0.1 + 0) / 4)
    assert report["drill_depth_share"] == {"L1": 0.5, "L2": 0.25, "L3": 0.25}
    assert report["disclosure_by_type"]["multi-session"]["drill_depth_share"] == {"L1": 2 / 3, "L2": 0.0, "L3": 1 / 3}
    assert report["steps_max"] == 7
    assert report["offline_tokens_per_question"] == 110
    assert report["online_tokens_per_query"] == 80
    assert report["latency_s"]["median"] == 2.0


def test_disclosure_summary_by_hand(tmp_path):
    calls = {"decompose": {"calls": 1, "critical_calls": 1}, "drill": {"calls": 3, "critical_calls": 1},
             "reflect": {"calls": 2, "critical_calls": 2}}
    records = [
        {**_record("q1", "multi-session", None, {"s1": "L1", "s2": "L3"}, gold=("s1", "s3")), "online_usage": calls},
        {**_record("q2", "multi-session", None, {"s3": "L1"}), "online_usage": {"drill": {"calls": 1, "critical_calls": 1}}},
        {**_record("q3", "single-session-user", None, {"s1": "L3"}, step=5), "online_usage": {}},
    ]
    report = longmemeval.summarize(records, disclosure_only=True)
    assert "accuracy" not in report and "accuracy_by_type" not in report
    assert report["evidence_recall_opened"] == pytest.approx((0.5 + 0 + 1) / 3)
    assert report["sessions_accessed_mean"] == pytest.approx(4 / 3)
    assert report["model_calls"] == {"mean": 7 / 3, "median": 1, "p95": 5.5, "max": 6}  # p95 of [0, 1, 6]: 1 + 0.9 * 5
    assert report["critical_path_calls"]["max"] == 4 and report["critical_path_calls"]["median"] == 1
    multi = report["disclosure_by_type"]["multi-session"]
    assert multi["n"] == 2 and multi["evidence_recall_opened"] == 0.25 and multi["drill_depth_share"]["L1"] == 2 / 3
    assert multi["model_calls"]["mean"] == 3.5 and multi["critical_path_calls"]["mean"] == 2.5
    assert report["disclosure_by_type"]["single-session-user"]["steps_mean"] == 5
    report.update(ablation="no-reflection", chat_model="local", judge_model=None, l0_mode="raw")
    longmemeval.write_report(report, tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "disclosure only" in md and "| multi-session | 2 | 0.250 | 15.0% | 1.50 | 0.67 | 0.00 | 0.33 | 3.0 | 3.5 (4, 6) | 2.5 (2, 4) |" in md
    assert (tmp_path / "disclosure_depth.png").exists() and not (tmp_path / "accuracy_by_type.png").exists()


def test_disclosure_only_stops_before_notes_and_answer(make_memory, history, monkeypatch):
    from graph_helpers import ScriptedChatModel, clean_environment

    from apdmem.graph import Context, Settings, build_graph

    clean_environment(monkeypatch)
    model = ScriptedChatModel(script={"Reflection": [{"sufficient": False, "deepen": [{"session_id": "s-dog", "layer": "L2"}]}]})
    memory = make_memory(chat_model=model)
    memory.ingest(history)
    state = longmemeval.disclose(build_graph(settings=Settings(chat_model=model), memory=memory),
                                 {"question": "What is my dog's name?", "question_date": "2024/06/01 (Sat) 10:00"}, Context())
    assert state["route"] == "synthesize_notes" and state["opened"]["s-dog"] == "L2"
    assert "notes" not in state and "answer" not in state
    assert "notes" not in model.kinds() and "answer" not in model.kinds()


def test_select_is_stratified():
    class Item:
        def __init__(self, qtype):
            self.question_type = qtype

    items = [Item(t) for t in "aabbbca"]
    assert [i.question_type for i in longmemeval.select(items, per_type=1)] == ["a", "b", "c"]
    assert [i.question_type for i in longmemeval.select(items, types=["b"], limit=2)] == ["b", "b"]


def test_ablations_map_to_context_fields():
    from dataclasses import fields

    from apdmem.graph import Context

    names = {f.name for f in fields(Context)}
    for ablation, overrides in longmemeval.ABLATIONS.items():
        assert set(overrides) - {"l0_mode"} <= names, ablation


@pytest.mark.skipif(not Path(DEV).exists(), reason="needs shared/data/longmemeval beside the repository")
def test_run_resumes_and_ignores_a_torn_line(tmp_path, monkeypatch):
    """A run that dies after one question resumes with the rest; a half-written line is ignored."""
    calls = []

    def fake_answer(item, settings):
        calls.append(item.question_id)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the run is killed while answering the second question
        return _record(item.question_id, item.question_type, True, {item.answer_session_ids[0]: "L1"},
                       gold=item.answer_session_ids, haystack=len(item.sessions))

    monkeypatch.setattr(longmemeval, "answer_item", fake_answer)
    with pytest.raises(KeyboardInterrupt):
        longmemeval.run(DEV, limit=2, output_dir=str(tmp_path), progress=False)
    results = next(tmp_path.glob("*/results.jsonl"))
    assert len(results.read_text().splitlines()) == 1
    with results.open("a") as handle:
        handle.write('{"question_id": "torn')  # what a kill -9 mid-write leaves
    calls.clear()
    monkeypatch.setattr(longmemeval, "answer_item", lambda item, settings: (calls.append(item.question_id), _record(
        item.question_id, item.question_type, True, {}, gold=item.answer_session_ids))[1])
    report = longmemeval.run(DEV, limit=3, output_dir=str(tmp_path), progress=False)
    assert len(calls) == 2 and report["questions"] == 3
    assert len({json.loads(l)["question_id"] for l in results.read_text().splitlines() if l.endswith("}")}) == 3
    for name in ("report.json", "report.md", "accuracy_by_type.png", "disclosure_depth.png"):
        assert (results.parent / name).stat().st_size > 0


@pytest.mark.skipif(not Path(DEV).exists(), reason="needs shared/data/longmemeval beside the repository")
@pytest.mark.slow
def test_one_question_end_to_end_on_the_embedded_models(tmp_path):
    report = longmemeval.run(DEV, limit=1, l0_mode="raw", tmax=4, output_dir=str(tmp_path), progress=False)
    record = json.loads(next(tmp_path.glob("*/results.jsonl")).read_text().splitlines()[0])
    assert report["questions"] == 1 and record["hypothesis"].strip()
    assert record["verdict"] in (True, False, None) and 0 < record["step"] <= 4
    # The default chat model is "local": no generative model, so the answer quotes (or computes from) the evidence,
    # and no judge.
    assert record["hypothesis"].startswith((QUOTED, UNCLEAR, NOT_FOUND, COMPUTED, UNDATED))
    assert record["verdict"] is None and record["online_usage"]["answer"].get("calls", 0) == 0
    assert set(record["opened"]) <= {s for s in record["answer_session_ids"]} | set(record["opened"])
