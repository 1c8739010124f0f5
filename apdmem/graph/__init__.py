"""The controller graph: state, run-time context and wiring."""

from apdmem.lazy import exports

_SOURCES = {
    "Context": "apdmem.graph.context",
    "Evidence": "apdmem.graph.state",
    "Settings": "apdmem.settings",
    "State": "apdmem.graph.state",
    "build_graph": "apdmem.graph.builder",
}
__all__ = sorted(_SOURCES)
__getattr__ = exports(globals(), _SOURCES)
