"""`drill`: disclose the next layer of the sessions the controller selected.

A session is first opened at L1 (key facts); deeper reads go to L2 (notes of the turns that matched the
search) and L3 (their exact messages). Each (session, layer) read is one step of the budget.
"""

from __future__ import annotations

from apdmem.graph.state import LAYER_DEPTH, Drill
from apdmem.memory.records import Usage
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


def default_targets(state, ctx) -> list[dict]:
    """Without a choice from the controller: the best-scored sessions not opened yet, at L1."""
    opened = state.get("opened", {})
    ranked = sorted(state.get("candidates", {}).items(), key=lambda kv: -kv[1]["score"])
    return [{"session_id": sid, "layer": "L1"} for sid, _ in ranked if sid not in opened][: ctx.drill_width]


def drill(state, runtime) -> dict:
    ctx = runtime.context
    memory = open_memory(runtime)
    targets = state.get("targets") or default_targets(state, ctx)
    step, opened, candidates = state.get("step", 0), dict(state.get("opened", {})), state.get("candidates", {})
    seen = {(e["session_id"], e["layer"], e["turn"], e["text"]) for e in state.get("evidence", [])}
    evidence, drills = [], []
    spent = Usage(-memory.usage.input_tokens, -memory.usage.output_tokens, -memory.usage.calls)
    for target in targets:
        sid = target["session_id"]
        layer = next_layer(opened.get(sid), target.get("layer", "L1"), ctx.allowed_layers)
        if step >= ctx.tmax or layer is None or sid not in memory.manifest["sessions"]:
            continue
        turns = None if layer == "L1" else relevant_turns(candidates.get(sid))
        step += 1
        emit(runtime, event="drill", step=step, session_id=sid, layer=layer, turns=turns)
        items = READERS[layer](memory, sid) if layer == "L1" else READERS[layer](memory, sid, turns)
        fresh = [e for e in items if (e["session_id"], e["layer"], e["turn"], e["text"]) not in seen]
        seen.update((e["session_id"], e["layer"], e["turn"], e["text"]) for e in fresh)
        evidence += fresh
        opened[sid] = layer
        drills.append(Drill(step=step, session_id=sid, layer=layer, turns=turns))
    # L1 and L2 are generated on first read: their tokens are this node's.
    spent.merge(memory.usage)
    annotate(step=step, drills=[(d["session_id"], d["layer"]) for d in drills])
    return {"evidence": evidence, "drills": drills, "opened": opened, "step": step, "targets": [],
            "new_evidence": len(evidence), **usage_update("drill", spent)}
