"""`Context`: how one question is answered. Whose memory (a claim that a server's auth handler may overrule),
the step budget and the ablation switches: plain JSON values, what a run's ``context`` (and LangGraph Studio's
form) may set.

The deployment (where memories live, which models run: `apdmem.settings.Settings`) is not part of it: the graph
is built with it, ``build_graph(settings=..., memory=...)``, so a client never chooses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from apdmem.errors import ConfigError, shown
from apdmem.limits import CONTEXT_MAXIMA
from apdmem.settings import environment


def _option(default, description: str):
    return field(default=default, metadata={"description": description})


def _from_environment(config) -> None:
    """Fill fields left at their default from ``APDMEM_<FIELD>`` (converted to the field's type)."""
    for f in fields(config):
        if getattr(config, f.name) != f.default:
            continue
        raw = environment(f.name)
        if raw is not None:
            setattr(config, f.name, _convert(f"APDMEM_{f.name.upper()}", raw, f.default))


@dataclass(kw_only=True)
class Context:
    """How one question is answered. Unset fields take ``APDMEM_<FIELD>`` from the environment (e.g.
    ``APDMEM_TMAX=12``), else the default shown. Every field is a JSON value, so a server's client (and Studio's
    form) can set any of them, and none of them says where memory lives or which model endpoint is called.
    """

    user_id: str = _option("default", "Whose memory to read (a namespace; with server auth on, the authenticated user).")
    tmax: int = _option(20, "Step budget: searches, drills (one per session and layer) and reflections.")
    top_k: int = _option(20, "Sessions returned by each search, the first 10 rescored (the disclosure policy reads how their scores fall "
                         "off; its threshold was set with 20).")
    drill_width: int = _option(3, "Most session reads in one round of drilling (they run concurrently).")
    max_queries: int = _option(4, "Most sub-queries a question is decomposed into.")
    follow_links: bool = _option(True, "For questions that gather several sessions (how many, in total, the latest ...), lift "
                                 "into the question's ranking the sessions most strongly linked to the best ones found "
                                 "(shared rare terms, close units), so that they are opened with them, within the step budget.")
    # Ablations (the paper's Table 4); all on by default.
    controller: bool = _option(True, "Agent control; off = one search, L1 of the sessions that stand out in it, then notes and answer.")
    layers: str = _option("L1,L2,L3", "Layers the controller may open, comma-separated.")
    reflection: bool = _option(True, "Reflect on the evidence between rounds.")
    decomposition: bool = _option(True, "Split compound questions into sub-queries.")
    date_normalization: bool = _option(True, "Resolve relative dates in the question.")
    organized_notes: bool = _option(True, "Organize evidence into notes before answering (off = raw evidence).")
    draft_answer: bool = _option(True, "Pass the controller's draft to the answer node.")

    def __post_init__(self) -> None:
        """Every field checked where a run starts (LangGraph builds the context from the run's JSON before any
        node): a JSON value of the field's type ("false" is no boolean), integers within `CONTEXT_MAXIMA`."""
        _from_environment(self)
        for f in fields(self):
            value, kind = getattr(self, f.name), type(f.default)
            if type(value) is not kind:  # exactly: True is an int to isinstance
                raise ConfigError(f"context field {f.name!r} must be {_KINDS[kind]}, got {type(value).__name__} {shown(value)}")
            if kind is int and not 1 <= value <= CONTEXT_MAXIMA[f.name]:
                raise ConfigError(f"context field {f.name!r} must be an integer from 1 to {CONTEXT_MAXIMA[f.name]}, got {value!r}")
        unknown = set(self.allowed_layers) - {"L1", "L2", "L3"}
        if unknown:
            raise ConfigError(f"context field 'layers' names unknown layers {shown(sorted(unknown))}: use L1, L2, L3")

    @property
    def allowed_layers(self) -> tuple[str, ...]:
        return tuple(layer.strip() for layer in self.layers.split(",") if layer.strip())


_KINDS = {bool: "true or false", int: "an integer", str: "a string"}


def _convert(name: str, raw: str, default):
    if isinstance(default, bool):
        word = raw.strip().lower()
        if word not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            raise ConfigError(f"{name}={raw!r} is not a boolean: use true or false")
        return word in ("1", "true", "yes", "on")
    if isinstance(default, int):
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"{name}={raw!r} is not an integer") from None
    return raw
