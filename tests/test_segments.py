"""A memory's index stored as segments (`apdmem.memory.generations`): a commit writes what changed, not the history;
forget rewrites the segments holding the session; segments are merged by eights; a fresh reader sees exactly what the
writer holds; a writer killed at any write leaves a whole memory; a memory of format 2 is read as it is and written
as segments by its next write."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest

from apdmem.memory import Memory, generations
from apdmem.memory.backends import open_store
from apdmem.memory.store import UserStore

QUERIES = ["What did I buy for my sister?", "Where did I travel last year?", "How long is my commute?",
           "What music do I listen to?", "Which plants do I grow?"]


@pytest.fixture
def sessions(haystack):
    """The 50 sessions of the LongMemEval item shipped with the package (their vectors are cached: already embedded)."""
    return haystack[0].sessions


def written(monkeypatch) -> dict[str, int]:
    """From now on, the size of everything written to any user's store, by key."""
    out: dict[str, int] = {}
    put = UserStore.put
    monkeypatch.setattr(UserStore, "put", lambda store, items: out.update({k: len(v) for k, v in items.items()}) or put(store, items))
    return out


def results(memory: Memory) -> list[list[tuple]]:
    """What search returns for each query: sessions, spans, scores and texts, in order."""
    return [[(d.metadata["session_id"], d.metadata["span"], d.metadata["score"], d.page_content) for d in memory.search(q, k=8)]
            for q in QUERIES]


def stored_manifest(location, user: str = "alice") -> dict:
    return json.loads(UserStore(open_store(location), user).get("manifest.json"))


def segment(location, number: int, user: str = "alice") -> dict:
    return json.loads(UserStore(open_store(location), user).get(f"index/{number}/segment.json"))


def same_index(a: Memory, b: Memory) -> bool:
    """Whether two memories hold the same units, in the same order, with the same vectors."""
    units = [(u.session_id, u.start, u.end, u.summary) for u in a.index.units] == \
        [(u.session_id, u.start, u.end, u.summary) for u in b.index.units]
    return units and np.array_equal(a.index.dense.vectors(), b.index.dense.vectors()) and \
        np.array_equal(a.index.dense.rows, b.index.dense.rows)


def test_a_one_session_commit_writes_that_session_one_segment_and_the_manifest(store_location, sessions, make_memory, monkeypatch):
    memory = make_memory(store=store_location)
    memory.ingest(sessions[:-1])
    reads = []
    get_many = UserStore.get_many
    monkeypatch.setattr(UserStore, "get_many", lambda store, keys: reads.extend(keys) or get_many(store, keys))
    sizes = written(monkeypatch)
    memory.ingest([sessions[-1]])

    new = sessions[-1].session_id
    number = stored_manifest(store_location)["generation"]
    assert {k for k in sizes if not k.startswith("sessions/")} == {"manifest.json", f"index/{number}/segment.json",
                                                                    f"index/{number}/vectors.f32"}
    assert list(segment(store_location, number)["sessions"]) == [new]  # the new session's units, nothing else
    assert sizes["manifest.json"] < 1000  # names the segments; the listing is in them
    assert not [k for k in reads if k.startswith("index/")]  # the writer held the current generation: not read again
    assert len(stored_manifest(store_location)["segments"]) == 2
    reader = make_memory(store=store_location)  # a fresh reader sees exactly what the writer holds
    assert same_index(reader, memory) and results(reader) == results(memory)
    assert reader.manifest["sessions"] == memory.manifest["sessions"] and reader.links() == memory.links()


def test_segments_are_merged_by_eights_and_hold_what_one_commit_would(sessions, make_memory, tmp_path):
    one_by_one, at_once = make_memory(store=str(tmp_path / "a")), make_memory(store=str(tmp_path / "b"))
    for session in sessions[:20]:
        one_by_one.ingest([session])
    at_once.ingest(sessions[:20])

    numbers = stored_manifest(tmp_path / "a")["segments"]
    held = [len(segment(tmp_path / "a", n)["sessions"]) for n in numbers]
    assert len(numbers) < generations.MERGE_FANOUT and sum(held) == 20 and held[0] >= 8  # 20 commits, merged by eights
    assert sorted(UserStore(open_store(str(tmp_path / "a")), "alice").keys("index/")) == \
        sorted(f"index/{n}/{name}" for n in numbers for name in ("segment.json", "vectors.f32"))  # merged ones dropped
    reader = make_memory(store=str(tmp_path / "a"))
    assert same_index(reader, at_once) and results(reader) == results(at_once)
    assert reader.manifest["sessions"] == at_once.manifest["sessions"]


def test_forget_rewrites_only_the_segments_holding_the_session_and_leaves_no_byte_of_it(store_location, sessions, make_memory, monkeypatch):
    memory = make_memory(store=store_location)
    for session in sessions[:10]:
        memory.ingest([session])
    store = UserStore(open_store(store_location), "alice")
    before = {k: store.get(k) for k in store.keys("index/")}
    gone = sessions[2]  # in the segment the first eight commits were merged into
    text = max((t.content for t in gone.turns), key=len)[:60].encode()
    sizes = written(monkeypatch)
    memory.forget(gone.session_id)

    after = {k: store.get(k) for k in store.keys("index/")}
    rewritten = {k for k in sizes if k.startswith("index/")}
    assert len(rewritten) == 2 and rewritten == after.keys() - before.keys()  # one segment, in place of the old one
    assert {k: v for k, v in after.items() if k not in rewritten} == {k: v for k, v in before.items() if k in after}
    assert not [k for k in store.keys() if text in store.get(k)] and not store.keys(f"sessions/{gone.session_id}/")
    assert gone.session_id not in memory.session_ids() and len(memory.session_ids()) == 9
    reader = make_memory(store=store_location)
    assert same_index(reader, memory) and results(reader) == results(memory) and reader.links() == memory.links()


def test_a_commit_compares_only_the_sessions_it_touched_and_plans_what_comparing_every_one_would(sessions, make_memory,
                                                                                                   tmp_path, monkeypatch):
    """The listing and the link table note the sessions a commit set or removed (`Listing`, `LinkTable.changed`): the
    plan compares those with the stored segments, and is the plan that comparing every session makes."""
    plan, touched_sizes = generations._plan, []

    def shown(planned):
        return [("kept", p.number) if isinstance(p, generations.Segment) else (p.sessions, p.links) for p in planned]

    def both(stored, listing, rows, links, touched=None):
        planned = plan(stored, listing, rows, links, touched)
        if stored is not None:
            touched_sizes.append(None if touched is None else len(touched))
            assert shown(planned) == shown(plan(stored, listing, rows, links, None))
        return planned

    monkeypatch.setattr(generations, "_plan", both)
    memory = make_memory(store=str(tmp_path / "m"))
    memory.ingest(sessions[:30])
    for session in sessions[30:42]:
        memory.ingest([session])
    changed = dataclasses.replace(sessions[5], turns=sessions[5].turns[:-1])
    memory.ingest([changed])  # replaced
    memory.forget(sessions[33].session_id)
    assert touched_sizes[0] is None and None not in touched_sizes[1:]  # the first commit: no table was copied
    assert len(touched_sizes) >= 15 and max(touched_sizes[1:13]) < 15  # a session and the few it linked with, of 30-42
    reader = make_memory(store=str(tmp_path / "m"))
    assert same_index(reader, memory) and reader.links() == memory.links()
    assert reader.manifest["sessions"] == memory.manifest["sessions"]


def test_a_listing_changes_one_entry_at_a_time():
    listing = generations.Listing({"a": {"units": 1}})
    listing["b"] = {"units": 2}
    del listing["a"]
    assert listing == {"b": {"units": 2}} and listing.changed == {"a", "b"}
    for change in (lambda: listing.pop("b"), lambda: listing.update(c={}), lambda: listing.setdefault("c", {}),
                   listing.clear, listing.popitem):
        with pytest.raises(TypeError):
            change()
    assert listing == {"b": {"units": 2}}


class Killed(Exception):
    """Stands for the process dying at that write: nothing after it runs."""


@pytest.mark.parametrize("change", ["ingest", "forget", "replace"])
def test_a_writer_killed_at_any_write_of_a_commit_leaves_the_old_or_the_new_memory(sessions, make_memory, tmp_path, monkeypatch, change):
    base = tmp_path / "base"
    memory = make_memory(store=str(base))
    for session in sessions[:7]:  # the next commit merges eight segments into one
        memory.ingest([session])
    old = (set(memory.session_ids()), results(memory))
    put, killed_at = UserStore.put, 0
    while True:
        copy = tmp_path / f"copy{killed_at}"
        shutil.copytree(base, copy)
        writer, puts = make_memory(store=str(copy)), []

        def dying(store, items, puts=puts):
            if len(puts) == killed_at:
                raise Killed
            puts.append(items)
            return put(store, items)

        monkeypatch.setattr(UserStore, "put", dying)
        try:
            if change == "ingest":
                writer.ingest([sessions[7]])
            elif change == "forget":
                writer.forget(sessions[1].session_id)
            else:
                writer.ingest([dataclasses.replace(sessions[1], turns=sessions[1].turns[:-2])])
            done = True
        except Killed:
            done = False
        monkeypatch.setattr(UserStore, "put", put)
        reopened = make_memory(store=str(copy))
        ids = set(reopened.session_ids())
        expected = {"ingest": old[0] | {sessions[7].session_id}, "forget": old[0] - {sessions[1].session_id},
                    "replace": old[0]}[change]
        # a replacement killed midway leaves the session unlisted until it is run again
        assert ids in (old[0], expected if change != "replace" else old[0] - {sessions[1].session_id}), killed_at
        for sid in ids:
            assert len(reopened.units(sid)) == reopened.manifest["sessions"][sid]["units"]
        assert len(reopened.index) == sum(m["units"] for m in reopened.manifest["sessions"].values())
        if ids == old[0] and change != "replace":
            assert results(reopened) == old[1]
        assert sorted(UserStore(open_store(str(copy)), "alice").keys("index/")) == \
            sorted(f"index/{n}/{name}" for n in stored_manifest(copy)["segments"] for name in ("segment.json", "vectors.f32"))
        if done:
            assert ids == expected
            break
        killed_at += 1
    assert killed_at >= 3  # a segment's two files, the manifest ...


def as_format_2(location, user: str = "alice") -> None:
    """Store a user's memory as apdmem wrote it before segments (format 2): the listing in the manifest, one whole
    index per generation (``index/<generation>/units.json``, ``vectors.f32``, ``links.json``)."""
    memory = Memory(user, store=location, l0_mode="raw")
    store, current = memory.store, memory.generations.current
    number = current.number
    table, vectors = current.index.dump()
    store.delete(store.keys("index/"))
    store.put({f"index/{number}/units.json": table, f"index/{number}/vectors.f32": vectors,
               f"index/{number}/links.json": current.links.dump(), "manifest.json": json.dumps({**current.manifest, "format": 2}).encode()})


def test_a_format_2_memory_is_read_as_it_is_and_written_as_segments_by_its_next_write(store_location, sessions, make_memory):
    memory = make_memory(store=store_location)
    memory.ingest(sessions[:12])
    expected, links = results(memory), memory.links()
    as_format_2(store_location)
    store = UserStore(open_store(store_location), "alice")
    before = {k: store.get(k) for k in store.keys()}

    old = make_memory(store=store_location)  # read as it is: nothing written
    assert results(old) == expected and old.links() == links and {k: store.get(k) for k in store.keys()} == before
    old.ingest([sessions[12]])  # the next write: the index as segments, then the new session's commit
    manifest = stored_manifest(store_location)
    assert manifest["format"] == 3 and "sessions" not in manifest and len(manifest["segments"]) == 2
    assert not store.keys(f"index/{json.loads(before['manifest.json'])['generation']}/")  # the whole index is gone
    reader = make_memory(store=store_location)
    assert same_index(reader, old) and sorted(reader.session_ids()) == sorted(s.session_id for s in sessions[:13])
    reader.forget(sessions[12].session_id)
    assert results(reader) == expected


def test_a_reader_reads_only_the_segments_another_writer_added(store_location, sessions, make_memory, monkeypatch):
    writer, reader = make_memory(store=store_location), make_memory(store=store_location)
    writer.ingest(sessions[:30])
    reader.refresh()
    reads = []
    get_many = UserStore.get_many
    monkeypatch.setattr(UserStore, "get_many", lambda store, keys: reads.extend(keys) or get_many(store, keys))
    for session in sessions[30:40]:  # the eighth one-session commit merges the last eight segments
        writer.ingest([session])
        reads.clear()
        reader.refresh()
        number = stored_manifest(store_location)["segments"][-1]
        merged = len(segment(store_location, number)["sessions"]) > 1
        index_reads = sorted(k for k in reads if k.startswith("index/"))
        assert merged or index_reads == [f"index/{number}/segment.json", f"index/{number}/vectors.f32"]
        fresh = make_memory(store=store_location)
        assert same_index(reader, fresh) and reader.manifest["sessions"] == fresh.manifest["sessions"]
        assert reader.links() == fresh.links() == writer.links()
    assert results(reader) == results(fresh) == results(writer)
