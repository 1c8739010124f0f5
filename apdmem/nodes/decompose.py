"""`decompose`: a compound question becomes sub-queries; a simple one passes through."""

from __future__ import annotations

from pydantic import BaseModel, Field

from apdmem import prompts
from apdmem.memory.index import tokenize
from apdmem.memory.records import Usage
from apdmem.models import ask_structured
from apdmem.nodes.common import usage_update


class SubQueries(BaseModel):
    """Search queries for the parts of a question."""

    queries: list[str] = Field(description="one short query per fact needed", json_schema_extra={"maxItems": 6})


def decompose(state, runtime) -> dict:
    """The question itself is always the first query; the model may add sub-queries (never required)."""
    ctx, usage = runtime.context, Usage()
    question = state["question"]
    queries = [question]
    if ctx.decomposition:
        prompt = prompts.DECOMPOSE.format(today=state.get("today", ""), question=question, max_queries=ctx.max_queries)
        out = ask_structured(ctx.settings.controller(), SubQueries, prompt, usage)
        for query in out.queries if out else []:
            query = query.strip()
            # A weak model's debris (a stray comma, several lines of text) is not a query: it would only find noise.
            usable = tokenize(query) and "\n" not in query
            if usable and query.lower() not in {q.lower() for q in queries} and len(queries) < ctx.max_queries:
                queries.append(query)
    return {"queries": queries, **usage_update("decompose", usage)}
