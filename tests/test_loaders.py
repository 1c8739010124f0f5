"""Loaders: every supported format, the real LongMemEval dev file, dates, LangChain messages, and bad input."""

import gzip
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from apdmem.errors import InputError
from apdmem.limits import MAX_MESSAGE_CHARS
from apdmem.memory.loaders import (
    load_locomo,
    load_longmemeval,
    load_sessions,
    parse_date,
    session_from_messages,
)

ORACLE_DEV = Path(__file__).resolve().parents[2] / "shared" / "data" / "longmemeval" / "longmemeval_oracle_dev.json.gz"


def write(path: Path, data) -> Path:
    """Write `data` to `path`: bytes as they are; str as UTF-8, anything else as JSON, both gzipped for `.gz`."""
    if not isinstance(data, bytes):
        data = (data if isinstance(data, str) else json.dumps(data)).encode()
        data = gzip.compress(data) if path.suffix == ".gz" else data
    path.write_bytes(data)
    return path


def generic(session_id="s1", date="2023-05-20T10:00:00", messages=None) -> dict:
    """One session in the generic format."""
    if messages is None:
        messages = [{"role": "user", "content": "I adopted a cat."}, {"role": "assistant", "content": "Lovely!"}]
    return {"session_id": session_id, "date": date, "messages": messages}


def lme_item(qid="q1", sessions=(("s1", "2023/05/20 (Sat) 00:29"),), answer="Luna") -> dict:
    """One LongMemEval item whose haystack holds `sessions` (id, date) of two turns each."""
    return {
        "question_id": qid,
        "question_type": "single-session-user",
        "question": "What is my cat's name?",
        "question_date": "2023/05/30 (Tue) 23:40",
        "answer": answer,
        "answer_session_ids": [sessions[0][0]],
        "haystack_session_ids": [sid for sid, _ in sessions],
        "haystack_dates": [date for _, date in sessions],
        "haystack_sessions": [
            [{"role": "user", "content": f"My cat is Luna ({sid}).", "has_answer": True},
             {"role": "assistant", "content": "Nice name!"}]
            for sid, _ in sessions
        ],
    }


def locomo_sample(sample_id="conv-26") -> dict:
    """A small LoCoMo sample: two sessions (stored out of order), one shared image, three questions."""
    return {
        "sample_id": sample_id,
        "conversation": {
            "speaker_a": "Caroline",
            "speaker_b": "Melanie",
            "session_2_date_time": "10:37 am on 27 June, 2023",
            "session_2": [
                {"speaker": "Melanie", "dia_id": "D2:1", "text": "Look at this!", "img_url": ["http://x/y.jpg"],
                 "blip_caption": "a photo of a pottery bowl"},
                {"speaker": "Caroline", "dia_id": "D2:2", "text": "Beautiful bowl."},
            ],
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Caroline", "dia_id": "D1:1", "text": "I went to a support group yesterday."},
                {"speaker": "Melanie", "dia_id": "D1:2", "text": "How was it?"},
            ],
        },
        "qa": [
            {"question": "When did Caroline go to the support group?", "answer": "7 May 2023",
             "evidence": ["D1:1"], "category": 2},
            {"question": "What year did Melanie start pottery?", "answer": 2022, "evidence": ["D2:1"], "category": 1},
            {"question": "What did Caroline make?", "adversarial_answer": "a bowl", "evidence": [], "category": 5},
        ],
    }


# --------------------------------------------------------------------------------------------------- formats


@pytest.mark.parametrize("name", ["history.json", "history.json.gz"])
def test_generic_json_list(tmp_path, name):
    path = write(tmp_path / name, [generic("s1"), generic("s2", "2023-05-21", [{"role": "human", "content": ""}])])
    s1, s2 = load_sessions(path)
    assert (s1.session_id, s1.date) == ("s1", datetime(2023, 5, 20, 10))
    assert [t.role for t in s1.turns] == ["user", "assistant"]
    assert (s2.turns[0].role, s2.turns[0].content) == ("user", "")  # "human" alias; empty content is allowed


@pytest.mark.parametrize("name", ["history.jsonl", "history.json"])  # JSON lines are found by content too
def test_generic_jsonl(tmp_path, name):
    lines = [generic("s1"), generic("s2", messages=[{"role": "ai", "content": "Hi\u2028there"}])]
    path = write(tmp_path / name, "\n".join(json.dumps(x, ensure_ascii=False) for x in lines) + "\n\n")
    sessions = load_sessions(path)
    assert [s.session_id for s in sessions] == ["s1", "s2"]
    assert sessions[1].turns[0].role == "assistant" and sessions[1].turns[0].content == "Hi\u2028there"


def test_generic_single_session_and_identical_duplicate(tmp_path):
    assert [s.session_id for s in load_sessions(write(tmp_path / "one.json", generic()))] == ["s1"]
    assert len(load_sessions(write(tmp_path / "twice.json", [generic(), generic()]))) == 1


@pytest.mark.parametrize("name", ["lme.json", "lme.json.gz"])
def test_longmemeval(tmp_path, name):
    items = [
        lme_item("q1", (("s1", "2023/05/20 (Sat) 00:29"), ("s2", "2023/05/21 (Sun) 09:00")), answer=3),
        lme_item("q2_abs", (("s2", "2023/05/21 (Sun) 09:00"),)),  # s2 again, identical
    ]
    path = write(tmp_path / name, items)
    q1, q2 = load_longmemeval(path)
    assert (q1.answer, q1.is_abstention, q2.is_abstention) == ("3", False, True)
    assert q1.question_date == datetime(2023, 5, 30, 23, 40) and q1.answer_session_ids == ["s1"]
    assert [s.session_id for s in q1.sessions] == ["s1", "s2"] and q1.sessions[0].date == datetime(2023, 5, 20, 0, 29)
    assert [t.has_answer for t in q1.sessions[0].turns] == [True, False]
    assert [s.session_id for s in load_sessions(path)] == ["s1", "s2"]  # the repeat is kept once
    assert len(load_longmemeval(write(tmp_path / "one.json", lme_item()))) == 1  # a single item


@pytest.mark.skipif(not ORACLE_DEV.exists(), reason="LongMemEval dev data not present")
def test_longmemeval_real_dev_file():
    items = load_longmemeval(ORACLE_DEV)
    raw = json.loads(gzip.decompress(ORACLE_DEV.read_bytes()))
    assert len(items) == 50 and sum(i.is_abstention for i in items) == 3
    assert [len(i.sessions) for i in items] == [len(r["haystack_sessions"]) for r in raw]
    assert all(isinstance(i.answer, str) for i in items)
    sessions = load_sessions(ORACLE_DEV)
    assert len(sessions) == len({sid for r in raw for sid in r["haystack_session_ids"]}) == 91
    raw_evidence = sum(bool(t.get("has_answer")) for r in raw for s in r["haystack_sessions"] for t in s)
    assert sum(t.has_answer for s in sessions for t in s.turns) == raw_evidence > 0


S_DEV = ORACLE_DEV.with_name("longmemeval_s_dev.json.gz")


@pytest.mark.skipif(not S_DEV.exists(), reason="LongMemEval dev data not present")
def test_longmemeval_real_haystacks_load_as_they_are():
    # Official haystacks repeat a session now and then, under new dates: each item keeps its haystack as is.
    raw = json.loads(gzip.decompress(S_DEV.read_bytes()))
    items = load_longmemeval(S_DEV)
    assert [[s.session_id for s in i.sessions] for i in items] == [r["haystack_session_ids"] for r in raw]


def test_locomo(tmp_path):
    path = write(tmp_path / "locomo.json", [locomo_sample()])
    (sample,) = load_locomo(path)
    assert (sample.sample_id, sample.speaker_a, sample.speaker_b) == ("conv-26", "Caroline", "Melanie")
    s1, s2 = sample.sessions
    assert (s1.session_id, s1.date) == ("conv-26:session_1", datetime(2023, 5, 8, 13, 56))
    assert (s2.session_id, s2.date) == ("conv-26:session_2", datetime(2023, 6, 27, 10, 37))
    assert [(t.role, t.speaker, t.turn_id) for t in s1.turns] == [
        ("user", "Caroline", "D1:1"), ("assistant", "Melanie", "D1:2"),
    ]
    assert s2.turns[0].content == "Look at this! [shares an image: a photo of a pottery bowl]"
    assert [(q.answer, q.category, q.evidence) for q in sample.questions] == [
        ("7 May 2023", 2, ["D1:1"]), ("2022", 1, ["D2:1"]), ("a bowl", 5, []),
    ]
    assert load_sessions(path) == sample.sessions


def test_locomo_single_sample_numeric_order_and_default_id(tmp_path):
    sample = locomo_sample()
    del sample["sample_id"]
    conv = sample["conversation"]
    conv["session_10"], conv["session_10_date_time"] = conv.pop("session_2"), conv.pop("session_2_date_time")
    (loaded,) = load_locomo(write(tmp_path / "one.json", sample))
    assert [s.session_id for s in loaded.sessions] == ["sample0:session_1", "sample0:session_10"]


def test_loader_checks_the_format_it_expects(tmp_path):
    with pytest.raises(InputError, match="expected a LongMemEval file, found LoCoMo data"):
        load_longmemeval(write(tmp_path / "locomo.json", [locomo_sample()]))
    with pytest.raises(InputError, match="expected a LoCoMo file, found generic data"):
        load_locomo(write(tmp_path / "generic.json", [generic()]))


# ----------------------------------------------------------------------------------------------------- dates


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2023/05/20 (Sat) 00:29", datetime(2023, 5, 20, 0, 29)),
        ("2023/12/31 (Sun) 23:59", datetime(2023, 12, 31, 23, 59)),
        ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56)),
        ("10:37 am on 27 June, 2023", datetime(2023, 6, 27, 10, 37)),
        ("12:05 am on 1 January, 2024", datetime(2024, 1, 1, 0, 5)),
        ("2023-05-20", datetime(2023, 5, 20)),
        ("2023-05-20T00:29:00", datetime(2023, 5, 20, 0, 29)),
        ("2023-05-20 00:29", datetime(2023, 5, 20, 0, 29)),
        ("2023-05-20T00:29:00+02:00", datetime(2023, 5, 20, 0, 29)),  # wall-clock time kept, zone dropped
        ("2023-05-20T00:29:00Z", datetime(2023, 5, 20, 0, 29)),
        ("  2023-05-20  ", datetime(2023, 5, 20)),
    ],
)
def test_parse_date(text, expected):
    parsed = parse_date(text)
    assert parsed == expected and parsed.tzinfo is None


@pytest.mark.parametrize("text", ["", "yesterday", "2023/13/01 (Mon) 00:00", "25:00 pm on 8 May, 2023", "8 May 2023"])
def test_parse_date_rejects(text):
    with pytest.raises(ValueError, match="unrecognized date"):
        parse_date(text)


# ------------------------------------------------------------------------------------------ LangChain messages


def test_session_from_messages():
    messages = [
        SystemMessage("Be brief."),
        HumanMessage("I moved to Lisbon.", name="Ana"),
        AIMessage([{"type": "text", "text": "Welcome "}, {"type": "image", "url": "http://x/y.png"}, "to Lisbon!"]),
    ]
    aware = datetime(2023, 5, 20, 9, 0, tzinfo=timezone(timedelta(hours=1)))
    session = session_from_messages(messages, session_id="chat-1", date=aware)
    assert [t.role for t in session.turns] == ["system", "user", "assistant"]
    assert session.turns[1].speaker == "Ana" and session.turns[2].content == "Welcome to Lisbon!"
    assert session.date == datetime(2023, 5, 20, 9, 0)
    assert session_from_messages(messages[1:2], session_id="c", date="2023-05-20").date == datetime(2023, 5, 20)


@pytest.mark.parametrize(
    "messages, session_id, date, fragment",
    [
        ([HumanMessage("hi"), ToolMessage("42", tool_call_id="t1")], "chat-1", "2023-05-20", "ToolMessage"),
        ([HumanMessage("hi")], "a/b", "2023-05-20", "invalid session id"),
        ([HumanMessage("hi")], "chat-1", "someday", "someday"),
        ([], "chat-1", "2023-05-20", "no turns"),
    ],
)
def test_session_from_messages_rejects(messages, session_id, date, fragment):
    with pytest.raises(InputError, match=fragment) as caught:
        session_from_messages(messages, session_id=session_id, date=date)
    # the record is the session; an id that is invalid is named once, in the message (quoted and cut)
    assert caught.value.record == (None if fragment == "invalid session id" else session_id)


# ------------------------------------------------------------------------------------------------ bad input

NO_FILE, DIRECTORY = object(), object()
BAD_UTF8 = b'[{"session_id": "s1", "date": "2023-05-20", "messages": [{"role": "user", "content": "caf\xe9"}]}]'
BAD_BYTE = BAD_UTF8.index(b"\xe9")
LOCOMO_NO_DATE = {**locomo_sample(), "conversation": {
    k: v for k, v in locomo_sample()["conversation"].items() if k != "session_1_date_time"}}


@pytest.mark.parametrize(
    "name, content, record, fragment",
    [
        ("absent.json", NO_FILE, None, "no such file"),
        ("folder.json", DIRECTORY, None, "not a regular file"),
        ("empty.json", "  \n", None, "empty"),
        ("broken.json", '[\n  {"session_id": "s1",\n   "date": 2023-05-20}\n]', None, "line 3, column 16"),
        ("broken.jsonl", json.dumps(generic()) + '\n{"session_id": "s2",\n', None, "line 2"),
        ("lines.json", json.dumps(generic()) + "\n{oops}\n", None, "line 2, column 2"),  # JSON lines, by content
        ("broken.json.gz", b"not gzip at all", None, "not a valid gzip file"),
        ("unknown.json", [{"text": "hello"}], None, "unknown format"),
        ("nothing.json", [], None, "empty list"),
        ("no_date.json", [{"session_id": "s1", "messages": generic()["messages"]}], "s1", "missing field 'date'"),
        ("bad_date.json", [generic(date="next Tuesday")], "s1", "'next Tuesday'"),
        ("bad_lme_date.json", [lme_item(sessions=(("s9", "20/05/2023"),))], "s9", "'20/05/2023'"),
        ("no_locomo_date.json", [LOCOMO_NO_DATE], "conv-26:session_1", "session_1_date_time"),
        ("no_turns.json", [generic(messages=[])], "s1", "no turns"),
        ("number.json", [generic(messages=[{"role": "user", "content": 42}])], "s1", "content must be a string"),
        ("null.json", [generic(messages=[{"role": "user", "content": None}])], "s1", "content must be a string"),
        ("dup.json", [generic(), generic(date="2023-06-01")], "s1", "duplicate session id 's1'"),
        ("dup.jsonl", f"{json.dumps(generic())}\n{json.dumps(generic(messages=[{'role': 'user', 'content': 'x'}]))}",
         "s1", "duplicate session id 's1' with different turns"),
        ("role.json", [generic(messages=[{"role": "tool", "content": "42"}])], "s1", "unknown role 'tool'"),
        ("no_role.json", [generic(messages=[{"content": "hi"}])], "s1", "missing field 'role'"),
        ("latin1.json", BAD_UTF8, None, f"byte offset {BAD_BYTE}"),
        ("huge.json", [generic(messages=[{"role": "user", "content": "x" * (MAX_MESSAGE_CHARS + 1)}])], "s1",
         "over 200,000"),
        ("slash.json", [generic(session_id="a/b")], 0, "invalid session id"),
        ("dots.json", [generic(), generic(session_id="..")], 1, "invalid session id"),
        ("backslash.json", [generic(session_id="a\\b")], 0, "invalid session id"),
        ("control.json", [generic(session_id="a\x07b")], 0, "invalid session id"),
        ("lme_id.json", [lme_item(sessions=(("../s1", "2023/05/20 (Sat) 00:29"),))], "q1", "invalid session id"),
        ("locomo_id.json", [locomo_sample("conv/26")], "conv/26", "invalid session id"),
    ],
)
def test_bad_input(tmp_path, name, content, record, fragment):
    path = tmp_path / name
    if content is DIRECTORY:
        path.mkdir()
    elif content is not NO_FILE:
        write(path, content)
    with pytest.raises(InputError) as caught:
        load_sessions(path)
    assert name in str(caught.value) and fragment in str(caught.value)
    assert caught.value.source == str(path) and caught.value.record == record


def test_lme_items_sharing_an_id_with_different_sessions_fail_as_one_history(tmp_path):
    items = [lme_item("q1", (("s1", "2023/05/20 (Sat) 00:29"),)), lme_item("q2", (("s1", "2023/05/22 (Mon) 08:00"),))]
    path = write(tmp_path / "lme.json", items)
    assert len(load_longmemeval(path)) == 2  # fine as separate questions
    with pytest.raises(InputError, match="different dates") as caught:
        load_sessions(path)
    assert caught.value.record == "s1" and "lme.json" in str(caught.value)
