"""Replies measured without a model as judge: on LongMemEval questions and on the evolving-memory suite.

What a reply *does* is read from its text: it says the memory does not hold the answer (`NOT_FOUND`), hedges
(`HEDGED`), or asserts (`ASSERTS`); it contains the gold answer or not (`mentions`, normalized words); on a
question about something that changed, it leads with the current value or presents a stale one as current
(`leads_with_current`, `stale_as_current`).

The suite (`apdmem/eval/data/evolving.json`, `load_suite`) is small histories of facts that change, written for
apdmem: each scenario's sessions, and questions of five kinds: ``current`` (the value now; `stale` lists the values
it replaced), ``earlier`` (a value before the change), ``when`` (the date it changed), ``count`` (how many times,
how many in all) and ``never`` (something never said: the reply should say it is not in memory). Sessions are in
`Session.to_json`'s shape; a session given as ``{"session_id", "date", "filler": NAME}`` takes the turns of the
suite's filler NAME, a conversation about something else.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from importlib.resources import files
from pathlib import Path

from tqdm.auto import tqdm

from apdmem.errors import InputError
from apdmem.eval.judge import gold_contained
from apdmem.eval.locomo import abstains
from apdmem.eval.longmemeval import answer_item, ask, disclosure
from apdmem.eval.metrics import mean
from apdmem.memory import Memory
from apdmem.memory.records import ROLES, Session, Turn, check_id
from apdmem.nodes.answer import NOT_FOUND as NOT_FOUND_REPLY
from apdmem.nodes.answer import QUOTED, UNCLEAR
from apdmem.nodes.reckon import COMPUTED, UNDATED

NOT_FOUND, HEDGED, ASSERTS = "not found", "hedged", "asserts"
KINDS = ("current", "earlier", "when", "count", "never")
MAX_SESSIONS = 15

# Words of a generative reply that does not commit to what it says.
_HEDGES = re.compile(r"\b(may not|might not|not sure|unsure|not certain|uncertain|unclear|it seems|it appears|possibly|"
                     r"perhaps|probably|i think|i believe|can't be sure|cannot be sure|hard to say|not clear)\b")
# Words that place a value in the past: labels ("earlier, 2023-01-10: ...", "previously") and statements that a
# value ended ("I sold the red one", "Karen left the company").
_PAST = re.compile(r"\b(earlier|previous|previously|before|former|formerly|used to|no longer|anymore|originally|at first|"
                   r"until|cancell?ed|quit|sold|left|stopped|dropped|switched|gave up|returned|ended|broke up|"
                   r"passed away|died|replaced|changed|instead of|moved from|moved away|moved out)\b", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_NUMBERS = {word: str(n) for n, word in enumerate("two three four five six seven eight nine ten eleven twelve thirteen fourteen "
                                                   "fifteen sixteen seventeen eighteen nineteen twenty".split(), start=2)}
_NUMBER_WORD = re.compile(r"\b(" + "|".join(_NUMBERS) + r")\b", re.IGNORECASE)


def stance(reply: str) -> str:
    """What a reply does: NOT_FOUND (it says the memory does not hold the answer), HEDGED (it offers something
    without committing to it) or ASSERTS.

    An extractive reply is read by its heading (`apdmem.nodes.answer`'s and `apdmem.nodes.reckon`'s constants: the
    quotes under it are the user's words, whatever they say); a generative one by its words (`apdmem.eval.locomo.abstains`, hedges).

    >>> stance(NOT_FOUND_REPLY), stance(UNCLEAR + '\\n- 2023-01-02, you said: "I like tea."'), stance("You live in Lisbon.")
    ('not found', 'hedged', 'asserts')
    """
    text = (reply or "").strip()
    if not text or text.startswith(NOT_FOUND_REPLY):
        return NOT_FOUND
    if text.startswith((UNCLEAR, UNDATED)):
        return HEDGED
    if text.startswith((QUOTED, COMPUTED)):
        return ASSERTS
    if abstains(text):
        return NOT_FOUND
    return HEDGED if _HEDGES.search(text.lower().replace("\u2019", "'")) else ASSERTS


def mentions(text: str, values: list[str]) -> bool:
    """Whether `text` holds one of `values`, as whole normalized words (lower case, punctuation as spaces), a
    number from two to twenty written in words or digits alike.

    >>> mentions("I now own four bikes.", ["4"]), mentions("My rent is $1,550.", ["1,550"]), mentions("11 plants", ["1"])
    (True, True, False)
    """
    return any(gold_contained(_digits(text), _digits(value)) for value in values)


def _digits(text: str) -> str:
    """`text` with the number words two to twenty as digits ("one" is left alone: "a blue one")."""
    return _NUMBER_WORD.sub(lambda m: _NUMBERS[m.group(0).lower()], str(text))


def segments(reply: str) -> list[str]:
    """The parts of a reply that each state one thing: a line holding a quotation is one (the label before the
    quote, e.g. its date, belongs to it); other lines are split into sentences."""
    parts = []
    for line in (reply or "").splitlines():
        parts += [line] if '"' in line else [s for s in _SENTENCE_END.split(line) if s.strip()]
    return parts


def stale_as_current(reply: str, stale: list[str], current: list[str]) -> bool:
    """Whether the reply presents a stale value as current: a segment mentions a stale value with nothing that
    places it in the past (a word such as "earlier", "previously", "sold", "left") and without the current value
    (a segment naming both states the change: "you moved from Porto to Lisbon")."""
    return any(mentions(part, stale) and not mentions(part, current) and not _PAST.search(part) for part in segments(reply))


def leads_with_current(reply: str, current: list[str], stale: list[str]) -> bool:
    """Whether a reply to a current-value question leads with the current value: the first segment that names
    the current value or presents a stale one as current names the current value, and no segment presents a stale
    value as current (`stale_as_current`). A stale value marked as past may come anywhere.

    >>> leads_with_current('latest, 2023-05-20: "We moved to Lisbon."\\nearlier, 2023-01-12: "I live in Porto."', ["Lisbon"], ["Porto"])
    True
    >>> leads_with_current('- 2023-01-12: "I live in Porto."\\n- 2023-05-20: "We moved to Lisbon."', ["Lisbon"], ["Porto"])
    False
    """
    named = [part for part in segments(reply) if mentions(part, current) or mentions(part, stale) and not _PAST.search(part)]
    return bool(named) and mentions(named[0], current) and not stale_as_current(reply, stale, current)


# --- LongMemEval ------------------------------------------------------------------------------------------------


def extractable(item) -> bool:
    """Whether a LongMemEval question's gold answer can be quoted: it occurs (`mentions`) in a turn of one of its
    evidence sessions."""
    evidence = set(item.answer_session_ids)
    return any(mentions(turn.content, [item.answer]) for s in item.sessions if s.session_id in evidence for turn in s.turns)


def answer_longmemeval(item, settings) -> dict:
    """Ask one LongMemEval question (`apdmem.eval.longmemeval.answer_item`, no judge with
    ``settings.llm_judge=False``): its record, with whether its gold is `quotable` (`extractable`), the reply
    `contained` it (`mentions`), and the reply's `stance`."""
    record = answer_item(item, settings)
    reply = record["hypothesis"]
    return {**record, "quotable": extractable(item), "contained": mentions(reply, [item.answer]), "stance": stance(reply)}


def reply_figures(records: list[dict]) -> dict:
    """The answer figures of a group of records (each with `abstention`, `quotable`, `contained`, `stance`, and
    the disclosure fields `apdmem.eval.longmemeval.disclosure` reads).

    On answerable questions whose gold is quotable: `contained` (the reply holds the gold), `confident_right` /
    `confident_wrong` (it asserts, with / without the gold) and `hedged` (it hedges or says not found). On
    abstention questions: `not_in_memory`, the share that say the memory does not hold it. Shares are None where
    a group has no such question."""
    quotable = [r for r in records if not r["abstention"] and r["quotable"]]
    abstention = [r for r in records if r["abstention"]]
    answerable = [r for r in records if not r["abstention"]]

    def share(rows: list[dict], test) -> float | None:
        return mean([1.0 if test(r) else 0.0 for r in rows]) if rows else None

    figures = disclosure(records)
    return {
        "n": len(records), "quotable": len(quotable), "abstention": len(abstention),
        "contained": share(quotable, lambda r: r["contained"]),
        "contained_all_answerable": share(answerable, lambda r: r["contained"]),
        "confident_right": share(quotable, lambda r: r["stance"] == ASSERTS and r["contained"]),
        "confident_wrong": share(quotable, lambda r: r["stance"] == ASSERTS and not r["contained"]),
        "hedged": share(quotable, lambda r: r["stance"] != ASSERTS),
        "not_in_memory": share(abstention, lambda r: r["stance"] == NOT_FOUND),
        "evidence_recall": figures["evidence_recall_opened"] if any(r["answer_session_ids"] for r in answerable) else None,
        "opened": figures["sessions_accessed_fraction"],
    }


def by_group(records: list[dict], group, figures=reply_figures) -> dict[str, dict]:
    """`figures` of all records and of each group (`group(record)` names it), groups sorted by name."""
    groups = defaultdict(list)
    for r in records:
        groups[group(r)].append(r)
    return {"all": figures(records), **{name: figures(rows) for name, rows in sorted(groups.items())}}


def longmemeval_group(record: dict) -> str:
    """Answerable questions by their type; abstention questions (ids ending in ``_abs``) in a group of their own."""
    return "abstention" if record["abstention"] else record["question_type"]


# --- the evolving-memory suite -----------------------------------------------------------------------------------


@dataclass
class Question:
    """A question of the suite: `answer` is the gold reply (the value, for all kinds but ``never``), `aliases`
    other ways of writing it, `stale` the values a ``current`` question's answer replaced, `evidence` the
    sessions that hold the answer."""

    id: str
    kind: str
    question: str
    date: datetime
    answer: str
    aliases: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)

    @property
    def answers(self) -> list[str]:
        return [self.answer, *self.aliases]


@dataclass
class Scenario:
    """One small history and its questions; `fillers` names the sessions about something else."""

    id: str
    topic: str
    sessions: list[Session]
    questions: list[Question]
    fillers: set[str] = field(default_factory=set)

    def says(self, session_ids, values: list[str]) -> bool:
        """Whether a turn of one of these sessions holds one of `values` (`mentions`)."""
        ids = set(session_ids)
        return any(mentions(t.content, values) for s in self.sessions if s.session_id in ids for t in s.turns)

    def quotable(self, q: Question) -> bool:
        """Whether a reply could quote the answer: it is said in an evidence session, or (``when``) it is the
        date of one, which a quote of it carries."""
        dates = {f"{s.date:%Y-%m-%d}" for s in self.sessions if s.session_id in q.evidence}
        return self.says(q.evidence, q.answers) or q.kind == "when" and bool(dates & set(q.answers))


def suite_path() -> Path:
    return Path(str(files("apdmem") / "eval" / "data" / "evolving.json"))


def load_suite(path: str | Path | None = None) -> list[Scenario]:
    """The scenarios of the suite file (default: the one shipped with the package), each checked
    (`scenario_problems`); InputError naming the file and the scenario at the first problem."""
    path = Path(path or suite_path())
    try:
        data = json.loads(path.read_text())
        fillers, raw = data["fillers"], data["scenarios"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"not an evolving-memory suite: {exc}", source=str(path)) from None
    scenarios = []
    for index, entry in enumerate(raw):
        where = entry.get("id", index) if isinstance(entry, dict) else index
        try:
            scenario = _scenario(entry, fillers)
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(f"malformed scenario: {exc!r}", source=str(path), record=str(where)) from None
        problems = scenario_problems(scenario)
        if problems:
            raise InputError("; ".join(problems), source=str(path), record=scenario.id)
        scenarios.append(scenario)
    if len({s.id for s in scenarios}) != len(scenarios):
        raise InputError("scenario ids repeat", source=str(path))
    return scenarios


def _scenario(entry: dict, fillers: dict) -> Scenario:
    """A scenario of the suite file, its filler sessions given their turns; KeyError, ValueError or TypeError for
    an entry that is not one (what it says is checked by `scenario_problems`)."""
    sessions, filler_ids = [], set()
    for raw in entry["sessions"]:
        turns = raw.get("turns")
        if "filler" in raw:
            turns = fillers[raw["filler"]]
            filler_ids.add(raw["session_id"])
        sessions.append(Session(check_id(raw["session_id"], "session"), datetime.fromisoformat(raw["date"]),
                                tuple(Turn(t["role"], t["content"], t.get("speaker")) for t in turns)))
    questions = [Question(q["id"], q["kind"], q["question"], datetime.fromisoformat(q["date"]), q["answer"],
                          q.get("aliases", []), q.get("stale", []), q.get("evidence", [])) for q in entry["questions"]]
    return Scenario(check_id(entry["id"], "user"), entry["topic"], sessions, questions, filler_ids)


def scenario_problems(scenario: Scenario) -> list[str]:
    """What makes a scenario unfit to measure with, as sentences; none for a good one.

    1 to MAX_SESSIONS sessions of at least two turns with known roles, unique ids; each question of a known kind,
    asked after the last session, with evidence among the scenario's sessions (none for ``never``). What each
    kind is scored on must be in its evidence (the answer's words for ``current`` and ``earlier``; for ``when``
    the words or the date of an evidence session), every stale value must have been said in a session before the
    current value's, and no scored value may occur in a filler session (a quote of it would score by chance).
    """
    problems = []
    sessions = {s.session_id: s for s in scenario.sessions}
    if not 1 <= len(scenario.sessions) <= MAX_SESSIONS:
        problems.append(f"{len(scenario.sessions)} sessions (1 to {MAX_SESSIONS})")
    if len(sessions) != len(scenario.sessions) or len({q.id for q in scenario.questions}) != len(scenario.questions):
        problems.append("session or question ids repeat")
    for s in scenario.sessions:
        if len(s.turns) < 2 or any(t.role not in ROLES or not t.content.strip() for t in s.turns):
            problems.append(f"session {s.session_id}: fewer than two turns, an unknown role or an empty turn")
    last = max((s.date for s in scenario.sessions), default=None)
    for q in scenario.questions:
        name = f"question {q.id}"
        if q.kind not in KINDS:
            problems.append(f"{name}: unknown kind {q.kind!r} ({', '.join(KINDS)})")
            continue
        if last and q.date <= last:
            problems.append(f"{name}: asked before the last session")
        if any(i not in sessions for i in q.evidence) or bool(q.evidence) == (q.kind == "never"):
            problems.append(f"{name}: evidence must name sessions of the scenario, and none for 'never'")
            continue
        if q.kind in ("current", "earlier", "when") and not scenario.quotable(q):
            problems.append(f"{name}: the answer is not said in its evidence" + (" nor its date" if q.kind == "when" else ""))
        if q.kind == "current":
            first = min(sessions[i].date for i in q.evidence)
            before = [s.session_id for s in scenario.sessions if s.date < first or s.session_id in q.evidence]
            if not q.stale or not all(scenario.says(before, [value]) for value in q.stale):
                problems.append(f"{name}: a current-value question needs stale values said before or beside its evidence")
            if mentions(" ".join(q.stale), q.answers):
                problems.append(f"{name}: a stale value names the answer")
        if q.kind != "never" and scenario.says(scenario.fillers, q.answers + q.stale):
            problems.append(f"{name}: a filler session says the answer or a stale value")
    return problems


def run_suite(scenarios: list[Scenario], *, store, settings, progress: bool = False) -> list[dict]:
    """Ask every question of every scenario through the controller graph, as `apdmem.eval.longmemeval.ask` asks
    it with `settings` (an `EvalSettings`); each scenario is ingested once (raw L0), as its own user of `store`. One
    record per question: the reply and what it does (`suite_record`), what was opened, the latency."""
    records = []
    for scenario in tqdm(scenarios, desc="evolving suite", disable=not progress):
        memory = Memory(f"evolving-{scenario.id}", store=store, chat_model=settings.chat_model, embeddings=settings.embeddings,
                        base_url=settings.base_url, l0_mode="raw")
        memory.ingest(scenario.sessions)
        for q in scenario.questions:
            records.append(suite_record(scenario, q, *ask(memory, q.question, q.date, settings)))
    return records


def suite_record(scenario: Scenario, q: Question, final: dict, latency: float) -> dict:
    """What a reply to a suite question does, with the fields `reply_figures` and `suite_figures` read."""
    reply = final.get("answer", "")
    current = q.kind == "current"
    return {
        "scenario": scenario.id, "question_id": f"{scenario.id}/{q.id}", "kind": q.kind, "question": q.question,
        "answer": q.answer, "stale": q.stale, "reply": reply, "stance": stance(reply),
        "abstention": q.kind == "never", "quotable": scenario.quotable(q), "contained": mentions(reply, q.answers),
        "leads_with_current": leads_with_current(reply, q.answers, q.stale) if current else None,
        "stale_as_current": stale_as_current(reply, q.stale, q.answers) if current else None,
        "answer_session_ids": q.evidence, "haystack_sessions": len(scenario.sessions),
        "opened": final.get("opened", {}), "step": final.get("step", 0), "online_usage": final.get("usage", {}),
        "latency_s": latency,
    }


def suite_figures(records: list[dict]) -> dict:
    """`reply_figures`, and on current-value questions the share that lead with the current value and the share
    that present a stale value as current."""
    current = [r for r in records if r["kind"] == "current"]
    return {
        **reply_figures(records),
        "leads_with_current": mean([float(r["leads_with_current"]) for r in current]) if current else None,
        "stale_as_current": mean([float(r["stale_as_current"]) for r in current]) if current else None,
    }


# --- tables ---------------------------------------------------------------------------------------------------------

COLUMNS = {"n": "n", "quotable": "quotable", "contained": "contained", "confident_right": "conf.right",
           "confident_wrong": "conf.wrong", "hedged": "hedged", "not_in_memory": "not in mem", "evidence_recall": "recall",
           "opened": "opened"}
SUITE_COLUMNS = {**COLUMNS, "leads_with_current": "leads", "stale_as_current": "stale cur."}


def table(groups: dict[str, dict], columns: dict[str, str] = COLUMNS) -> str:
    """A text table: one row per group, one column per figure ("-" where the group has none)."""
    width = max(len(name) for name in groups) + 2
    lines = [f"{'':<{width}}" + "".join(f"{label:>11}" for label in columns.values())]
    for name, figures in groups.items():
        cells = []
        for key in columns:
            value = figures.get(key)
            cells.append(f"{'-':>11}" if value is None else f"{value:>11d}" if isinstance(value, int) else f"{value:>11.3f}")
        lines.append(f"{name:<{width}}" + "".join(cells))
    return "\n".join(lines)
