"""The deterministic disclosure policy: which sessions to open, which to read deeper, when to stop.

It decides whenever the controller's model does not: the first drill after a search, every round of the
`no-reflection` ablation, and every reflection whose output is unusable or proposes nothing usable.

- **Open everything** found in a small memory: when the user has at most `SMALL_MEMORY` sessions, every candidate
  session is opened, best-ranked first (`small`); the rules below choose among the sessions of a larger one.
- **Open** the sessions that stand out in the question's ranking (its *head*: scores at least `HEAD` of the
  way from the background, the median score below the first few, to the best; the scores are the search's
  rescored by the cross-encoder, see `retriever.rerank`), and cover every sub-query: when none of the sessions
  standing out for a sub-query is opened, its best one is. Cover every date the question names too ("10 days
  ago", "last Saturday": the state's `date_ranges`): when no session opened is dated within `DATE_SLACK_DAYS` of
  it, the question's best-ranked session that is, is opened. Sessions open at L1.
- **Lift links** (with the `follow_links` option, for questions that gather several sessions: a count, a total,
  the latest state of something; see `follows_links`): the sessions most strongly linked to the question's first
  `LIFTED_FROM` sessions (`apdmem.memory.links`: shared rare terms, close units), at most `LINKS_LIFTED`, rise to
  `LIFT` of the score of the session they are linked from (`lift`, in the `search` node), so the head opens them
  like any other (one lifted by a session the head opens is opened with it); each read names its link (``via``).
  The session the date cover opens for each of the question's dates is lifted too, to `LIFT` of the best score,
  and its read names the date. The lifts are `apdmem.memory.lifts`, which `Memory.search(rerank=True)` applies too.
- **Deepen** an opened session when what was disclosed of it lacks words of the queries that its matched
  turns contain: the upper layer dropped what made the session match, so its matched turns are read at the
  next layer down (L3, the exact messages: no model call).
- **Stop** when nothing is left to open or deepen (or at the step budget).

At most `drill_width` reads per round; a round's reads run concurrently.
"""

from __future__ import annotations

import statistics

from apdmem.graph.state import LAYER_DEPTH
from apdmem.memory.index import tokenize
# The lifts are the policy's own terms, shared with `Memory.search`: they live below both.
from apdmem.memory.lifts import (LIFT, LIFTED_FROM, LINKS_LIFTED, dated_near, follows_links, lift,  # noqa: F401
                                 raise_to, ranking)

# A session stands out when its score is at least this share of the way from the background (the median score
# below the first BACKGROUND_FROM places) to the best. On reranked scores, 20 sessions per search, links lifted,
# the 144 answerable dev questions (benchmarks/ablation.py, bge-small) gave: 0.25 opened 6.7% of the sessions for 0.986
# of the evidence sessions, 0.3 6.2% for 0.983.
HEAD = 0.25
BACKGROUND_FROM = 3

# A memory of at most this many sessions is opened whole (every session a search found): two rounds of `drill_width`
# reads. On LongMemEval haystacks (39 to 57 sessions) the graph opens 3.15 sessions per question, and 6 or more for 18
# of the 144 answerable dev questions: opening a small memory whole costs no more than a large one often takes. In a
# short ranking the head stands out from no background: of three sessions one was opened, the stale one, for "Do I
# still have my red bike?". Memories of more sessions are opened as before.
SMALL_MEMORY = 6


def head(scores: list[float]) -> int:
    """How many of the leading `scores` (best first) stand out from the background: the median of the scores
    after the first BACKGROUND_FROM (or the last score, in a short ranking). One when they do not differ at all.

    >>> head([2.0, 1.9, 1.3, 1.2, 1.1, 1.0, 1.0]), head([2.0, 1.2, 1.1, 1.0]), head([1.0, 1.0])
    (3, 1, 1)
    """
    if not scores:
        return 0
    tail = scores[BACKGROUND_FROM:] or scores[-1:]
    background = statistics.median(tail)
    if scores[0] <= background:
        return 1
    floor = background + HEAD * (scores[0] - background)
    return sum(1 for s in scores if s >= floor)


def query_head(candidates: dict[str, dict], query: str) -> list[str]:
    """The sessions that stand out in what a query found."""
    ranked = ranking(candidates, query)
    return ranked[: head([candidates[sid]["hits"][query] for sid in ranked])]


def wanted(state) -> list[str]:
    """Sessions worth opening, in order: in a small memory every candidate (`small`); else the question's head with the sessions its sessions lifted (`lift`: in a
    short ranking a lifted session may not stand out by itself), then the best session of each sub-query whose head
    has none of them yet, then, for each of the question's date ranges that none of them is dated near, the
    question's best-ranked session that is (`dated_near`)."""
    candidates = state.get("candidates", {})
    queries = list(dict.fromkeys(state.get("searched", [])))
    if not queries:
        return []
    question = state.get("question") if state.get("question") in queries else queries[0]
    if small(state):
        ranked = ranking(candidates, question)
        return ranked + sorted((sid for sid in candidates if sid not in ranked), key=lambda sid: -candidates[sid]["score"])
    picked = query_head(candidates, question)
    picked += [sid for sid in ranking(candidates, question)
               if sid not in picked and candidates[sid].get("via", {}).get("from") in picked]
    for query in queries:
        found = query_head(candidates, query)
        if query != question and found and not set(found) & set(picked):
            picked.append(found[0])
    for start, end in state.get("date_ranges", []):
        dated = [sid for sid in ranking(candidates, question) if dated_near(candidates[sid], start, end)]
        if dated and not set(dated) & set(picked):
            picked.append(dated[0])
    return picked


def small(state) -> bool:
    """Whether the memory searched holds at most `SMALL_MEMORY` sessions (``memory_sessions``, set by `search`).

    >>> small({"memory_sessions": 3}), small({"memory_sessions": 50}), small({})
    (True, False, False)
    """
    return 0 < state.get("memory_sessions", 0) <= SMALL_MEMORY


def uncovered(state, session_id: str) -> bool:
    """Whether the words that made this session match (query words found in its matched unit) are missing
    from what has been disclosed of it."""
    candidate = state.get("candidates", {}).get(session_id)
    if not candidate:
        return False
    asked = {t for query in [state.get("question", ""), *candidate.get("hits", {})] for t in tokenize(query)}
    matched = asked & set(tokenize(candidate["summary"]))
    disclosed = set(tokenize(" ".join(e["text"] for e in state.get("evidence", []) if e["session_id"] == session_id)))
    return bool(matched - disclosed)


def plan(state, ctx) -> list[dict]:
    """The next round's reads, at most `drill_width`: sessions to open (one that was lifted says why, under
    ``via``: see `lift`), then sessions to read deeper. Empty when the policy has nothing left to do."""
    opened, candidates = state.get("opened", {}), state.get("candidates", {})
    reads = [{"session_id": sid, "layer": "L1", **({"via": candidates[sid]["via"]} if "via" in candidates[sid] else {})}
             for sid in wanted(state) if sid not in opened]
    deepest = max((LAYER_DEPTH[layer] for layer in ctx.allowed_layers), default=0)
    ranked = sorted(opened, key=lambda sid: -candidates.get(sid, {}).get("score", 0.0))
    reads += [{"session_id": sid, "layer": "L3"} for sid in ranked
              if LAYER_DEPTH[opened[sid]] < deepest and uncovered(state, sid)]
    return reads[: ctx.drill_width]
