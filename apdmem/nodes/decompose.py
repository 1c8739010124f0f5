"""`decompose`: a compound question becomes sub-queries; a simple one passes through."""

from __future__ import annotations

from pydantic import BaseModel, Field

from apdmem import prompts
from apdmem.memory.index import tokenize
from apdmem.memory.records import Usage
from apdmem.models import ask_structured
from apdmem.nodes.common import annotate, usage_update


class SubQueries(BaseModel):
    """Search queries for the parts of a question."""

    queries: list[str] = Field(description="one short query per fact needed", json_schema_extra={"maxItems": 6})


def decompose(state, runtime, *, settings) -> dict:
    """The question itself is always the first query; the model may add sub-queries (never required)."""
    ctx, usage = runtime.context, Usage()
    question = state["question"]
    queries = [question]
    if ctx.decomposition:
        prompt = prompts.DECOMPOSE.format(today=state.get("today", ""), question=question, max_queries=ctx.max_queries)
        out = ask_structured(settings.controller(), SubQueries, prompt, usage)
        for query in out.queries if out else []:
            query = query.strip()
            if usable(query, question) and query.lower() not in {q.lower() for q in queries} and len(queries) < ctx.max_queries:
                queries.append(query)
    annotate(queries=queries)
    return {"queries": queries, **usage_update("decompose", usage)}


def usable(query: str, question: str) -> bool:
    """Whether a proposed sub-query is a part of the question: one line sharing a content word with it. A weak
    model's debris (a stray comma, a URL fragment, text in another language) would only find noise, and the
    disclosure policy opens a session for every sub-query.

    >>> usable("when did I start reading The Nightingale", "How long did The Nightingale take me?"), usable(".com/en-US", "How often do I see Dr. Smith?")
    (True, False)
    """
    words = set(tokenize(query))
    return bool(words & set(tokenize(question))) and "\n" not in query
