"""`synthesize_notes`: organize the evidence for the question (facts, timeline, updates, counts, hint).

It organizes; it does not answer. Without a generative model (the extractive default) or when it replies nothing, the
notes are the evidence itself, in date order, so the answer node always has grounding. For a temporal or
counting question the notes end with what the dated evidence computes (`apdmem.nodes.reckon`: a date, an order,
a duration, a de-duplicated list), which the extractive reply states as it is. When the memory does not hold the
answer (`apdmem.nodes.holds`), the notes say so instead and nothing is computed from the evidence that came closest.
"""

from __future__ import annotations

from apdmem import prompts
from apdmem.memory.records import Usage
from apdmem.models import generate
from apdmem.nodes.common import annotate, emit, open_memory, usage_update
from apdmem.nodes.holds import holding
from apdmem.nodes.reckon import kind, reckon_evidence
from apdmem.tools import format_evidence


def synthesize_notes(state, runtime, *, settings, memory=None) -> dict:
    ctx, usage = runtime.context, Usage()
    evidence = format_evidence(state.get("evidence", []))
    notes = ""
    if evidence and ctx.organized_notes:
        prompt = prompts.SYNTHESIZE_NOTES.format(
            today=state.get("today", ""),
            question=state["question"],
            date_hints="Dates: " + "; ".join(state["date_hints"]) if state.get("date_hints") else "",
            evidence=evidence,
        )
        notes = generate(settings.generator(), prompt, usage)
    notes = notes or ("## Evidence\n" + evidence if evidence else "No relevant memory was found.")
    memory = open_memory(runtime, settings, memory)
    held = holding(state["question"], state.get("evidence", []), memory, settings.reranker(), state.get("memory_sessions", 0))
    reckoning = ""
    if not held.held:
        notes += "\n\n" + held.notes()
    elif evidence and kind(state["question"]):
        reckoning = reckon_evidence(state, memory, settings.reranker())
    if reckoning:
        notes += "\n\n## Computed from the dated evidence\n" + reckoning
    annotate(evidence_items=len(state.get("evidence", [])), holding=held.traced())
    if held.unsaid:  # the decision weighed something: the stream shows it (`apdmem ask` prints it)
        emit(runtime, event="holding", **held.traced())
    return {"notes": notes, "reckoning": reckoning, "holding": held.traced(), **usage_update("synthesize_notes", usage)}
