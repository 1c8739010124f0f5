"""Any reranker: a LangChain document compressor or an HTTP rerank endpoint takes the place of the embedded
cross-encoder, in the controller's searches, `Memory.search(rerank=True)` and the extractive answer alike.

The compressors are real LangChain classes and the endpoint a real HTTP server on loopback, all computing their
scores with the embedded cross-encoder: plugged in, they must give what the default gives.
"""

import doctest
import math
import subprocess
import sys

import pytest
from graph_helpers import clean_environment, free_port, run_graph
from langchain_classic.retrievers.document_compressors import CrossEncoderReranker
from langchain_core.cross_encoders import BaseCrossEncoder
from langchain_core.documents import BaseDocumentCompressor, Document
from rerank_server import RerankServer

from apdmem.errors import ConfigError, ModelError
from apdmem.graph import Context, Settings
from apdmem.memory import Memory
from apdmem.memory.store import memory_store
from apdmem.models import get_reranker, rerankers
from apdmem.models.rerankers import CompressorReranker, EndpointReranker

QUESTION = "What did the physiotherapist say about my running injury?"


@pytest.fixture(autouse=True)
def environment(monkeypatch):
    clean_environment(monkeypatch)


@pytest.fixture
def store(history):
    """A byte store holding alice's memory of `history`."""
    store = memory_store()
    Memory("alice", store=store, l0_mode="raw").ingest(history)
    return store


@pytest.fixture
def memory(store):
    return Memory("alice", store=store, l0_mode="raw")


class SigmoidReranker(BaseDocumentCompressor):
    """A reranker as langchain-community writes them (Cohere, Jina, FlashRank ...): the `top_n` best documents,
    each with its probability in ``relevance_score``; here the embedded cross-encoder's."""

    top_n: int = 3

    def compress_documents(self, documents, query, callbacks=None):
        logits = get_reranker("local").score([(query, doc.page_content) for doc in documents])
        ranked = sorted(zip(logits, documents), key=lambda pair: -pair[0])[: self.top_n]
        return [Document(page_content=doc.page_content, metadata={**doc.metadata, "relevance_score": 1 / (1 + math.exp(-logit))})
                for logit, doc in ranked]


class EmbeddedCrossEncoder(BaseCrossEncoder):
    """The embedded cross-encoder as a LangChain `BaseCrossEncoder`, for langchain's own `CrossEncoderReranker`."""

    def score(self, text_pairs):
        return get_reranker("local").score(text_pairs)


def searched(store, reranker="local") -> tuple[list[str], list[float]]:
    """`Memory.search(rerank=True)` of alice's memory with `reranker`: the sessions and their scores."""
    found = Memory("alice", store=store, l0_mode="raw", reranker=reranker).search(QUESTION, k=7, rerank=True)
    return [d.metadata["session_id"] for d in found], [d.metadata["score"] for d in found]


def test_probabilities_become_logits_and_logits_stay():
    assert doctest.testmod(rerankers).failed == 0
    logits = [-7.5, -1.0, 0.0, 0.3, 4.2, 9.9]
    assert rerankers.log_odds([1 / (1 + math.exp(-x)) for x in logits]).tolist() == pytest.approx(logits, abs=1e-9)


def test_a_document_compressor_scores_as_the_cross_encoder_it_wraps(memory, store):
    passages = [memory.read(sid, "L3") for sid in memory.session_ids()]
    pairs = [(QUESTION, text) for text in passages] + [("Where will I stay in Japan?", text) for text in passages]
    logits = get_reranker("local").score(pairs)
    compressor = SigmoidReranker()
    assert get_reranker(compressor).score(pairs) == pytest.approx(logits, abs=1e-6)  # every passage, not its top 3
    assert compressor.top_n == 3  # the user's object is left as it was
    # langchain's CrossEncoderReranker gives no score: its order ranks, the first highest.
    ordered = get_reranker(CrossEncoderReranker(model=EmbeddedCrossEncoder(), top_n=2)).score(pairs[:7])
    assert sorted(range(7), key=lambda i: -ordered[i]) == sorted(range(7), key=lambda i: -logits[i])
    assert isinstance(get_reranker(compressor), CompressorReranker)
    (sessions, scores), (default_sessions, default_scores) = searched(store, compressor), searched(store)
    assert sessions == default_sessions and scores == pytest.approx(default_scores, abs=1e-6)


@pytest.mark.parametrize("shape", ["tei", "results"])
def test_an_http_rerank_endpoint_gives_the_defaults_answer_and_ranking(memory, store, shape):
    """Both reply shapes: TEI's (probabilities, "texts") and the results list of Cohere, Jina, vLLM and llama.cpp
    (logits, "documents", only the top_n asked for). The controller's searches and the extractive answer both read
    the endpoint."""
    default, default_events = run_graph(QUESTION, Context(), memory=memory)
    with RerankServer(shape=shape) as server:
        assert get_reranker(server.url) is get_reranker(server.url)  # one per process, like the embedded one
        (sessions, scores), (default_sessions, default_scores) = searched(store, server.url), searched(store)
        assert sessions == default_sessions and scores == pytest.approx(default_scores, abs=1e-6)
        final, events = run_graph(QUESTION, Context(), settings=Settings(reranker_model=server.url), memory=memory)
    assert final["answer"] == default["answer"] and "physiotherapist" in final["answer"]
    assert events == default_events
    asked = [r for r in server.requests if r["query"] == QUESTION]
    passages = [r.get("texts") or r.get("documents") for r in asked]
    assert any(any("runner's knee" in p and len(p) < 200 for p in batch) for batch in passages)  # the answer's sentences
    assert all(len(batch) <= rerankers.BATCH for batch in passages) and all(r["authorization"] is None for r in asked)


def test_a_hosted_rerank_api_takes_its_key_from_the_environment(monkeypatch):
    with RerankServer(shape="results") as server:
        monkeypatch.setitem(rerankers.HOSTED, "cohere", (server.url, ("COHERE_API_KEY", "CO_API_KEY")))
        with pytest.raises(ConfigError, match=r"reranker 'cohere:rerank-v3.5' needs .*COHERE_API_KEY"):
            rerankers.endpoint_reranker("cohere:rerank-v3.5")
        monkeypatch.setenv("CO_API_KEY", "secret-key")
        reranker = rerankers.endpoint_reranker("cohere:rerank-v3.5")
        assert "secret-key" not in repr(reranker)
        scores = reranker.score([(QUESTION, "My physiotherapist says it's runner's knee."), (QUESTION, "I bake bread.")])
    assert scores == pytest.approx(get_reranker("local").score([(QUESTION, "My physiotherapist says it's runner's knee."),
                                                                (QUESTION, "I bake bread.")]), abs=1e-6)
    (request,) = server.requests
    assert request["model"] == "rerank-v3.5" and request["authorization"] == "Bearer secret-key" and "texts" not in request
    with pytest.raises(ConfigError, match=r"unknown reranker 'voyage:rerank-2'.*http://host:port/rerank.*cohere:<model>"):
        Settings(reranker_model="voyage:rerank-2").reranker()


def test_an_unreachable_endpoint_fails_in_one_line(store, tmp_path):
    url = f"http://127.0.0.1:{free_port()}/rerank"
    with pytest.raises(ModelError, match=rf"^reranker {url}: cannot reach it \(.*\)$"):
        searched(store, url)
    with RerankServer() as server:
        server.reply = lambda body: {"answer": 42}
        with pytest.raises(ModelError, match=r"unexpected reply \(expected results"):
            EndpointReranker(server.url).score([(QUESTION, "text")])
    # From the command line: exit code 2, one line naming the endpoint.
    memory_dir = tmp_path / "store"
    env = {"APDMEM_STORE": str(memory_dir), "APDMEM_RERANKER_MODEL": url, "LANGSMITH_TRACING": "false", "HF_HUB_OFFLINE": "1"}
    ingest = [sys.executable, "-m", "apdmem.cli", "ingest", "--user", "u", "--l0-mode", "raw", "--quiet"]
    history = tmp_path / "history.json"
    history.write_text('[{"session_id": "s1", "date": "2024-05-20", "messages": [{"role": "user", "content": '
                       '"My physiotherapist says it is runner\'s knee."}]}]')
    assert subprocess.run([*ingest, str(history)], env=env, capture_output=True, timeout=300).returncode == 0
    run = subprocess.run([sys.executable, "-m", "apdmem.cli", "ask", "--user", "u", QUESTION], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and run.stderr.startswith(f"apdmem: error: reranker {url}: cannot reach it (")
    assert run.stderr.count("\n") == 1
