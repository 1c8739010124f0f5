"""`converge`: back to search or drill, or on to synthesis.

The loop stops at the step budget Tmax, when a round added no new evidence, when the controller judges
the evidence sufficient, or when it has nothing left to try.
"""

from __future__ import annotations

from apdmem.nodes.common import annotate


def converge(state, runtime) -> dict:
    ctx = runtime.context
    pending = [q for q in state.get("queries", []) if q not in set(state.get("searched", []))]
    if not ctx.controller:
        route, reason = "synthesize_notes", "no controller: one retrieval pass"
    elif state.get("step", 0) >= ctx.tmax:
        route, reason = "synthesize_notes", "step budget reached"
    elif state.get("new_evidence", 0) == 0:
        route, reason = "synthesize_notes", "no new evidence"
    elif state.get("sufficient"):
        route, reason = "synthesize_notes", "evidence sufficient"
    elif pending:
        route, reason = "search", "new queries"
    elif state.get("targets"):
        route, reason = "drill", "sessions to read"
    else:
        route, reason = "synthesize_notes", "nothing left to try"
    annotate(route=route, reason=reason, step=state.get("step", 0))
    return {"route": route, "stop_reason": reason}


def route(state) -> str:
    """The edge taken after `converge`."""
    return state["route"]
