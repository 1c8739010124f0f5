"""Reads that do not depend on each other run side by side: a drill round, L2 groups of turns, eager L1.
A model that sleeps a fixed time per call stands in for a hosted model's round trip."""

import time

import pytest
from graph_helpers import ScriptedChatModel, clean_environment
from langchain_core.callbacks import BaseCallbackHandler
from langgraph.runtime import Runtime

from apdmem.graph import Context, Settings, build_graph
from apdmem.memory.records import Usage
from apdmem.nodes.drill import drill

DELAY = 1.0  # seconds per model call


class SleepingChatModel(ScriptedChatModel):
    """Replies as `ScriptedChatModel` does, after `delay` seconds, like a remote model's round trip."""

    delay: float = DELAY

    def _next(self, kind: str, prompt: str):
        time.sleep(self.delay)
        return super()._next(kind, prompt)


@pytest.fixture(autouse=True)
def environment(monkeypatch):
    clean_environment(monkeypatch)


@pytest.fixture
def sleepy(ingested):
    return ingested(SleepingChatModel())


def run_drill(memory, model, targets, **context):
    state = {"question": "q", "candidates": {}, "targets": targets}
    started = time.perf_counter()
    update = drill(state, Runtime(context=Context(**context)), settings=Settings(chat_model=model), memory=memory)
    return update, time.perf_counter() - started


def test_a_drill_of_three_sessions_costs_about_one_call(sleepy):
    model, memory = sleepy
    targets = [{"session_id": sid, "layer": "L1"} for sid in ("s-dog", "s-bread", "s-job")]
    update, seconds = run_drill(memory, model, targets, drill_width=3)
    assert [d["session_id"] for d in update["drills"]] == ["s-dog", "s-bread", "s-job"]
    assert model.kinds().count("KeyFacts") == 3
    assert seconds < 2 * DELAY, f"three concurrent L1 reads took {seconds:.2f}s"
    assert update["usage"]["drill"]["calls"] == 3 and update["usage"]["drill"]["critical_calls"] == 1
    # Whichever read finished first, evidence keeps the order of the targets.
    assert [e["session_id"] for e in update["evidence"]] == ["s-dog", "s-bread", "s-job"]


def test_drill_width_bounds_the_reads_in_flight(sleepy):
    model, memory = sleepy
    targets = [{"session_id": sid, "layer": "L1"} for sid in ("s-dog", "s-bread", "s-job")]
    update, seconds = run_drill(memory, model, targets, drill_width=1)
    # drill_width 1 reads one session of the round at a time (and caps what the policy plans, not what is asked)
    assert seconds >= 3 * DELAY
    assert update["usage"]["drill"]["calls"] == 3 and update["usage"]["drill"]["critical_calls"] == 3


def test_l2_groups_of_turns_are_generated_concurrently(sleepy):
    model, memory = sleepy
    usage = Usage()
    started = time.perf_counter()
    notes = memory.notes("s-dog", usage=usage)  # six turns: two groups of four and two
    assert time.perf_counter() - started < 2 * DELAY
    assert sorted(notes) == list(range(6)) and usage.calls == 2 and usage.critical_calls == 1
    assert memory.usage.calls == 2  # the memory's running total sees them too


def test_eager_l1_builds_every_session_concurrently_and_first_reads_cost_nothing(sleepy, history):
    model, memory = sleepy
    started = time.perf_counter()
    spent = memory.build_facts(progress=False)
    seconds = time.perf_counter() - started
    assert spent.calls == len(history) and spent.critical_calls == 2  # seven sessions, four at a time
    assert seconds < 3 * DELAY
    before = len(model.calls)
    usage = Usage()
    assert memory.facts("s-dog", usage=usage) and usage.calls == 0 and len(model.calls) == before
    assert memory.build_facts().calls == 0  # nothing left to build


def test_usage_adds_up_sequential_calls_and_takes_the_longest_of_concurrent_ones():
    def chain(n):
        usage = Usage()
        for _ in range(n):
            usage.add(None)
        return usage

    total = chain(1)  # e.g. decompose
    total.merge_concurrent([chain(1), chain(3), chain(2)])  # a drill: three reads side by side
    total.merge(chain(1))  # then a reflection
    assert (total.calls, total.critical_calls) == (8, 1 + 3 + 1)
    total.merge_concurrent([chain(1)] * 5, width=2)  # five reads, two at a time: three waves
    assert (total.calls, total.critical_calls) == (13, 5 + 3)


def test_concurrent_reads_stay_inside_the_runs_trace(sleepy):
    """Model calls made by a drill's worker threads are children of the drill node's run (callbacks, LangSmith
    tracing and `messages` streaming follow the run's context into the threads)."""
    class Recorder(BaseCallbackHandler):
        def __init__(self):
            self.model_runs = []

        def on_chain_start(self, serialized, inputs, *, metadata=None, name=None, **kwargs):
            if name == "run":  # the scripted model's structured-output runnable
                self.model_runs.append((metadata or {}).get("langgraph_node"))

    model, memory = sleepy
    model.delay = 0.0
    recorder = Recorder()
    context = Context(reflection=False, decomposition=False)
    build_graph(settings=Settings(chat_model=model), memory=memory).invoke({"question": "When is my puppy's first vet appointment?", "question_date": "2024/06/01 (Sat) 10:00"},
                         context=context, config={"callbacks": [recorder]})
    assert recorder.model_runs and recorder.model_runs.count("drill") == model.kinds().count("KeyFacts")
