"""notebooks/quickstart.ipynb, run the way the README tells a user to: `jupyter execute` (nbclient and ipykernel
come with the `test` extra) in a fresh kernel on the embedded models of the default install."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
GOLD = "answer_82a04f59"  # the evidence session of the LongMemEval item the notebook asks about
TIMEOUT = 900  # seconds for one cell (the graph's run on the tiny model) on a slow machine


def test_quickstart_notebook_runs_with_jupyter_execute(tmp_path):
    notebook = tmp_path / "quickstart.ipynb"  # a copy: `--output` writes beside the notebook it runs
    shutil.copy(ROOT / "notebooks" / "quickstart.ipynb", notebook)
    env = {k: v for k, v in os.environ.items() if not k.startswith("APDMEM_") and k != "OPENAI_BASE_URL"}
    run = subprocess.run([str(Path(sys.executable).parent / "jupyter"), "execute", str(notebook), "--output=executed",
                          f"--timeout={TIMEOUT}"], cwd=tmp_path, env={**env, "HF_HUB_OFFLINE": "1", "LANGSMITH_TRACING": "false"},
                         capture_output=True, text=True, timeout=4 * TIMEOUT)
    assert run.returncode == 0, run.stderr[-3000:]
    executed = nbformat.read(tmp_path / "executed.ipynb", as_version=4)
    printed = "".join(out.get("text", "") for cell in executed.cells if cell.cell_type == "code" for out in cell.outputs)
    assert "1 session(s), " in printed and "Answer (extractive): " in printed and "Reference answer:" in printed
    assert f"opened: {{'{GOLD}'" in printed and "'event': 'drill'" in printed and "step:" in printed
    assert "# L1 key facts" in printed
    # the agent's thread was saved, and the fact it recorded is kept in it, once (no session of its own left)
    assert "session thread-demo-chat" in printed and "\nthread-demo-chat |" in printed and "\nfact-" not in printed
