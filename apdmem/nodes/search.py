"""`search`: hybrid search over L0 for every pending query, rescored by the cross-encoder; sessions merged by their
best unit."""

from __future__ import annotations

from apdmem.memory.lifts import collect, linked
from apdmem.nodes import policy
from apdmem.nodes.common import annotate, emit, open_memory
from apdmem.tools import search_memory


def search(state, runtime, *, settings, memory=None) -> dict:
    """Search each query not searched yet on its own and rescore its hits with the cross-encoder (the policy reads
    how those scores fall off). Each query on its own, so that what every sub-query found stays visible (the
    disclosure policy covers each one); `collect` merges the hits into the candidate sessions. With the
    `follow_links` option and a question that gathers several sessions (`policy.follows_links`), the sessions most
    strongly linked to the question's first ones are lifted into its ranking, and so is its best-ranked session
    dated near each of its dates (`policy.lift`). How many sessions the memory holds goes to the policy too
    (``memory_sessions``: a small memory is opened whole, `policy.small`). `settings` and `memory` are what the graph was built with
    (`build_graph`)."""
    ctx = runtime.context
    searched = set(state.get("searched", []))
    queries = list(dict.fromkeys(q for q in state.get("queries", []) if q not in searched))
    candidates = {sid: {**c, "spans": list(c["spans"]), "hits": dict(c["hits"])} for sid, c in state.get("candidates", {}).items()}
    memory, found = open_memory(runtime, settings, memory), []
    reranker = settings.reranker()
    # The question's dates are no search preference (they reach the models as `date_hints`, and one session dated
    # near each is lifted and opened: `policy.lift`, `policy.wanted`): on the 151 dev questions preferring the sessions
    # dated in them lowered the policy's evidence recall (0.986 -> 0.974, temporal questions 0.961 -> 0.914;
    # docs/controller.md). A date in a question says when something happened, and the evidence is often told in other
    # sessions: a preferred day crowds them out of the head.
    for query in queries:
        found += collect(candidates, query, search_memory(memory, query, k=ctx.top_k, reranker=reranker))
    sessions = list(dict.fromkeys(found))
    step = state.get("step", 0) + 1
    annotate(step=step, queries=queries, session_ids=sessions)
    emit(runtime, event="search", step=step, queries=queries, sessions=sessions)
    question = state.get("question", "")
    if question in queries:
        links = linked(memory, list(candidates)) if ctx.follow_links and policy.follows_links(question) else {}
        policy.lift(candidates, question, links, state.get("date_ranges", []))
        for sid, candidate in candidates.items():  # the links just lifted: their terms as the trace shows them
            if "from" in candidate.get("via", {}):
                via = candidate["via"] = {**candidate["via"]}
                via["terms"] = memory.spelled(via["terms"], [via["from"], sid])
    return {"candidates": candidates, "searched": queries, "step": step, "memory_sessions": len(memory.manifest["sessions"])}
