"""Copy memories from one store to another (e.g. a directory into PostgreSQL) and check the copy.

Each user is copied whole under both stores' writer locks, so the copy is one consistent generation (and, in
PostgreSQL, one transaction); a user already in the target is replaced. The check opens both copies: same
sessions, and the same search results, unit for unit and score for score, for a query drawn from each of up
to `PROBES` sessions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from tqdm.auto import tqdm

from apdmem.errors import ConfigError
from apdmem.memory.memory import Memory
from apdmem.memory.store import open_store

PROBES = 5
BATCH = 200  # keys copied per call


@dataclass
class Migrated:
    """One user's copy: what was copied and what the check found."""

    user_id: str
    keys: int
    sessions: int
    same_sessions: bool | None = None
    same_results: bool | None = None

    @property
    def verified(self) -> bool:
        return bool(self.same_sessions and self.same_results)


def migrate(source, target, *, users: list[str] | None = None, verify: bool = True, progress: bool = False) -> list[Migrated]:
    """Copy every user (or the listed ones) from `source` to `target` (store locations or objects)."""
    source, target = open_store(source), open_store(target)
    wanted = None if users is None else set(users)
    done = []
    for name in tqdm(source.namespaces("users/"), desc="migrate", unit="user", disable=not progress):
        data = source.namespace(name)
        manifest = json.loads(data.mget(["manifest.json"])[0] or b"{}")
        user_id = manifest.get("user_id")
        if wanted is not None and user_id not in wanted:
            continue
        if not isinstance(user_id, str):
            raise ConfigError(f"{name} has no readable manifest.json with a user id; repair it by opening it with apdmem first")
        with source.writer(name), target.writer(name):
            keys = list(data.yield_keys())
            copy = target.namespace(name)
            copy.mdelete(list(copy.yield_keys()))
            for i in range(0, len(keys), BATCH):
                chunk = keys[i : i + BATCH]
                copy.mset([(k, v) for k, v in zip(chunk, data.mget(chunk)) if v is not None])
        done.append(Migrated(user_id, len(keys), len(manifest.get("sessions", {}))))
        if verify:
            _check(done[-1], source, target, manifest.get("embeddings", "local"))
    if wanted is not None and (missing := wanted - {m.user_id for m in done}):
        raise ConfigError(f"no memory of user(s) {', '.join(sorted(missing))} in the source store")
    return done


def _check(migrated: Migrated, source, target, embeddings: str) -> None:
    before = Memory(migrated.user_id, store=source, embeddings=embeddings, l0_mode="raw")
    after = Memory(migrated.user_id, store=target, embeddings=embeddings, l0_mode="raw")
    migrated.same_sessions = before.session_ids() == after.session_ids() and before.manifest == after.manifest
    probes = [max(before.session(sid).turns, key=lambda t: len(t.content)).content[:300]
              for sid in before.session_ids()[:PROBES]]

    def results(memory: Memory) -> list:
        return [[(d.metadata["session_id"], d.metadata["span"], round(d.metadata["score"], 9)) for d in memory.search(q, k=10)]
                for q in probes]

    migrated.same_results = results(before) == results(after)
