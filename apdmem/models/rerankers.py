"""Rerankers beyond the embedded cross-encoder, behind its interface: ``score(text_pairs) -> list[float]``, one
logit per (query, passage) pair, higher is more relevant and above 0 is relevant (the ms-marco convention the
extractive answer relies on).

- `CompressorReranker`: any LangChain `BaseDocumentCompressor` (the rerankers of langchain-community: Cohere,
  Jina, FlashRank, Infinity ...), which reranks documents for a query and keeps its score in each document's
  ``relevance_score`` metadata.
- `EndpointReranker`: an HTTP rerank endpoint in the shape text-embeddings-inference, llama.cpp's server, vLLM,
  Cohere and Jina share: ``POST {"query", "documents" (TEI: "texts"), "top_n"}`` answered by results that each
  carry the ``index`` of a document and its ``relevance_score`` (TEI: ``score``).

Most of them return probabilities (a cross-encoder's logit through a sigmoid); `log_odds` turns them back into
logits, so a TEI server running the embedded cross-encoder reproduces its logits.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
from langchain_core.documents import Document
from langchain_core.documents.compressor import BaseDocumentCompressor

from apdmem.errors import ConfigError, ModelError

# Hosted rerank APIs named "<provider>:<model>": their endpoint and the environment variables their key is read
# from (first set wins). Keys come from the process's environment only, never from a run's context.
HOSTED = {
    "cohere": ("https://api.cohere.com/v2/rerank", ("COHERE_API_KEY", "CO_API_KEY")),
    "jina": ("https://api.jina.ai/v1/rerank", ("JINA_API_KEY",)),
}
ENDPOINT_KEY = "APDMEM_RERANKER_API_KEY"  # sent as a bearer token to a rerank URL, when set
BATCH = 32  # passages per request: text-embeddings-inference refuses more by default (--max-client-batch-size)
TIMEOUT = 60  # seconds to wait for an endpoint's reply


def log_odds(scores: Sequence[float]) -> np.ndarray:
    """Scores as logits. Scores that all lie in [0, 1] are probabilities (Cohere, Jina, TEI and vLLM by default,
    langchain-community's rerankers): their log-odds, i.e. the logit the reranker's sigmoid turned into them.
    Other scores (llama.cpp's server) are logits already and are returned as they are.

    >>> log_odds([0.5, 0.8807970779778823]).round(6).tolist(), log_odds([-3.0, 2.5]).tolist()
    ([0.0, 2.0], [-3.0, 2.5])
    """
    values = np.asarray(scores, dtype=np.float64)
    if values.size and np.all((values >= 0) & (values <= 1)):
        p = np.clip(values, 1e-12, 1 - 1e-12)
        return np.log(p) - np.log1p(-p)
    return values


class QueryReranker:
    """A reranker that reads one query with its passages at a time (what compressors and endpoints take): pairs
    are grouped by query, at most `batch` passages at once (None: all). A passage the reranker leaves out of its
    reply scores below every passage it kept (a logit of -1 when it kept none)."""

    batch: int | None = None

    def score(self, text_pairs: Sequence[tuple[str, str]]) -> list[float]:
        by_query: dict[str, list[int]] = defaultdict(list)
        for i, (query, _) in enumerate(text_pairs):
            by_query[query].append(i)
        scores = [0.0] * len(text_pairs)
        for query, positions in by_query.items():
            size = self.batch or len(positions)
            for start in range(0, len(positions), size):
                batch = positions[start:start + size]
                kept = self.rank(query, [text_pairs[i][1] for i in batch])
                floor = min(kept.values()) - 1 if kept else -1.0
                for j, i in enumerate(batch):
                    scores[i] = float(kept.get(j, floor))
        return scores

    def rank(self, query: str, passages: list[str]) -> dict[int, float]:
        """The logit of each passage the reranker kept, by its position in `passages`."""
        raise NotImplementedError


class CompressorReranker(QueryReranker):
    """A LangChain `BaseDocumentCompressor` as a reranker. Its ``top_n``, when it has one, is raised to the number
    of passages so that it scores them all. The score is each document's ``relevance_score`` (as log-odds, see
    `log_odds`); a compressor that gives none (a filter, langchain's `CrossEncoderReranker`) ranks by its order:
    the first document it returns scores highest. A returned document is matched to its passage by the metadata
    it was given, else by its text."""

    ORDER = "apdmem_passage"  # metadata key that finds each returned document's passage

    def __init__(self, compressor: BaseDocumentCompressor):
        self.compressor = compressor

    def rank(self, query: str, passages: list[str]) -> dict[int, float]:
        compressor = self.compressor
        if "top_n" in type(compressor).model_fields:
            compressor = compressor.model_copy(update={"top_n": len(passages)})
        docs = [Document(page_content=text, metadata={self.ORDER: i}) for i, text in enumerate(passages)]
        returned = compressor.compress_documents(docs, query)
        relevance = [next((v for k, v in doc.metadata.items() if k.endswith("relevance_score")), None) for doc in returned]
        if returned and all(score is not None for score in relevance):
            scores = log_odds(relevance)
        else:
            scores = np.arange(len(returned), 0, -1, dtype=np.float64)
        where = {text: i for i, text in reversed(list(enumerate(passages)))}
        kept = {doc.metadata.get(self.ORDER, where.get(doc.page_content)): float(score) for doc, score in zip(returned, scores)}
        return {i: score for i, score in kept.items() if i is not None}


class EndpointReranker(QueryReranker):
    """An HTTP rerank endpoint (see the module). `model` is sent when given (hosted APIs need it), `key` as a bearer
    token. An endpoint that cannot be reached or answers otherwise fails in one line (`ModelError`)."""

    batch = BATCH

    def __init__(self, url: str, *, model: str | None = None, key: str | None = None, name: str | None = None):
        self.url, self.model, self.name = url, model, name or url
        self._headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}

    def __repr__(self) -> str:  # never the key
        return f"EndpointReranker({self.name!r})"

    def rank(self, query: str, passages: list[str]) -> dict[int, float]:
        body = {"query": query, "documents": passages, "top_n": len(passages)}
        if self.model:
            body["model"] = self.model
        else:  # a server of unknown kind: TEI reads "texts", the others "documents"
            body["texts"] = passages
        results = self._post(body)
        try:
            if isinstance(results, dict):
                results = results["results"]
            indexed = {int(r["index"]): r["relevance_score"] if "relevance_score" in r else r["score"] for r in results}
        except (KeyError, TypeError, ValueError):
            raise ModelError(f"reranker {self.name}: unexpected reply (expected results, each with an index and a "
                             f"relevance_score or score): {json.dumps(results)[:200]}") from None
        indexed = {i: s for i, s in indexed.items() if 0 <= i < len(passages)}
        return dict(zip(indexed, log_odds(list(indexed.values())).tolist()))

    def _post(self, body: dict):
        request = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=self._headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = " ".join(exc.read().decode("utf-8", "replace").split())[:200]
            raise ModelError(f"reranker {self.name}: HTTP {exc.code} {exc.reason}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ModelError(f"reranker {self.name}: cannot reach it ({reason})") from None
        except ValueError:
            raise ModelError(f"reranker {self.name}: the reply is not JSON") from None


def endpoint_reranker(spec: str) -> EndpointReranker:
    """The endpoint a specification names: a rerank URL (``http://host:port/rerank``, with the bearer token
    APDMEM_RERANKER_API_KEY when set) or a hosted API's ``"<provider>:<model>"`` (``"cohere:rerank-v3.5"``,
    ``"jina:jina-reranker-v2-base-multilingual"``) with its key from the environment."""
    if spec.startswith(("http://", "https://")):
        return EndpointReranker(spec, key=os.environ.get(ENDPOINT_KEY) or None)
    provider, _, model = spec.partition(":")
    url, variables = HOSTED[provider]
    key = next((os.environ[v] for v in variables if os.environ.get(v)), None)
    if not model or key is None:
        raise ConfigError(f"reranker {spec!r} needs a model name ('{provider}:<model>') and {variables[0]} in the environment")
    return EndpointReranker(url, model=model, key=key, name=spec)
