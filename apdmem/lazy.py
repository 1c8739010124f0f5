"""Package names imported on first use (PEP 562), so that importing a package costs only what is used: the
command line's memory commands never load LangGraph."""

from __future__ import annotations

import importlib
from typing import Any, Callable


def exports(namespace: dict[str, Any], sources: dict[str, str]) -> Callable[[str], Any]:
    """The module-level ``__getattr__`` of a package whose name ``n`` lives in the module ``sources[n]``; the
    value found is kept in the package's `namespace`, so later lookups are plain attributes."""

    def __getattr__(name: str) -> Any:
        if name not in sources:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        value = namespace[name] = getattr(importlib.import_module(sources[name]), name)
        return value

    return __getattr__
