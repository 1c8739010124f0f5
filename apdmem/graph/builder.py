"""The progressive-disclosure controller, wired as the paper draws it."""

from __future__ import annotations

from functools import partial

from langgraph.graph import END, START, StateGraph

from apdmem.graph.context import Context
from apdmem.graph.state import InputState, OutputState, State
from apdmem.nodes.answer import answer
from apdmem.nodes.converge import converge, route
from apdmem.nodes.dates import normalize_dates
from apdmem.nodes.decompose import decompose
from apdmem.nodes.drill import drill
from apdmem.nodes.notes import synthesize_notes
from apdmem.nodes.reflect import reflect
from apdmem.nodes.search import search
from apdmem.settings import Settings


def build_graph(*, settings: Settings | None = None, memory=None, **compile_options):
    """The compiled controller graph, bound to a deployment: `settings` (default: `Settings()`, from the
    environment) say where memories live and which models run; `memory`, an open `Memory`, is read instead of
    the run's user's memory in that store (an application that already holds one, tests). Neither is part of a
    run's `Context`, so a server's client can choose neither.

    >>> graph = build_graph(settings=Settings(chat_model="openai:gpt-4.1-mini"))      # doctest: +SKIP
    >>> out = graph.invoke({"question": "Where did I go hiking?", "question_date": "2024-05-01"},
    ...                    context=Context(user_id="alice", tmax=12))                     # doctest: +SKIP
    >>> out["answer"], out["opened"], out["step"]                                     # doctest: +SKIP

    `compile_options` go to `StateGraph.compile` (e.g. a checkpointer when embedding it in an app).
    """
    settings = settings or Settings()
    # Nodes take what the graph is bound to as keyword arguments; the run's `Context` stays plain JSON.
    builder = StateGraph(State, context_schema=Context, input_schema=InputState, output_schema=OutputState)
    builder.add_node("normalize_dates", partial(normalize_dates, settings=settings))
    builder.add_node("decompose", partial(decompose, settings=settings))
    builder.add_node("search", partial(search, settings=settings, memory=memory))
    builder.add_node("drill", partial(drill, settings=settings, memory=memory))
    builder.add_node("reflect", partial(reflect, settings=settings))
    builder.add_node(converge)
    builder.add_node("synthesize_notes", partial(synthesize_notes, settings=settings, memory=memory))
    builder.add_node("answer", partial(answer, settings=settings, memory=memory))

    builder.add_edge(START, "normalize_dates")
    builder.add_edge("normalize_dates", "decompose")
    builder.add_edge("decompose", "search")
    builder.add_edge("search", "drill")
    builder.add_edge("drill", "reflect")
    builder.add_edge("reflect", "converge")
    builder.add_conditional_edges("converge", route, ["search", "drill", "synthesize_notes"])
    builder.add_edge("synthesize_notes", "answer")
    builder.add_edge("answer", END)
    return builder.compile(name="apdmem", **compile_options)


graph = build_graph()  # for langgraph.json / LangGraph Studio: the server's settings come from its environment
