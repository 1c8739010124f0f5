"""`reflect`: is the evidence sufficient? What is missing? Proposes searches or drills and drafts an answer."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from apdmem import prompts
from apdmem.memory.records import Usage
from apdmem.models import ask_structured
from apdmem.nodes import policy
from apdmem.nodes.common import annotate, usage_update
from apdmem.tools import format_evidence

CANDIDATES_SHOWN = 10
SUMMARY_CHARS = 300


class DeepenRequest(BaseModel):
    session_id: str
    layer: Literal["L2", "L3"] = Field(description="L2 detailed notes, L3 exact messages")


class Reflection(BaseModel):
    """The controller's judgement of the evidence so far."""

    sufficient: bool
    missing: str = ""
    draft_answer: str = ""
    open_sessions: list[str] = Field(default_factory=list, json_schema_extra={"maxItems": 5})
    deepen: list[DeepenRequest] = Field(default_factory=list, json_schema_extra={"maxItems": 4})
    new_queries: list[str] = Field(default_factory=list, json_schema_extra={"maxItems": 3})


def render_candidates(state) -> str:
    ranked = sorted(state.get("candidates", {}).items(), key=lambda kv: -kv[1]["score"])[:CANDIDATES_SHOWN]
    opened = state.get("opened", {})
    lines = []
    for sid, c in ranked:
        summary = " ".join(c["summary"].split())[:SUMMARY_CHARS] or (f"(linked from {c['via']['from']})" if "via" in c else "")
        lines.append(f"- {sid} | {c['date'][:10]} | read: {opened.get(sid, 'L0')} | {summary}")
    return "\n".join(lines) or "(none)"


def reflect(state, runtime, *, settings) -> dict:
    ctx, usage = runtime.context, Usage()
    decision = None
    # A reflection is a step of the budget: with none left, the loop stops at `converge` anyway.
    if ctx.reflection and ctx.controller and state.get("step", 0) < ctx.tmax:
        prompt = prompts.REFLECT.format(
            today=state.get("today", ""),
            question=state["question"],
            date_hints="Dates: " + "; ".join(state["date_hints"]) if state.get("date_hints") else "",
            candidates=render_candidates(state),
            evidence=format_evidence(state.get("evidence", [])) or "(nothing read yet)",
            step=state.get("step", 0),
            tmax=ctx.tmax,
        )
        decision = ask_structured(settings.controller(), Reflection, prompt, usage)
    candidates, searched, opened = state.get("candidates", {}), set(state.get("searched", [])), state.get("opened", {})
    targets, queries = [], []
    if decision is not None:
        targets = [{"session_id": s, "layer": "L1"} for s in decision.open_sessions[:5] if s in candidates and s not in opened]
        targets += [{"session_id": d.session_id, "layer": d.layer} for d in decision.deepen[:4] if d.session_id in opened]
        queries = [q.strip() for q in decision.new_queries[:3] if q.strip() and q.strip() not in searched]
    sufficient = bool(decision and decision.sufficient)
    if not (sufficient or targets or queries):
        # No reflection, an unusable one, or one that wants more but names nothing usable: the policy decides.
        targets = policy.plan(state, ctx)
    step = state.get("step", 0) + (1 if usage.calls else 0)  # only a model's reflection spends a step
    annotate(step=step, sufficient=sufficient, targets=targets, new_queries=queries)
    return {
        "sufficient": sufficient,
        "draft": (decision.draft_answer.strip() if decision else "") or state.get("draft", ""),
        "targets": targets,
        "queries": [*state.get("queries", []), *queries],
        "step": step,
        **usage_update("reflect", usage),
    }
