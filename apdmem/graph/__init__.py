"""The controller graph: state, run-time context and wiring."""

from apdmem.graph.builder import build_graph
from apdmem.graph.context import Context, Settings
from apdmem.graph.state import Evidence, State

__all__ = ["Context", "Evidence", "Settings", "State", "build_graph"]
