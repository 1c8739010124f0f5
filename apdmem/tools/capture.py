"""Writing to memory from a running agent: `MemoryCapture` saves the agent's conversation as a session of the
user's memory after its turns, and the `remember_fact` tool lets the agent record a fact the user states.

Both call `Memory.remember`, the write path of the server's `remember` graph: a conversation saved again with
more messages extends its session (nothing is stored twice, the L2 notes of earlier turns are kept).

A fact is stored once. When a conversation is saved, the facts the agent recorded in it with `remember_fact`
(its tool calls) are forgotten as sessions of their own: the saved conversation holds what the user said, in
their words, where and when they said it, which is the better evidence. A fact recorded where no conversation is
saved (no `MemoryCapture`, no `save_conversation`) stays a session of its own.

>>> from langchain.agents import create_agent                                          # doctest: +SKIP
>>> memory = Memory("alice")                                                           # doctest: +SKIP
>>> agent = create_agent(model, [*make_memory_tools(memory), make_remember_tool(memory)],
...                      middleware=[MemoryCapture(memory)], checkpointer=InMemorySaver())  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import BaseTool, ToolException, tool
from langgraph.config import get_config

from apdmem.errors import ApdmemError, StoreError, warn_once
from apdmem.memory.memory import IngestReport

_ROLES = ((HumanMessage, "user"), (AIMessage, "assistant"))
FACT_TOOL = "remember_fact"  # the name of the tool of `make_remember_tool`, as an agent's tool calls name it


def conversation(messages: Sequence[BaseMessage]) -> list[dict[str, str]]:
    """What of an agent's messages is conversation, as ``{"role", "content"}`` dicts (the input of the
    `remember` graph and of `Memory.remember`): the text of human and AI messages. Tool calls, tool results,
    system prompts and messages without text are the agent's machinery, not what was said, and are left out."""
    out = []
    for message in messages:
        role = next((r for cls, r in _ROLES if isinstance(message, cls)), None)
        text = str(message.text).strip() if role else ""
        if text:
            out.append({"role": role, "content": text})
    return out


def thread_session_id(messages: Sequence[BaseMessage], thread_id: str | None = None) -> str:
    """The session a conversation is saved as: ``thread-<thread id>``, or, for a graph run without a
    checkpointer (no thread), ``conversation-<hash of its first message>``, the same at every turn."""
    if thread_id:
        return f"thread-{thread_id}"
    first = next(iter(conversation(messages)), {"content": ""})["content"]
    return "conversation-" + hashlib.sha256(first.encode()).hexdigest()[:16]


def save_conversation(memory, messages: Sequence[BaseMessage], *, session_id: str) -> IngestReport:
    """Save an agent's conversation (see `conversation`) as session `session_id` of `memory`; saved again with
    more messages, the session is extended. The facts the agent recorded in it with `remember_fact` are then
    forgotten as sessions of their own (see the module's docstring). Call it when a thread ends, e.g.
    ``save_conversation(memory, agent.get_state(config).values["messages"], session_id=f"thread-{thread_id}")``."""
    report = memory.remember(conversation(messages), session_id=session_id)
    stored = set(memory.session_ids())
    if absorbed := [sid for sid in dict.fromkeys(recorded_facts(messages)) if sid in stored]:
        memory.forget(*absorbed)
    return report


def recorded_facts(messages: Sequence[BaseMessage]) -> list[str]:
    """The session ids of the facts the agent's `remember_fact` calls in `messages` recorded (or tried to)."""
    return [fact_session_id(call["args"]["fact"]) for message in messages if isinstance(message, AIMessage)
            for call in message.tool_calls if call["name"] == FACT_TOOL and isinstance(call["args"].get("fact"), str)]


class MemoryCapture(AgentMiddleware):
    """Agent middleware that saves the conversation to the user's memory after every `every`-th user turn
    (default: after each one), as session ``thread-<thread id>``.

    `memory` is the user's `Memory`, or a function of the run's `Runtime` that returns it (an app serving
    several users: ``lambda runtime: settings.open_memory(runtime.context.user_id)``). In a graph that is not
    made by `create_agent`, add ``capture.after_agent`` as a node after the last one (its state needs a
    ``messages`` key). A conversation whose last turns fall between two captures is saved whole by
    `save_conversation` at the end of its thread. A store that refuses the write (read-only, no rights) does
    not stop the agent: its runs finish, unsaved, and one warning per process says why.
    """

    def __init__(self, memory, *, every: int = 1):
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be a positive number of user turns, got {every!r}")
        self.memory, self.every = memory, every

    def _memory(self, runtime) -> Any:
        return self.memory(runtime) if callable(self.memory) else self.memory

    def after_agent(self, state, runtime) -> dict[str, Any] | None:
        messages = state["messages"]
        user_turns = sum(1 for m in messages if isinstance(m, HumanMessage))
        if user_turns and user_turns % self.every == 0:
            thread_id = (get_config().get("configurable") or {}).get("thread_id")
            try:
                save_conversation(self._memory(runtime), messages, session_id=thread_session_id(messages, thread_id))
            except StoreError as refused:  # a read-only store: the agent's run goes on, unsaved, and says so once
                warn_once(f"apdmem: MemoryCapture saves nothing: {refused}")
        return None

    async def aafter_agent(self, state, runtime) -> dict[str, Any] | None:
        return await asyncio.to_thread(self.after_agent, state, runtime)


# --- the tool with which an agent records a fact --------------------------------------------------------------


def fact_session_id(fact: str) -> str:
    """The session a fact is stored as: ``fact-<hash of its words>``, whatever their case and spacing."""
    return "fact-" + hashlib.sha256(" ".join(fact.split()).lower().encode()).hexdigest()[:16]


def remember_fact(memory, fact: str) -> str:
    """Store a fact the user stated (one user message, in the user's words) as a session of its own, dated
    now; returns its id. The id comes from the fact's text, so a fact recorded twice is stored once."""
    if not isinstance(fact, str) or not fact.strip():
        raise ValueError("the fact is empty: pass the user's statement, e.g. 'My sister Maya lives in Porto.'")
    session_id = fact_session_id(fact)
    memory.remember([HumanMessage(" ".join(fact.split()))], session_id=session_id)
    return session_id


def make_remember_tool(memory) -> BaseTool:
    """The `remember_fact` tool over one user's memory, for any agent (beside `make_memory_tools(memory)`). As
    those tools do, it answers a bad call with a message the model can act on, and never raises."""

    @tool(FACT_TOOL)
    def remember_tool(fact: str) -> str:
        """Save a fact the user just stated about themselves (people, preferences, plans, events, changes) so that
        it can be found in later conversations. Write it in the user's own words, first person, one fact, e.g.
        'My sister Maya moved to Porto in May.'"""
        try:
            session_id = remember_fact(memory, fact)
        except (ApdmemError, ValueError) as error:
            raise ToolException(f"Not saved: {error}") from None
        return f"Saved to memory as session {session_id}."

    remember_tool.handle_tool_error = True  # a ToolException's message is the tool's result
    return remember_tool
