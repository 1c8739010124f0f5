"""Metrics shared by the benchmarks, as plain functions of ranked ids and gold ids."""

from __future__ import annotations

import math
from collections.abc import Sequence


def recall_any(ranked: Sequence[str], gold: set[str], k: int) -> float:
    """1.0 if any gold id is in the top k."""
    return float(any(r in gold for r in ranked[:k]))


def recall_all(ranked: Sequence[str], gold: set[str], k: int) -> float:
    """1.0 if every gold id is in the top k."""
    return float(gold <= set(ranked[:k]))


def ndcg_any(ranked: Sequence[str], gold: set[str], k: int) -> float:
    """NDCG@k with binary relevance: each gold id found counts 1/log2(rank+1)."""
    dcg = sum(1.0 / math.log2(i + 2) for i, r in enumerate(ranked[:k]) if r in gold)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(k, len(gold))))
    return dcg / ideal if ideal else 0.0


def turn_recall(spans: Sequence[tuple[str, int, int]], gold: set[tuple[str, int]], k: int) -> float:
    """Share of the gold (session, turn) pairs inside the first k spans (session, start, end), end exclusive."""
    if not gold:
        return 0.0
    covered = {(sid, turn) for sid, turn in gold for s, start, end in spans[:k] if s == sid and start <= turn < end}
    return len(covered) / len(gold)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0
