"""Hybrid search latency over a large synthetic unit table (default 100,000 L0 units).

Texts are short sentences drawn from a Zipf-distributed vocabulary (common words first, like real chat);
dense vectors are random unit vectors (384-d float32, the embedded model's shape) so that building the table takes
seconds, while the query vectors come from the real embedded bge-small. Each query goes through
`apdmem.memory.retriever.rank_sessions`, as `Memory.search` does.

It reports median and p95 latency with the "sparse" lexical backend (the "auto" choice at this size) and, for a
few queries only, with "rank-bm25" (which scores every unit in Python: the reason it is not used at this size).

    LANGSMITH_TRACING=false .venv/bin/python benchmarks/bench_large_store.py --units 100000
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import faiss
import numpy as np

from apdmem.memory.index import RankBM25, UnitIndex, make_lexical, tokenize
from apdmem.memory.records import Unit
from apdmem.memory.retriever import rank_sessions
from apdmem.models import get_embeddings

COMMON = ("i the a to and my of it for in is that you was on with this be have so but we at just about what "
          "can do me your are not they like if get an all one would there out up he she her him").split()
CONTENT = ("trip hiking dog cat vet puppy bread starter flour oven guitar lesson chord song job offer manager "
           "dashboard commute train office knee doctor marathon swim gym yoga recipe pasta dinner garden tomato "
           "flight hotel passport museum beach mountain lake camping tent boots jacket budget rent apartment "
           "landlord sister brother mother father friend wedding birthday gift concert ticket movie book novel "
           "podcast course exam project deadline client meeting laptop phone camera bike car insurance loan "
           "coffee tea wine cheese chocolate painting pottery piano violin chess soccer tennis golf kayak").split()


def vocabulary(size: int, rng: random.Random) -> list[str]:
    """Common words, then content words, then made-up names and terms (the long tail), in Zipf rank order."""
    syllables = ["ka", "lo", "mi", "ren", "tor", "vi", "sa", "del", "mar", "quin", "bel", "zu", "ros", "tan", "ex"]
    tail = set()
    while len(tail) < size - len(COMMON) - len(CONTENT):
        tail.add("".join(rng.choices(syllables, k=rng.randint(2, 4))))
    return COMMON + CONTENT + sorted(tail)


def sentences(n: int, words: list[str], rng: random.Random) -> list[str]:
    ranks = np.arange(1, len(words) + 1)
    p = 1 / ranks**1.07
    p /= p.sum()
    np_rng = np.random.default_rng(rng.randrange(2**32))
    lengths = np_rng.integers(8, 40, size=n)
    picks = np_rng.choice(len(words), size=int(lengths.sum()), p=p)
    out, at = [], 0
    for length in lengths:
        speaker = "user" if rng.random() < 0.5 else "assistant"
        out.append(f"{speaker}: " + " ".join(words[i] for i in picks[at : at + length]))
        at += length
    return out


def random_unit_vectors(n: int, dimension: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((n, dimension), dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def timed(index: UnitIndex, queries: list[str], vectors: np.ndarray, k: int) -> tuple[list[float], list[str]]:
    """Milliseconds per query, and each query's top session."""
    latencies, tops = [], []
    for query, vector in zip(queries, vectors):
        started = time.perf_counter()
        hits = rank_sessions(index, [query], vector[None], k)
        latencies.append((time.perf_counter() - started) * 1000)
        tops.append(hits[0].session_id if hits else "")
    return latencies, tops


def summary(latencies: list[float]) -> str:
    return (f"median {statistics.median(latencies):7.1f} ms   p95 {np.percentile(latencies, 95):7.1f} ms   "
            f"max {max(latencies):7.1f} ms   ({len(latencies)} queries)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--units", type=int, default=100_000, help="L0 units in the table (default 100,000)")
    parser.add_argument("--units-per-session", type=int, default=10)
    parser.add_argument("--queries", type=int, default=200, help="queries timed with the sparse backend")
    parser.add_argument("--rank-bm25-queries", type=int, default=5, help="queries timed with rank-bm25 (slow)")
    parser.add_argument("-k", type=int, default=10, help="sessions returned per query")
    parser.add_argument("--faiss-threads", type=int, default=0, help="OpenMP threads of FAISS (0: its default)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    if args.faiss_threads:
        faiss.omp_set_num_threads(args.faiss_threads)

    started = time.perf_counter()
    words = vocabulary(20_000, rng)
    texts = sentences(args.units, words, rng)
    units = [Unit(f"s{i // args.units_per_session:06d}", 2 * (i % args.units_per_session), 2 * (i % args.units_per_session) + 4,
                  text, embed_texts=[text]) for i, text in enumerate(texts)]
    print(f"{args.units:,} units in {args.units // args.units_per_session:,} sessions, "
          f"{np.mean([len(t.split()) for t in texts]):.0f} words per unit on average; "
          f"texts generated in {time.perf_counter() - started:.1f}s")
    print(f"lexical backend chosen by 'auto' at this size: {type(make_lexical('auto', args.units)).__name__}; "
          f"FAISS threads: {faiss.omp_get_max_threads()}")

    started = time.perf_counter()
    index = UnitIndex(384, "sparse", expected_size=args.units)
    index.add(units, random_unit_vectors(args.units, 384, args.seed))
    print(f"index built in {time.perf_counter() - started:.1f}s (tokenize + postings + FAISS IndexFlatIP)")

    # Queries: a few words of a random unit (so lexical hits exist), as a user would type them.
    embeddings = get_embeddings("local", None)
    queries = []
    for _ in range(args.queries):
        tokens = [w for w in rng.choice(texts).split()[1:] if w not in COMMON] or ["trip"]
        queries.append("what did I say about " + " ".join(rng.sample(tokens, min(len(tokens), rng.randint(2, 4)))))
    started = time.perf_counter()
    query_vectors = embeddings.embed(queries)
    print(f"{len(queries)} query vectors from the embedded MiniLM in {time.perf_counter() - started:.1f}s")

    started = time.perf_counter()
    rank_sessions(index, [queries[0]], query_vectors[:1], args.k)  # first query builds the idf table
    print(f"\nsparse: first query (builds idf table) {(time.perf_counter() - started) * 1000:.0f} ms")
    sparse_latencies, sparse_tops = timed(index, queries, query_vectors, args.k)
    print(f"sparse     hybrid search: {summary(sparse_latencies)}")

    # Where the time goes, on the same queries.
    lexical_ms = [1000 * _seconds(lambda q=q: index.lexical.scores(tokenize(q))) for q in queries[:50]]
    dense_ms = [1000 * _seconds(lambda v=v: index.dense.search(v, 300)) for v in query_vectors[:50]]
    print(f"           of which BM25 scores {statistics.median(lexical_ms):.1f} ms, "
          f"FAISS search {statistics.median(dense_ms):.1f} ms (medians)")

    n = min(args.rank_bm25_queries, len(queries))
    index.lexical = RankBM25()
    started = time.perf_counter()
    index.lexical.add([tokenize(u.summary) for u in units])
    rank_sessions(index, [queries[0]], query_vectors[:1], args.k)  # builds BM25Okapi over the corpus
    print(f"\nrank-bm25: corpus statistics built on first query in {time.perf_counter() - started:.1f}s")
    bm25_latencies, bm25_tops = timed(index, queries[:n], query_vectors[:n], args.k)
    print(f"rank-bm25  hybrid search: {summary(bm25_latencies)}")
    same = sum(a == b for a, b in zip(bm25_tops, sparse_tops))
    print(f"same top session as sparse for {same}/{n} queries; "
          f"rank-bm25 is {statistics.median(bm25_latencies) / statistics.median(sparse_latencies):.0f}x slower at the median")


def _seconds(call) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
