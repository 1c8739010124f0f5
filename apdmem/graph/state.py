"""The controller's state: the question, the evidence with provenance, and the disclosure trace."""

from __future__ import annotations

import operator
from typing import Annotated

from pydantic import Field

# Pydantic (which builds the JSON schemas LangGraph Studio shows) reads TypedDicts of `typing_extensions` only,
# on Python < 3.12.
from typing_extensions import Required, TypedDict

LAYER_DEPTH = {"L0": 0, "L1": 1, "L2": 2, "L3": 3}


class Evidence(TypedDict):
    """One piece of disclosed memory and where it came from."""

    session_id: str
    date: str
    layer: str
    turn: int | None  # 0-based turn for L2/L3 evidence, None for session-level L1 facts
    text: str


class Drill(TypedDict):
    """One disclosure: a layer of a session read at a step."""

    step: int
    session_id: str
    layer: str
    turns: list[int] | None


def deepest(left: dict[str, str], right: dict[str, str]) -> dict[str, str]:
    """Merge opened-session maps, keeping the deepest layer reached per session."""
    merged = dict(left)
    for sid, layer in right.items():
        if LAYER_DEPTH[layer] > LAYER_DEPTH.get(merged.get(sid, "L0"), 0):
            merged[sid] = layer
    return merged


def add_usage(left: dict[str, dict], right: dict[str, dict]) -> dict[str, dict]:
    """Sum token usage per node (a node's rounds run one after another, so their critical-path calls add up too)."""
    merged = {k: dict(v) for k, v in left.items()}
    for node, usage in right.items():
        slot = merged.setdefault(node, {})
        for key, value in usage.items():
            slot[key] = slot.get(key, 0) + value
    return merged


class InputState(TypedDict, total=False):
    # The descriptions are what Studio and MCP clients show (LangGraph Server serves the graph as an MCP tool).
    question: Required[Annotated[str, Field(description="The question about the user's past conversations.")]]
    question_date: Annotated[str, Field(description="When the question is asked, for relative dates ('last week'): "
                                                    "ISO 8601 or e.g. '2023/05/30 (Tue) 23:40'; default: now.")]


class OutputState(TypedDict, total=False):
    answer: str
    answer_mode: str  # "generative" (a model wrote the answer) or "extractive" (it quotes the evidence)
    notes: str
    draft: str
    evidence: list[Evidence]
    opened: dict[str, str]
    drills: list[Drill]
    step: int
    stop_reason: str
    usage: dict[str, dict]


class State(InputState, OutputState, total=False):
    today: str  # the question date as YYYY-MM-DD
    date_hints: list[str]
    date_ranges: list[list[str]]  # [start, end] as YYYY-MM-DD, one per date hint: the disclosure policy covers each
    queries: list[str]
    searched: Annotated[list[str], operator.add]
    # session id -> {date, summary, score, spans, hits: {query: score}}, and `via`: the link or date that lifted it
    # (`policy.lift`)
    candidates: dict[str, dict]
    memory_sessions: int  # how many sessions the memory searched holds (the policy opens a small one whole)
    evidence: Annotated[list[Evidence], operator.add]
    opened: Annotated[dict[str, str], deepest]
    drills: Annotated[list[Drill], operator.add]
    targets: list[dict]  # drill requests for the next drill node: {session_id, layer}
    new_evidence: int  # evidence items added since the last reflection
    sufficient: bool
    holding: dict  # whether the memory holds the answer, and why (`nodes.holds.Holding`)
    reckoning: str  # what the dated evidence computes for a temporal or counting question (`nodes.reckon`)
    route: str
    stop_reason: str
    usage: Annotated[dict[str, dict], add_usage]
