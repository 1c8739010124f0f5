"""Memory as a service: the `remember`, `forget` and `sessions` graphs that `langgraph.json` serves beside
`apdmem`, so that a client of LangGraph Server (or an MCP client of its ``/mcp`` endpoint) can write to a
user's memory, not only ask it.

Each graph is one node, bound like the controller (`build_service_graph(name, settings=..., memory=...)`, as
`build_graph`). It acts on the run's user exactly as the controller does (`open_memory`: with server auth on,
the token's user, and a context naming another user fails the run), checks its whole
input before it changes anything, and fails the run with a one-line message on bad input. They need no
thread: a client may wait for them, start them in the background, or schedule them.

>>> client.runs.wait(None, "remember", input={"session_id": "chat-7", "messages": [
...     {"role": "user", "content": "My cat is called Miso."}]}, context={"user_id": "alice"})  # doctest: +SKIP
{'added': ['chat-7'], 'updated': [], 'unchanged': [], 'turns': 1, 'units': 1}
"""

from __future__ import annotations

import json
from functools import partial
from typing import Annotated

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from pydantic import Field
from typing_extensions import NotRequired, TypedDict

from apdmem.errors import InputError
from apdmem.graph.context import Context
from apdmem.limits import MAX_REMEMBER_BYTES, MAX_REMEMBER_SESSIONS, check_limit
from apdmem.memory.loaders import parse_sessions
from apdmem.memory.records import check_id
from apdmem.nodes.common import open_memory
from apdmem.settings import Settings


def _doc(text: str):
    """A field's description in the graph's JSON schema (what Studio and MCP clients show)."""
    return Field(description=text)


class Message(TypedDict):
    """One message of a conversation."""

    role: Annotated[str, _doc("'user', 'assistant' or 'system' ('human' and 'ai' are aliases).")]
    content: Annotated[str, _doc("The message text.")]


class SessionRecord(TypedDict):
    """One conversation, as `apdmem ingest` reads it from a generic JSON file."""

    session_id: Annotated[str, _doc("The conversation's id in the user's memory.")]
    date: Annotated[str, _doc("When it took place: ISO 8601, e.g. '2024-05-01T09:30'.")]
    messages: Annotated[list[Message], _doc("The messages, in order.")]
    metadata: NotRequired[Annotated[dict, _doc('Names to strings, numbers or booleans, e.g. {"channel": "email"}: what '
                                               "search filters read.")]]


# --- remember ----------------------------------------------------------------------------------------------


class RememberInput(TypedDict, total=False):
    """Either `sessions` (several conversations) or `messages` with `session_id` (one conversation)."""

    sessions: Annotated[list[SessionRecord], _doc(f"Conversations to store, each with its id, date and messages; at most "
                                                  f"{MAX_REMEMBER_SESSIONS} per call, and {MAX_REMEMBER_BYTES:,} bytes of input.")]
    messages: Annotated[list[Message], _doc("One conversation's messages (with session_id).")]
    session_id: Annotated[str, _doc("Id of the conversation given in messages. Sending a stored id again with more "
                                    "messages extends that conversation.")]
    date: Annotated[str, _doc("When the conversation given in messages started (ISO 8601); default: the stored "
                              "session's date, else now.")]
    metadata: Annotated[dict, _doc("The conversation's metadata, names to strings, numbers or booleans (e.g. "
                                   '{"channel": "email"}), what search filters read; default: the stored session\'s.')]


class RememberOutput(TypedDict, total=False):
    added: Annotated[list[str], _doc("Sessions stored for the first time.")]
    updated: Annotated[list[str], _doc("Stored sessions whose messages changed (extended or corrected).")]
    unchanged: Annotated[list[str], _doc("Sessions already stored exactly as sent.")]
    turns: Annotated[int, _doc("Messages stored.")]
    units: Annotated[int, _doc("L0 units indexed.")]


class RememberState(RememberInput, RememberOutput, total=False):
    pass


def remember(state: RememberState, runtime: Runtime[Context], *, settings: Settings, memory=None) -> RememberOutput:
    """Store the conversations of the input in the run's user's memory (all of them or, on bad input, none)."""
    _check_size(state)
    memory = open_memory(runtime, settings, memory)
    if state.get("sessions") is not None:
        if any(state.get(key) is not None for key in ("messages", "session_id", "date", "metadata")):
            raise InputError("give either 'sessions' or 'messages' with 'session_id', not both")
        try:
            report = memory.ingest(parse_sessions(state["sessions"]))
        except InputError as error:
            raise InputError(error.reason, source="sessions", record=error.record) from None
    elif state.get("messages") is not None:
        if state.get("session_id") is None:
            raise InputError("'messages' needs a 'session_id'")
        try:
            report = memory.remember(state["messages"], session_id=state["session_id"], date=state.get("date"),
                                     metadata=state.get("metadata"))
        except InputError as error:
            raise InputError(error.reason, source="messages", record=error.record) from None
    else:
        raise InputError("nothing to remember: give 'sessions', or 'messages' with 'session_id'")
    return RememberOutput(added=report.added, updated=report.updated, unchanged=report.unchanged, turns=report.turns,
                          units=report.units)


def _check_size(state: RememberState) -> None:
    """The input within one call's limits (`apdmem.limits`: sessions, and bytes as JSON), before it is parsed."""
    if isinstance(state.get("sessions"), list):
        check_limit(len(state["sessions"]), MAX_REMEMBER_SESSIONS, source="sessions", unit="sessions")
    size = len(json.dumps(state, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))
    check_limit(size, MAX_REMEMBER_BYTES, source="input", unit="bytes")


# --- forget ------------------------------------------------------------------------------------------------


class ForgetInput(TypedDict):
    session_ids: Annotated[list[str], _doc("Ids of the sessions to remove from every layer and index.")]


class ForgetOutput(TypedDict, total=False):
    forgotten: Annotated[list[str], _doc("The sessions removed.")]


class ForgetState(ForgetInput, ForgetOutput, total=False):
    pass


def forget(state: ForgetState, runtime: Runtime[Context], *, settings: Settings, memory=None) -> ForgetOutput:
    """Remove the listed sessions from the run's user's memory; if one of them is not there, none is removed."""
    memory = open_memory(runtime, settings, memory)
    ids = state.get("session_ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise InputError("'session_ids' must be a non-empty list of session ids", source="session_ids")
    ids = list(dict.fromkeys(check_id(i, "session") for i in ids))
    memory.forget(*ids)  # all in one commit, or none
    return ForgetOutput(forgotten=ids)


# --- sessions ----------------------------------------------------------------------------------------------


class SessionsInput(TypedDict, total=False):
    """No input: the run's user's sessions are listed."""


class SessionInfo(TypedDict):
    session_id: str
    date: Annotated[str, _doc("When the conversation took place (ISO 8601).")]
    turns: Annotated[int, _doc("Number of messages.")]


class SessionsOutput(TypedDict, total=False):
    sessions: Annotated[list[SessionInfo], _doc("The user's sessions, oldest first.")]


class SessionsState(SessionsInput, SessionsOutput, total=False):
    pass


def sessions(state: SessionsState, runtime: Runtime[Context], *, settings: Settings, memory=None) -> SessionsOutput:
    """The sessions stored in the run's user's memory, oldest first."""
    memory = open_memory(runtime, settings, memory)
    memory.refresh()
    listing = memory.manifest["sessions"]  # one generation's listing, whatever writers do meanwhile
    ordered = sorted(listing, key=lambda s: (listing[s]["date"], s))
    return SessionsOutput(sessions=[SessionInfo(session_id=s, date=listing[s]["date"], turns=listing[s]["turns"])
                                    for s in ordered])


# --- the graphs --------------------------------------------------------------------------------------------


SERVICE_GRAPHS = {  # name: (node, state, input schema, output schema)
    "remember": (remember, RememberState, RememberInput, RememberOutput),
    "forget": (forget, ForgetState, ForgetInput, ForgetOutput),
    "sessions": (sessions, SessionsState, SessionsInput, SessionsOutput),
}


def build_service_graph(name: str, *, settings: Settings | None = None, memory=None):
    """The one-node graph `name` ("remember", "forget" or "sessions"), bound to `settings` (default: from the
    environment) and optionally to one open `memory`, as `build_graph` binds the controller."""
    node, state, input_schema, output_schema = SERVICE_GRAPHS[name]
    builder = StateGraph(state, context_schema=Context, input_schema=input_schema, output_schema=output_schema)
    builder.add_node(name, partial(node, settings=settings or Settings(), memory=memory))
    builder.add_edge(START, name)
    builder.add_edge(name, END)
    return builder.compile(name=name)


# for langgraph.json: the server's settings come from its environment
remember_graph = build_service_graph("remember")
forget_graph = build_service_graph("forget")
sessions_graph = build_service_graph("sessions")
