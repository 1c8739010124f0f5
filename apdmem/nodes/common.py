"""Small things every node needs: the question date, token accounting, run metadata, stream events."""

from __future__ import annotations

from datetime import datetime

from langsmith.run_helpers import get_current_run_tree

from apdmem.memory.loaders import parse_date
from apdmem.memory.records import Usage


def question_today(state) -> datetime:
    """The question's date (now when none was given)."""
    raw = state.get("question_date")
    return parse_date(raw) if raw else datetime.now().replace(microsecond=0)


def usage_update(node: str, usage: Usage) -> dict:
    return {"usage": {node: {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens, "calls": usage.calls}}}


def annotate(**metadata) -> None:
    """Add metadata to the current LangSmith run (a no-op when tracing is off)."""
    run = get_current_run_tree()
    if run is not None:
        run.metadata.update(metadata)


def emit(runtime, **event) -> None:
    """A custom stream event (`stream_mode="custom"`), e.g. which layer of which session is read."""
    if runtime is not None and runtime.stream_writer is not None:
        runtime.stream_writer(event)
