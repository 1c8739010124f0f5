"""Crafted questions against the work that grows with a question's length (issue 30, item 4).

    python benchmarks/bench_crafted_questions.py                   # 25,000, 50,000, 100,000 characters
    python benchmarks/bench_crafted_questions.py --sizes 10000 20000 --graph

A question is made of one phrase repeated to `size` characters, each phrase aimed at a pattern of the
controller's first two nodes: the clauses, items and options `decompose.events` splits a question at, the
frames it reads ("between", "before ... did I"), closing punctuation, and the relative dates `normalize_dates`
resolves. Prints the seconds `events` and the date parser (`resolve_relative_dates`, `unresolved_cues`) take on
each, best of 3: the work is linear when doubling the size doubles the time. With `--graph`, also the whole
`apdmem` graph (extractive default, the LongMemEval history shipped with the package, in memory) on each kind at
the question-length limit (`apdmem.limits.MAX_QUESTION_CHARS`), the longest question a run accepts.
"""

from __future__ import annotations

import argparse
import time
from datetime import date
from importlib.resources import files

from apdmem.limits import MAX_QUESTION_CHARS
from apdmem.nodes.dates import resolve_relative_dates, unresolved_cues
from apdmem.nodes.decompose import events

KINDS = {  # name: (head, phrase repeated)
    "when-clauses": ("", "how long when I ran "),
    "and-items": ("", "How many total of apples and "),
    "or-options": ("Which did I do first, ", "a or "),
    "between-no-and": ("How many days ", "between "),
    "before-no-did": ("How many days ", "before a "),
    "before-did": ("How many days ", "before a did I "),
    "since": ("how many days since ", "ago did I "),
    "punctuation": ("Which did I do first, a or b", "?."),
    "compared": ("How much more did I spend on ", "x compared to "),
    "yesterday": ("", "yesterday ago "),
    "last-n-days": ("", "in the last 3 days "),
}


def crafted(kind: str, size: int) -> str:
    head, phrase = KINDS[kind]
    return (head + phrase * (size // len(phrase) + 1))[:size] + ("x" if kind == "punctuation" else "")


def best_of_3(function, *args) -> float:
    times = []
    for _ in range(3):
        started = time.perf_counter()
        function(*args)
        times.append(time.perf_counter() - started)
    return min(times)


def parse_dates(question: str) -> None:
    unresolved_cues(question, resolve_relative_dates(question, date(2023, 5, 30)))


def graph_seconds(kinds) -> dict[str, float]:
    from apdmem import Context, build_graph
    from apdmem.memory import Memory, load_longmemeval
    from apdmem.memory.store import memory_store

    item = load_longmemeval(str(files("apdmem") / "data" / "longmemeval_demo.json"))[0]
    memory = Memory("crafted", store=memory_store(), l0_mode="raw")
    memory.ingest(item.sessions)
    graph = build_graph(memory=memory)
    graph.invoke({"question": "What did I buy?", "question_date": "2023-05-30"}, context=Context())  # models loaded
    seconds = {}
    for kind in kinds:
        started = time.perf_counter()
        graph.invoke({"question": crafted(kind, MAX_QUESTION_CHARS - 1), "question_date": "2023-05-30"}, context=Context())
        seconds[kind] = time.perf_counter() - started
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[25_000, 50_000, 100_000])
    parser.add_argument("--graph", action="store_true", help="also run the whole graph at the question-length limit")
    args = parser.parse_args()
    rows = {kind: [(best_of_3(events, crafted(kind, n)), best_of_3(parse_dates, crafted(kind, n))) for n in args.sizes]
            for kind in KINDS}
    whole = graph_seconds(KINDS) if args.graph else {}
    print("seconds, best of 3: events / dates at each size" + (f"; whole graph at {MAX_QUESTION_CHARS - 1:,} characters" if whole else ""))
    print("question".ljust(16) + "".join(f"{n:>20,}" for n in args.sizes) + ("      graph" if whole else ""))
    for kind, cells in rows.items():
        print(kind.ljust(16) + "".join(f"{e:9.3f} / {d:7.3f}" for e, d in cells) + (f"{whole[kind]:11.1f}" if whole else ""))


if __name__ == "__main__":
    main()
