"""Helpers for the controller tests: a scripted chat model, a clean configuration, a graph runner, and
the LongMemEval item shipped with the package."""

from __future__ import annotations

import json
import os
import re
import socket
from importlib.resources import files
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableLambda
from pydantic import Field, ValidationError

from apdmem import prompts
from apdmem.graph import build_graph
from apdmem.memory import load_longmemeval

BAD = "Sorry, I cannot produce JSON."  # a structured reply no schema accepts

# Free-text prompts are told apart by their first line (it has no placeholders).
TEXT_KINDS = {prompts.SYNTHESIZE_NOTES.split("\n")[0]: "notes", prompts.ANSWER.split("\n")[0]: "answer"}


def _numbered_turns(prompt: str) -> list[int]:
    return [int(n) for n in re.findall(r"^\[(\d+)\] ", prompt, flags=re.M)]


# What the model says when the script of a kind is used up: harmless, valid replies.
DEFAULT_REPLIES: dict[str, Any] = {
    "WindowSummary": lambda prompt: {"summary": "L0 summary: " + re.search(r"^\[\d+\] \w+: (.*)$", prompt, re.M)[1]},
    "ResolvedDates": {"ranges": []},
    "SubQueries": {"queries": []},
    "Reflection": {"sufficient": True, "draft_answer": "scripted draft"},
    # L1 and L2 name the session's first turn, so evidence shows which session it came from.
    "KeyFacts": lambda prompt: {"facts": ["L1 fact: " + re.search(r"^\[1\] \w+: (.*)$", prompt, re.M)[1]]},
    "EvidenceNotes": lambda prompt: {"turns": [{"turn": n, "facts": [f"L2 note of turn {n}"]} for n in _numbered_turns(prompt)]},
    "notes": "## Relevant facts\n- scripted notes",
    "answer": "scripted answer",
    "text": "scripted text",
}


class ScriptedChatModel(BaseChatModel):
    """A chat model that replies from a script, for routing tests without a real model.

    `script` maps a kind of call to the replies for its successive calls: structured calls are keyed by the
    schema's class name (``"Reflection"``), free-text calls by ``"notes"``, ``"answer"`` or ``"text"``. A
    reply is a dict (validated against the schema), any other value (unusable output), an exception
    (raised, like a failing server) or a callable of the prompt returning one of those. When a script runs
    out, `DEFAULT_REPLIES` answers. Every call is logged in `calls` as (kind, prompt).
    """

    script: dict[str, list[Any]] = Field(default_factory=dict)
    calls: list[tuple[str, str]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.calls]

    def prompts_of(self, kind: str) -> list[str]:
        return [prompt for k, prompt in self.calls if k == kind]

    def _next(self, kind: str, prompt: str):
        self.calls.append((kind, prompt))
        queue = self.script.get(kind)
        reply = queue.pop(0) if queue else DEFAULT_REPLIES[kind]
        reply = reply(prompt) if callable(reply) else reply
        if isinstance(reply, Exception):
            raise reply
        return reply

    @staticmethod
    def _message(content: str, prompt: str) -> AIMessage:
        tokens_in, tokens_out = len(prompt.split()) + 1, len(content.split()) + 1
        return AIMessage(content=content, usage_metadata={"input_tokens": tokens_in, "output_tokens": tokens_out,
                                                          "total_tokens": tokens_in + tokens_out})

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        prompt = "\n".join(m.text for m in messages)
        kind = TEXT_KINDS.get(prompt.split("\n")[0], "text")
        reply = self._next(kind, prompt)
        return ChatResult(generations=[ChatGeneration(message=self._message(str(reply), prompt))])

    def with_structured_output(self, schema, *, include_raw: bool = False, **kwargs):
        def run(prompt):
            text = prompt if isinstance(prompt, str) else "\n".join(m.text for m in prompt)
            reply = self._next(schema.__name__, text)
            parsed, error = None, None
            if isinstance(reply, dict):
                try:
                    parsed = schema.model_validate(reply)
                except ValidationError as exc:
                    error = exc
            else:
                error = ValueError(f"not a JSON object: {reply!r}")
            raw = self._message(json.dumps(reply) if isinstance(reply, dict) else str(reply), text)
            return {"raw": raw, "parsed": parsed, "parsing_error": error} if include_raw else parsed

        return RunnableLambda(run)


class ScriptedToolModel(GenericFakeChatModel):
    """Replies from a list of AI messages (tool calls included) whatever tools it is given: for routing only."""

    def bind_tools(self, tools, **kwargs):
        return self


def clean_environment(monkeypatch) -> None:
    """No configuration from the shell: every Context field takes its default, nothing is traced."""
    for name in list(os.environ):
        if name.startswith("APDMEM_"):
            monkeypatch.delenv(name)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("LANGSMITH_TRACING", "false")


def run_graph(question: str, context, question_date: str = "2024/06/01 (Sat) 10:00", *, settings=None,
              memory=None) -> tuple[dict, list[dict]]:
    """Run the controller built with `settings` and `memory` (see `build_graph`); returns (final output, custom
    stream events in order)."""
    final, events = {}, []
    inputs = {"question": question, "question_date": question_date}
    for mode, chunk in build_graph(settings=settings, memory=memory).stream(inputs, context=context, stream_mode=["custom", "values"]):
        if mode == "custom":
            events.append(chunk)
        else:
            final = chunk
    return final, events


def demo_item():
    """The LongMemEval item shipped with the package (one session, `answer_82a04f59`)."""
    return load_longmemeval(str(files("apdmem") / "data" / "longmemeval_demo.json"))[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
