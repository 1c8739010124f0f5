"""Speed of the embedded embeddings (bge-small-en-v1.5, int8 ONNX) on the texts apdmem embeds: the dense texts of
raw L0 units (the user turns of each window) of a LongMemEval file, the model loaded once and its cache emptied
before each pass. Queries are the file's
questions, embedded one at a time as a search does.

    LANGSMITH_TRACING=false .venv/bin/python benchmarks/bench_embeddings.py ../shared/data/longmemeval/longmemeval_s_dev.json.gz
"""

from __future__ import annotations

import argparse
import statistics
import time

from apdmem.memory import load_longmemeval
from apdmem.memory.layers import raw_unit, window_spans
from apdmem.models import get_embeddings


def unit_texts(items, count: int) -> list[str]:
    """The first `count` distinct dense texts of raw L0 units, in file order."""
    seen: dict[str, None] = {}
    for item in items:
        for session in item.sessions:
            for start, end in window_spans(len(session.turns)):
                seen.update(dict.fromkeys(raw_unit(session, start, end).embed_texts))
                if len(seen) >= count:
                    return list(seen)[:count]
    return list(seen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", help="a LongMemEval file")
    parser.add_argument("--texts", type=int, default=2000, help="unit texts embedded (default 2000)")
    parser.add_argument("--queries", type=int, default=100, help="questions embedded one by one (default 100)")
    args = parser.parse_args()
    items = load_longmemeval(args.dataset)
    texts, queries = unit_texts(items, args.texts), [item.question for item in items][: args.queries]
    print(f"{len(texts)} unit texts ({sum(map(len, texts)) / len(texts):.0f} characters on average), {len(queries)} queries")
    model = get_embeddings("local")
    model.embed(["warm-up"])
    model._cache.clear()
    started = time.perf_counter()
    model.embed(texts)
    seconds = time.perf_counter() - started
    model._cache.clear()
    latencies = []
    for query in queries:
        started = time.perf_counter()
        model.embed([query])
        latencies.append((time.perf_counter() - started) * 1000)
    print(f"{model.model.space:16} {len(texts) / seconds:7.1f} texts/s ({seconds:.1f} s)   query p50 "
          f"{statistics.median(latencies):6.1f} ms, mean {statistics.fmean(latencies):6.1f} ms")


if __name__ == "__main__":
    main()
