"""The controller's lifts: what raises a session in a question's ranking besides its own score, shared by the
controller's `search` node and `Memory.search(rerank=True)`, so that the public search and the graph rank alike.

- **Links** (for questions that gather several sessions: a count, a total, the latest state of something; see
  `follows_links`): the sessions most strongly linked to the question's first `LIFTED_FROM` sessions
  (`apdmem.memory.links`: shared rare terms, close units), at most `LINKS_LIFTED`, rise to `LIFT` of the score of
  the session they are linked from.
- **Dates**: the question's best-ranked session dated near each of its dates rises to `LIFT` of the best score.

A lifted session records why under ``via``. Rankings here are *candidates*: per session its date, best summary, best
score, matched spans and the score per query in ``hits`` (`collect`).
"""

from __future__ import annotations

import re

from apdmem.memory.retriever import DATE_SLACK_DAYS, as_date

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


def ranking(candidates: dict[str, dict], query: str) -> list[str]:
    """The sessions a query found, best first (ties by id, as the retriever orders them)."""
    hits = [(sid, c["hits"][query]) for sid, c in candidates.items() if query in c.get("hits", {})]
    return [sid for sid, _ in sorted(hits, key=lambda h: (-h[1], h[0]))]


def follows_links(question: str) -> bool:
    """Whether a question gathers several sessions or asks for the latest state (`FOLLOW_CUES`).

    >>> follows_links("How many plants did I buy in total?"), follows_links("What is my dog's name?")
    (True, False)
    """
    return bool(FOLLOW_CUES.search(question))


def dated_near(candidate: dict, start: str, end: str) -> bool:
    """Whether a candidate session is dated within `DATE_SLACK_DAYS` of the range [start, end] (ISO dates): the
    dates questions name are loose ("two weeks ago"), and a session may tell of an event a day or two later.

    >>> dated_near({"date": "2023-03-17T09:30:00"}, "2023-03-15", "2023-03-15")
    True
    """
    day = as_date(candidate["date"])  # distances, not start - slack: that is no date near year 1
    return (as_date(start) - day).days <= DATE_SLACK_DAYS and (day - as_date(end)).days <= DATE_SLACK_DAYS


def lift(candidates: dict[str, dict], question: str, links: dict[str, list[dict]], date_ranges=()) -> None:
    """Lift into the question's ranking, in place, the sessions most strongly linked to its first `LIFTED_FROM`
    sessions, at most `LINKS_LIFTED`, each to `LIFT` of the score of the session it is linked from, and its
    best-ranked session dated near each of `date_ranges` (the one the date cover opens: `wanted`) to `LIFT` of the
    best score; a session ranking higher already keeps its score. A lifted session records why under ``via``: its
    link (``from``, ``strength``, ``terms``) or the date range (``date_range``: [start, end]). `links` maps sessions to their links (`linked`:
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


def linked(memory, session_ids: list[str]) -> dict[str, list[dict]]:
    """The cross-session links of these sessions (`Memory.links`), as the policy reads them: per session, the
    sessions it is linked to with their date, the strength and the shared terms of each link."""
    wanted, out = set(session_ids), {}
    links, sessions = memory.links(), memory.manifest["sessions"]  # the generation links() refreshed to
    for link in links:
        for sid, other in ((link.session_id, link.other), (link.other, link.session_id)):
            if sid in wanted and other in sessions:
                out.setdefault(sid, []).append({"session_id": other, "date": sessions[other]["date"],
                                                "strength": link.strength, "terms": list(link.terms)})
    return out


def collect(candidates: dict[str, dict], query: str, docs) -> list[str]:
    """Merge one query's hits (search documents) into `candidates`, in place: per session the best score and its
    unit, the score per query in `hits`, matched unit spans accumulated for later L2/L3 reads. Returns the
    session ids, best first."""
    for doc in docs:
        meta = doc.metadata
        slot = candidates.setdefault(meta["session_id"], {"date": meta["date"], "summary": doc.page_content,
                                                          "score": meta["score"], "spans": [], "hits": {}})
        if meta["score"] > slot["score"]:  # rescored scores are standard scores: they may be negative
            slot.update(summary=doc.page_content, score=meta["score"])
        slot["hits"][query] = meta["score"]
        if meta["span"] not in slot["spans"]:
            slot["spans"].append(meta["span"])
    return [doc.metadata["session_id"] for doc in docs]
