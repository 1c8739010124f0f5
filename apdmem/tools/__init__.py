"""Agent-facing memory tools: `search_memory`, `read_facts`, `read_notes`, `read_raw`.

The functions below are what the controller graph's nodes call; `make_memory_tools` wraps the same
functions as LangChain tools bound to one user's memory, for any agent.
"""

from __future__ import annotations

from langchain_core.documents import Document
from langchain_core.tools import BaseTool, ToolException, tool

from apdmem.errors import InputError, InvalidIdError, QueryError, UnknownSessionError, shown
from apdmem.graph.state import Evidence
from apdmem.limits import MAX_QUESTION_CHARS, MAX_SEARCH_K, MAX_TURNS_PER_READ, check_limit
from apdmem.memory.layers import TURN_CHARS
from apdmem.memory.records import Usage
from apdmem.memory.retriever import SEARCH_K, parse_date_range, rerank

MAX_RAW_TURNS = 12  # an L3 read returns at most this many turns; ask again with other turns for more


def search_memory(memory, queries: str | list[str], k: int = SEARCH_K, reranker=None, *, filter=None,
                  date_range=None) -> list[Document]:
    """Top-k sessions for one or several queries, each with its best L0 summary, among those `filter` keeps;
    `date_range` prefers the sessions in it (see `Memory.search`). With a `reranker` (a cross-encoder) the k
    sessions are rescored for the query (one query only; it reads the first 10; see `retriever.rerank`)."""
    docs = memory.search(queries, k=k, filter=filter, date_range=date_range)
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
    """Evidence as lines `[date | session | layer turn] text`, oldest session first; when it comes from several
    sessions, the lines of the latest end their bracket with `| latest` (a fact that changed: its current value).

    >>> print(format_evidence([Evidence(session_id="s2", date="2023-05-02T10:00", layer="L1", turn=None, text="Sold it."),
    ...                        Evidence(session_id="s1", date="2023-01-10T09:00", layer="L3", turn=0, text="user: A red bike.")]))
    [2023-01-10 09:00 | s1 | L3 turn 1] user: A red bike.
    [2023-05-02 10:00 | s2 | L1 | latest] Sold it.
    """
    ordered = sorted(items, key=lambda e: (e["date"], e["session_id"], e["turn"] if e["turn"] is not None else -1))
    latest = (ordered[-1]["date"], ordered[-1]["session_id"]) if len({e["session_id"] for e in ordered}) > 1 else None
    lines = []
    for e in ordered:
        where = e["layer"] if e["turn"] is None else f"{e['layer']} turn {e['turn'] + 1}"
        mark = " | latest" if (e["date"], e["session_id"]) == latest else ""
        lines.append(f"[{e['date'][:16].replace('T', ' ')} | {e['session_id']} | {where}{mark}] {e['text']}")
    return "\n".join(lines)


def parse_turns(text: str | None) -> list[int] | None:
    """'3,5-7' (1-based, as shown to agents) -> [2, 4, 5, 6]; empty -> None (all). Raises ValueError, saying
    what is expected, for anything else ("first", "0", "7-5"), and LimitError (one too) for more than
    MAX_TURNS_PER_READ turns ("1-100000000"): they are counted before any is listed.

    >>> parse_turns("3,5-7"), parse_turns("")
    ([2, 4, 5, 6], None)
    """
    if not text or not text.strip():
        return None
    spans: list[range] = []
    for part in text.split(","):
        low, dash, high = (p.strip() for p in part.partition("-"))
        if not low.isdigit() or (dash and not high.isdigit()) or int(low) < 1 or int(high or low) < int(low):
            raise ValueError(f"turns must be 1-based numbers and ranges like '3,5-7', not {shown(text)}")
        spans.append(range(int(low) - 1, int(high or low)))
    check_limit(sum(len(span) for span in spans), MAX_TURNS_PER_READ, source="turns", unit="turns")
    return [turn for span in spans for turn in span]


# --- tools for an agent -----------------------------------------------------------------------------------------
# A tool's errors are part of its interface: a model that called it with a bad argument gets a message naming
# what is valid (raised as ToolException inside the tool, returned as the tool's result by `handle_tool_error`),
# never an exception that ends the agent's run, never an empty result that looks like "nothing there".

LISTED_SESSIONS = 20  # an unknown session's message lists the valid ids when there are at most this many


def _no_session(memory, session_id: str) -> ToolException:
    ids = memory.session_ids()
    if not ids:
        return ToolException(f"There is no session {shown(session_id)}: this memory holds no sessions yet.")
    if len(ids) <= LISTED_SESSIONS:
        return ToolException(f"There is no session {shown(session_id)}. The sessions you may read are: {', '.join(ids)}.")
    return ToolException(f"There is no session {shown(session_id)}. This memory holds {len(ids)} sessions: find the ones "
                         "you need with search_memory, which names each session's id.")


def _session(memory, session_id: str):
    """The session, or a ToolException naming the valid ones."""
    try:
        return memory.session(session_id)
    except (UnknownSessionError, InvalidIdError):
        raise _no_session(memory, session_id) from None


def _wanted_turns(session, text: str) -> tuple[list[int] | None, str]:
    """The 0-based turns `text` asks for within `session` (None: all), and a note on the ones outside it. A
    request that is malformed or has no turn inside the session is a ToolException naming the valid range."""
    valid = f"session {session.session_id!r} has turns 1-{len(session.turns)}"
    try:
        turns = parse_turns(text)
    except ValueError as exc:
        reason = str(exc)
        raise ToolException(f"{reason[:1].upper()}{reason[1:]}; {valid} (leave turns empty for all of them).") from None
    if turns is None:
        return None, ""
    inside = [t for t in turns if t < len(session.turns)]
    outside = sorted({t + 1 for t in turns} - {t + 1 for t in inside})
    if not inside:
        raise ToolException(f"Turns {text!r} are outside the session: {valid}.")
    if not outside:
        return inside, ""
    named = f"turn {outside[0]} is" if len(outside) == 1 else f"turns {_ranges(outside)} are"
    return inside, f"({named} outside the session: {valid}.)"


def _ranges(numbers: list[int]) -> str:
    """[1, 2, 3, 7] -> '1-3,7'."""
    parts, start = [], None
    for i, n in enumerate(numbers):
        start = n if start is None else start
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            parts.append(f"{start}" if start == n else f"{start}-{n}")
            start = None
    return ",".join(parts)


def _with_note(text: str, note: str) -> str:
    return "\n".join(part for part in (text, note) if part)


def make_memory_tools(memory) -> list[BaseTool]:
    """LangChain tools over one user's memory, e.g. for `langchain.agents.create_agent(model, tools)`. A call with
    a bad argument (an unknown session, turns that are malformed or outside the session) returns a message that
    says what is valid, so the model can try again; it never raises.

    >>> tools = make_memory_tools(memory)             # doctest: +SKIP
    >>> [t.name for t in tools]                       # doctest: +SKIP
    ['search_memory', 'read_facts', 'read_notes', 'read_raw']
    """

    @tool("search_memory")
    def search_tool(query: str, k: int = SEARCH_K, date_range: str = "", filter: dict | None = None) -> str:
        """Search the user's past conversations. Returns session ids, dates and a one-line summary each, best first.
        date_range, like '2023-05-01..2023-05-31', ranks the sessions of those days first (empty: no preference).
        `filter` keeps only conversations whose metadata and date match, e.g. {"channel": "email"} or
        {"date": {"$gte": "2023-05-01", "$lt": "2023-06-01"}}."""
        if not query.strip():
            raise ToolException("The query is empty: say what to look for, e.g. 'my dog's name'.")
        if not 1 <= k <= MAX_SEARCH_K:
            raise ToolException(f"k must be between 1 and {MAX_SEARCH_K}, got {k}.")
        if len(query) > MAX_QUESTION_CHARS:
            raise ToolException(f"The query is {len(query):,} characters, over the limit of {MAX_QUESTION_CHARS:,}: "
                                "say in a sentence what to look for.")
        try:
            dates = parse_date_range(date_range) if date_range.strip() else None
        except InputError as error:
            raise ToolException(f"Not searched: {error}.") from None
        try:
            docs = search_memory(memory, query, k, filter=filter, date_range=dates)
        except QueryError as exc:
            raise ToolException(f"{exc}.") from None
        if not docs and filter:
            return f"No conversation matches the filter {filter}: search again without it, or with another."
        if not docs:
            return "This memory holds no sessions yet: there is nothing to search."
        # One line per session: raw-mode summaries are whole windows of turns, newlines included.
        return "\n".join(f"{d.metadata['session_id']} ({d.metadata['date'][:10]}): {' '.join(d.page_content.split())[:400]}"
                         for d in docs)

    @tool("read_facts")
    def facts_tool(session_id: str) -> str:
        """Read the key facts about the user from one session (layer L1)."""
        _session(memory, session_id)
        return format_evidence(read_facts(memory, session_id)) or (
            f"Session {session_id!r} holds no key facts about the user; read_notes or read_raw show its turns.")

    @tool("read_notes")
    def notes_tool(session_id: str, turns: str = "") -> str:
        """Read detailed per-turn notes of a session (layer L2); turns like '3,5-7' (1-based), empty for all."""
        wanted, note = _wanted_turns(_session(memory, session_id), turns)
        text = format_evidence(read_notes(memory, session_id, wanted)) or "No notes were taken of these turns; read_raw shows them."
        return _with_note(text, note)

    @tool("read_raw")
    def raw_tool(session_id: str, turns: str = "") -> str:
        """Read the exact messages of a session (layer L3); turns like '3,5-7' (1-based), empty for the first ones."""
        session = _session(memory, session_id)
        wanted, note = _wanted_turns(session, turns)
        wanted = list(range(len(session.turns))) if wanted is None else wanted
        if len(wanted) > MAX_RAW_TURNS:
            note = _with_note(note, f"(showing {MAX_RAW_TURNS} of the {len(wanted)} turns asked for; session "
                                    f"{session_id!r} has turns 1-{len(session.turns)}: ask for turns "
                                    f"{_ranges([t + 1 for t in wanted[MAX_RAW_TURNS:]])} next.)")
        return _with_note(format_evidence(read_raw(memory, session_id, wanted)), note)

    tools = [search_tool, facts_tool, notes_tool, raw_tool]
    for t in tools:
        t.handle_tool_error = True  # a ToolException's message is the tool's result
    return tools
