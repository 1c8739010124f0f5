"""What one request may ask of apdmem: every size a client (a server's caller, an agent calling a tool) controls
has a limit here, and a request past it fails with one line naming the field and the limit, before any work.
Below the limits the work grows linearly with the size. The README's "Limits" section lists them.

>>> check_limit(len("What is my dog's name?"), MAX_QUESTION_CHARS, source="question", unit="characters")
>>> check_limit(30_000, MAX_QUESTION_CHARS, source="question", unit="characters")
Traceback (most recent call last):
apdmem.errors.LimitError: question: 30,000 characters, over the limit of 20,000
"""

from __future__ import annotations

from apdmem.errors import LimitError

# A question (the `apdmem` graph, `apdmem ask`) or a search_memory query: 2,000-word questions are answered.
MAX_QUESTION_CHARS = 20_000
# Turns one read_notes / read_raw call may name ("1-1000"); no turns named reads the whole session.
MAX_TURNS_PER_READ = 1_000
# Sessions a search_memory call returns.
MAX_SEARCH_K = 50
# The run context's integer fields (`Context`): step budget, sessions per search, reads per round, sub-queries.
CONTEXT_MAXIMA = {"tmax": 100, "top_k": 100, "drill_width": 16, "max_queries": 10}
# One `remember` call: the sessions it stores and the UTF-8 bytes of their messages' text.
MAX_REMEMBER_SESSIONS = 100
MAX_REMEMBER_BYTES = 10_000_000
# One message, from any source (a file, a `remember` call): a longer one is a pasted file or a broken export, and
# would overflow the context window of the model that summarizes its session.
MAX_MESSAGE_CHARS = 200_000


def check_limit(size: int, limit: int, *, source: str, unit: str) -> None:
    """Raise LimitError naming `source` when `size` (in `unit`) is over `limit`."""
    if size > limit:
        raise LimitError(f"{size:,} {unit}, over the limit of {limit:,}", source=source)
