"""First-pass retrieval beyond rank fusion: the BM25 ceiling, score-aware fusion, the date preference, speaker-aware
dense texts, and `apdmem bench retrieval` on LoCoMo and LongMemEval files. Real MiniLM, real indexes."""

import math
import re
from datetime import date, datetime
from pathlib import Path

import numpy as np
import pytest
from test_index import S_DEV, TOPICS, build, unit

from apdmem.eval.metrics import turn_recall
from apdmem.eval.retrieval import format_report, load_cases, run
from apdmem.memory import Session, Turn, load_locomo
from apdmem.memory.index import K1, RankBM25, SparseBM25, tokenize
from apdmem.memory.layers import raw_unit
from apdmem.errors import ConfigError
from apdmem.memory.retriever import (DATE_BOOST, DATE_SLACK_DAYS, DENSE_WEIGHT, PERFECT, date_closeness, date_ranges,
                                     fuse, passage, rank_sessions, rerank)

LOCOMO = Path(__file__).parent / "fixtures" / "locomo_small.json"


# ---------------------------------------------------------------------------------------------- BM25 ceiling


@pytest.mark.parametrize("backend", [RankBM25, SparseBM25])
def test_ceiling_bounds_every_score_and_counts_unseen_words(backend):
    docs = [tokenize(text) for _, text in TOPICS]
    lexical = backend()
    lexical.add(docs)
    for query in ["my dog Biscuit", "Biscuit Biscuit vet", "rye flour starter", "glaciers of Mount Rainier"]:
        terms = tokenize(query)
        assert 0 < lexical.scores(terms).max() < lexical.ceiling(terms)
    # A word in no document counts with the largest idf: log((n + 0.5) / 0.5) times (K1 + 1).
    n = len(docs)
    extra = lexical.ceiling(tokenize("Biscuit zeppelin")) - lexical.ceiling(tokenize("Biscuit"))
    assert extra == pytest.approx(math.log((n + 0.5) / 0.5) * (K1 + 1), rel=1e-12)
    assert lexical.ceiling([]) == 0.0


def test_both_backends_have_the_same_ceiling():
    docs = [tokenize(text) for _, text in TOPICS]
    reference, sparse = RankBM25(), SparseBM25()
    reference.add(docs)
    sparse.add(docs)
    for query in ["my beagle Biscuit", "sourdough", "the the summit", "nothing known here"]:
        assert sparse.ceiling(tokenize(query)) == pytest.approx(reference.ceiling(tokenize(query)), rel=1e-9)


# ------------------------------------------------------------------------------------------ score-aware fusion


@pytest.fixture(scope="module")
def topics(embeddings):
    return build([unit(sid, text, start=2 * i) for i, (sid, text) in enumerate(TOPICS)], embeddings)


@pytest.mark.parametrize("query", ["my dog Biscuit", "what did the vet say", "Kyoto in spring", "zzz unknown words"])
def test_score_fusion_is_weighted_cosine_plus_bm25_coverage(topics, embeddings, query):
    vector = embeddings.embed([query])[0]
    lexical = topics.lexical.scores(tokenize(query))
    ceiling = topics.lexical.ceiling(tokenize(query))
    got = fuse(topics, query, vector)
    assert set(got) == set(range(len(TOPICS)))  # a small index: every unit is a dense candidate
    for row, score in got.items():
        cosine = float(embeddings.embed([TOPICS[row][1]])[0] @ vector)
        assert score == pytest.approx(DENSE_WEIGHT * cosine + (1 - DENSE_WEIGHT) * lexical[row] / ceiling, abs=1e-5)


def test_a_failing_lexical_signal_does_not_bury_the_dense_match(embeddings):
    """A unit that shares no word with the question but means it, against units that share a word in another
    sense: rank fusion puts a lexical match first, score fusion the meaning."""
    query = "Which pet did I adopt?"
    match = unit("s-cat", "We brought home a grey kitten from the shelter and named her Pixel.")
    noise = [unit(f"s-noise{i}", text) for i, text in enumerate([
        "Our team will adopt the new naming convention for the code base.",
        "My pet peeve is people who talk during movies.",
        "The city council may adopt the budget next week.",
    ])]
    index = build([match, *noise], embeddings)
    vector = embeddings.embed([query])[0]
    assert index.lexical.scores(tokenize(query))[0] == 0  # the premise: no shared word
    assert rank_sessions(index, [query], vector[None], k=4)[0].session_id == "s-cat"
    assert rank_sessions(index, [query], vector[None], k=4, fusion="rrf")[0].session_id != "s-cat"


def test_unknown_fusion_is_refused(topics, embeddings):
    with pytest.raises(ValueError, match="unknown fusion"):
        fuse(topics, "dog", embeddings.embed(["dog"])[0], fusion="max")


# ------------------------------------------------------------------------------------------------------ dates


def test_date_closeness_is_one_inside_and_decays_outside():
    may = [(date(2023, 5, 10), date(2023, 5, 20))]
    assert date_closeness(date(2023, 5, 10), may) == date_closeness(date(2023, 5, 20), may) == 1.0
    assert date_closeness(date(2023, 5, 23), may) == pytest.approx(math.exp(-3 / DATE_SLACK_DAYS))
    assert date_closeness(date(2023, 5, 7), may) == date_closeness(date(2023, 5, 23), may)  # symmetric
    far = date_closeness(date(2022, 5, 23), may)
    assert 0 <= far < 1e-9
    # A long range is looser: a quarter of its length.
    year = [(date(2022, 1, 1), date(2022, 12, 31))]
    assert date_closeness(date(2023, 1, 31), year) == pytest.approx(math.exp(-31 / (364 / 4)))
    # Several ranges: the closest counts.
    assert date_closeness(date(2023, 5, 23), [*may, (date(2023, 5, 23), date(2023, 5, 23))]) == 1.0


def test_date_ranges_accept_a_pair_a_list_strings_and_datetimes():
    assert date_ranges(None) == date_ranges([]) == []
    one = [(date(2023, 5, 1), date(2023, 5, 31))]
    assert date_ranges(("2023-05-01", "2023-05-31")) == one
    assert date_ranges([("2023-05-31T10:00:00", date(2023, 5, 1))]) == one  # swapped ends are put in order
    assert date_ranges([(datetime(2023, 5, 1, 9), "2023-05-31"), ["2023-06-02", "2023-06-02"]]) == [*one, (date(2023, 6, 2),) * 2]


def test_a_date_range_boosts_sessions_softly(embeddings):
    """Two sessions with the same text tie; the one in the range wins by exactly the boost, and a session
    outside it is still returned."""
    units = [unit("s-march", "I bought a smoker for barbecue."), unit("s-april", "I bought a smoker for barbecue."),
             unit("s-other", "My sister visited from Chicago.")]
    index = build(units, embeddings)
    dates = {"s-march": "2023-03-15T11:56:00", "s-april": date(2023, 4, 20), "s-other": "2023-03-15"}
    query = "What did I buy?"
    vector = embeddings.embed([query])[0][None]
    plain = {h.session_id: h.score for h in rank_sessions(index, [query], vector, k=3, session_dates=dates)}
    assert plain["s-march"] == plain["s-april"]
    for fusion in PERFECT:
        before = {h.session_id: h.score for h in rank_sessions(index, [query], vector, k=3, session_dates=dates, fusion=fusion)}
        hits = rank_sessions(index, [query], vector, k=3, date_range=("2023-03-14", "2023-03-16"), session_dates=dates, fusion=fusion)
        assert hits[0].session_id == "s-march" and len(hits) == 3
        after = {h.session_id: h.score for h in hits}
        assert after["s-march"] - before["s-march"] == pytest.approx(DATE_BOOST * PERFECT[fusion])
        assert after["s-april"] - before["s-april"] == pytest.approx(DATE_BOOST * PERFECT[fusion] * math.exp(-35 / DATE_SLACK_DAYS))


def test_memory_search_takes_a_date_range(make_memory, history):
    memory = make_memory()
    memory.ingest(history)
    question = "What did I do with my hobbies?"  # vague: several sessions qualify
    plain = [d.metadata["session_id"] for d in memory.search(question, k=7)]
    dated = [d.metadata["session_id"] for d in memory.search(question, k=7, date_range=("2024-04-19", "2024-04-21"))]
    assert dated[0] == "s-guitar" and sorted(dated) == sorted(plain)  # s-guitar is dated 2024-04-20; nothing dropped
    scores = {d.metadata["session_id"]: d.metadata["score"] for d in memory.search(question, k=7)}
    moved = {d.metadata["session_id"]: d.metadata["score"] for d in memory.search(question, k=7, date_range=[("2024-04-20", "2024-04-20")])}
    assert moved["s-guitar"] - scores["s-guitar"] == pytest.approx(DATE_BOOST)
    assert moved["s-hiking"] - scores["s-hiking"] < 1e-6  # March is far from April 20


# ------------------------------------------------------------------------------------------ speaker-aware units


def test_raw_units_embed_both_people_of_a_two_person_conversation_with_their_names():
    session = load_locomo(LOCOMO)[0].sessions[0]
    assert [t.role for t in session.turns] == ["user", "assistant", "user", "assistant"]
    texts = raw_unit(session, 0, 4).embed_texts
    assert texts[0].startswith("Nadia: Hey Tomas!") and texts[1].startswith("Tomas: Nice! I've been busy restoring")
    assert len(texts) == 4


def test_raw_units_of_an_assistant_conversation_embed_the_user_turns_only():
    session = Session("s", datetime(2023, 5, 1), (Turn("user", "I adopted a cat."), Turn("assistant", "Congratulations! " * 50),
                                                  Turn("user", "Her name is Pixel."), Turn("assistant", "Lovely name.")))
    assert raw_unit(session, 0, 4).embed_texts == ["I adopted a cat.", "Her name is Pixel."]
    only_assistant = Session("t", datetime(2023, 5, 1), (Turn("assistant", "Hello, how can I help?"),))
    assert raw_unit(only_assistant, 0, 1).embed_texts == ["Hello, how can I help?"]  # never a unit without a vector


def test_a_question_about_the_second_speaker_finds_their_turn(make_memory):
    """LoCoMo loads the second speaker as the assistant: their turns are searchable by meaning too."""
    sample = load_locomo(LOCOMO)[0]
    memory = make_memory(user=sample.sample_id)
    memory.ingest(sample.sessions)
    rows = [r for r, u in enumerate(memory.index.units) if any(t.startswith("Tomas: ") for t in u.embed_texts)]
    assert rows and set(memory.index.dense.rows.tolist()) >= set(rows)
    docs = memory.search("Who fixed up an old boat with a sibling?", k=1)  # no shared content word but "old"
    assert docs[0].metadata["session_id"] == f"{sample.sample_id}:session_1"


# ------------------------------------------------------------------------------------------ bench retrieval


def test_turn_recall():
    spans = [("a", 0, 4), ("b", 2, 6), ("a", 4, 8)]
    gold = {("a", 1), ("a", 5), ("b", 0)}
    assert turn_recall(spans, gold, 1) == pytest.approx(1 / 3)
    assert turn_recall(spans, gold, 3) == pytest.approx(2 / 3)  # ("b", 0) is outside b's span
    assert turn_recall(spans, set(), 3) == 0.0


def test_locomo_cases_take_their_evidence_from_dia_ids():
    kind, conversations, cases = load_cases(str(LOCOMO))
    assert kind == "LoCoMo" and set(conversations) == {s.sample_id for s in load_locomo(LOCOMO)}
    cat = next(c for c in cases if c.question == "What is the name of Nadia's cat?")
    assert cat.user == "conv-a" and cat.type == "single-hop"
    assert cat.gold_sessions == {"conv-a:session_2"} and cat.gold_turns == {("conv-a:session_2", 0)}
    assert cat.question_date == max(s.date for s in conversations["conv-a"])


def test_bench_retrieval_on_locomo_reports_per_category(tmp_path):
    result = run(str(LOCOMO), output=str(tmp_path / "r.json"), progress=False)
    assert result["format"] == "LoCoMo" and result["questions"] == len(load_cases(str(LOCOMO))[2])
    assert set(result["by_type"]) <= {"multi-hop", "temporal", "open-domain", "single-hop", "adversarial"}
    assert sum(row["n"] for row in result["by_type"].values()) == result["questions"]
    for record in result["per_question"]:
        assert 0 <= record["turn_recall@10"] <= 1 and record["ranked"]
    table = format_report(result)
    assert "turn_recall@10" in table and "single-hop" in table and (tmp_path / "r.json").exists()


@pytest.mark.skipif(not S_DEV.exists(), reason="needs shared/data/longmemeval beside the repository")
def test_bench_retrieval_on_longmemeval_scores_turns_and_dates(tmp_path):
    result = run(str(S_DEV), limit=2, progress=False)
    assert result["format"] == "LongMemEval" and result["questions"] >= 1
    for record in result["per_question"]:
        assert {"recall_any@1", "recall_all@10", "ndcg_any@10", "turn_recall@10"} <= record.keys()
        assert record["recall_any@10"] == float(bool(set(record["ranked"]) & set(record["gold"])))
    assert result["search_ms"]["median"] > 0 and result["ingest_turns_per_second"] > 0


# ------------------------------------------------------------------------------------------------ the graph


def test_the_graph_reads_the_question_dates_but_searches_by_meaning(make_memory, history, monkeypatch, capsys):
    """normalize_dates puts the resolved dates in the state for the models and the disclosure policy; the search
    node does not prefer them in its search (see `nodes.search`), but lifts the best session dated near each."""
    from types import SimpleNamespace

    from apdmem.cli import ask
    from apdmem.graph import Context, Settings, build_graph
    from apdmem.nodes import policy
    from apdmem.nodes.dates import normalize_dates
    from apdmem.nodes.search import search

    monkeypatch.setenv("LANGSMITH_TRACING", "false")
    memory = make_memory()
    memory.ingest(history)
    runtime = SimpleNamespace(context=Context(user_id="alice", top_k=3), stream_writer=None)
    state = {"question": "What did I do with my hobbies 10 days ago?", "question_date": "2024-04-30T10:00"}
    state |= normalize_dates(state, runtime, settings=Settings())
    assert state["date_hints"] == ['"10 days ago" = 2024-04-20 (Saturday)']
    assert state["date_ranges"] == [["2024-04-20", "2024-04-20"]]
    calls, found = [], []
    monkeypatch.setattr(memory, "search", lambda *a, **kw: calls.append(kw) or found.append(type(memory).search(memory, *a, **kw)) or found[-1])
    out = search({**state, "queries": [state["question"]]}, runtime, settings=Settings(), memory=memory)
    assert calls == [{"k": 3, "filter": None, "date_range": None}]  # no date preference
    assert "s-guitar" in out["candidates"]  # the hobby found by meaning
    assert "s-guitar" in policy.wanted({**state, **out})  # and dated that evening: opened either way
    # Ten days before 2024-05-15 the user told of the trip to Japan, which the question's words rank fifth of seven:
    # the search lifts it second (`policy.lift`), without the date it stays fifth.
    runtime.context.top_k = 7
    later = {**state, "question_date": "2024-05-15T10:00"}
    later |= normalize_dates(later, runtime, settings=Settings())
    assert later["date_ranges"] == [["2024-05-05", "2024-05-05"]]
    places = []
    for ranges in ([], later["date_ranges"]):
        out = search({**later, "date_ranges": ranges, "queries": [later["question"]]}, runtime, settings=Settings(), memory=memory)
        places.append(policy.ranking(out["candidates"], later["question"]).index("s-japan"))
    assert places == [4, 1]
    # The trace `apdmem ask` prints says why it was opened.
    capsys.readouterr()
    ask(later["question"], later["question_date"], build_graph(settings=Settings(), memory=memory),
        Context(user_id="alice", top_k=7, reflection=False))
    trace = capsys.readouterr().out
    assert "read L1 of s-japan (dated near 2024-05-05, a date the question names)" in trace
    assert trace.startswith('  [dates] the question\'s dates, from 2024-05-15: "10 days ago" = 2024-05-05 (Sunday)\n')


# ------------------------------------------------------------------------------------------------ reranking


def test_an_embedded_vector_is_the_same_whatever_it_is_embedded_with(history):
    """The int8 model scales its activations over its whole input: each text runs alone, so a session's vector at
    ingestion, at a reindex and as a query is one vector, whatever else is embedded in the same call."""
    from apdmem.models.local import BGE_SMALL, LocalEmbeddings

    texts = [turn.content for session in history for turn in session.turns][:12]
    assert len({len(t.split()) for t in texts}) > 3  # texts of different lengths: a padded batch would pad them
    together = LocalEmbeddings(BGE_SMALL).embed(texts)
    alone = LocalEmbeddings(BGE_SMALL)  # a fresh instance: nothing cached
    assert np.array_equal(together, np.stack([alone.embed([t])[0] for t in reversed(texts)])[::-1])
    assert np.array_equal(together[3], np.asarray(alone.embed_query(texts[3]), dtype=np.float32))
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)


def test_the_cross_encoder_rescores_what_a_search_found():
    from langchain_core.documents import Document

    from apdmem.models import get_reranker

    query = "What did the physiotherapist say about my running injury?"
    texts = {  # the search ranked the answer third, just below two sessions about something else
        "s-japan": "user: I'm planning a trip to Japan next spring to see the cherry blossoms.",
        "s-bread": "user: I feed my sourdough starter with rye flour every morning.",
        "s-knee": "user: My physiotherapist says it's runner's knee and gave me squats and lunges.",
        "s-guitar": "user: I'm learning Blackbird by the Beatles on my acoustic guitar.",
        "s-job": "user: I started a new job last week; my manager is called Priya.",
    }
    docs = [Document(page_content=text, metadata={"session_id": sid, "score": score})
            for (sid, text), score in zip(texts.items(), [0.60, 0.59, 0.58, 0.40, 0.38])]
    reranker = get_reranker()
    assert get_reranker("local") is reranker  # loaded once per process
    logits = dict(zip(texts, reranker.score([(query, text) for text in texts.values()])))
    assert logits["s-knee"] > max(v for sid, v in logits.items() if sid != "s-knee") + 3  # it reads both together
    rescored = rerank(query, docs, reranker)
    assert rescored[0].metadata["session_id"] == "s-knee"
    assert {d.metadata["session_id"]: d.metadata["search_score"] for d in rescored} == {d.metadata["session_id"]: d.metadata["score"] for d in docs}
    assert {d.metadata["session_id"]: d.metadata["rerank_score"] for d in rescored} == pytest.approx(logits, abs=1e-5)
    fused = [d.metadata["score"] for d in rescored]
    assert sum(fused) == pytest.approx(0.0, abs=1e-9) and fused == sorted(fused, reverse=True)
    # A pair's score is its own: the same alone, in any batch, in any order (each pair runs unpadded).
    assert reranker.score([(query, texts["s-knee"])]) == [logits["s-knee"]]
    assert reranker.score([(query, text) for text in reversed(texts.values())]) == list(reversed(logits.values()))
    assert rerank(query, [], reranker) == []
    assert [d.metadata["score"] for d in rerank(query, docs[:1], reranker)] == [0.0]  # one hit: nothing to compare
    # With a depth, the cross-encoder reads the first hits only; those below take the lowest logit read.
    shallow = {d.metadata["session_id"]: d.metadata for d in rerank(query, docs, reranker, depth=3)}
    lowest = min(logits[sid] for sid in ("s-japan", "s-bread", "s-knee"))
    assert [shallow[sid]["rerank_score"] for sid in texts] == pytest.approx([*(logits[sid] for sid in list(texts)[:3]), lowest, lowest], abs=1e-5)
    assert max(shallow, key=lambda sid: shallow[sid]["score"]) == "s-knee"
    assert shallow["s-guitar"]["score"] > shallow["s-job"]["score"]  # below the depth, the search's order stands


def test_the_cross_encoder_reads_the_sentences_of_a_long_unit_that_match_the_query():
    filler = [" ".join(f"We chatted about topic number {n} for a while." for n in range(start, start + 20)) for start in (0, 20)]
    unit = f"user: Hello there. {filler[0]}\nassistant: Your knee pain sounds like runner's knee. {filler[1]} Try squats."  # 370 words
    kept = passage("What did you say about my knee pain?", unit, words=40)
    assert "assistant: Your knee pain sounds like runner's knee." in kept  # the sentence naming the query's words, past word 180
    assert 30 < len(kept.split()) <= 40 and kept.startswith("user: Hello there. We chatted about topic number 0")  # filled up
    sentences = [s.strip() for s in re.split(r"(?<=\.)\s+|\n", unit)]
    kept_sentences = [s.strip() for s in re.split(r"(?<=\.)\s+|\n", kept)]
    assert kept_sentences == [s for s in sentences if s in kept_sentences]  # in the unit's order
    assert passage("knee", "A short unit is read whole. Even with no match.", words=40) == "A short unit is read whole. Even with no match."
    assert passage("knee", "word " * 100, words=40) == " ".join(["word"] * 40)  # one long sentence: its head
    # The search node's rescoring reads passages; passage_words=None reads the units whole.
    from langchain_core.documents import Document
    from apdmem.models import get_reranker

    docs = [Document(page_content=unit, metadata={"session_id": "s1", "score": 0.5}),
            Document(page_content="user: I bought a guitar.", metadata={"session_id": "s2", "score": 0.4})]
    pairs = []

    class Recording:
        def score(self, text_pairs):
            pairs.extend(text_pairs)
            return get_reranker().score(text_pairs)

    rerank("my knee pain", docs, Recording())
    rerank("my knee pain", docs, Recording(), passage_words=None)
    assert [text for _, text in pairs] == [passage("my knee pain", unit), "user: I bought a guitar.", unit, "user: I bought a guitar."]


def test_search_memory_rescores_one_query_with_the_settings_reranker(make_memory, history):
    from types import SimpleNamespace

    from apdmem.graph import Context, Settings
    from apdmem.models import get_reranker
    from apdmem.nodes import policy
    from apdmem.nodes.search import search
    from apdmem.tools import search_memory

    pairs = []

    class Recording:  # any object with LangChain's cross-encoder interface
        def score(self, text_pairs):
            pairs.extend(text_pairs)
            return get_reranker().score(text_pairs)

    memory = make_memory()
    memory.ingest(history)
    question = "What did the physiotherapist say about my running injury?"
    runtime = SimpleNamespace(context=Context(top_k=4), stream_writer=None)
    out = search({"question": question, "queries": [question, "knee exercises"]}, runtime,
                 settings=Settings(reranker_model=Recording()), memory=memory)
    searched = [passage(q, d.page_content) for q in (question, "knee exercises") for d in memory.search(q, k=4)]
    assert sorted(pairs) == sorted(zip([question] * 4 + ["knee exercises"] * 4, searched))
    assert policy.ranking(out["candidates"], question)[0] == "s-knee"
    # A session's score is its best over the queries, negative ones (standard scores) included.
    scores = {sid: c["score"] for sid, c in out["candidates"].items()}
    assert scores == {sid: max(c["hits"].values()) for sid, c in out["candidates"].items()} and min(scores.values()) < 0
    with pytest.raises(ValueError, match="one query"):
        search_memory(memory, [question, "knee"], reranker=Recording())
    with pytest.raises(ConfigError, match=r"unknown reranker 'cohere' \(APDMEM_RERANKER_MODEL\)"):
        Settings(reranker_model="cohere").reranker()
