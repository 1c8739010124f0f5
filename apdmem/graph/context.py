"""Run-time configuration of the controller graph: one dataclass, filled from ``APDMEM_*`` variables."""

from __future__ import annotations

import os
from dataclasses import MISSING, dataclass, field, fields
from typing import Any


def _option(default, description: str):
    return field(default=default, metadata={"description": description})


@dataclass(kw_only=True)
class Context:
    """How a question is answered. Unset fields take ``APDMEM_<FIELD>`` from the environment (e.g.
    ``APDMEM_CONTROLLER_MODEL=openai:gpt-4.1``), else the default shown."""

    user_id: str = _option("default", "Whose memory to read (a namespace; users never see each other's memory).")
    memory_dir: str | None = _option(None, "Memory directory (default ~/.apdmem).")
    controller_model: str = _option("local", "Model for date fallback, decomposition and reflection: 'local' or 'openai:<model>'.")
    generator_model: str = _option("local", "Model for organized notes and the final answer: 'local' or 'openai:<model>'.")
    embeddings: str = _option("local", "Embeddings the memory was indexed with: 'local' or 'openai:<model>'.")
    base_url: str | None = _option(None, "OpenAI-compatible server for 'openai:<model>' models (also OPENAI_BASE_URL).")
    tmax: int = _option(20, "Step budget: searches, drills (one per session and layer) and reflections.")
    top_k: int = _option(10, "Sessions returned by each search.")
    drill_width: int = _option(3, "Sessions opened at L1 after a search when the controller has not chosen.")
    max_queries: int = _option(4, "Most sub-queries a question is decomposed into.")
    # Ablations (the paper's Table 4); all on by default.
    controller: bool = _option(True, "Agent control; off = one search, L1 of the top sessions, then notes and answer.")
    layers: str = _option("L1,L2,L3", "Layers the controller may open, comma-separated.")
    reflection: bool = _option(True, "Reflect on the evidence between rounds.")
    decomposition: bool = _option(True, "Split compound questions into sub-queries.")
    date_normalization: bool = _option(True, "Resolve relative dates in the question.")
    organized_notes: bool = _option(True, "Organize evidence into notes before answering (off = raw evidence).")
    draft_answer: bool = _option(True, "Pass the controller's draft to the answer node.")
    memory: Any = field(default=None, repr=False, metadata={"description": "An open `Memory` to use instead of opening one."})

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name == "memory" or getattr(self, f.name) != f.default:
                continue
            raw = os.environ.get(f"APDMEM_{f.name.upper()}")
            if raw is None and f.name == "base_url":
                raw = os.environ.get("OPENAI_BASE_URL")
            if raw is not None:
                setattr(self, f.name, _convert(raw, f.default if f.default is not MISSING else ""))

    @property
    def allowed_layers(self) -> tuple[str, ...]:
        return tuple(layer.strip() for layer in self.layers.split(",") if layer.strip())

    def open_memory(self):
        """The user's `Memory` (the one passed in, or opened once per Context)."""
        if self.memory is None:
            from apdmem.memory import Memory

            self.memory = Memory(self.user_id, directory=self.memory_dir, chat_model=self.controller_model,
                                 embeddings=self.embeddings, base_url=self.base_url)
        return self.memory


def _convert(raw: str, default):
    if isinstance(default, bool):
        return raw.strip().lower() in ("1", "true", "yes", "on")
    if isinstance(default, int):
        return int(raw)
    return raw
