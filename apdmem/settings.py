"""The deployment's settings, resolved in one place: where memories live, which models run, at which endpoint.

`Memory`, the controller graph, the tools, the command line and a LangGraph server all resolve them through
`Settings`, so they agree on "which store am I on". Each field is, in this order: the value passed in Python
(or on the command line), else ``APDMEM_<FIELD>`` from the environment, else the fallback its description
names. A server takes them from its own environment, never from a client's run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

L0_MODES = ("auto", "llm", "raw")


def _setting(description: str):
    return field(default=None, metadata={"description": description})


@dataclass(kw_only=True)
class Settings:
    """Where memories live and which models run. A field left unset takes ``APDMEM_<FIELD>`` from the environment,
    else its fallback.

    Models are specification strings (``"local"``, ``"<provider>:<model>"`` as LangChain's `init_chat_model` and
    `init_embeddings` take them) or LangChain objects; see `apdmem.models`.

    >>> Settings(store="postgresql://apdmem@db/apdmem", chat_model="openai:gpt-4.1-mini").controller_model  # doctest: +SKIP
    'openai:gpt-4.1-mini'
    """

    store: Any = _setting("Where memories live: a directory or a postgresql:// URL, or a store object from Python "
                          "(also APDMEM_MEMORY_DIR; default ~/.apdmem).")
    chat_model: Any = _setting("Model that builds the layers: L0 in llm mode, L1 facts, L2 notes. Default 'local': no generative "
                               "model (extractive layers and answers); 'local:smollm2' is the local-chat extra's SmolLM2.")
    controller_model: Any = _setting("Model for date fallback, decomposition and reflection (default: chat_model).")
    generator_model: Any = _setting("Model for organized notes and the final answer (default: chat_model).")
    embeddings: Any = _setting("Embeddings the memories are indexed with (default 'local' = 'local:bge-small', the embedded "
                               "bge-small-en-v1.5). A memory embedded with other "
                               "ones is refused until `apdmem reindex` re-embeds it.")
    reranker_model: Any = _setting("Reranker of the controller's searches and the extractive answer: 'local' (the embedded "
                                   "cross-encoder, the default), a rerank URL (http://host:port/rerank), 'cohere:<model>' or "
                                   "'jina:<model>'; from Python a LangChain BaseDocumentCompressor. See apdmem.models.")
    base_url: str | None = _setting("Model server the provider calls, e.g. an OpenAI-compatible one for 'openai:<model>' "
                                    "or an Ollama host for 'ollama:<model>' (also OPENAI_BASE_URL).")
    l0_mode: str | None = _setting("How ingestion builds L0: 'llm' (the chat model summarizes each window), 'raw' (the "
                                   "window text) or 'auto' (raw with the embedded chat model, llm otherwise; the default).")
    cache_mb: Any = _setting("Megabytes the users loaded by a process (their indexes, kept between requests) may take "
                             "together; the least recently used are dropped beyond it (default 512, for a 2 GB server).")

    def __post_init__(self) -> None:
        for f in fields(self):
            if _unset(getattr(self, f.name)):
                setattr(self, f.name, environment(f.name))
        # Fallbacks. `_unset` rather than `or`: a store or model object passed in is kept whatever its truth value.
        fallbacks = {"store": environment("memory_dir") or str(Path.home() / ".apdmem"), "chat_model": "local",
                     "embeddings": "local", "reranker_model": "local", "base_url": os.environ.get("OPENAI_BASE_URL") or None,
                     "l0_mode": "auto", "cache_mb": "512"}
        for name, fallback in fallbacks.items():
            if _unset(getattr(self, name)):
                setattr(self, name, fallback)
        for name in ("controller_model", "generator_model"):
            if _unset(getattr(self, name)):
                setattr(self, name, self.chat_model)
        # Nothing is checked here: importing apdmem builds the server's graph with `Settings()`, and a bad value
        # must be a one-line error where it is used (`Memory` checks l0_mode, `apdmem.models` the models).

    def controller(self):
        """The controller's chat model."""
        from apdmem.models import get_chat_model

        return get_chat_model(self.controller_model, self.base_url)

    def generator(self):
        """The chat model that writes notes and answers."""
        from apdmem.models import get_chat_model

        return get_chat_model(self.generator_model, self.base_url)

    def reranker(self):
        """The cross-encoder of the controller's searches."""
        from apdmem.models import get_reranker

        return get_reranker(self.reranker_model)

    def open_memory(self, user_id: str):
        """A user's `Memory` in this store with these models (shared within the process, see
        `apdmem.memory.open_memory`)."""
        from apdmem.memory import open_memory

        return open_memory(user_id, store=self.store, chat_model=self.chat_model, embeddings=self.embeddings,
                           base_url=self.base_url, l0_mode=self.l0_mode)


def _unset(value) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def environment(name: str) -> str | None:
    """``APDMEM_<NAME>`` from the environment; None when unset or empty."""
    return os.environ.get(f"APDMEM_{name.upper()}") or None
