"""The deterministic disclosure policy: which sessions to open, which to read deeper, when to stop.

It decides whenever the controller's model does not: the first drill after a search, every round of the
`no-reflection` ablation, and every reflection whose output is unusable or proposes nothing usable.

- **Open** the sessions that stand out in the question's ranking (its *head*: scores at least `HEAD` of the
  way from the background, the median score below the first few, to the best; the scores are the search's
  rescored by the cross-encoder, see `retriever.rerank`), and cover every sub-query: when none of the sessions
  standing out for a sub-query is opened, its best one is. Sessions open at L1.
- **Follow links** (with the `follow_links` option, for questions that gather several sessions: a count, a
  total, the latest state of something; see `follows_links`): beside what it opens, the policy opens the sessions
  most strongly linked to them (`apdmem.memory.links`: shared rare terms, close units), at most
  `LINKS_FOLLOWED`; each is a read like any other, in the same rounds and the same step budget.
- **Deepen** an opened session when what was disclosed of it lacks words of the queries that its matched
  turns contain: the upper layer dropped what made the session match, so its matched turns are read at the
  next layer down (L3, the exact messages: no model call).
- **Stop** when nothing is left to open or deepen (or at the step budget).

At most `drill_width` reads per round; a round's reads run concurrently.
"""

from __future__ import annotations

import re
import statistics

from apdmem.graph.state import LAYER_DEPTH
from apdmem.memory.index import tokenize

# A session stands out when its score is at least this share of the way from the background (the median score
# below the first BACKGROUND_FROM places) to the best. On reranked scores, 20 sessions per search, links followed,
# the 144 answerable dev questions (benchmarks/ablation.py, bge-small) gave: 0.25 opened 7.7% of the sessions for 0.989
# of the evidence sessions, 0.3 7.0% for 0.984.
HEAD = 0.25
BACKGROUND_FROM = 3

# Questions whose answer gathers several sessions (aggregation: a count, a sum) or the latest of several (an update):
# the words that ask for them, as LongMemEval's and everyday questions phrase them. Comparisons and intervals
# ("which came first", "how long between") name their events: the event split covers them.
FOLLOW_CUES = re.compile(r"\b(how many|how much|in total|total|altogether|combined|so far|sum|"
                         r"current|currently|latest|most recent|still|now|anymore|these days|at the moment)\b",
                         re.IGNORECASE)
# Linked sessions one question may add to what the policy opens: the multi-session questions of LongMemEval need
# two or three sessions, and the head opens one or two of them.
LINKS_FOLLOWED = 2


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


def ranking(candidates: dict[str, dict], query: str) -> list[str]:
    """The sessions a query found, best first (ties by id, as the retriever orders them)."""
    hits = [(sid, c["hits"][query]) for sid, c in candidates.items() if query in c.get("hits", {})]
    return [sid for sid, _ in sorted(hits, key=lambda h: (-h[1], h[0]))]


def query_head(candidates: dict[str, dict], query: str) -> list[str]:
    """The sessions that stand out in what a query found."""
    ranked = ranking(candidates, query)
    return ranked[: head([candidates[sid]["hits"][query] for sid in ranked])]


def follows_links(question: str) -> bool:
    """Whether a question gathers several sessions or asks for the latest state (`FOLLOW_CUES`).

    >>> follows_links("How many plants did I buy in total?"), follows_links("What is my dog's name?")
    (True, False)
    """
    return bool(FOLLOW_CUES.search(question))


def wanted(state) -> list[str]:
    """Sessions worth opening, in order: the question's head, then the best session of each sub-query whose
    head has none of them yet (`chosen`), then the linked sessions worth following (`followed`)."""
    picked = chosen(state)
    return picked + list(followed(state, picked))


def chosen(state) -> list[str]:
    """The sessions the ranking itself picks: the question's head, then the best session of each sub-query
    whose head has none of them yet."""
    candidates = state.get("candidates", {})
    queries = list(dict.fromkeys(state.get("searched", [])))
    if not queries:
        return []
    question = state.get("question") if state.get("question") in queries else queries[0]
    picked = query_head(candidates, question)
    for query in queries:
        found = query_head(candidates, query)
        if query != question and found and not set(found) & set(picked):
            picked.append(found[0])
    return picked


def followed(state, chosen: list[str]) -> dict[str, dict]:
    """The sessions linked to `chosen` that are worth opening too, each with the link followed to it (``from``,
    ``strength``, ``terms``): the strongest links from the chosen sessions to others, at most `LINKS_FOLLOWED`.
    Empty unless the state holds links (the `search` node adds them with the `follow_links` option, for questions
    that `follows_links`)."""
    links = state.get("links") or {}
    offered = sorted(((link["strength"], sid, link) for sid in chosen for link in links.get(sid, [])
                      if link["session_id"] not in chosen), key=lambda t: (-t[0], t[1], t[2]["session_id"]))
    out: dict[str, dict] = {}
    for strength, sid, link in offered:
        if len(out) < LINKS_FOLLOWED and link["session_id"] not in out:
            out[link["session_id"]] = {"from": sid, "strength": strength, "terms": link["terms"]}
    return out


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
    """The next round's reads, at most `drill_width`: sessions to open (one opened for a link says which, under
    ``via``), then sessions to read deeper. Empty when the policy has nothing left to do."""
    opened = state.get("opened", {})
    picked = chosen(state)
    via = followed(state, picked)
    reads = [{"session_id": sid, "layer": "L1", **({"via": via[sid]} if sid in via else {})}
             for sid in picked + list(via) if sid not in opened]
    deepest = max((LAYER_DEPTH[layer] for layer in ctx.allowed_layers), default=0)
    ranked = sorted(opened, key=lambda sid: -state.get("candidates", {}).get(sid, {}).get("score", 0.0))
    reads += [{"session_id": sid, "layer": "L3"} for sid in ranked
              if LAYER_DEPTH[opened[sid]] < deepest and uncovered(state, sid)]
    return reads[: ctx.drill_width]
