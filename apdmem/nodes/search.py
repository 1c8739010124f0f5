"""`search`: hybrid search over L0 for every pending sub-query; sessions merged by their best unit."""

from __future__ import annotations

from apdmem.nodes.common import annotate, emit, open_memory
from apdmem.tools import search_memory


def search(state, runtime) -> dict:
    """Search the queries not searched yet, preferring sessions in the question's date ranges; merge hits into
    the candidate sessions (best score kept, matched unit spans accumulated for later L2/L3 reads)."""
    ctx = runtime.context
    searched = set(state.get("searched", []))
    queries = [q for q in state.get("queries", []) if q not in searched]
    candidates = {sid: {**c, "spans": list(c["spans"])} for sid, c in state.get("candidates", {}).items()}
    ranges = [tuple(r) for r in state.get("date_ranges", [])]
    docs = search_memory(open_memory(runtime), queries, k=ctx.top_k, date_range=ranges or None) if queries else []
    for doc in docs:
        meta = doc.metadata
        slot = candidates.setdefault(meta["session_id"], {"date": meta["date"], "summary": doc.page_content, "score": 0.0, "spans": []})
        if meta["score"] > slot["score"]:
            slot.update(summary=doc.page_content, score=meta["score"])
        if meta["span"] not in slot["spans"]:
            slot["spans"].append(meta["span"])
    step = state.get("step", 0) + 1
    annotate(step=step, queries=queries, session_ids=[d.metadata["session_id"] for d in docs])
    emit(runtime, event="search", step=step, queries=queries, sessions=[d.metadata["session_id"] for d in docs])
    return {"candidates": candidates, "searched": queries, "step": step}
