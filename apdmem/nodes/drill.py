"""`drill`: disclose the next layer of the sessions the controller selected.

A session is first opened at L1 (key facts); deeper reads go to L2 (notes of the turns that matched the
search) and L3 (their exact messages). Each (session, layer) read is one step of the budget. A round's reads
run concurrently (at most `drill_width` at a time), so with a hosted model a round costs about one model
call's time, not one per session; the embedded model serializes its calls anyway.
"""

from __future__ import annotations

from langchain_core.runnables.config import ContextThreadPoolExecutor

from apdmem.graph.state import LAYER_DEPTH, Drill
from apdmem.memory.records import Usage
from apdmem.nodes import policy
from apdmem.nodes.common import annotate, emit, open_memory, usage_update
from apdmem.tools import read_facts, read_notes, read_raw

READERS = {"L1": read_facts, "L2": read_notes, "L3": read_raw}


def next_layer(current: str | None, requested: str, allowed: tuple[str, ...]) -> str | None:
    """The layer to read: never below what was read, first contact at the shallowest allowed layer,
    then the requested layer or the next one down, whichever is deeper. None when nothing deeper is allowed."""
    depth = LAYER_DEPTH.get(current or "L0", 0)
    usable = sorted((layer for layer in allowed if LAYER_DEPTH[layer] > depth), key=LAYER_DEPTH.get)
    if not usable:
        return None
    if depth == 0:
        return usable[0]
    deeper = [layer for layer in usable if LAYER_DEPTH[layer] >= LAYER_DEPTH.get(requested, 0)]
    return deeper[0] if deeper else usable[0]


def relevant_turns(candidate: dict | None) -> list[int] | None:
    """Turns of the units that matched the search, one turn of context on each side; None = all turns."""
    if not candidate or not candidate.get("spans"):
        return None
    turns = {t for start, end in candidate["spans"] for t in range(max(start - 1, 0), end + 1)}
    return sorted(turns)


def drill(state, runtime, *, settings, memory=None) -> dict:
    ctx = runtime.context
    memory = open_memory(runtime, settings, memory)
    targets = state.get("targets") or policy.plan(state, ctx)
    step, opened, candidates = state.get("step", 0), dict(state.get("opened", {})), state.get("candidates", {})
    reads: list[Drill] = []
    for target in targets:
        sid = target["session_id"]
        layer = next_layer(opened.get(sid), target.get("layer", "L1"), ctx.allowed_layers)
        if step >= ctx.tmax or layer is None or sid not in memory.manifest["sessions"] or any(r["session_id"] == sid for r in reads):
            continue
        step += 1
        reads.append(Drill(step=step, session_id=sid, layer=layer, turns=None if layer == "L1" else relevant_turns(candidates.get(sid))))
        # A session that a link or one of the question's dates lifted says which (`policy.lift`): the trace shows it.
        emit(runtime, event="drill", step=step, session_id=sid, layer=layer, turns=reads[-1]["turns"],
             **({"via": target["via"]} if target.get("via") else {}))
    spent = [Usage() for _ in reads]

    def read(i: int) -> list:
        r = reads[i]
        if r["layer"] == "L1":
            return read_facts(memory, r["session_id"], spent[i])
        return READERS[r["layer"]](memory, r["session_id"], r["turns"], spent[i])

    width = max(1, min(len(reads), ctx.drill_width))
    with ContextThreadPoolExecutor(max_workers=width) as pool:
        disclosed = list(pool.map(read, range(len(reads))))
    seen = {(e["session_id"], e["layer"], e["turn"], e["text"]) for e in state.get("evidence", [])}
    evidence = []
    for r, items in zip(reads, disclosed):
        fresh = [e for e in items if (e["session_id"], e["layer"], e["turn"], e["text"]) not in seen]
        seen.update((e["session_id"], e["layer"], e["turn"], e["text"]) for e in fresh)
        evidence += fresh
        opened[r["session_id"]] = r["layer"]
    # L1 and L2 are generated on first read: their tokens are this node's. Reads ran side by side.
    usage = Usage()
    usage.merge_concurrent(spent, width)
    annotate(step=step, drills=[(r["session_id"], r["layer"]) for r in reads])
    return {"evidence": evidence, "drills": reads, "opened": opened, "step": step, "targets": [],
            "new_evidence": len(evidence), **usage_update("drill", usage)}
