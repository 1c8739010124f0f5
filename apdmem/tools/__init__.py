"""Agent-facing memory tools: `search_memory`, `read_facts`, `read_notes`, `read_raw`.

The functions below are what the controller graph's nodes call; `make_memory_tools` wraps the same
functions as LangChain tools bound to one user's memory, for any agent.
"""

from __future__ import annotations

from langchain_core.documents import Document
from langchain_core.tools import BaseTool, tool

from apdmem.graph.state import Evidence
from apdmem.memory.layers import TURN_CHARS
from apdmem.memory.records import Usage
from apdmem.memory.retriever import rerank

MAX_RAW_TURNS = 12  # an L3 read returns at most this many turns; ask again with other turns for more


def search_memory(memory, queries: str | list[str], k: int = 10, date_range=None, reranker=None) -> list[Document]:
    """Top-k sessions for one or several queries, each with its best L0 summary; sessions in `date_range`
    (a (start, end) pair or a list of them, see `Memory.search`) rank higher. With a `reranker` (a
    cross-encoder) the k sessions are rescored for the query (one query only; see `retriever.rerank`)."""
    docs = memory.search(queries, k=k, date_range=date_range)
    if reranker is None:
        return docs
    if not isinstance(queries, str):
        raise ValueError("reranking needs one query, not a list")
    return rerank(queries, docs, reranker)


def read_facts(memory, session_id: str, usage: Usage | None = None) -> list[Evidence]:
    """L1: the session's key facts about the user (tokens of a first read are added to `usage`)."""
    date = memory.session(session_id).date.isoformat()
    return [Evidence(session_id=session_id, date=date, layer="L1", turn=None, text=f) for f in memory.facts(session_id, usage=usage)]


def read_notes(memory, session_id: str, turns: list[int] | None = None, usage: Usage | None = None) -> list[Evidence]:
    """L2: evidence notes of the given 0-based turns (all turns when None), one item per turn (tokens of a first
    read are added to `usage`)."""
    date = memory.session(session_id).date.isoformat()
    notes = memory.notes(session_id, turns, usage=usage)
    return [Evidence(session_id=session_id, date=date, layer="L2", turn=t, text=" ".join(n)) for t, n in sorted(notes.items())]


def read_raw(memory, session_id: str, turns: list[int] | None = None, usage: Usage | None = None) -> list[Evidence]:
    """L3: the exact messages of the given 0-based turns (the first MAX_RAW_TURNS when None); no model call, so
    `usage` is left as it is."""
    session = memory.session(session_id)
    wanted = [t for t in (turns if turns is not None else range(len(session.turns))) if 0 <= t < len(session.turns)]
    items = []
    for t in wanted[:MAX_RAW_TURNS]:
        turn = session.turns[t]
        text = turn.content if len(turn.content) <= TURN_CHARS * 2 else turn.content[: TURN_CHARS * 2] + " [...]"
        items.append(Evidence(session_id=session_id, date=session.date.isoformat(), layer="L3", turn=t, text=f"{turn.speaker or turn.role}: {text}"))
    return items


def format_evidence(items: list[Evidence]) -> str:
    """Evidence as lines `[date | session | layer turn] text`, oldest session first."""
    ordered = sorted(items, key=lambda e: (e["date"], e["session_id"], e["turn"] if e["turn"] is not None else -1))
    lines = []
    for e in ordered:
        where = e["layer"] if e["turn"] is None else f"{e['layer']} turn {e['turn'] + 1}"
        lines.append(f"[{e['date'][:16].replace('T', ' ')} | {e['session_id']} | {where}] {e['text']}")
    return "\n".join(lines)


def _turns(text: str | None) -> list[int] | None:
    """'3,5-7' (1-based, as shown to agents) -> [2, 4, 5, 6]; empty -> None (all)."""
    if not text or not text.strip():
        return None
    out: list[int] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        out.extend(range(int(low) - 1, int(high or low)))
    return out


def make_memory_tools(memory) -> list[BaseTool]:
    """LangChain tools over one user's memory, e.g. for `langchain.agents.create_agent(model, tools)`.

    >>> tools = make_memory_tools(memory)             # doctest: +SKIP
    >>> [t.name for t in tools]                       # doctest: +SKIP
    ['search_memory', 'read_facts', 'read_notes', 'read_raw']
    """

    @tool("search_memory")
    def search_tool(query: str, k: int = 5) -> str:
        """Search the user's past conversations. Returns session ids, dates and a one-line summary each."""
        docs = search_memory(memory, query, k)
        # One line per session: raw-mode summaries are whole windows of turns, newlines included.
        return "\n".join(f"{d.metadata['session_id']} ({d.metadata['date'][:10]}): {' '.join(d.page_content.split())[:400]}"
                         for d in docs) or "no sessions found"

    @tool("read_facts")
    def facts_tool(session_id: str) -> str:
        """Read the key facts about the user from one session (layer L1)."""
        return format_evidence(read_facts(memory, session_id))

    @tool("read_notes")
    def notes_tool(session_id: str, turns: str = "") -> str:
        """Read detailed per-turn notes of a session (layer L2); turns like '3,5-7' (1-based), empty for all."""
        return format_evidence(read_notes(memory, session_id, _turns(turns)))

    @tool("read_raw")
    def raw_tool(session_id: str, turns: str = "") -> str:
        """Read the exact messages of a session (layer L3); turns like '3,5-7' (1-based), empty for the first ones."""
        return format_evidence(read_raw(memory, session_id, _turns(turns)))

    return [search_tool, facts_tool, notes_tool, raw_tool]
