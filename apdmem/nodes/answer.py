"""`answer`: the final reply, and which mode wrote it.

- **generative**: the generator model writes the reply from the organized notes and the controller's draft.
- **extractive**: without a generative model (the embedded default, ``chat_model="local"``), or when the model
  gives nothing, the reply quotes the disclosed sentences that answer the question best: the cross-encoder
  scores each sentence against the question, and only sentences found word for word in their session are
  quoted, with the session's date and who said them. No model writes a word of it.
"""

from __future__ import annotations

from apdmem import prompts
from apdmem.memory.records import Usage
from apdmem.nodes.common import annotate, open_memory, usage_update
from apdmem.nodes.notes import generate
from apdmem.nodes.quotes import beside, verbatim_sentences

NOT_FOUND = "I don't have that information from our past conversations."
QUOTED = "From your conversations (quoted, no model wrote this):"
UNCLEAR = "The closest I found in your conversations (quoted, no model wrote this; it may not answer the question):"
QUOTES = 3  # most sentences quoted
RELEVANT = 0.0  # cross-encoder logit above which a sentence answers the question (ms-marco: relevant > 0)


def answer(state, runtime, *, settings, memory=None) -> dict:
    ctx, usage = runtime.context, Usage()
    model = settings.generator()
    draft = state.get("draft", "") if ctx.draft_answer else ""
    reply = ""
    if state.get("evidence") and model is not None:
        prompt = prompts.ANSWER.format(today=state.get("today", ""), question=state["question"],
                                       notes=state.get("notes", ""), draft=draft or "(none)")
        reply = generate(model, prompt, usage)
    reply, mode = (reply or draft, "generative") if reply or draft else (None, "extractive")
    if reply is None and state.get("reckoning"):  # a temporal or counting question, computed (`nodes.reckon`)
        reply = state["reckoning"]
    if reply is None:
        reply = extractive_answer(state["question"], state.get("evidence", []), open_memory(runtime, settings, memory),
                                   settings.reranker())
    evidence = state.get("evidence", [])
    annotate(step=state.get("step", 0), answer_mode=mode, sessions=sorted({e["session_id"] for e in evidence}),
             layers=sorted({e["layer"] for e in evidence}), evidence_items=len(evidence))
    return {"answer": reply, "answer_mode": mode, **usage_update("answer", usage)}


def extractive_answer(question: str, evidence: list, memory, reranker) -> str:
    """The reply of the extractive mode: the QUOTES disclosed sentences the cross-encoder finds closest to the
    question, best first, each quoted with its session date and speaker, under QUOTED when the best one is
    relevant (above RELEVANT), else under UNCLEAR; NOT_FOUND when nothing was disclosed."""
    quotes = verbatim_sentences(evidence, memory)
    if not quotes:
        return NOT_FOUND
    scores = reranker.score([(question, sentence) for sentence, _, _ in quotes])
    ranked = sorted(zip(scores, quotes), key=lambda pair: -pair[0])[:QUOTES]
    heading = QUOTED if ranked[0][0] > RELEVANT else UNCLEAR
    return "\n".join([heading, *(f'- {date[:10]}, {speaker}: "{sentence}"{beside(sentence, date)}' for _, (sentence, date, speaker) in ranked)])
