"""apdmem behind LangGraph's store API: a `BaseStore` whose items are the sessions of apdmem memories, so an app that
keeps its long-term memory in a LangGraph store (LangMem's memory tools, `create_react_agent(..., store=...)`,
`create_agent(..., store=...)`) switches to apdmem by changing the store it passes.

The mapping:

- a namespace is ``(*prefix, user_id)``: one user per namespace (``("memories", "alice")`` with the default prefix).
  Every operation acts on that one user's memory; a namespace of another shape is refused, so no search spans users.
- an item's key is a session id. `put` remembers its value as that session (a value sent again under the same key
  replaces the session: LangMem's "update"); `put` with ``None`` (`delete`) forgets it.
- a value is ``{"content": ...}`` or ``{"text": ...}`` (one user message; content that is not text is stored as its
  JSON) or ``{"messages": [...]}`` (a conversation: ``{"role", "content"}`` dicts or LangChain messages), with an
  optional ``"date"``. `get` and `search` return the stored session as ``{"content", "messages", "date"}``:
  ``content`` is the message's text, or for several messages one ``role: text`` line each.
- `search` with a query returns apdmem's ranked sessions (rescored by the configured reranker, as the controller's
  searches are) as `SearchItem`s whose ``score`` is the rescored score; without a query, the user's sessions oldest
  first. `filter` keeps the items whose value holds each given key with the given value.
- `list_namespaces` lists the users of the store.

The timestamps of an item are its session's date (apdmem keeps no other).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from datetime import datetime

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from apdmem.errors import InputError, UnknownSessionError
from apdmem.memory.migrate import stored_users
from apdmem.settings import Settings
from apdmem.tools import search_memory


class ApdmemStore(BaseStore):
    """A LangGraph `BaseStore` over apdmem memories (see the module for the mapping), in the store and with the models
    of `settings` (default: `Settings()`, i.e. ``APDMEM_*`` from the environment).

    >>> from langgraph.prebuilt import create_react_agent                                        # doctest: +SKIP
    >>> agent = create_react_agent(model, tools, store=ApdmemStore())                             # doctest: +SKIP
    >>> ApdmemStore().put(("memories", "alice"), "fact-1", {"content": "My cat is called Miso."})  # doctest: +SKIP
    """

    def __init__(self, settings: Settings | None = None, *, prefix: tuple[str, ...] = ("memories",), rerank: bool = True):
        self.settings, self.prefix, self.rerank = settings or Settings(), tuple(prefix), rerank

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return [self._run(op) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))  # as Memory's own async methods do

    def _run(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            return self._get(op)
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, PutOp):
            return self._put(op)
        if isinstance(op, ListNamespacesOp):
            return self._list_namespaces(op)
        raise TypeError(f"unknown store operation {type(op).__name__}")

    # --- namespaces ---------------------------------------------------------------------------------------

    def _memory(self, namespace: tuple[str, ...]):
        """The memory of the user a namespace names."""
        namespace = tuple(namespace)
        if len(namespace) != len(self.prefix) + 1 or namespace[:-1] != self.prefix:
            raise InvalidNamespaceError(f"namespace {namespace!r}: apdmem keeps one user per namespace, "
                                        f"{(*self.prefix, '<user_id>')!r}")
        return self.settings.open_memory(namespace[-1])

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        found = [(*self.prefix, user) for user in stored_users(self.settings.store)]
        found = [ns for ns in found if all(_matches(ns, condition) for condition in op.match_conditions or ())]
        if op.max_depth is not None:
            found = sorted({ns[: op.max_depth] for ns in found})
        return found[op.offset: op.offset + op.limit]

    # --- items ------------------------------------------------------------------------------------------

    def _get(self, op: GetOp) -> Item | None:
        memory = self._memory(op.namespace)
        memory.refresh()
        if op.key not in memory.manifest["sessions"]:
            return None
        value, when = stored_value(memory, op.key)
        return Item(value=value, key=op.key, namespace=tuple(op.namespace), created_at=when, updated_at=when)

    def _put(self, op: PutOp) -> None:
        memory = self._memory(op.namespace)
        if op.value is None:
            try:
                memory.forget(op.key)
            except UnknownSessionError:
                pass  # deleting what is not there is nothing to do
            return
        memory.remember(messages_of(op.value, op.namespace, op.key), session_id=op.key, date=op.value.get("date"))

    def _search(self, op: SearchOp) -> list[SearchItem]:
        memory = self._memory(op.namespace_prefix)
        memory.refresh()
        sessions = memory.manifest["sessions"]
        if not sessions:  # a user with nothing stored yet: no hits (and no warning, unlike a read of apdmem's own)
            return []
        if op.query and op.query.strip():
            k = len(sessions) if op.filter else min(op.offset + op.limit, len(sessions))
            reranker = self.settings.reranker() if self.rerank else None
            hits = [(d.metadata["session_id"], d.metadata["score"]) for d in search_memory(memory, op.query, max(k, 1), reranker)]
        else:
            hits = [(sid, None) for sid in memory.session_ids()]
        items = []
        for sid, score in hits:
            value, when = stored_value(memory, sid)
            if all(value.get(key) == wanted for key, wanted in (op.filter or {}).items()):
                items.append(SearchItem(namespace=tuple(op.namespace_prefix), key=sid, value=value, created_at=when,
                                        updated_at=when, score=score))
        return items[op.offset: op.offset + op.limit]


def messages_of(value, namespace, key) -> list:
    """The conversation a put's value holds (see the module); bad input is one `InputError` naming the item."""
    where = {"source": f"namespace {tuple(namespace)!r}", "record": key}
    if not isinstance(value, dict):
        raise InputError(f"the value must be a dict, got {type(value).__name__}", **where)
    if "messages" in value:
        return value["messages"]
    for field in ("content", "text"):
        if field in value:
            text = value[field]
            return [{"role": "user", "content": text if isinstance(text, str) else json.dumps(text, default=str)}]
    raise InputError("the value needs 'content', 'text' or 'messages'", **where)


def stored_value(memory, session_id: str) -> tuple[dict, datetime]:
    """A stored session as an item's value, and its date."""
    session = memory.session(session_id)
    messages = [{"role": turn.role, "content": turn.content} for turn in session.turns]
    content = messages[0]["content"] if len(messages) == 1 else "\n".join(f"{m['role']}: {m['content']}" for m in messages)
    return {"content": content, "messages": messages, "date": session.date.isoformat()}, session.date


def _matches(namespace: tuple[str, ...], condition: MatchCondition) -> bool:
    """Whether a namespace starts (``prefix``) or ends (``suffix``) with a path, ``"*"`` matching any label."""
    path = tuple(condition.path)
    if len(path) > len(namespace):
        return False
    part = namespace[: len(path)] if condition.match_type == "prefix" else namespace[len(namespace) - len(path):]
    return all(want in ("*", have) for want, have in zip(path, part))
