"""Copy memories from one store to another (e.g. a directory into PostgreSQL) and check the copy.

The source is read, never written, and trusted in nothing: each of its users must be a folder named after the user
id its manifest holds, with a readable manifest and a current generation (index and listed sessions) that reads
back whole. Every user is checked before anything is copied, so a hostile or damaged source fails in one line and
leaves the target unchanged. A user is then copied through the target's own per-user interface (the namespace comes
from the validated user id, never from a name read in the source): the layer files of its listed sessions, the
index of its generation (with its link table, when it has a usable one: the copy builds a missing or outdated
table, derived from the index, when it is first opened), and the manifest last, under the target's writer lock (in
PostgreSQL, one transaction). A user the target already holds is refused (before anything is copied) unless
``replace=True``, and so is a target that is the source itself (the same directory by another path, the same
database by another URL). The check reads the copy back and compares
it with what was read from the source: the same bytes for every key, and the same search results, unit for unit and
score for score, for a query drawn from each of up to `PROBES` sessions.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from tqdm.auto import tqdm

from apdmem.errors import ApdmemError, ConfigError
from apdmem.memory.backends import open_store
from apdmem.memory.generations import Damaged, Generation, Generations, key
from apdmem.memory.records import Session, check_id
from apdmem.memory.retriever import rank_sessions
from apdmem.memory.store import TEMPORARY_PREFIX, UserStore, session_key
from apdmem.models import embed_array, get_embeddings, recorded_space

PROBES = 5
ATTEMPTS = 5  # a source user is read again this often when a writer commits while it is read
SESSION_FILES = re.compile(r"^(session\.json|L[0-3]\.(json|md))$")


@dataclass
class Migrated:
    """One user's copy: what was copied and what the check found."""

    user_id: str
    keys: int
    sessions: int
    same_sessions: bool | None = None
    same_results: bool | None = None
    replaced: bool = False  # the target held this user, and its memory there was replaced

    @property
    def verified(self) -> bool:
        return bool(self.same_sessions and self.same_results)


@dataclass
class _Read:
    """A source user as read: its id, its current generation and the values to copy (manifest last)."""

    user_id: str
    generation: Generation
    values: dict[str, bytes]


def migrate(source, target, *, users: list[str] | None = None, verify: bool = True, progress: bool = False,
            replace: bool = False) -> list[Migrated]:
    """Copy every user (or the listed ones) from `source` to `target` (store locations or objects). Raises
    ConfigError, before anything is copied, when the target is the source, when a user of the source cannot be
    read whole, or when the target already holds one of the users and `replace` is False."""
    source, target = open_store(source, existing=True), open_store(target)
    if source.identity() == target.identity():
        raise ConfigError(f"the source and the target are the same store ({target.location}); nothing was copied")
    wanted = None if users is None else {check_id(u, "user") for u in users}
    planted = [k for k in source.leftovers("users/") if not k.rsplit("/", 1)[-1].startswith(TEMPORARY_PREFIX)]
    if planted:
        raise ConfigError(f"the source holds {len(planted)} link(s) or special file(s) (e.g. {planted[0][:120]!r}); "
                          "a store never does: remove them; nothing was copied")
    read = []
    for name in source.namespaces("users/"):
        user = _read_user(source, name)
        if wanted is None or user.user_id in wanted:
            read.append(user)
    if wanted is not None and (missing := wanted - {u.user_id for u in read}):
        raise ConfigError(f"no memory of user(s) {', '.join(sorted(missing))} in the source store")
    if verify:  # the check searches each copy in its space: its embeddings must exist before anything is copied
        for user in read:
            try:
                get_embeddings(recorded_space(user.generation.manifest["embeddings"]), None)
            except ConfigError as exc:
                raise ConfigError(f"user {user.user_id!r}: {exc}; nothing was copied (--no-verify copies without "
                                  "checking)") from None
    held = {user.user_id for user in read if UserStore(target, user.user_id).keys()}
    if held and not replace:
        raise ConfigError(f"the target already holds user(s) {', '.join(sorted(held))}; nothing was copied (--replace "
                          "replaces their memories there with the source's)")
    done = []
    for user in tqdm(read, desc="migrate", unit="user", disable=not progress):
        _copy(user, UserStore(target, user.user_id))
        done.append(Migrated(user.user_id, len(user.values), len(user.generation.manifest["sessions"]),
                             replaced=user.user_id in held))
        if verify:
            _check(done[-1], user, target)
    return done


def _read_user(source, name: str) -> _Read:
    """The source user stored under the namespace `name`, validated (see the module's docstring)."""
    shown = repr(name[:120])
    folder = name[len("users/") :]
    data = source.namespace(name)
    raw = data.mget(["manifest.json"])[0] if "/" not in folder and folder not in ("", ".", "..") else None
    if raw is None:
        raise ConfigError(f"source user folder {shown} has no readable manifest.json; nothing was copied")
    user_id = _claimed_user(raw)
    if user_id is None or session_key(user_id) != folder:
        raise ConfigError(f"source user folder {shown} is not the folder of the user its manifest names; nothing was copied")
    store = UserStore(source, user_id)
    for _ in range(ATTEMPTS):
        raw = store.get("manifest.json")
        try:
            space = _claimed(raw, "embeddings")
            generations = Generations(store, space=space, lexical="auto", dimension=None, embed=None, window=4, stride=2)
            generation = generations.read(raw, need_links=False)  # derived: a copy without one rebuilds it
            if any(generations.stored_session(session_key(s)) is None for s in generation.manifest["sessions"]):
                raise Damaged("a listed session is unreadable")
        except (Damaged, ApdmemError, TypeError, ValueError, RecursionError) as exc:
            raise ConfigError(f"source user {user_id!r} cannot be read whole ({exc}); open it with apdmem to repair "
                              "it, then migrate again; nothing was copied") from None
        keys = [k for sid in generation.manifest["sessions"] for k in store.keys(f"sessions/{session_key(sid)}/")
                if len(k.split("/")) == 3 and SESSION_FILES.match(k.split("/")[2])]  # a layer file, nothing else
        if generation.raw is not None and generation.manifest["sessions"]:
            keys += [k for k in generations.index_keys(generation)  # format 2: a missing link table is rebuilt
                     if generation.links is not None or not k.endswith("/links.json")]
        values = dict(zip(keys, store.get_many(keys)))
        if store.get("manifest.json") == raw and all(v is not None for v in values.values()):
            values["manifest.json"] = raw
            return _Read(user_id, generation, values)
    raise ConfigError(f"source user {user_id!r} kept changing while it was read; nothing was copied")


def stored_users(location) -> list[str]:
    """The users with a memory in the store at `location`, sorted: those whose folder holds a readable manifest
    that names them (as `migrate` reads its source)."""
    store, users = open_store(location, existing=True), []
    for name in store.namespaces("users/"):
        raw = store.namespace(name).mget(["manifest.json"])[0] if "/" not in name[len("users/") :] else None
        user_id = _claimed_user(raw) if raw is not None else None
        if user_id is not None and f"users/{session_key(user_id)}" == name:
            users.append(user_id)
    return sorted(users)


def _claimed_user(raw: bytes) -> str | None:
    try:
        return check_id(_claimed(raw, "user_id"), "user")
    except (ApdmemError, TypeError, ValueError, RecursionError):
        return None


def _claimed(raw: bytes | None, field: str):
    manifest = json.loads(raw or b"null")
    if not isinstance(manifest, dict):
        raise ValueError("manifest.json is not an object")
    return manifest.get(field)


def _copy(user: _Read, copy: UserStore) -> None:
    """Write the user's values into the target (the manifest last), then drop what the target held before."""
    with copy.writer():
        old = set(copy.keys())
        values = dict(user.values)
        manifest = values.pop("manifest.json")
        copy.put(values)
        copy.put({"manifest.json": manifest})
        copy.delete(sorted(old - set(user.values)))


def _check(migrated: Migrated, user: _Read, target) -> None:
    """Compare the copy, read back, with what was read from the source."""
    from apdmem.memory.memory import Memory  # migrate is below Memory everywhere else

    copy = UserStore(target, user.user_id)
    migrated.same_sessions = dict(zip(user.values, copy.get_many(list(user.values)))) == user.values
    manifest = user.generation.manifest
    spec = recorded_space(manifest["embeddings"])
    after = Memory(user.user_id, store=target, embeddings=spec, l0_mode="raw")
    index = user.generation.index
    probes = []
    for sid in sorted(manifest["sessions"], key=lambda s: (manifest["sessions"][s]["date"], s))[:PROBES]:
        stored = Session.from_json(json.loads(user.values[key(sid, "session.json")]))
        probes.append(max(stored.turns, key=lambda t: len(t.content)).content[:300])
    if index is None or not probes:
        migrated.same_results = after.search("anything", k=1) == [] if index is None else True
        return
    embeddings = get_embeddings(spec, None)
    before = []
    for query in probes:
        hits = rank_sessions(index, [query], embed_array(embeddings, [query]).reshape(1, -1), 10)
        before.append([(h.session_id, [index.units[h.row].start, index.units[h.row].end], round(h.score, 9)) for h in hits])
    now = [[(d.metadata["session_id"], d.metadata["span"], round(d.metadata["score"], 9)) for d in after.search(q, k=10)]
           for q in probes]
    migrated.same_results = before == now
