"""The multi-resolution memory substrate: records, loaders, layers, stores, indexes, retriever."""

from apdmem.memory.loaders import load_locomo, load_longmemeval, load_sessions, session_from_messages
from apdmem.memory.memory import IngestReport, LayersReport, Memory, ReindexReport, open_memory
from apdmem.memory.records import Session, Turn, Unit
from apdmem.memory.retriever import HybridRetriever

__all__ = [
    "HybridRetriever",
    "IngestReport",
    "Memory",
    "LayersReport",
    "ReindexReport",
    "Session",
    "Turn",
    "Unit",
    "load_locomo",
    "load_longmemeval",
    "load_sessions",
    "open_memory",
    "session_from_messages",
]
