"""apdmem: agent-controlled progressive disclosure over a four-layer long-term conversation memory."""

from apdmem.graph import Context, build_graph
from apdmem.memory import Memory, Session, Turn, load_locomo, load_longmemeval, load_sessions, session_from_messages
from apdmem.settings import Settings

__all__ = [
    "Context",
    "Memory",
    "Session",
    "Settings",
    "Turn",
    "build_graph",
    "load_locomo",
    "load_longmemeval",
    "load_sessions",
    "session_from_messages",
]
