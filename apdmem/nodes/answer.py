"""`answer`: the final reply from the organized notes and the controller's draft."""

from __future__ import annotations

from apdmem import prompts
from apdmem.memory.records import Usage
from apdmem.nodes.common import annotate, usage_update
from apdmem.nodes.notes import generate

NOT_FOUND = "I don't have that information from our past conversations."


def answer(state, runtime) -> dict:
    ctx, usage = runtime.context, Usage()
    draft = state.get("draft", "") if ctx.draft_answer else ""
    reply = ""
    if state.get("evidence"):
        prompt = prompts.ANSWER.format(today=state.get("today", ""), question=state["question"],
                                       notes=state.get("notes", ""), draft=draft or "(none)")
        reply = generate(ctx.settings.generator(), prompt, usage)
    evidence = state.get("evidence", [])
    annotate(step=state.get("step", 0), sessions=sorted({e["session_id"] for e in evidence}),
             layers=sorted({e["layer"] for e in evidence}), evidence_items=len(evidence))
    return {"answer": reply or draft or NOT_FOUND, **usage_update("answer", usage)}
