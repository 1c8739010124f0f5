"""`apdmem eval locomo`: the scoring rules against hand-computed values, a run with a stand-in controller
(turn mapping, report, resumption, the command line), and one slow run on the embedded models."""

import doctest
import json
from pathlib import Path

import pytest
from graph_helpers import clean_environment

from apdmem.cli import main
from apdmem.errors import ConfigError
from apdmem.eval import locomo
from apdmem.graph import builder  # locomo imports build_graph from it when it runs
from apdmem.eval.locomo import (
    abstains,
    evidence_recall,
    f1,
    multi_answer_f1,
    normalize_answer,
    run,
    score_answer,
    tokens,
)

FIXTURE = Path(__file__).parent / "fixtures" / "locomo_small.json"


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch):
    clean_environment(monkeypatch)


# --- scoring -------------------------------------------------------------------------------------------------

def test_normalize_and_tokens():
    assert normalize_answer("  The Red-Car, an apple & A pear!  ") == "redcar apple pear"
    assert normalize_answer("Théâtre “Anna’s”") == "théâtre annas"  # Unicode punctuation goes too
    assert tokens("The runners were running") == ["runner", "were", "run"]
    assert tokens("running") == tokens("runs") == ["run"]


def test_f1_hand_computed():
    # [red, car] vs [red, bicycl]: one common token, P = R = 1/2
    assert f1("the red car", "a red bicycle") == pytest.approx(0.5)
    # [went, to, pari, in, may] vs [pari]: P = 1/5, R = 1 -> 2 * 0.2 / 1.2
    assert f1("Went to Paris in May", "Paris") == pytest.approx(1 / 3)
    # multiset: "red red" vs "red" shares one token, P = 1/2, R = 1
    assert f1("red red", "red") == pytest.approx(2 / 3)
    assert f1("running", "runs") == 1.0  # stemming
    assert f1("", "Paris") == f1("Paris", "") == f1("the", "a") == 0.0
    assert f1("Berlin", "Munich") == 0.0


def test_category_1_partial_f1_per_gold_item():
    gold = "volunteering at the food bank, playing the violin"
    # item 1 matches nothing; item 2 [play, violin] vs part [violin]: P = 1, R = 1/2, F1 = 2/3
    assert multi_answer_f1("the violin, painting", gold) == pytest.approx(1 / 3)
    assert score_answer("the violin, painting", gold, 1) == pytest.approx(1 / 3)
    # both items found, in any order, among extra parts
    assert score_answer("playing the violin, chess, volunteering at the food bank", gold, 1) == pytest.approx(1.0)
    # one unsplit reply is compared whole with each item: [play, violin, volunt, at, food, bank] vs
    # [volunt, at, food, bank] -> 2 * (4/6 * 1) / (4/6 + 1) = 0.8; vs [play, violin] -> 2 * (2/6) / (2/6 + 1) = 0.5
    assert score_answer("playing violin volunteering at food bank", gold, 1) == pytest.approx((0.8 + 0.5) / 2)


def test_category_3_uses_the_gold_before_the_first_semicolon():
    gold = "Likely yes; she is learning Italian; and hiked"
    assert score_answer("likely yes", gold, 3) == 1.0
    assert score_answer("yes", gold, 3) == pytest.approx(2 / 3)  # [ye] vs [like, ye]
    assert score_answer("learning Italian", gold, 3) == 0.0  # the rationale is not the answer
    assert score_answer("learning Italian", gold, 4) > 0.0  # other categories keep the whole gold


def test_category_5_rewards_saying_it_is_not_there():
    for reply in ("Not mentioned in the conversation.", "I don't have that information from our past conversations.",
                  "There is no information about Tomas owning a cat.", "That wasn’t mentioned.", "I cannot find that.",
                  "It's unknown.", "There is no record of it.", "That is not available in my memory."):
        assert abstains(reply), reply
        assert score_answer(reply, "Pixel", 5) == 1.0
    for reply in ("Pixel", "His cat is called Pixel.", "He is not interested in cats", ""):
        assert not abstains(reply), reply
        assert score_answer(reply, "Pixel", 5) == 0.0


def test_categories_2_and_4_are_plain_f1():
    assert score_answer("2022", "2022", 2) == 1.0
    assert score_answer("In May 2022", "May 2022", 2) == pytest.approx(0.8)  # [in, may, 2022] vs [may, 2022]
    assert score_answer("the red car", "a red bicycle", 4) == pytest.approx(0.5)


def test_docstring_examples():
    assert doctest.testmod(locomo).failed == 0


def test_evidence_recall():
    assert evidence_recall({"D1:3", "D2:1"}, ["D1:3", "D1:5"]) == 0.5
    assert evidence_recall({"D1:3"}, ["D1:3"]) == 1.0
    assert evidence_recall(set(), ["D1:3", "D2:2"]) == 0.0
    assert evidence_recall({"D1:3"}, []) is None
    assert evidence_recall({"D8:6", "D9:17"}, ["D8:6; D9:17", "D8:6"]) == 1.0  # ids joined by ';' count singly


# --- a run with a stand-in controller ------------------------------------------------------------------------

# Replies of the stand-in controller; any other question gets an abstention.
REPLIES = {
    "What is the name of Nadia's cat?": "Pixel",
    "What hobbies has Omar taken up?": "the violin, painting",
    "In which year did Lena hike the Alta Via 1?": "2022",
    "Would Lena enjoy a trip to Italy?": "Yes",
    "Where is Lena's marathon?": "Berlin",
    "Where is Omar's marathon?": "Berlin",
}


class FakeGraph:
    """Stands in for the compiled controller: discloses turn 1 of session 2 (L3) and turn 3 of session 1 (L2),
    plus an L1 fact, and answers from REPLIES. `calls` holds (inputs, context, settings, memory) of each call."""

    def __init__(self, *, settings=None, memory=None):
        self.calls = []
        self.build(settings=settings, memory=memory)

    def build(self, *, settings, memory):
        """Stands in for `build_graph`: this graph, bound to `settings` and `memory`."""
        self.settings, self.memory = settings, memory
        return self

    def invoke(self, inputs, *, context):
        self.calls.append((inputs, context, self.settings, self.memory))
        user = context.user_id
        evidence = [
            {"session_id": f"{user}:session_2", "date": "", "layer": "L3", "turn": 0, "text": "raw"},
            {"session_id": f"{user}:session_1", "date": "", "layer": "L2", "turn": 2, "text": "note"},
            {"session_id": f"{user}:session_1", "date": "", "layer": "L1", "turn": None, "text": "fact"},
        ]
        answer = REPLIES.get(inputs["question"], "I don't have that information.")
        return {"answer": answer, "evidence": evidence, "opened": {f"{user}:session_2": "L3"}, "step": 2,
                "stop_reason": "sufficient"}


def no_graph(**bound):
    raise AssertionError("the controller was built although every question was answered")


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_run_maps_turns_scores_and_resumes(tmp_path, monkeypatch, embeddings):
    fake = FakeGraph()
    monkeypatch.setattr(builder, "build_graph", fake.build)
    options = dict(l0_mode="raw", output_dir=tmp_path / "out", progress=False, context_overrides={"reflection": False})

    first = run(FIXTURE, limit=3, **options)  # both questions of conv-a, the first of conv-b
    assert first["questions"] == 3 and len(fake.calls) == 3
    inputs, context, settings, memory = zip(*fake.calls)
    assert [i["question_date"] for i in inputs] == ["2023-05-27T10:20:00"] * 2 + ["2022-08-15T19:30:00"]
    assert [c.user_id for c in context] == [m.user_id for m in memory] == ["conv-a", "conv-a", "conv-b"]
    assert context[0].reflection is False and context[0].tmax == 20 and settings[0].controller_model == "local"
    assert (tmp_path / "out" / "memory" / "users" / "conv-b").is_dir()  # a namespace per sample

    results = tmp_path / "out" / "results.jsonl"
    record = lines(results)[0]
    assert record["disclosed"] == ["D1:3", "D2:1"]  # L2/L3 turns only, as dataset ids
    assert (record["sample_id"], record["index"], record["gold"], record["category"]) == ("conv-a", 0, "Pixel", 4)
    assert record["score"] == 1.0 and record["evidence_recall"] == 1.0 and record["step"] == 2
    assert record["opened"] == {"conv-a:session_2": "L3"} and record["latency_s"] >= 0

    report = run(FIXTURE, **options)  # the rest: five more questions, none asked twice
    assert len(fake.calls) == 8 and len(lines(results)) == 8
    assert report["questions"] == 8
    assert report["score"] == pytest.approx(5 / 8)  # 1 + 1 + 1/3 + 1 + 2/3 + 1 + 0 + 0
    assert report["evidence_recall"] == pytest.approx(5 / 7)  # the recital question has no evidence
    expected = {"1": (1, 1 / 3, 0.0), "2": (2, 0.5, 1.0), "3": (1, 2 / 3, 0.0), "4": (2, 1.0, 1.0), "5": (2, 0.5, 1.0)}
    assert {c: (row["n"], row["score"], row["evidence_recall"]) for c, row in report["by_category"].items()} == \
        {c: (n, pytest.approx(s), pytest.approx(r)) for c, (n, s, r) in expected.items()}
    assert report["by_category"]["1"]["name"] == "multi-hop" and report["by_category"]["5"]["name"] == "adversarial"
    assert json.loads((tmp_path / "out" / "report.json").read_text()) == report
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "| 1 multi-hop | 1 | 0.333 | 0.000 |" in markdown and "| overall | 8 | 0.625 | 0.714 |" in markdown

    monkeypatch.setattr(builder, "build_graph", no_graph)
    assert run(FIXTURE, **options) == report and len(lines(results)) == 8
    assert run(FIXTURE, limit=2, **options)["questions"] == 2  # the report covers the selected questions


def test_a_torn_last_line_is_dropped_and_answered_again(tmp_path, monkeypatch, embeddings):
    monkeypatch.setattr(builder, "build_graph", FakeGraph)
    out = tmp_path / "out"
    run(FIXTURE, limit=2, l0_mode="raw", output_dir=out, progress=False)
    results = out / "results.jsonl"
    results.write_text(results.read_text()[:-40])  # a run killed while writing the second record
    report = run(FIXTURE, limit=2, l0_mode="raw", output_dir=out, progress=False)
    assert report["questions"] == 2 and [(r["sample_id"], r["index"]) for r in lines(results)] == [("conv-a", 0), ("conv-a", 1)]


def test_results_of_another_file_are_refused(tmp_path, monkeypatch, embeddings):
    monkeypatch.setattr(builder, "build_graph", FakeGraph)
    out = tmp_path / "out"
    run(FIXTURE, limit=1, l0_mode="raw", output_dir=out, progress=False)
    results = out / "results.jsonl"
    results.write_text(results.read_text().replace("Nadia's cat", "Nadia's dog"))
    with pytest.raises(ConfigError, match="another file"):
        run(FIXTURE, limit=1, l0_mode="raw", output_dir=out, progress=False)


def test_command_line(tmp_path, monkeypatch, capsys, embeddings):
    fake = FakeGraph()
    monkeypatch.setattr(builder, "build_graph", fake.build)
    code = main(["eval", "locomo", str(FIXTURE), "--limit", "1", "--l0-mode", "raw", "--tmax", "4", "--top-k", "3",
                 "--generator-model", "local", "--output-dir", str(tmp_path / "out"), "--memory-dir", str(tmp_path / "mem")])
    out = capsys.readouterr().out
    assert code == 0 and "| 4 single-hop | 1 | 1.000 | 1.000 |" in out and "| overall | 1 |" in out
    _, context, settings, _ = fake.calls[0]
    assert (context.tmax, context.top_k, settings.generator_model) == (4, 3, "local")
    assert (tmp_path / "mem" / "users" / "conv-a").is_dir() and not (tmp_path / "out" / "memory").exists()


# --- end to end on the embedded models -----------------------------------------------------------------------

@pytest.mark.slow
def test_run_on_embedded_models_then_resume(tmp_path):
    options = dict(limit=3, chat_model="local", l0_mode="raw", tmax=3, output_dir=tmp_path / "out", progress=False)
    report = run(FIXTURE, **options)
    assert {"dataset", "settings", "questions", "score", "evidence_recall", "by_category", "latency_s"} <= report.keys()
    assert report["questions"] == 3 and set(report["by_category"]) == {"1", "4", "5"}
    assert 0.0 <= report["score"] <= 1.0
    for row in report["by_category"].values():
        assert {"name", "n", "score", "evidence_recall"} <= row.keys()
    results = tmp_path / "out" / "results.jsonl"
    records = lines(results)
    assert len(records) == 3
    for r in records:
        assert isinstance(r["prediction"], str) and 0.0 <= r["score"] <= 1.0 and r["step"] <= 3
        assert r["evidence_recall"] is None or 0.0 <= r["evidence_recall"] <= 1.0
    assert run(FIXTURE, **options) == report and lines(results) == records
