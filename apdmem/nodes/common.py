"""Small things every node needs: the user's memory, the question date, token accounting, run metadata,
stream events."""

from __future__ import annotations

from datetime import datetime

from langgraph_sdk.auth.types import StudioUser
from langsmith.run_helpers import get_current_run_tree

from apdmem.errors import ConfigError
from apdmem.memory.loaders import parse_date
from apdmem.memory.records import Usage


def authenticated_user(runtime) -> str | None:
    """The identity a LangGraph server's auth handler established for this run, if any."""
    server = getattr(runtime, "server_info", None)
    user = getattr(server, "user", None)
    # Studio's developers (authenticated by LangSmith, not by apdmem) act as operators and may pick the user.
    if user is None or not getattr(user, "is_authenticated", False) or isinstance(user, StudioUser):
        return None
    return user.identity


def open_memory(runtime, settings, memory=None):
    """The memory this run reads: the graph's own `memory` when it was built with one, else the user's in the
    store of `settings`. Behind server auth it is the authenticated user's, whatever the run's context claims:
    a context naming another user is refused."""
    ctx = runtime.context
    user = authenticated_user(runtime)
    if user is not None and ctx.user_id not in (user, "default"):
        raise ConfigError(f"this run is authenticated as {user!r} and cannot read the memory of {ctx.user_id!r}")
    return memory if memory is not None else settings.open_memory(user or ctx.user_id)


def question_today(state) -> datetime:
    """The question's date (now when none was given)."""
    raw = state.get("question_date")
    return parse_date(raw) if raw else datetime.now().replace(microsecond=0)


def usage_update(node: str, usage: Usage) -> dict:
    return {"usage": {node: vars(usage).copy()}}


def annotate(**metadata) -> None:
    """Add metadata to the current LangSmith run (a no-op when tracing is off)."""
    run = get_current_run_tree()
    if run is not None:
        run.metadata.update(metadata)


def emit(runtime, **event) -> None:
    """A custom stream event (`stream_mode="custom"`), e.g. which layer of which session is read."""
    if runtime is not None and runtime.stream_writer is not None:
        runtime.stream_writer(event)
