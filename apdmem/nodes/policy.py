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
  and its read names the date.
- **Deepen** an opened session when what was disclosed of it lacks words of the queries that its matched
  turns contain: the upper layer dropped what made the session match, so its matched turns are read at the
  next layer down (L3, the exact messages: no model call).
- **Stop** when nothing is left to open or deepen (or at the step budget).

At most `drill_width` reads per round; a round's reads run concurrently.
"""

from __future__ import annotations

import re
import statistics
from datetime import timedelta

from apdmem.graph.state import LAYER_DEPTH
from apdmem.memory.index import tokenize
from apdmem.memory.retriever import DATE_SLACK_DAYS, as_date

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

# Questions whose answer gathers several sessions (aggregation: a count, a sum) or the latest of several (an update):
# the words that ask for them, as LongMemEval's and everyday questions phrase them. Comparisons and intervals
# ("which came first", "how long between") name their events: the event split covers them.
FOLLOW_CUES = re.compile(r"\b(how many|how much|in total|total|altogether|combined|so far|sum|"
                         r"current|currently|latest|most recent|still|now|anymore|these days|at the moment)\b",
                         re.IGNORECASE)
# Sessions a question's links may lift into its ranking, from its first LIFTED_FROM sessions, each to LIFT of the
# score of the session it is linked from (a share of its distance above zero, for scores below it). LongMemEval's
# multi-session questions need two or three sessions, and the first one or two found are the surest to link from.
# On the 144 answerable dev questions (benchmarks/ablation.py) this opened 6.7% of the sessions for 0.986 of the
# evidence (all@5 0.951; without links 6.4% for 0.980, all@5 0.938). Following the two strongest links of every
# session the head opened instead took 7.7% for 0.991 (all@5 0.931: links added nothing to the ranking; measured on
# the vectors of batched embeddings, see `models.local.BGE_SMALL`).
LIFTED_FROM = 2
LINKS_LIFTED = 2
LIFT = 0.8


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


def dated_near(candidate: dict, start: str, end: str) -> bool:
    """Whether a candidate session is dated within `DATE_SLACK_DAYS` of the range [start, end] (ISO dates): the
    dates questions name are loose ("two weeks ago"), and a session may tell of an event a day or two later.

    >>> dated_near({"date": "2023-03-17T09:30:00"}, "2023-03-15", "2023-03-15")
    True
    """
    day, slack = as_date(candidate["date"]), timedelta(days=DATE_SLACK_DAYS)
    return as_date(start) - slack <= day <= as_date(end) + slack


def lift(candidates: dict[str, dict], question: str, links: dict[str, list[dict]], date_ranges=()) -> None:
    """Lift into the question's ranking, in place, the sessions most strongly linked to its first `LIFTED_FROM`
    sessions, at most `LINKS_LIFTED`, each to `LIFT` of the score of the session it is linked from, and its
    best-ranked session dated near each of `date_ranges` (the one the date cover opens: `wanted`) to `LIFT` of the
    best score; a session ranking higher already keeps its score. A lifted session records why under ``via``: its
    link (``from``, ``strength``, ``terms``) or the date range (``date_range``: [start, end]). `links` maps sessions to their links (`search.linked`:
    ``session_id``, ``date``, ``strength``, ``terms``); a linked session the searches did not find becomes a
    candidate without a matched unit."""
    ranked = ranking(candidates, question)
    offered = sorted(((link["strength"], sid, link) for sid in ranked[:LIFTED_FROM] for link in links.get(sid, [])),
                     key=lambda t: (-t[0], t[1], t[2]["session_id"]))
    lifted: list[str] = []
    for strength, sid, link in offered:
        other = link["session_id"]
        if len(lifted) == LINKS_LIFTED:
            break
        if other in lifted:
            continue
        lifted.append(other)
        slot = candidates.setdefault(other, {"date": link["date"], "summary": "", "score": float("-inf"), "spans": [],
                                             "hits": {}})
        if raise_to(slot, question, candidates[sid]["hits"][question]):
            slot["via"] = {"from": sid, "strength": strength, "terms": link["terms"]}
    ranked = ranking(candidates, question)  # with the linked sessions: the ranking the date cover reads
    for start, end in date_ranges if ranked else ():
        dated = next((sid for sid in ranked if dated_near(candidates[sid], start, end)), None)
        if dated and raise_to(candidates[dated], question, candidates[ranked[0]]["hits"][question]):
            candidates[dated]["via"] = {"date_range": [start, end]}


def raise_to(candidate: dict, question: str, score: float) -> bool:
    """Raise a candidate's score for the question to `LIFT` of `score` (a share of its distance above zero, for a
    negative score) unless it is higher already; whether it rose."""
    score -= (1 - LIFT) * abs(score)
    if score <= candidate["hits"].get(question, float("-inf")):
        return False
    candidate["hits"][question], candidate["score"] = score, max(candidate["score"], score)
    return True


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
