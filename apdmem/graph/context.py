"""Configuration of the controller graph, in two parts.

- `Settings`: the deployment. Where memories live, which models run and at which endpoint. Read from the
  process environment (``APDMEM_*``, ``OPENAI_BASE_URL``), or built in Python and passed in; a server takes
  them from its own environment, never from a client's run.
- `Context`: one question. Whose memory (a claim that a server's auth handler may overrule), the step budget
  and the ablation switches. This is what a run's ``context`` may set.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any

from apdmem.errors import ConfigError


def _option(default, description: str):
    return field(default=default, metadata={"description": description})


def _from_environment(config) -> None:
    """Fill fields left at their default from ``APDMEM_<FIELD>`` (converted to the field's type)."""
    for f in fields(config):
        if f.metadata.get("python_only") or getattr(config, f.name) != f.default:
            continue
        raw = os.environ.get(f"APDMEM_{f.name.upper()}")
        if raw is not None:
            setattr(config, f.name, _convert(f"APDMEM_{f.name.upper()}", raw, f.default))


@dataclass(kw_only=True)
class Settings:
    """Where memories live and which models run. Unset fields take ``APDMEM_<FIELD>`` from the environment.

    Models are specification strings (``"local"``, ``"<provider>:<model>"`` as LangChain's `init_chat_model` and
    `init_embeddings` take them) or LangChain objects; see `apdmem.models`.

    >>> Settings(controller_model="openai:gpt-4.1", generator_model="openai:gpt-4.1-mini")   # doctest: +SKIP
    """

    store: str | None = _option(None, "Memory store: a directory (also APDMEM_MEMORY_DIR; default ~/.apdmem).")
    chat_model: Any = _option("local", "Model that builds the layers (L0 in llm mode, L1 facts, L2 notes).")
    controller_model: Any = _option(None, "Model for date fallback, decomposition and reflection (default: chat_model).")
    generator_model: Any = _option(None, "Model for organized notes and the final answer (default: chat_model).")
    embeddings: Any = _option("local", "Embeddings the memories are indexed with.")
    reranker_model: Any = _option("local", "Cross-encoder that rescores what each search found, for the disclosure policy.")
    base_url: str | None = _option(None, "Model server the provider calls, e.g. an OpenAI-compatible one for 'openai:<model>' "
                                   "(also OPENAI_BASE_URL) or an Ollama host for 'ollama:<model>'.")

    def __post_init__(self) -> None:
        _from_environment(self)
        self.store = self.store or os.environ.get("APDMEM_MEMORY_DIR") or None
        self.base_url = self.base_url or os.environ.get("OPENAI_BASE_URL") or None
        self.controller_model = self.controller_model or self.chat_model
        self.generator_model = self.generator_model or self.chat_model

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
        """A user's `Memory` under these settings (shared within the process, see `apdmem.memory.open_memory`)."""
        from apdmem.memory import open_memory

        return open_memory(user_id, store=self.store, chat_model=self.chat_model, embeddings=self.embeddings,
                           base_url=self.base_url)


@dataclass(kw_only=True)
class Context:
    """How one question is answered. Unset fields take ``APDMEM_<FIELD>`` from the environment (e.g.
    ``APDMEM_TMAX=12``), else the default shown.

    `settings` and `memory` are for Python callers embedding the graph; a server's run context cannot set
    them (they are not JSON), so a client never chooses where memory lives or which endpoint is called.
    """

    user_id: str = _option("default", "Whose memory to read (a namespace; with server auth on, the authenticated user).")
    tmax: int = _option(20, "Step budget: searches, drills (one per session and layer) and reflections.")
    top_k: int = _option(20, "Sessions returned and rescored by each search (the disclosure policy reads how their scores fall "
                         "off; its threshold was set with 20).")
    drill_width: int = _option(3, "Most session reads in one round of drilling (they run concurrently).")
    max_queries: int = _option(4, "Most sub-queries a question is decomposed into.")
    # Ablations (the paper's Table 4); all on by default.
    controller: bool = _option(True, "Agent control; off = one search, L1 of the sessions that stand out in it, then notes and answer.")
    layers: str = _option("L1,L2,L3", "Layers the controller may open, comma-separated.")
    reflection: bool = _option(True, "Reflect on the evidence between rounds.")
    decomposition: bool = _option(True, "Split compound questions into sub-queries.")
    date_normalization: bool = _option(True, "Resolve relative dates in the question.")
    organized_notes: bool = _option(True, "Organize evidence into notes before answering (off = raw evidence).")
    draft_answer: bool = _option(True, "Pass the controller's draft to the answer node.")
    settings: Any = field(default=None, repr=False, metadata={"python_only": True,
                          "description": "Deployment `Settings` (Python only; default: from the environment)."})
    memory: Any = field(default=None, repr=False, metadata={"python_only": True,
                        "description": "An open `Memory` to use instead of opening one (Python only)."})

    def __post_init__(self) -> None:
        _from_environment(self)
        if self.settings is not None and not isinstance(self.settings, Settings):
            raise ConfigError("context field 'settings' must be a Settings object; a server takes its settings from its environment")
        if self.memory is not None and not hasattr(self.memory, "search"):
            raise ConfigError("context field 'memory' must be an open Memory; a server opens memories from its own store")
        for name in ("tmax", "top_k", "drill_width", "max_queries"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"context field {name!r} must be a positive integer, got {value!r}")
        unknown = set(self.allowed_layers) - {"L1", "L2", "L3"}
        if unknown:
            raise ConfigError(f"context field 'layers' names unknown layers {sorted(unknown)}: use L1, L2, L3")
        self.settings = self.settings or Settings()

    @property
    def allowed_layers(self) -> tuple[str, ...]:
        return tuple(layer.strip() for layer in self.layers.split(",") if layer.strip())

    def open_memory(self, user_id: str | None = None):
        """The user's `Memory`: the one passed in, or the one the settings open for `user_id`."""
        if self.memory is not None:
            return self.memory
        return self.settings.open_memory(user_id or self.user_id)


def _convert(name: str, raw: str, default):
    if isinstance(default, bool):
        return raw.strip().lower() in ("1", "true", "yes", "on")
    if isinstance(default, int):
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"{name}={raw!r} is not an integer") from None
    return raw
