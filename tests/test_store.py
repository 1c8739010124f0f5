"""Stores: per-user namespaces over one byte store (files and memory), id checks, atomic file writes."""

import os

import pytest

from apdmem.errors import InvalidIdError, StoreError
from apdmem.memory import Memory
from apdmem.memory.backends import open_store
from apdmem.memory.store import AtomicFileStore, UserStore, memory_store, session_key


@pytest.fixture(params=["files", "memory"])
def store(request, tmp_path):
    return open_store(tmp_path / "mem") if request.param == "files" else memory_store()


# ------------------------------------------------------------------------------------------------ namespaces


def test_two_users_never_see_each_other(store):
    alice, bob = UserStore(store, "alice"), UserStore(store, "bob")
    alice.put({"manifest.json": b"A", "sessions/s1/L3.md": b"alice s1"})
    bob.put({"manifest.json": b"B", "sessions/s1/L3.md": b"bob s1", "sessions/s2/L3.md": b"bob s2"})

    assert sorted(alice.keys()) == ["manifest.json", "sessions/s1/L3.md"]
    assert sorted(bob.keys()) == ["manifest.json", "sessions/s1/L3.md", "sessions/s2/L3.md"]
    assert sorted(bob.keys("sessions/")) == ["sessions/s1/L3.md", "sessions/s2/L3.md"]
    assert (alice.get("manifest.json"), bob.get("manifest.json")) == (b"A", b"B")
    assert alice.get("sessions/s2/L3.md") is None  # bob's key, same name: not alice's

    alice.delete(alice.keys())
    assert alice.keys() == [] and alice.get("sessions/s1/L3.md") is None
    assert sorted(bob.keys()) == ["manifest.json", "sessions/s1/L3.md", "sessions/s2/L3.md"]
    assert bob.get("sessions/s1/L3.md") == b"bob s1"


def test_a_user_id_that_prefixes_another_is_its_own_namespace(store):
    al, alice = UserStore(store, "al"), UserStore(store, "alice")
    al.put({"k": b"1"})
    alice.put({"k": b"2"})
    assert (al.keys(), alice.keys()) == (["k"], ["k"])
    assert (al.get("k"), alice.get("k")) == (b"1", b"2")


@pytest.mark.parametrize(
    "user_id",
    ["a/b", "/etc", "..", "../bob", "a..b", "a\\b", "a\x00b", "tab\there", "new\nline", "\x7f", "", " alice", "alice ",
     "x" * 201, None, 42],
)
def test_invalid_user_ids_are_refused(store, user_id):
    with pytest.raises(InvalidIdError):
        UserStore(store, user_id)


def test_memory_refuses_an_invalid_user_id_before_touching_the_store(tmp_path):
    with pytest.raises(InvalidIdError, match="user id"):
        Memory("../bob", store=str(tmp_path), l0_mode="raw")
    assert list(tmp_path.iterdir()) == []


def test_an_email_user_id_works_hex_encoded(store):
    user = UserStore(store, "alice@example.com")
    user.put_json({"manifest.json": {"ok": True}})
    prefix = "users/x-" + "alice@example.com".encode().hex() + "/"
    assert list(store.yield_keys()) == [prefix + "manifest.json"]
    assert user.keys() == ["manifest.json"] and user.get_json("manifest.json") == {"ok": True}


def test_encoded_names_cannot_collide_with_plain_ones(store):
    # "x-616c696365" is the encoding of "alice", so the id "x-616c696365" itself must be encoded again.
    ids = ["alice", "x-616c696365", "alice@example.com", "."]
    assert len({session_key(i) for i in ids}) == len(ids)
    for i in ids:
        UserStore(store, i).put({"k": i.encode()})
    assert [UserStore(store, i).get("k") for i in ids] == [i.encode() for i in ids]
    assert all(UserStore(store, i).keys() == ["k"] for i in ids)


def test_dot_user_does_not_see_the_whole_directory(tmp_path):
    # Regression: "users/./" named the parent directory, so user "." listed every user's keys.
    store = open_store(tmp_path)
    UserStore(store, "alice").put({"secret": b"alice's"})
    dot = UserStore(store, ".")
    dot.put({"mine": b"dot's"})
    assert dot.keys() == ["mine"] and dot.get("secret") is None
    assert sorted(store.yield_keys()) == ["users/alice/secret", "users/x-2e/mine"]


def test_session_key():
    assert session_key("s1") == "s1" and session_key("answer_4be1b6b4_1") == "answer_4be1b6b4_1"
    assert session_key("conv-26:session_1") == "x-" + b"conv-26:session_1".hex()
    assert session_key(".") == "x-2e"


def test_json_and_text_helpers_round_trip(store):
    user = UserStore(store, "alice")
    user.put_json({"a.json": {"name": "Zoë", "n": [1, 2]}})
    user.put_text({"b.md": "# Título\n- ✓\n"})
    assert user.get_json("a.json") == {"name": "Zoë", "n": [1, 2]}
    assert user.get_text("b.md") == "# Título\n- ✓\n"
    assert user.get_json("missing.json", default=[]) == [] and user.get_text("missing.md") is None


# ---------------------------------------------------------------------------------------------- atomic files


def test_atomic_file_store_round_trips_and_overwrites(tmp_path):
    store = open_store(tmp_path)
    assert isinstance(store, AtomicFileStore)
    values = {"a/b/c.bin": bytes(range(256)) * 1000, "empty": b"", "x.json": b'{"k": 1}'}
    store.mset(list(values.items()))
    assert store.mget(list(values)) == list(values.values())
    store.mset([("x.json", b'{"k": 2}')])
    assert store.mget(["x.json", "nope"]) == [b'{"k": 2}', None]
    assert sorted(store.yield_keys()) == sorted(values)
    assert not [p for p in tmp_path.rglob(".tmp-*")]  # no temporary file survives a write


def test_a_write_of_several_values_syncs_once_and_a_failed_one_leaves_no_temporary_file(tmp_path, monkeypatch):
    # Several values: each written to a temporary file, one sync of the disk for all, then each renamed in.
    store = open_store(tmp_path)
    syncs = []
    monkeypatch.setattr(os, "sync", lambda sync=os.sync: syncs.append(1) or sync())
    store.mset([(f"s{i}/L0.json", b"[%d]" % i) for i in range(5)])
    assert syncs == [1] and store.mget([f"s{i}/L0.json" for i in range(5)]) == [b"[%d]" % i for i in range(5)]
    (tmp_path / "s3" / "L3.md").mkdir()  # a folder where the third value's file belongs
    with pytest.raises(StoreError, match="is a folder where apdmem keeps a file"):
        store.mset([("s1/L3.md", b"one"), ("s2/L3.md", b"two"), ("s3/L3.md", b"three"), ("s4/L3.md", b"four")])
    assert store.mget(["s1/L3.md", "s2/L3.md", "s4/L3.md"]) == [b"one", b"two", None]  # renamed in order, up to it
    assert not [p for p in tmp_path.rglob(".tmp-*")]  # the temporaries not renamed in were removed


def test_leftover_temporary_file_is_not_a_key(tmp_path):
    store = open_store(tmp_path)
    store.mset([("users/alice/manifest.json", b"{}")])
    (tmp_path / "users" / "alice" / ".tmp-k2j4l1").write_bytes(b"half a manifest")  # a write killed mid-way
    assert list(store.yield_keys()) == ["users/alice/manifest.json"]
    assert UserStore(store, "alice").keys() == ["manifest.json"]


def test_a_failed_write_keeps_the_old_value(tmp_path, monkeypatch):
    store = open_store(tmp_path)
    store.mset([("k", b"old")])

    def crash(src, dst, **where):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        store.mset([("k", b"new")])
    monkeypatch.undo()
    assert store.mget(["k"]) == [b"old"]
    assert [p.name for p in tmp_path.iterdir()] == ["k"]  # the temporary file was removed
