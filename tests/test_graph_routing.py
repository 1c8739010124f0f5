"""The controller's routing, with a scripted chat model: budget, stopping rules, drills, decomposition,
fallbacks on unusable model output, ablations and stream events. Offline; the memory is real (raw L0)."""

import itertools

import pytest
from graph_helpers import BAD, ScriptedChatModel, clean_environment, run_graph

from apdmem.graph import Context, Settings, build_graph
from apdmem.graph.state import OutputState
from apdmem.nodes import policy
from apdmem.nodes.answer import NOT_FOUND, QUOTED
from apdmem.nodes.decompose import events as named_events

QUESTION = "What is my dog's name?"  # s-dog ranks first (conftest.QUESTIONS)


@pytest.fixture(autouse=True)
def environment(monkeypatch):
    clean_environment(monkeypatch)


@pytest.fixture
def scripted(ingested):
    """`scripted(**script)` -> (model, memory): the nodes and the memory's L1/L2 construction all call one
    `ScriptedChatModel` (see its docstring for the script)."""

    def make(**script):
        return ingested(ScriptedChatModel(script=script))

    return make


def deepen(*pairs, sufficient=False, **extra) -> dict:
    """A Reflection reply asking for deeper layers: deepen(("s-dog", "L2"), ...)."""
    return {"sufficient": sufficient, "deepen": [{"session_id": s, "layer": layer} for s, layer in pairs], **extra}


def layers_read(final: dict, session_id: str) -> list[str]:
    return [d["layer"] for d in final["drills"] if d["session_id"] == session_id]


@pytest.mark.parametrize("tmax", [3, 5, 8])
def test_step_budget_is_never_exceeded(scripted, history, tmax):
    counter = itertools.count()
    ids = [s.session_id for s in history]
    greedy = lambda prompt: {  # noqa: E731 - always wants more: every session, every layer, a new search
        "sufficient": False,
        "open_sessions": ids[:5],
        "deepen": [{"session_id": sid, "layer": "L3"} for sid in ids[:4]],
        "new_queries": [f"more about my pets {next(counter)}"],
    }
    model, memory = scripted(Reflection=[greedy] * 10)
    out = build_graph(settings=Settings(chat_model=model), memory=memory).invoke(
        {"question": QUESTION, "question_date": "2024/06/01 (Sat) 10:00"}, context=Context(tmax=tmax))
    assert set(out) <= set(OutputState.__annotations__)
    assert out["step"] == tmax and out["stop_reason"] == "step budget reached"
    assert all(d["step"] <= tmax for d in out["drills"])
    # Every step is a search, a drill or a reflection.
    _, events = run_graph(QUESTION, Context(tmax=tmax), settings=Settings(chat_model=model), memory=memory)
    searches = sum(e["event"] == "search" for e in events)
    assert out["step"] == searches + len(out["drills"]) + out["usage"].get("reflect", {}).get("calls", 0)
    assert searches >= (2 if tmax == 8 else 1)  # the model asks for a new search every round


def test_stops_when_a_round_adds_no_evidence(scripted):
    # The controller asks again for a layer it has read: that round discloses nothing, whatever it decides next.
    model, memory = scripted(Reflection=[deepen(("s-dog", "L3")), deepen(("s-dog", "L3")), deepen(("s-dog", "L3"))])
    final, _ = run_graph(QUESTION, Context(tmax=20), settings=Settings(chat_model=model), memory=memory)
    assert final["stop_reason"] == "no new evidence"
    assert layers_read(final, "s-dog") == ["L1", "L3"]
    # steps: the search, L1 of the head (s-dog stands out alone), three reflections and the L3 read (the read of
    # nothing costs no step)
    assert model.kinds().count("Reflection") == 3 and final["step"] == 1 + 1 + 3 + 1


def test_drill_escalates_l1_l2_l3(scripted):
    model, memory = scripted(Reflection=[
        deepen(("s-dog", "L2"), draft_answer="Maybe Biscuit"),
        deepen(("s-dog", "L3")),
        {"sufficient": True, "draft_answer": "Biscuit"},
    ])
    final, _ = run_graph(QUESTION, Context(tmax=20), settings=Settings(chat_model=model), memory=memory)
    dog = [d for d in final["drills"] if d["session_id"] == "s-dog"]
    assert [d["layer"] for d in dog] == ["L1", "L2", "L3"]
    assert dog[0]["step"] < dog[1]["step"] < dog[2]["step"]
    assert final["opened"]["s-dog"] == "L3" and final["stop_reason"] == "evidence sufficient"
    # L2 and L3 read the turns the search matched (with context), not the whole session.
    turns = dog[1]["turns"]
    assert turns and turns == dog[2]["turns"] and 0 in turns
    evidence = {layer: [e for e in final["evidence"] if e["session_id"] == "s-dog" and e["layer"] == layer] for layer in ("L1", "L2", "L3")}
    assert [e["text"] for e in evidence["L1"]] == ["L1 fact: I adopted a beagle puppy from the shelter and named her Biscuit."]
    assert [e["text"] for e in evidence["L2"]] == [f"L2 note of turn {t + 1}" for t in turns]
    assert evidence["L3"][0] == {"session_id": "s-dog", "date": "2024-03-10T18:30:00", "layer": "L3", "turn": 0,
                                 "text": "user: I adopted a beagle puppy from the shelter and named her Biscuit."}
    assert final["draft"] == "Biscuit" and "Draft answer from the search: Biscuit" in model.prompts_of("answer")[0]
    # Tokens of lazily built layers are the drill node's; every node's calls are counted.
    layer_calls = model.kinds().count("KeyFacts") + model.kinds().count("EvidenceNotes")
    assert final["usage"]["drill"]["calls"] == layer_calls > 0
    assert final["usage"]["reflect"]["calls"] == 3 and final["usage"]["reflect"]["input_tokens"] > 0
    assert final["answer"] == "scripted answer"


def test_decomposition_fans_out_and_reflection_adds_queries(scripted):
    model, memory = scripted(
        # Repeats, blanks and a query sharing no word with the question are dropped; at most 4 queries in all.
        SubQueries=[{"queries": ["dog name", "Dog Name", "  ", "guitar song", "dog breed", "name of my dog's vet", "dog toys"]}],
        Reflection=[{"sufficient": False, "new_queries": ["hiking trip", "dog name"]}, {"sufficient": True}],
    )
    final, events = run_graph(QUESTION, Context(tmax=20), settings=Settings(chat_model=model), memory=memory)  # max_queries 4, the question included
    searches = [e for e in events if e["event"] == "search"]
    assert [e["queries"] for e in searches] == [[QUESTION, "dog name", "dog breed", "name of my dog's vet"], ["hiking trip"]]
    assert final["searched"] == [QUESTION, "dog name", "dog breed", "name of my dog's vet", "hiking trip"]
    assert "s-dog" in searches[0]["sessions"] and "s-hiking" in searches[1]["sessions"]
    assert final["stop_reason"] == "evidence sufficient"


def test_without_decomposition_the_question_is_the_only_query(scripted):
    model, memory = scripted(SubQueries=[{"queries": ["dog name"]}])
    final, _ = run_graph(QUESTION, Context(decomposition=False), settings=Settings(chat_model=model), memory=memory)
    assert final["searched"] == [QUESTION] and "SubQueries" not in model.kinds()


def test_ids_the_model_invents_are_ignored(scripted):
    invented = {"sufficient": False, "open_sessions": ["s-unicorn"], "deepen": [{"session_id": "s-japan", "layer": "L3"}]}
    model, memory = scripted(Reflection=[invented] * 3)  # s-japan is not open
    final, _ = run_graph(QUESTION, Context(tmax=20, drill_width=1), settings=Settings(chat_model=model), memory=memory)
    # Only what the policy wants is read: s-dog, which stands out alone.
    assert [(d["session_id"], d["layer"]) for d in final["drills"]] == [(s, "L1") for s in policy.wanted(final)]
    assert [d["session_id"] for d in final["drills"]] == ["s-dog"]
    assert final["stop_reason"] == "nothing left to try"


GOOD = {
    "ResolvedDates": {"ranges": [{"expression": "my birthday trip", "start": "2024-03-09", "end": "2024-03-09"}]},
    "SubQueries": {"queries": ["dog food"]},
    "Reflection": {"sufficient": True, "draft_answer": "Biscuit eats kibble"},
    "notes": "## Relevant facts\n- scripted notes",
    "answer": "scripted answer",
}
# Every attempt of a failing decision is unusable: not JSON, JSON off the schema, or empty; a transient error of the
# server (a timeout) is tried again (`ask_structured`).
FAILING = {
    "dates": {"ResolvedDates": [BAD, {"ranges": [{"expression": "my birthday trip"}]}, BAD]},
    "decompose": {"SubQueries": [TimeoutError("server too slow"), {"queries": "dog food"}, BAD]},
    "reflect": {"Reflection": [BAD, {"sufficient": "perhaps", "deepen": [{"session_id": "s-dog", "layer": "L9"}]}, BAD] * 3},
    "notes": {"notes": [""]},  # an empty reply (a model that raises is an error: test_model_failures.py)
    "answer": {"answer": [""]},
}


@pytest.mark.parametrize("failing", [*FAILING, "all"])
def test_unusable_model_output_falls_back(scripted, failing):
    question = "What did I feed my dog the day before my birthday trip?"  # "before", "birthday": the model resolves dates
    script = {kind: [reply] * 3 for kind, reply in GOOD.items()}
    for name, replies in FAILING.items():
        if failing in (name, "all"):
            script.update({kind: list(r) for kind, r in replies.items()})
    model, memory = scripted(**script)
    final, events = run_graph(question, Context(tmax=12), settings=Settings(chat_model=model), memory=memory)

    assert isinstance(final["answer"], str) and final["answer"].strip()
    reflect_prompts = model.prompts_of("Reflection")
    first_search = next(e for e in events if e["event"] == "search")
    if failing in ("dates", "all"):
        assert "ResolvedDates" in model.kinds() and all("Dates:" not in p for p in reflect_prompts)  # no hint
    else:
        assert 'Dates: "my birthday trip" = 2024-03-09 (Saturday)' in reflect_prompts[0]
    # The two events ("before") are split without the model; its sub-query is added when usable.
    split = [question, *named_events(question)]
    assert len(split) == 3 and first_search["queries"] == (split if failing in ("decompose", "all") else [*split, "dog food"])
    if failing in ("reflect", "all"):
        # The disclosure policy decides: it opens what it wants, reads deeper what L1 did not cover, then stops.
        assert final["usage"]["reflect"]["calls"] >= 1 and final["draft"] == ""
        assert set(final["opened"]) == set(policy.wanted(final)) and final["stop_reason"] == "nothing left to try"
        assert all(layer == "L3" or not policy.uncovered(final, sid) for sid, layer in final["opened"].items())
    else:
        assert final["draft"] == "Biscuit eats kibble" and final["stop_reason"] == "evidence sufficient"
    if failing in ("notes", "all"):
        assert final["notes"].startswith("## Evidence\n[2024-")  # the evidence itself, oldest first
    else:
        assert final["notes"] == GOOD["notes"]
    if failing == "all":  # no draft and no answer from the model: the answer quotes the evidence instead
        assert final["answer_mode"] == "extractive" and final["answer"].startswith((QUOTED, NOT_FOUND))
    else:
        assert final["answer_mode"] == "generative"
        assert final["answer"] == ("Biscuit eats kibble" if failing == "answer" else "scripted answer")


def test_without_controller_one_search_and_l1_only(scripted):
    model, memory = scripted(Reflection=[deepen(("s-dog", "L3"))])
    final, events = run_graph(QUESTION, Context(controller=False, drill_width=3), settings=Settings(chat_model=model), memory=memory)
    # One round: the head of the ranking (s-dog stands out alone).
    assert [e["event"] for e in events] == ["search", "drill"]
    assert [(d["session_id"], d["layer"]) for d in final["drills"]] == [(s, "L1") for s in policy.wanted(final)]
    assert [d["session_id"] for d in final["drills"]] == ["s-dog"]
    assert {e["layer"] for e in final["evidence"]} == {"L1"}
    assert "Reflection" not in model.kinds() and "EvidenceNotes" not in model.kinds()
    assert final["stop_reason"] == "no controller: one retrieval pass" and final["step"] == 2


def test_layers_ablation_never_reads_a_disallowed_layer(scripted):
    model, memory = scripted(Reflection=[deepen(("s-dog", "L2"), ("s-knee", "L2")), {"sufficient": True}])
    final, _ = run_graph(QUESTION, Context(layers="L1,L3"), settings=Settings(chat_model=model), memory=memory)
    assert layers_read(final, "s-dog") == ["L1", "L3"]  # L2 asked for, the next allowed layer read
    assert all(d["layer"] != "L2" for d in final["drills"]) and "EvidenceNotes" not in model.kinds()

    model, memory = scripted()
    final, _ = run_graph(QUESTION, Context(layers="L3"), settings=Settings(chat_model=model), memory=memory)
    assert {d["layer"] for d in final["drills"]} == {"L3"}  # first contact at the shallowest allowed layer
    assert "KeyFacts" not in model.kinds() and "EvidenceNotes" not in model.kinds()


def test_custom_stream_reports_every_search_and_drill(scripted):
    model, memory = scripted(Reflection=[deepen(("s-dog", "L2")), {"sufficient": True}])
    final, events = run_graph(QUESTION, Context(tmax=20), settings=Settings(chat_model=model), memory=memory)
    drills = [e for e in events if e["event"] == "drill"]
    assert [{k: e[k] for k in ("step", "session_id", "layer", "turns")} for e in drills] == final["drills"]
    assert drills[0]["session_id"] == "s-dog" and drills[0]["layer"] == "L1" and drills[-1]["layer"] == "L2"
    search = events[0]
    assert search["event"] == "search" and search["step"] == 1 and search["sessions"][0] == "s-dog"


def test_the_notes_and_the_answer_receive_the_evidence_oldest_first_with_the_latest_session_marked(scripted):
    # The reflection opens two sessions; the notes and the answer prompts then carry their evidence in date order.
    model, memory = scripted(Reflection=[{"sufficient": False, "open_sessions": ["s-knee", "s-hiking"]},
                                         {"sufficient": True, "draft_answer": "scripted draft"}])
    final, _ = run_graph("Which outdoor activities did I do?", Context(), settings=Settings(chat_model=model), memory=memory)
    (notes_prompt,) = model.prompts_of("notes")
    lines = [line for line in notes_prompt.splitlines() if line.startswith("[2024-")]
    assert lines == sorted(lines) and {"s-knee", "s-hiking"} <= {line.split(" | ")[1] for line in lines}
    latest = max(e["date"] for e in final["evidence"])[:16].replace("T", " ")
    assert all(line.startswith(f"[{latest}") == ("| latest]" in line) for line in lines)
    assert 'marked "latest" in the notes' in model.prompts_of("answer")[0]  # the answer prefers the latest value
