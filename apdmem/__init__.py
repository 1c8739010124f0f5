"""apdmem: agent-controlled progressive disclosure over a four-layer long-term conversation memory."""

from apdmem.lazy import exports

_SOURCES = {
    "ApdmemStore": "apdmem.memory.langgraph_store",
    "Context": "apdmem.graph.context",
    "build_graph": "apdmem.graph.builder",
    "Memory": "apdmem.memory",
    "Session": "apdmem.memory",
    "Turn": "apdmem.memory",
    "load_locomo": "apdmem.memory",
    "load_longmemeval": "apdmem.memory",
    "load_sessions": "apdmem.memory",
    "session_from_messages": "apdmem.memory",
    "Settings": "apdmem.settings",
}
__all__ = sorted(_SOURCES)
__getattr__ = exports(globals(), _SOURCES)
