"""A rerank endpoint on loopback that serves the embedded cross-encoder, for the tests and the ablation benchmark.

It speaks the two reply shapes apdmem reads: ``tei`` (text-embeddings-inference: ``POST {"query", "texts"}`` ->
``[{"index", "score"}]``, the score a probability, the logit through a sigmoid, as TEI does by default) and
``results`` (Cohere, Jina, vLLM, llama.cpp: ``POST {"query", "documents", "top_n"}`` -> ``{"results": [{"index",
"relevance_score"}]}``, the first `top_n`, the score the raw logit as llama.cpp's server gives it).

    python tests/rerank_server.py --port 8089     # then APDMEM_RERANKER_MODEL=http://127.0.0.1:8089/rerank
"""

from __future__ import annotations

import argparse
import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from apdmem.models import get_reranker


class RerankServer(ThreadingHTTPServer):
    """The endpoint; every request body (and its Authorization header) is kept in `requests`."""

    daemon_threads = True

    def __init__(self, port: int = 0, shape: str = "tei"):
        super().__init__(("127.0.0.1", port), RerankHandler)
        self.shape, self.requests, self.cross_encoder = shape, [], get_reranker("local")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/rerank"

    def reply(self, body: dict):
        passages = body.get("texts") if self.shape == "tei" else body.get("documents")
        logits = self.cross_encoder.score([(body["query"], text) for text in passages])
        ranked = sorted(range(len(logits)), key=lambda i: -logits[i])
        if self.shape == "tei":
            return [{"index": i, "score": 1 / (1 + math.exp(-logits[i]))} for i in ranked]
        return {"results": [{"index": i, "relevance_score": logits[i]} for i in ranked[:body.get("top_n") or len(ranked)]]}

    def __enter__(self):
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.shutdown()
        self.server_close()


class RerankHandler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - the name http.server calls
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append({**body, "authorization": self.headers.get("Authorization")})
        data = json.dumps(self.server.reply(body)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):  # quiet
        pass


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8089)
    parser.add_argument("--shape", choices=["tei", "results"], default="tei")
    args = parser.parse_args()
    server = RerankServer(args.port, args.shape)
    print(f"serving the embedded cross-encoder at {server.url} ({args.shape})", flush=True)
    server.serve_forever()
