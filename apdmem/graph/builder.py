"""The progressive-disclosure controller, wired as the paper draws it."""

from __future__ import annotations

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


def build_graph(**compile_options):
    """The compiled controller graph.

    >>> graph = build_graph()                                                        # doctest: +SKIP
    >>> out = graph.invoke({"question": "Where did I go hiking?", "question_date": "2024-05-01"},
    ...                    context=Context(user_id="alice", controller_model="openai:gpt-4.1"))  # doctest: +SKIP
    >>> out["answer"], out["opened"], out["step"]                                     # doctest: +SKIP

    `compile_options` go to `StateGraph.compile` (e.g. a checkpointer when embedding it in an app).
    """
    builder = StateGraph(State, context_schema=Context, input_schema=InputState, output_schema=OutputState)
    builder.add_node(normalize_dates)
    builder.add_node(decompose)
    builder.add_node(search)
    builder.add_node(drill)
    builder.add_node(reflect)
    builder.add_node(converge)
    builder.add_node(synthesize_notes)
    builder.add_node(answer)

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


graph = build_graph()  # for langgraph.json / LangGraph Studio
