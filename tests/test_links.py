"""Cross-session links: built at ingestion without a model (shared rare terms, close units), stored beside the
index of each generation on both stores, rebuilt when damaged, swept with old generations, shown by the API and
the command line, and followed by the disclosure policy for questions that gather several sessions."""

import hashlib
import json
import logging

import pytest
from conftest import HISTORY, make_session
from graph_helpers import ScriptedChatModel, clean_environment, run_graph

from apdmem.cli import ask, main
from apdmem.errors import UnknownSessionError
from apdmem.graph import Context, Settings, build_graph
from apdmem.memory import Memory
from apdmem.memory.backends import open_store
from apdmem.memory.store import UserStore, memory_store

# Two sessions about the same purchases (the second names the items, not the first's words), dated after HISTORY.
SHOP_1 = make_session("s-shop1", "2024-06-01T10:00", [
    "I bought two pairs of Hoka running shoes and a Patagonia rain jacket at the REI sale today.",
    "Nice haul! Were they discounted?",
    "The Hoka Clifton shoes were 30% off, the Patagonia jacket was full price.",
    "REI members also get a dividend on purchases.",
])
SHOP_2 = make_session("s-shop2", "2024-06-20T10:00", [
    "I went back to REI and bought another pair of Hoka Clifton running shoes for trail days.",
    "So that's three pairs of Hoka shoes now?",
    "Yes, and I returned the Patagonia rain jacket because it was too big.",
    "REI has a generous return policy for members.",
])


@pytest.fixture(autouse=True)
def environment(monkeypatch):
    clean_environment(monkeypatch)


@pytest.fixture
def history():
    return [make_session(s, d, t) for s, (d, t) in HISTORY.items()] + [SHOP_1, SHOP_2]


def pairs(memory) -> set[frozenset]:
    return {frozenset((link.session_id, link.other)) for link in memory.links()}


@pytest.mark.parametrize("embeddings", ["local", "local:bge-small"])  # each space links at its own threshold
def test_sessions_about_the_same_purchases_are_linked_and_unrelated_ones_are_not(store_location, history, embeddings):
    memory = Memory("alice", store=store_location, l0_mode="raw", embeddings=embeddings)
    memory.ingest(history)
    assert pairs(memory) == {frozenset({"s-shop1", "s-shop2"})}  # the seven unrelated sessions link to nothing
    link = memory.links("s-shop2")[0]
    assert (link.session_id, link.other) == ("s-shop2", "s-shop1")
    assert {"hoka", "patagonia", "clifton"} <= set(link.terms)  # the reason: the rare terms they share (stemmed)
    assert link.strength == pytest.approx((link.similarity + link.overlap) / 2, abs=1e-3) and link.similarity > 0.5
    assert memory.links("s-shop1")[0].other == "s-shop2" and memory.links("s-dog") == []
    # Shown to people, a stem reads as the word it most often stands for in the sessions; one they lack stays.
    assert memory.spelled(["member", "2 pair", "nowher"], ["s-shop1", "s-nowhere"]) == ["members", "2 pairs", "nowher"]
    with pytest.raises(UnknownSessionError):
        memory.links("s-nowhere")
    # Another process (a new Memory) reads the table saved with the generation.
    assert pairs(Memory("alice", store=store_location, l0_mode="raw", embeddings=embeddings)) == pairs(memory)


def test_forget_removes_links_and_a_replaced_session_is_linked_again(store_location, history):
    memory = Memory("alice", store=store_location, l0_mode="raw")
    memory.ingest(history)
    # The second session replaced by a conversation about something else: its links are computed again (to the
    # session about the knee now).
    memory.remember([{"role": "user", "content": "My knee feels better after swimming twice a week."}],
                    session_id="s-shop2", date="2024-06-20T10:00")
    assert pairs(memory) == {frozenset({"s-shop2", "s-knee"})}
    assert "swim" in memory.links("s-shop2")[0].terms
    memory.ingest([SHOP_2])
    assert pairs(memory) == {frozenset({"s-shop1", "s-shop2"})}
    memory.forget("s-shop1")
    assert memory.links() == [] and memory.links("s-shop2") == []
    assert Memory("alice", store=store_location, l0_mode="raw").links() == []


def stored(location: str, user: str = "alice") -> dict[str, bytes]:
    store = UserStore(open_store(location), user)
    keys = store.keys()
    return dict(zip(keys, store.get_many(keys)))


def digests(values: dict[str, bytes]) -> dict[str, str]:
    """Every stored file's hash, index files named without their generation (a repair commits a new one)."""
    out = {}
    for key, value in values.items():
        if key.startswith("index/"):
            key = "index/" + key.split("/", 2)[2]
        if key != "manifest.json":
            out[key] = hashlib.sha256(value).hexdigest()
    return out


def test_a_new_session_is_compared_with_the_sessions_the_index_finds_near_it_only(history, monkeypatch):
    # With candidates this few (the nearest vectors of each unit, the sessions sharing the most rare words), the new
    # session is compared with a few sessions, not the eight others, and still finds the session about the same
    # purchases; the table equals the one built comparing it with every session.
    from apdmem.memory import links

    memory = Memory("alice", store=memory_store(), l0_mode="raw")
    memory.ingest([s for s in history if s.session_id != "s-shop2"])
    compared = []
    monkeypatch.setattr(links, "NEAREST", 3)
    monkeypatch.setattr(links, "SHARING", 1)

    def similarities(profiles, sid, measured=links._Profiles.similarities):
        found = measured(profiles, sid)  # the sessions it is compared with
        compared.extend(found)
        return found

    monkeypatch.setattr(links._Profiles, "similarities", similarities)
    memory.ingest([SHOP_2])
    assert "s-shop1" in compared and len(set(compared)) < len(history) - 1
    assert pairs(memory) == {frozenset({"s-shop1", "s-shop2"})}
    monkeypatch.setattr(links, "NEAREST", 1000)
    monkeypatch.setattr(links, "SHARING", 1000)
    assert links.LinkTable.build(memory.index, memory.generations.link_threshold).dump() == memory.generations.current.links.dump()


def test_a_session_linked_alone_searches_the_vectors_of_the_sessions_nearest_it_only(history, monkeypatch):
    # Above NEAR_SESSIONS sessions per session being linked, a session's vectors are searched among those of the
    # sessions whose mean vector is nearest its own (here two: itself and one other), not among every vector; it
    # still finds the session about the same purchases. A bulk ingest searches every vector.
    from apdmem.memory import links

    monkeypatch.setattr(links, "NEAR_SESSIONS", 2)
    memory = Memory("alice", store=memory_store(), l0_mode="raw")
    searched = []

    def nearest_among(profiles, linked, within, measured=links._Profiles._nearest_among):
        searched.append(within)  # the positions of the vectors searched (None: all)
        return measured(profiles, linked, within)

    monkeypatch.setattr(links._Profiles, "_nearest_among", nearest_among)
    memory.ingest([s for s in history if s.session_id != "s-shop2"])
    assert searched == [None]
    searched.clear()
    memory.ingest([SHOP_2])
    index = memory.index
    [within] = searched
    owners = {index.owners.sessions[n] for n in index.owners.session_of[index.dense.rows[within]]}
    assert owners == {"s-shop1", "s-shop2"} and len(within) < index.dense.count
    assert pairs(memory) == {frozenset({"s-shop1", "s-shop2"})}


def test_sessions_are_linked_outside_the_lock_and_again_under_it_when_another_writer_committed_meanwhile(store_location,
                                                                                                           history, monkeypatch):
    # An ingestion indexes and links its sessions before it takes the writer lock. Another writer commits the
    # session they should link with in between: under the lock the ingestion links them again, against that commit.
    memory = Memory("alice", store=store_location, l0_mode="raw")
    memory.ingest([s for s in history if s.session_id not in ("s-shop1", "s-shop2")])
    other = Memory("alice", store=store_location, l0_mode="raw")
    linked, bases = Memory._linked, []

    def interleaved(self, current, built, spent):
        bases.append(current.raw)
        if self is memory and len(bases) == 1:
            other.ingest([SHOP_1])  # committed after this preparation began
        return linked(self, current, built, spent)

    monkeypatch.setattr(Memory, "_linked", interleaved)
    lock_holds = []
    writer = memory.generations.writer
    monkeypatch.setattr(memory.generations, "writer", lambda: lock_holds.append(1) or writer())
    memory.ingest([SHOP_2])
    assert len(lock_holds) == 1 and bases[0] != bases[-1]  # prepared twice: before the other's commit, then under the lock
    assert memory.session_ids()[-2:] == ["s-shop1", "s-shop2"] and pairs(memory) == {frozenset({"s-shop1", "s-shop2"})}
    prepared = len(bases)
    memory.ingest([make_session("s-shop3", "2024-07-01T10:00", ["I wore my Hoka Clifton shoes on a trail run."])])
    assert len(bases) == prepared + 1 and len(lock_holds) == 2  # no other writer meanwhile: prepared once, outside the lock


STRENGTHS = {"NaN strength": float("nan"), "infinite strength": float("inf"), "negative strength": -0.5,
             "strength above 1": 7.0, "similarity below -1": -3.0}


@pytest.mark.parametrize("damage", ["missing", "garbage", "unknown session", "another threshold", *STRENGTHS])
def test_a_damaged_or_missing_link_table_is_rebuilt_and_nothing_else_changes(store_location, history, caplog, damage):
    Memory("alice", store=store_location, l0_mode="raw").ingest(history)
    before = stored(store_location)
    (segment_key,) = [k for k in before if k.endswith("/segment.json")]  # one commit: one segment, holding the links
    segment = json.loads(before[segment_key])
    store = UserStore(open_store(store_location), "alice")
    if damage == "missing":
        del segment["links"]
    elif damage == "garbage":
        segment["links"] = "\x00garbage"
    else:
        table = segment["links"]
        if damage == "another threshold":  # e.g. built before the threshold of the memory's space changed
            table["threshold"] += 0.1
        elif damage in STRENGTHS:  # issue 30 item 8: a NaN strength was accepted
            link = next(iter(table["links"].values()))[0]
            link[2 if damage.startswith("similarity") else 1] = STRENGTHS[damage]
        else:
            table["links"]["s-gone"] = [["s-shop1", 0.9, 0.9, 0.9, []]]
    store.put({segment_key: json.dumps(segment, ensure_ascii=False).encode()})
    with caplog.at_level(logging.WARNING, logger="apdmem"):
        memory = Memory("alice", store=store_location, l0_mode="raw")
        assert pairs(memory) == {frozenset({"s-shop1", "s-shop2"})}
    assert [r.getMessage() for r in caplog.records if "repaired" in r.getMessage()] != []
    assert "link table of generation" in caplog.text and "saved index kept" in caplog.text  # nothing re-embedded
    after = stored(store_location)
    assert digests(after) == digests(before)  # the same layers, the same index, the same links, in a new generation
    assert memory.search("What is my dog's name?", k=1)[0].metadata["session_id"] == "s-dog"


def test_segments_the_manifest_does_not_name_are_debris(store_location, history):
    Memory("alice", store=store_location, l0_mode="raw").ingest(history)
    before = stored(store_location)
    current = next(k for k in before if k.endswith("/segment.json")).split("/")[1]
    store = UserStore(open_store(store_location), "alice")
    store.put({f"index/{int(current) + 7}/{name}": before[f"index/{current}/{name}"] for name in ("segment.json", "vectors.f32")})
    orphan = f"index/{int(current) + 8}/segment.json"  # a segment half written, as a writer killed between two puts may leave
    store.put({orphan: before[f"index/{current}/segment.json"]})
    store.put({f"index/{int(current) - 1}/links.json": b"{}"})  # a link table of format 2
    memory = Memory("alice", store=store_location, l0_mode="raw")  # opening a store sweeps what killed writers left
    assert stored(store_location) == before
    assert pairs(memory) == {frozenset({"s-shop1", "s-shop2"})}


def cli(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_show_links_prints_both_sessions_with_dates_strength_and_reason(tmp_path, capsys, history, embeddings):
    where = ["--store", str(tmp_path / "mem"), "--user", "alice"]
    Memory("alice", store=str(tmp_path / "mem"), l0_mode="raw").ingest(history)
    code, out, err = cli(capsys, "show", "--links", *where)
    assert (code, err) == (0, "")
    [line] = out.splitlines()
    assert line.startswith("s-shop1 (2024-06-01) -- s-shop2 (2024-06-20)  strength 0.")
    assert "units' best cosine 0." in line and "term overlap 0." in line
    assert {"hoka", "members", "pairs"} <= set(line.split("shared: ")[1].split(", "))  # words, not stems ("member")
    code, out, _ = cli(capsys, "show", "--links", "--session", "s-shop2", *where)
    assert code == 0 and out.startswith("s-shop2 (2024-06-20) -- s-shop1 (2024-06-01)")  # the session asked for first
    code, out, _ = cli(capsys, "show", "s-dog", "--links", *where)
    assert code == 0 and out.startswith("no links of session s-dog")
    code, out, err = cli(capsys, "show", "--links", "--session", "s-nowhere", *where)
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and "s-nowhere" in err
    code, _, err = cli(capsys, "show", *where)
    assert code == 2 and "needs a session id" in err


@pytest.fixture
def shopper(history):
    model = ScriptedChatModel()  # builds L1 when a session is opened; the deterministic policy asks no model
    memory = Memory("alice", store=memory_store(), l0_mode="raw", chat_model=model)  # not the user's ~/.apdmem
    memory.ingest(history)
    return memory, Settings(chat_model=model)


def drills(events: list[dict]) -> list[tuple[str, dict | None]]:
    return [(e["session_id"], e.get("via")) for e in events if e["event"] == "drill"]


def test_the_policy_follows_a_link_for_an_aggregation_question_within_its_budget(shopper, capsys):
    memory, settings = shopper
    question = "How many pairs of running shoes did I buy in total?"
    # Two sessions per search: the best stands out alone (the second is the background), so only a link can
    # bring the other purchase in.
    final, events = run_graph(question, Context(reflection=False, top_k=2, follow_links=False), settings=settings,
                              memory=memory)
    best = next(iter(final["opened"]))
    assert set(final["opened"]) == {best} and best in ("s-shop1", "s-shop2")
    final, events = run_graph(question, Context(reflection=False, top_k=2, follow_links=True), settings=settings, memory=memory)
    other = ({"s-shop1", "s-shop2"} - {best}).pop()
    assert set(final["opened"]) == {best, other}
    via = dict(drills(events))[other]
    assert via["from"] == best and {"hoka", "pairs"} <= set(via["terms"]) and via["strength"] >= 0.3
    assert final["step"] <= Context().tmax
    # The trace `apdmem ask` and `apdmem demo` print names the link followed.
    capsys.readouterr()
    ask(question, "2024-07-01", build_graph(settings=settings, memory=memory),
        Context(reflection=False, top_k=2, follow_links=True))
    trace = capsys.readouterr().out
    assert f"read L1 of {other} (linked from {best}, strength 0." in trace and "hoka" in trace
    # The budget holds: with one search and one read allowed, the link is not followed.
    final, events = run_graph(question, Context(reflection=False, top_k=2, follow_links=True, tmax=2), settings=settings,
                              memory=memory)
    assert set(final["opened"]) == {best} and final["step"] == 2


@pytest.mark.parametrize("question", ["Did I return the rain jacket?", "What is my dog's name?"])
def test_the_policy_follows_no_link_for_a_single_fact_question(shopper, question):
    memory, settings = shopper
    final, events = run_graph(question, Context(reflection=False, top_k=2, follow_links=True), settings=settings, memory=memory)
    assert len(final["opened"]) == 1 and all(via is None for _, via in drills(events))
    assert not any("via" in c for c in final["candidates"].values())  # nothing lifted


def test_the_strongest_links_of_the_first_sessions_lift_at_most_links_lifted_sessions():
    import doctest

    from apdmem.memory import lifts
    from apdmem.nodes import policy
    from apdmem.nodes.reflect import render_candidates

    def link(sid, strength):
        return {"session_id": sid, "date": "2024-03-05T10:00:00", "strength": strength, "terms": ["hoka"]}

    scores = {"s1": 2.0, "s2": 1.0, "s3": 0.9, "s4": 0.9, "s5": 0.8}
    candidates = {s: {"date": "", "summary": "", "score": v, "spans": [], "hits": {"q": v}} for s, v in scores.items()}
    state = {"question": "q", "searched": ["q"], "candidates": candidates}
    assert policy.wanted(state) == ["s1"] and (policy.LIFTED_FROM, policy.LINKS_LIFTED, policy.LIFT) == (2, 2, 0.8)
    # From s1 and s2 (the first two), the strongest two links: s8 (found by no search) and s3; s6 and s7 stay put,
    # and so does every link of s3, which is not among the first two.
    links = {"s1": [link("s3", 0.5), link("s6", 0.4)], "s2": [link("s8", 0.9), link("s7", 0.3)], "s3": [link("s5", 0.95)]}
    lifted = {s: {**c, "hits": dict(c["hits"])} for s, c in candidates.items()}
    policy.lift(lifted, "q", links)
    assert policy.ranking(lifted, "q") == ["s1", "s3", "s2", "s4", "s5", "s8"]  # s3 to 0.8 x 2.0, s8 to 0.8 x 1.0
    assert lifted["s3"]["via"] == {"from": "s1", "strength": 0.5, "terms": ["hoka"]} and "s6" not in lifted
    assert lifted["s8"] == {"date": "2024-03-05T10:00:00", "summary": "", "score": 0.8, "spans": [], "hits": {"q": 0.8},
                            "via": {"from": "s2", "strength": 0.9, "terms": ["hoka"]}}
    assert "- s8 | 2024-03-05 | read: L0 | (linked from s2)" in render_candidates({"candidates": lifted})  # what reflection reads
    state = {**state, "candidates": lifted}
    assert policy.wanted(state) == ["s1", "s3"]  # the head now holds the session linked from the best one
    reads = policy.plan(state, Context(drill_width=2))
    assert reads == [{"session_id": "s1", "layer": "L1"}, {"session_id": "s3", "layer": "L1", "via": lifted["s3"]["via"]}]
    # A session ranking higher than the lift keeps its score (and no via); a negative score lifts toward zero.
    higher = {"s1": {**candidates["s1"], "hits": {"q": -1.0}, "score": -1.0}, "s2": {**candidates["s2"], "hits": {"q": 3.0}, "score": 3.0}}
    policy.lift(higher, "q", {"s1": [link("s2", 0.9), link("s9", 0.8)]})
    assert higher["s2"]["hits"]["q"] == 3.0 and "via" not in higher["s2"] and higher["s9"]["hits"]["q"] == pytest.approx(-1.2)
    assert doctest.testmod(policy).failed == doctest.testmod(lifts).failed == 0  # follows_links: "how many ... in total" yes, "what is my dog's name" no


def test_sessions_about_one_subject_link_in_a_small_memory_as_in_a_large_one():
    """The evolving-memory suite's histories (1-15 sessions) alone: pairs of sessions about the scenario's subject
    link about as often as inside a 50-session history (a third; 4% at the large memory's threshold), pairs with a
    session about something else almost never (`links.small_discount`)."""
    from itertools import combinations

    from apdmem.eval.answers import load_suite
    from apdmem.memory.links import small_discount

    same, other = [], []
    for scenario in load_suite():
        memory = Memory("alice", store=memory_store(), l0_mode="raw")
        memory.ingest(scenario.sessions)
        linked = pairs(memory)
        for a, b in combinations([s.session_id for s in scenario.sessions], 2):
            about_subject = a not in scenario.fillers and b not in scenario.fillers
            (same if about_subject else other).append(frozenset((a, b)) in linked)
    assert sum(same) / len(same) >= 0.3 and sum(other) / len(other) <= 0.01, (sum(same), len(same), sum(other), len(other))
    assert small_discount(3) > small_discount(15) > small_discount(30) == 0.0
