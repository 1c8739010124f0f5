"""The controller graph: state, run-time context and wiring."""

from apdmem.graph.builder import build_graph
from apdmem.graph.context import Context
from apdmem.graph.state import Evidence, State
from apdmem.settings import Settings

__all__ = ["Context", "Evidence", "Settings", "State", "build_graph"]
