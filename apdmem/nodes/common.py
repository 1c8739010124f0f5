"""Small things every node needs: the user's memory, the question date, token accounting, run metadata,
stream events."""

from __future__ import annotations

from datetime import datetime

from langsmith.run_helpers import get_current_run_tree

from apdmem.auth import auth_on, token_user
from apdmem.errors import ConfigError, InputError, shown
from apdmem.limits import MAX_QUESTION_CHARS, check_limit
from apdmem.memory.loaders import parse_date
from apdmem.memory.records import Usage, readable


def authenticated_user(runtime) -> str | None:
    """The user whose apdmem token authenticated this server run; None for a run outside a server, or on a
    server without auth (anonymous requests: the context's `user_id` is trusted).

    With auth on (``APDMEM_AUTH_SECRET``), a server run without the user of a token the server accepts now
    (Studio's LangSmith login, an anonymous or missing user, or a cron's or background run whose token was
    revoked, expired or signed with a secret since changed) has no identity and reads nobody's memory.
    """
    server = getattr(runtime, "server_info", None)
    if server is None or not auth_on():
        return None  # a Python caller embedding the graph, or a laptop server: the context names the user
    user = token_user(getattr(server, "user", None))
    if user is None:
        raise ConfigError("this server has auth on and the run carries no apdmem token's user that it accepts now "
                          "(none, or one revoked, expired or signed with another secret since the run or its cron "
                          "was created); send a valid token (Authorization: Bearer ..., see `apdmem token`)")
    return user


def open_memory(runtime, settings, memory=None):
    """The memory this run reads: the graph's own `memory` when it was built with one, else the user's in the
    store of `settings`. Behind server auth it is the authenticated user's, whatever the run's context claims:
    a context naming another user is refused."""
    ctx = run_context(runtime)
    user = authenticated_user(runtime)
    if user is not None and ctx.user_id not in (user, "default"):
        raise ConfigError(f"this run is authenticated as {user!r} and cannot read the memory of {shown(ctx.user_id)}")
    return memory if memory is not None else settings.open_memory(user or ctx.user_id)


def run_context(runtime):
    """The run's `Context`; a run invoked without one (a Python caller) fails in one line saying what to give."""
    if runtime.context is None:
        raise ConfigError("the run has no context: give one, e.g. context={'user_id': 'alice'}")
    return runtime.context


def checked_input(state, runtime) -> tuple[str, datetime]:
    """The run's question, with its lone surrogates replaced (`readable`), and its date (now when none was
    given), checked where the controller starts: a missing, empty or non-string question, one over
    MAX_QUESTION_CHARS, a question_date that is no date, or no run context fail the run with one line naming
    the field. (The context's own fields are checked as LangGraph builds it: `Context.__post_init__`.)"""
    run_context(runtime)
    question = state.get("question")
    if not isinstance(question, str) or not question.strip():
        got = "none" if question is None else f"{type(question).__name__} {shown(question)}"
        raise InputError(f"give the question as non-empty text, got {got}", source="question")
    check_limit(len(question), MAX_QUESTION_CHARS, source="question", unit="characters")
    try:
        today = question_today(state)
    except ValueError as exc:
        raise InputError(str(exc), source="question_date") from None
    return readable(question), today


def question_today(state) -> datetime:
    """The question's date (now when none was given)."""
    raw = state.get("question_date")
    return parse_date(raw) if raw not in (None, "") else datetime.now().replace(microsecond=0)


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
