"""Indexes and fusion: tokenizer, the two BM25 backends, compaction, saving as plain vectors, RRF with keyword boost
(score-aware fusion and dates: test_retrieval.py)."""

import gzip
import json
import random
from pathlib import Path

import numpy as np
import pytest

from apdmem.memory.index import SPARSE_THRESHOLD, DenseIndex, RankBM25, SparseBM25, UnitIndex, make_lexical, tokenize
from apdmem.memory.records import Unit
from apdmem.memory.retriever import KEYWORD_BOOST, PERFECT, RRF_K, fuse, rank_sessions

S_DEV = Path(__file__).resolve().parents[2] / "shared" / "data" / "longmemeval" / "longmemeval_s_dev.json.gz"


def random_vectors(n: int, dimension: int = 384, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(n, dimension)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def unit(session_id: str, summary: str, *, start: int = 0, keywords=(), embed=None) -> Unit:
    return Unit(session_id, start, start + 2, summary, keywords=list(keywords), embed_texts=[embed or summary])


def build(units: list[Unit], embeddings, lexical: str = "auto") -> UnitIndex:
    index = UnitIndex(embeddings.dimension, lexical)
    index.add(units, embeddings.embed([t for u in units for t in u.embed_texts]))
    return index


# ------------------------------------------------------------------------------------------------- tokenizer


def test_tokenize():
    assert tokenize("The dogs were running to Mount Rainier's trail, I'm happy! Running 42 km.") == [
        "dog", "run", "mount", "rainier", "trail", "happi", "run", "42", "km",
    ]
    assert tokenize("What is it? I, you, the...") == []  # stopwords only
    assert tokenize("Biscuit's VET visit") == tokenize("biscuit vet visits")


# ----------------------------------------------------------------------------------------------------- BM25


def corpus_and_queries() -> tuple[list[list[str]], list[list[str]]]:
    """~400 documents (turns of the real LongMemEval dev haystacks when present) and ~100 queries."""
    rng = random.Random(7)
    if S_DEV.exists():
        items = json.loads(gzip.decompress(S_DEV.read_bytes()))
        turns = [t["content"][:600] for item in items[:2] for s in item["haystack_sessions"] for t in s]
        docs = rng.sample(turns, 400)
        snippets = [" ".join(rng.sample(d.split(), min(6, len(d.split())))) for d in docs[:50]]
        queries = [item["question"] for item in items] + snippets
    else:  # synthetic: Zipf-like word frequencies over a small vocabulary
        vocab = [f"w{i}" for i in range(800)]
        weights = [1 / (i + 1) for i in range(len(vocab))]
        docs = [" ".join(rng.choices(vocab, weights, k=rng.randint(3, 60))) for _ in range(400)]
        queries = [" ".join(rng.choices(vocab, weights, k=rng.randint(1, 6))) for _ in range(100)]
    return [tokenize(d) for d in docs] + [[], ["ok"]], [tokenize(q) for q in queries]


def test_sparse_bm25_scores_exactly_as_rank_bm25():
    docs, queries = corpus_and_queries()
    reference, sparse = RankBM25(), SparseBM25()
    reference.add(docs)
    sparse.add(docs[:150])
    sparse.scores(queries[0])  # caches built here must be invalidated by the next add
    for at in range(150, len(docs), 3):  # a few at a time, by copies: postings in two parts (`SparseBM25._JOIN`)
        sparse = sparse.copy()
        sparse.add(docs[at : at + 3])
    nonzero = 0
    for query in queries:
        expected, got = reference.scores(query), sparse.scores(query)
        assert expected.shape == got.shape == (len(docs),)
        assert np.allclose(expected, got, rtol=1e-10, atol=1e-12), query
        nonzero += bool(expected.any())
    assert nonzero > 0.9 * len(queries)  # the comparison is not between zero vectors
    assert np.array_equal(sparse.scores(["unseenterm"]), np.zeros(len(docs)))


def test_forgetting_renumbers_the_sparse_postings_as_an_index_of_the_survivors_holds_them():
    docs, queries = corpus_and_queries()
    sparse = SparseBM25()
    sparse.add(docs[:150])
    for at in range(150, len(docs), 3):  # postings in both parts, as a memory's are after one-session commits
        sparse = sparse.copy()
        sparse.add(docs[at : at + 3])
    live = [i for i in range(len(docs)) if i % 7]
    renumbered = np.full(len(docs), -1)
    renumbered[live] = np.arange(len(live))
    kept, fresh = sparse.kept(renumbered), SparseBM25()
    fresh.add([docs[i] for i in live])
    assert kept.idf() == fresh.idf() and len(kept.idf()) < len(sparse.idf())  # words only the dropped held are gone
    for query in queries:
        assert np.array_equal(kept.scores(query), fresh.scores(query)), query


def test_bm25_of_empty_corpora():
    for backend in (RankBM25(), SparseBM25()):
        assert backend.scores(["x"]).shape == (0,)
        backend.add([[], []])
        assert np.array_equal(backend.scores(["x"]), np.zeros(2))


def test_make_lexical_picks_by_size():
    assert isinstance(make_lexical("auto", 0), RankBM25)
    assert isinstance(make_lexical("auto", SPARSE_THRESHOLD), RankBM25)
    assert isinstance(make_lexical("auto", SPARSE_THRESHOLD + 1), SparseBM25)
    assert isinstance(make_lexical("rank-bm25", 10**6), RankBM25)
    assert isinstance(make_lexical("sparse", 1), SparseBM25)
    with pytest.raises(ValueError, match="unknown lexical backend"):
        make_lexical("bm42", 10)


# ---------------------------------------------------------------------------------------------------- dense


def test_dense_search_of_an_empty_index():
    rows, sims = DenseIndex(384).search(random_vectors(1)[0], 10)
    assert rows.shape == sims.shape == (0,)


# --------------------------------------------------------------------------------------------- unit index


def three_sessions() -> tuple[list[Unit], np.ndarray]:
    texts = {
        "A": ["hiking the skyline trail", "snow on the glacier near camp muir", "boots and poles for hiking"],
        "B": ["sourdough starter fed with rye flour", "dense loaf after a short proof"],
        "C": ["guitar lessons on wonderwall", "barre chords hurt my fingertips", "new strings for the guitar"],
    }
    units = []
    for sid, summaries in texts.items():
        for i, s in enumerate(summaries):
            units.append(Unit(sid, i, i + 2, s, embed_texts=[s, s.upper()]))  # two vectors per unit
    return units, random_vectors(2 * len(units), seed=3)


def test_an_index_grown_past_the_sparse_threshold_scores_with_the_sparse_backend(monkeypatch):
    """As a read of the same units would make it (a bulk ingest into an empty index grows it past the threshold)."""
    monkeypatch.setattr("apdmem.memory.index.SPARSE_THRESHOLD", 5)
    units, vectors = three_sessions()
    index = UnitIndex(384)
    index.add(units[:4], vectors[:8])
    assert isinstance(index.lexical, RankBM25)
    index.add(units[4:], vectors[8:])
    read = UnitIndex.load(*index.dump())
    assert isinstance(index.lexical, SparseBM25) and isinstance(read.lexical, SparseBM25)
    query = tokenize("guitar strings and hiking boots")
    assert np.array_equal(index.lexical.scores(query), read.lexical.scores(query)) and index.lexical.scores(query).any()


def test_copies_of_a_dense_index_add_on_their_own():
    """Copies share the vectors: the first to add writes after them, the second moves to a matrix of its own; the
    original still holds and finds exactly its own."""
    vectors, first, second = random_vectors(20, seed=1), random_vectors(3, seed=2), random_vectors(4, seed=3)
    original = DenseIndex(384)
    original.add(vectors, list(range(20)))
    query = second[0]
    before = original.search(query, 5)
    one, two = original.copy(), original.copy()
    one.add(first, [20, 21, 22])
    two.add(second, [20, 21, 22, 23])
    assert np.array_equal(original.vectors(), vectors) and original.count == 20
    assert np.array_equal(one.vectors(), np.concatenate([vectors, first]))
    assert np.array_equal(two.vectors(), np.concatenate([vectors, second]))
    assert all(np.array_equal(a, b) for a, b in zip(original.search(query, 5), before))
    assert two.search(query, 1)[0].tolist() == [20] and one.search(query, 1)[0].tolist() != [20]
    with pytest.raises(ValueError):
        original.vectors()[0, 0] = 1.0  # what copies share is read-only


@pytest.mark.parametrize("lexical", ["rank-bm25", "sparse"])  # the sparse index's postings give the rare words' rows
def test_what_linking_looks_up_is_kept_up_to_date_as_units_are_added(monkeypatch, lexical):
    """Each session's rows, each row's session, the rows of each rare word, how many units hold each word and each
    session's mean vector, kept up to date by additions (`add`, `extended`) and copies, are what a fresh index of the same units makes."""
    monkeypatch.setattr("apdmem.memory.index.RARE_UNITS", 2)  # so that words stop being rare as units are added
    units, vectors = three_sessions()
    more = [Unit("D", 0, 2, "hiking boots for the guitar trail", embed_texts=["d"])]
    index = UnitIndex(384, lexical)
    index.add(units[:3], vectors[:6])
    made, first = (index.owners, index.rare, index.units_with, index.means), index  # made now, then kept up to date
    index = index.compact()  # a copy
    index.add(units[3:5], vectors[6:10])
    other = UnitIndex(384)
    other.add(units[5:] + more, np.concatenate([vectors[10:], random_vectors(1, seed=4)]))
    index = index.extended(other)
    fresh = UnitIndex.load(*index.dump())
    assert index.owners.rows == fresh.owners.rows == {"A": [0, 1, 2], "B": [3, 4], "C": [5, 6, 7], "D": [8]}
    assert [index.owners.sessions[n] for n in index.owners.session_of] == [u.session_id for u in fresh.units]
    assert index.rare == fresh.rare and index.units_with == fresh.units_with
    assert index.means.rows.tolist() == fresh.means.rows.tolist() == [0, 1, 2, 3]  # one mean per session, by number
    assert np.allclose(index.means.vectors(), fresh.means.vectors(), atol=1e-6)
    assert np.allclose(np.linalg.norm(fresh.means.vectors(), axis=1), 1.0)
    assert "hike" not in index.rare and np.frombuffer(index.rare["trail"], np.intc).tolist() == [0, 8]  # hike: in three units now
    # What the first index holds is as it was: what only writers read, handed over to its copy, it makes again.
    assert made[1] is index.rare and first.rare is not made[1] and "hike" in first.rare
    assert first.owners is not made[0] and first.owners.rows == {"A": [0, 1, 2]} and made[3].count == 1


@pytest.mark.parametrize("lexical", ["rank-bm25", "sparse"])
def test_compact_drops_removed_sessions_and_keeps_the_others(lexical):
    units, vectors = three_sessions()
    index = UnitIndex(384, lexical)
    index.add(units, vectors)
    index.remove("B")
    assert len(index) == 6 and len(index.units) == 8  # dead rows stay until compaction
    compact = index.compact()
    assert [u.session_id for u in compact.units] == ["A"] * 3 + ["C"] * 3
    assert compact.alive.all() and compact.dense.count == 12
    assert sorted(set(compact.dense.rows.tolist())) == list(range(6))

    # Exactly the index one would build from the survivors alone ...
    survivors = [i for i, u in enumerate(units) if u.session_id != "B"]
    fresh = UnitIndex(384, lexical)
    fresh.add([units[i] for i in survivors], vectors[[2 * i + j for i in survivors for j in (0, 1)]])
    queries = ["hiking boots", "guitar chords", "rye flour", "glacier snow trail"]
    query_vectors = random_vectors(len(queries), seed=4)
    for q, v in zip(queries, query_vectors):
        assert fuse(compact, q, v) == pytest.approx(fuse(fresh, q, v), rel=1e-12)
        assert np.allclose(compact.lexical.scores(tokenize(q)), fresh.lexical.scores(tokenize(q)))

    # ... and the dense results of the survivors are those of the index before compaction.
    for v in query_vectors:
        before_rows, before_sims = index.dense.search(v, 16)
        keep = index.alive[before_rows]
        after_rows, after_sims = compact.dense.search(v, 12)
        assert [id(index.units[r]) for r in before_rows[keep]] == [id(compact.units[r]) for r in after_rows]
        assert np.allclose(before_sims[keep], after_sims)
    # No hit from the removed session, before or after compaction.
    for q, v in zip(queries, query_vectors):
        assert {index.units[r].session_id for r in fuse(index, q, v)} <= {"A", "C"}
        assert {compact.units[r].session_id for r in fuse(compact, q, v)} <= {"A", "C"}


# ----------------------------------------------------------------------------------------------- retriever

TOPICS = [
    ("s-hike", "We hiked to the summit of Mount Rainier at sunrise with my sister."),
    ("s-hike", "The Skyline Trail loop has views of the glaciers."),
    ("s-dog", "My beagle puppy Biscuit chews my sneakers."),
    ("s-dog", "Biscuit's first vet appointment is on Friday."),
    ("s-bread", "Baking sourdough bread with a rye flour starter."),
    ("s-guitar", "Learning the chords of Wonderwall on an acoustic guitar."),
    ("s-japan", "Cherry blossoms in Kyoto and a night in a ryokan."),
    ("s-knee", "Runner's knee from half marathon training; physiotherapy exercises."),
]


@pytest.fixture(scope="module")
def topics_index(embeddings) -> UnitIndex:
    return build([unit(sid, text, start=2 * i) for i, (sid, text) in enumerate(TOPICS)], embeddings)


def expected_fusion(index: UnitIndex, query: str, vector: np.ndarray) -> dict[int, float]:
    """RRF written out independently: 1/(60 + rank) per ranking, ranks from 1, plus the keyword boost."""
    lexical = index.lexical.scores(tokenize(query))
    lexical_ranked = sorted((r for r in range(len(index.units)) if index.alive[r] and lexical[r] > 0), key=lambda r: -lexical[r])
    sims = np.array([max(float(index.dense.vectors()[i] @ vector) for i in np.flatnonzero(index.dense.rows == r))
                     for r in range(len(index.units))])
    dense_ranked = sorted((r for r in range(len(index.units)) if index.alive[r]), key=lambda r: -sims[r])
    scores: dict[int, float] = {}
    for ranking in (lexical_ranked, dense_ranked):
        for rank, row in enumerate(ranking, 1):
            scores[row] = scores.get(row, 0.0) + 1 / (RRF_K + rank)
    for row in scores:
        scores[row] += KEYWORD_BOOST * PERFECT["rrf"] * sum(len(k) > 2 and k.lower() in query.lower() for k in index.units[row].keywords)
    return scores


def test_a_unit_first_in_both_rankings_scores_two_first_places(topics_index, embeddings):
    query = "hiking to the summit of Mount Rainier at sunrise"
    vector = embeddings.embed([query])[0]
    scores = fuse(topics_index, query, vector, fusion="rrf")
    lexical = topics_index.lexical.scores(tokenize(query))
    dense_rows, _ = topics_index.dense.search(vector, 1)
    assert int(np.argmax(lexical)) == dense_rows[0] == 0  # the premise: unit 0 leads both rankings
    assert scores[0] == pytest.approx(2 / (RRF_K + 1), rel=1e-12)
    assert max(scores, key=scores.get) == 0


@pytest.mark.parametrize("query", ["my dog Biscuit", "what did the vet say", "Kyoto in spring", "zzz unknown words"])
def test_fusion_is_reciprocal_rank_fusion(topics_index, embeddings, query):
    vector = embeddings.embed([query])[0]
    expected = expected_fusion(topics_index, query, vector)
    got = fuse(topics_index, query, vector, fusion="rrf")
    assert got.keys() == expected.keys()
    assert got == pytest.approx(expected, rel=1e-12)


def test_keyword_match_adds_exactly_the_boost(embeddings):
    query = "Who is Dr. Alvarez?"
    others = [unit(sid, text) for sid, text in TOPICS]
    plain = unit("s-vet", "Dr. Alvarez checked the puppy's vaccination schedule.")
    tagged = unit("s-vet", plain.summary, keywords=["Alvarez", "vaccination"])  # only "Alvarez" is in the query
    vector = embeddings.embed([query])[0]
    for fusion in PERFECT:
        without = fuse(build([plain, *others], embeddings), query, vector, fusion=fusion)
        with_keyword = fuse(build([tagged, *others], embeddings), query, vector, fusion=fusion)
        if fusion == "rrf":  # first in both rankings either way: the boost is all that differs
            assert without[0] == pytest.approx(2 / (RRF_K + 1), rel=1e-12)
            assert with_keyword[0] - without[0] == pytest.approx(KEYWORD_BOOST * PERFECT[fusion], rel=1e-9)
        else:  # BM25 also reads the keywords, so the unit gains the boost and some coverage
            assert with_keyword[0] - without[0] >= KEYWORD_BOOST * PERFECT[fusion]

        # Side by side in one index, the twin with the keyword wins.
        both = fuse(build([plain, tagged, *others], embeddings), query, vector, fusion=fusion)
        assert both[1] > both[0]
        # Keywords of two characters or fewer never count (they would match inside any word).
        short = fuse(build([unit("s-vet", plain.summary, keywords=["Dr"]), *others], embeddings), query, vector, fusion=fusion)
        if fusion == "rrf":
            assert short[0] == pytest.approx(without[0], rel=1e-12)
        else:  # only the coverage of the indexed keyword changes
            assert 0 <= short[0] - without[0] < 0.1 * KEYWORD_BOOST


def test_sessions_are_scored_by_their_best_unit_over_all_queries(topics_index, embeddings):
    queries = ["my beagle chews sneakers", "sourdough bread with rye flour"]
    vectors = embeddings.embed(queries)
    fused = [fuse(topics_index, q, v, fusion="rrf") for q, v in zip(queries, vectors)]
    hits = rank_sessions(topics_index, queries, vectors, k=10, fusion="rrf")
    assert [(h.session_id, h.score) for h in hits[:2]] == [("s-bread", 2 / (RRF_K + 1)), ("s-dog", 2 / (RRF_K + 1))]  # ties by id
    for hit in hits:
        candidates = [scores[row] for scores in fused for row in scores if topics_index.units[row].session_id == hit.session_id]
        assert hit.score == max(candidates) and topics_index.units[hit.row].session_id == hit.session_id
        assert fused[0].get(hit.row, 0) == hit.score or fused[1].get(hit.row, 0) == hit.score
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    # Each sub-query alone ranks only its own topic first; together both lead.
    alone = [rank_sessions(topics_index, [q], v[None], k=2)[0].session_id for q, v in zip(queries, vectors)]
    assert alone == ["s-dog", "s-bread"]
    assert len(rank_sessions(topics_index, queries, vectors, k=3)) == 3


def test_unit_index_round_trips_through_plain_vectors():
    units, vectors = three_sessions()
    index = UnitIndex(384)
    index.add(units, vectors)
    index.remove("B")
    table, raw = index.dump()
    assert len(raw) == 4 * 384 * 12  # the 6 live units' two vectors each, float32: no FAISS file
    copy = UnitIndex.load(table, raw)
    assert [u.session_id for u in copy.units] == ["A"] * 3 + ["C"] * 3 and len(copy) == 6
    assert all(u.embed_texts == [] for u in copy.units)  # texts are embedded once; the table keeps the vectors
    for query in random_vectors(10, seed=1):
        (rows_a, sims_a), (rows_b, sims_b) = index.dense.search(query, 40), copy.dense.search(query, 40)
        live = index.alive[rows_a]
        assert [index.units[r].start for r in rows_a[live]] == [copy.units[r].start for r in rows_b]
        assert np.allclose(sims_a[live], sims_b)


@pytest.mark.parametrize("damage", ["truncated vectors", "garbage table", "row out of range", "unit of wrong shape",
                                    "nested too deep"])
def test_unit_index_load_refuses_damaged_parts(damage):
    units, vectors = three_sessions()
    index = UnitIndex(384)
    index.add(units, vectors)
    table, raw = index.dump()
    data = json.loads(table)
    if damage == "truncated vectors":
        raw = raw[:-7]
    elif damage == "garbage table":
        table = b"\x00\xffnot json"
    elif damage == "row out of range":
        data["vector_units"][0] = len(units)
    elif damage == "unit of wrong shape":
        data["units"][2] = {"session_id": "A", "start": "zero", "end": 2, "summary": 5}
    elif damage == "nested too deep":
        table = b"[" * 100_000 + b"]" * 100_000
    if damage in ("row out of range", "unit of wrong shape"):
        table = json.dumps(data).encode()
    with pytest.raises(ValueError):
        UnitIndex.load(table, raw)
