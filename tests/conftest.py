"""Shared fixtures: the embedded embeddings model (loaded once per test run), a small synthetic history with one
topic per session, and a factory of raw-mode memories."""

import os
import uuid
from datetime import datetime
from importlib.resources import files

import pytest
from pg_cluster import UNAVAILABLE, start_cluster

from apdmem.memory import Memory, Session, Turn, load_longmemeval
from apdmem.memory.store import memory_store
from apdmem.models import get_embeddings

os.environ.setdefault("LANGSMITH_TRACING", "false")  # tests never trace, whatever the shell says

# One topic per session, six turns each (two L0 windows: turns 1-4 and 3-6). Dates are in order of the list.
HISTORY = {
    "s-hiking": ("2024-03-02T09:00", [
        "Last weekend my sister Maya and I hiked up Mount Rainier to Camp Muir.",
        "That's a demanding climb! How long did it take you?",
        "About six hours up. We started at the Paradise trailhead before sunrise.",
        "Starting early is smart for the snow conditions.",
        "Next time I want to try the Skyline Trail loop with better boots.",
        "The Skyline Trail has great views of the glaciers.",
    ]),
    "s-dog": ("2024-03-10T18:30", [
        "I adopted a beagle puppy from the shelter and named her Biscuit.",
        "Congratulations! How old is Biscuit?",
        "She's ten weeks old. Her first vet appointment with Dr. Alvarez is on Friday.",
        "Ask the vet about the vaccination schedule and deworming.",
        "Biscuit keeps chewing my sneakers, any tips?",
        "Give her chew toys and reward her when she uses them.",
    ]),
    "s-bread": ("2024-03-18T07:15", [
        "I've started baking sourdough bread at home. My starter is called Bubbles.",
        "Fun! How often do you feed the starter?",
        "Every morning with rye flour. My first loaf came out dense and flat.",
        "A dense crumb often means underproofing; try a longer bulk fermentation.",
        "I'll try a twelve hour cold retard in the fridge.",
        "That also develops a tangier flavor.",
    ]),
    "s-job": ("2024-04-01T12:00", [
        "I accepted an offer as a data analyst at Northwind Logistics.",
        "Congratulations on the new job! When do you start?",
        "On April 15. The office is downtown, so I'll commute by light rail.",
        "The train gives you time to read on the way.",
        "My manager Priya wants me to build a shipment delay dashboard in Tableau.",
        "Start by defining which delay metrics matter to her.",
    ]),
    "s-guitar": ("2024-04-20T20:45", [
        "I bought a used Yamaha acoustic guitar and started weekly lessons.",
        "Great choice for a beginner. What are you practicing?",
        "My teacher has me learning the chords of Wonderwall by Oasis.",
        "The Em7, G, Dsus4 and A7sus4 shapes are a good start.",
        "My fingertips hurt after practicing barre chords.",
        "That's normal; calluses form in a couple of weeks.",
    ]),
    "s-japan": ("2024-05-05T10:30", [
        "I'm planning a trip to Japan next spring to see the cherry blossoms.",
        "Which cities are you thinking of visiting?",
        "Tokyo for three days, then Kyoto to visit the Fushimi Inari shrine.",
        "Get a Japan Rail Pass if you take the shinkansen between them.",
        "I also want to stay one night in a ryokan with an onsen in Hakone.",
        "Hakone is a popular spot for ryokans near Tokyo.",
    ]),
    "s-knee": ("2024-05-20T17:00", [
        "I hurt my left knee while training for the Portland half marathon.",
        "Sorry to hear that. Have you seen a doctor?",
        "My physiotherapist says it's runner's knee and gave me squats and lunges.",
        "Strengthening your quads and hips should help.",
        "I'm switching to swimming twice a week until it heals.",
        "Swimming keeps your fitness without impact on the knee.",
    ]),
}

# A natural question for each session, answered only by that session.
QUESTIONS = {
    "What is my dog's name?": "s-dog",
    "Which mountain did I hike with my sister?": "s-hiking",
    "What flour do I feed my sourdough starter?": "s-bread",
    "Who is my manager at the new job?": "s-job",
    "What song am I learning on the guitar?": "s-guitar",
    "Where will I stay in Japan?": "s-japan",
    "What did the physiotherapist say about my running injury?": "s-knee",
}


def make_session(session_id: str, date: str, texts: list[str]) -> Session:
    """A session whose turns alternate user / assistant, starting with the user."""
    turns = tuple(Turn("user" if i % 2 == 0 else "assistant", text) for i, text in enumerate(texts))
    return Session(session_id, datetime.fromisoformat(date), turns)


@pytest.fixture(scope="session")
def embeddings():
    """The embedded bge-small: the very instance `Memory(embeddings="local")` gets, so it is loaded once."""
    return get_embeddings("local", None)


@pytest.fixture(scope="session")
def history() -> list[Session]:
    return [make_session(sid, date, texts) for sid, (date, texts) in HISTORY.items()]


@pytest.fixture
def make_memory(embeddings):
    """Factory of raw-mode memories: `make_memory(user="alice", store=None, **options)`; in memory by default."""

    def make(user: str = "alice", store=None, **options) -> Memory:
        options.setdefault("l0_mode", "raw")
        return Memory(user, store=memory_store() if store is None else store, **options)

    return make


@pytest.fixture
def ingested(make_memory, history):
    """`ingested(model)` -> (model, memory): a raw-mode memory of `history` whose layers `model` builds."""

    def make(model):
        memory = make_memory(chat_model=model)
        memory.ingest(history)
        return model, memory

    return make


@pytest.fixture(scope="session")
def haystack(embeddings):
    """(item, memory): the whole LongMemEval-S item shipped with the package (50 sessions, 495 turns of one
    user's history), ingested once per test run (raw L0) into an in-memory store, with the default models (the
    extractive chat model "local"). Tests only read it."""
    item = load_longmemeval(str(files("apdmem") / "data" / "longmemeval_s_af8d2e46.json.gz"))[0]
    with pytest.MonkeyPatch.context() as monkeypatch:
        for name in [n for n in os.environ if n.startswith("APDMEM_")]:
            monkeypatch.delenv(name)
        memory = Memory("haystack", store=memory_store(), l0_mode="raw")
        memory.ingest(item.sessions)
    return item, memory


@pytest.fixture(scope="session")
def postgres():
    """A throwaway PostgreSQL cluster on loopback for the whole test run. Tests that need it are skipped when
    none can be started, unless APDMEM_REQUIRE_POSTGRES is set (CI), where that is a failure."""
    cluster = start_cluster(durable=False)
    if cluster is None:
        reason = f"no PostgreSQL could be started: {UNAVAILABLE[-1]}"
        if os.environ.get("APDMEM_REQUIRE_POSTGRES"):
            pytest.fail(reason)
        pytest.skip(reason)
    yield cluster
    cluster.stop()


@pytest.fixture
def postgres_url(postgres) -> str:
    """The URL of a new, empty database of the test cluster."""
    name = "t_" + uuid.uuid4().hex[:12]
    postgres.psql(f"CREATE DATABASE {name}")
    return postgres.url.rsplit("/", 1)[0] + "/" + name


@pytest.fixture(params=["files", "postgres"])
def store_location(request, tmp_path) -> str:
    """Where a memory lives, once per backend: a new directory, or a new PostgreSQL database."""
    return str(tmp_path / "mem") if request.param == "files" else request.getfixturevalue("postgres_url")
