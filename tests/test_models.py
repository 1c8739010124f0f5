"""Choosing models: provider strings through LangChain's init_chat_model / init_embeddings, objects passed from
Python, and one-line errors for a missing provider package or an unknown provider. Offline: models are built,
never called (test_servers.py calls them on a local server)."""

import sys

import pytest
from graph_helpers import ScriptedChatModel, clean_environment
from langchain_core.embeddings import DeterministicFakeEmbedding

from apdmem.errors import ConfigError
from apdmem.graph import Context, Settings
from apdmem.memory import Memory
from apdmem.memory.store import memory_store
from apdmem.models import get_chat_model, get_embeddings


@pytest.fixture(autouse=True)
def environment(monkeypatch):
    clean_environment(monkeypatch)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-local-server")  # DeepSeek's client wants a key, even a local server's


def test_a_provider_string_builds_that_providers_model_at_base_url():
    model = get_chat_model("deepseek:smollm2-test", base_url="http://127.0.0.1:9/v1")
    assert type(model).__name__ == "ChatDeepSeek" and model.model_name == "smollm2-test"
    assert model.api_base == "http://127.0.0.1:9/v1" and model.temperature == 0
    assert get_chat_model("deepseek:smollm2-test", base_url="http://127.0.0.1:9/v1") is model  # built once


def test_openai_keeps_its_key_free_path_for_local_servers():
    model = get_chat_model("openai:local-test", base_url="http://127.0.0.1:9/v1")
    assert type(model).__name__ == "ChatOpenAI" and model.openai_api_base == "http://127.0.0.1:9/v1"
    embeddings = get_embeddings("openai:embed-test", base_url="http://127.0.0.1:9/v1")
    assert type(embeddings).__name__ == "OpenAIEmbeddings" and embeddings.check_embedding_ctx_length is False
    with pytest.raises(ConfigError, match=r"cannot create chat model 'openai:nokey-test': .*OPENAI_API_KEY"):
        get_chat_model("openai:nokey-test")  # no key and no local server


def test_objects_from_python_are_used_as_they_are(make_memory, history):
    model, embeddings = ScriptedChatModel(), DeterministicFakeEmbedding(size=16)
    assert get_chat_model(model) is model and get_embeddings(embeddings) is embeddings
    settings = Settings(chat_model=model, generator_model=ScriptedChatModel())
    assert settings.controller() is model and settings.generator() is not model
    memory = Memory("obj", store=memory_store(), chat_model=model, embeddings=embeddings, l0_mode="llm")
    memory.ingest(history[:1])
    assert memory.chat_model is model and "WindowSummary" in model.kinds()  # the object built L0


@pytest.mark.parametrize("what, build", [("chat model", get_chat_model), ("embeddings", get_embeddings)])
def test_a_missing_provider_package_is_named_with_its_extra(monkeypatch, what, build):
    monkeypatch.setitem(sys.modules, "langchain_ollama", None)  # as if langchain-ollama were not installed
    with pytest.raises(ConfigError) as error:
        build("ollama:llama3.1-missing-test")
    assert str(error.value) == (f"{what} 'ollama:llama3.1-missing-test' needs the package langchain-ollama: "
                                "pip install 'apdmem[ollama]' (or pip install langchain-ollama)")


def test_a_provider_without_an_extra_gets_langchains_package_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "langchain_xai", None)
    with pytest.raises(ConfigError, match=r"chat model 'xai:grok-missing-test': .*requires the langchain-xai package"):
        get_chat_model("xai:grok-missing-test")


@pytest.mark.parametrize("spec", ["nosuchprovider:model", "no-provider-at-all"])
def test_an_unknown_provider_is_a_one_line_error(spec):
    with pytest.raises(ConfigError, match=rf"cannot create chat model '{spec}'") as error:
        get_chat_model(spec)
    assert "\n" not in str(error.value)
