"""Every ```python block of README.md and docs/*.md runs, so the documentation cannot drift from the code.

How the blocks run:
- The blocks of one page run in one fresh Python process, in order, in one namespace (a page's blocks may build
  on each other, as a reader running them in turn would), in a temporary working directory, with a temporary
  `APDMEM_STORE`, no other APDMEM_* variable and the default (embedded) models. A block that raises fails the
  page's test, with the traceback pointing at the page's own line numbers.
- A block whose first line is ``# docs-test: needs VARIABLE (why)`` runs on its own, only when VARIABLE is set
  in the environment; otherwise its test is reported as skipped with that reason.
- A page whose blocks talk to ``http://127.0.0.1:2024`` (a LangGraph server, as `langgraph dev` serves it) runs
  against a real `langgraph dev` with auth on, which the test starts on a free loopback port: the address is
  replaced by that server's, and ``APDMEM_TOKEN`` holds a token of user alice.
- A ```python block whose next fenced block is an ```output block must print exactly that output.
"""

import json
import os
import re
import subprocess
import sys
import textwrap
from contextlib import nullcontext
from pathlib import Path

import pytest
from test_servers import SECRET, langgraph_dev, server_env

from apdmem.auth import make_token

ROOT = Path(__file__).resolve().parents[1]
DOC_PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SERVER = "http://127.0.0.1:2024"  # the address the pages' server examples use
MARKER = re.compile(r"#\s*docs-test:\s*needs\s+(\w+)\s*(.*)")
RUN_TIMEOUT = 900  # seconds for one page's blocks, on a busy machine


def fenced_blocks(page: Path) -> list[tuple[str, int, str]]:
    """The fenced blocks of `page`, in order: (language, line number of their first line, code). A block indented
    in a list item is dedented."""
    text = page.read_text()
    return [(m.group(1), text.count("\n", 0, m.start(2)) + 1, textwrap.dedent(m.group(2)))
            for m in re.finditer(r"^[ \t]*```(\w*)\n(.*?)^[ \t]*```", text, flags=re.S | re.M)]


def python_blocks(page: Path) -> list[dict]:
    """The page's python blocks: line, code, the variable a marked block needs (else None) and the output it
    must print (the next fenced block when it is an ```output block; else None, not checked)."""
    fenced, blocks = fenced_blocks(page), []
    for (language, line, code), following in zip(fenced, [*fenced[1:], ("", 0, None)]):
        if language != "python":
            continue
        marker = MARKER.match(code.lstrip())
        blocks.append({"line": line, "code": code, "needs": marker and marker.group(1),
                       "why": marker and marker.group(2).strip(" ()"),
                       "output": following[2] if following[0] == "output" else None})
    return blocks


# Runs the blocks (a JSON list on stdin) in one namespace; a block's code is compiled under the page's name and
# shifted to its line there, so that a traceback shows the page's line. Prints each block's output, then a JSON
# line of what each block printed.
RUNNER = """
import contextlib, io, json, sys
page, blocks = sys.argv[1], json.load(sys.stdin)
namespace, printed = {"__name__": "__main__"}, []
for block in blocks:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile("\\n" * (block["line"] - 1) + block["code"], page, "exec"), namespace)
    sys.stdout.write(out.getvalue())
    printed.append(out.getvalue())
print(json.dumps(printed))
"""


def run_blocks(name: str, blocks: list[dict], tmp_path: Path, **env: str) -> list[str]:
    """Run `blocks` of page `name` as described above; returns what each printed. Fails with the page, the line
    and the traceback when one raises."""
    work = tmp_path / "work"
    work.mkdir()
    run = subprocess.run([sys.executable, "-c", RUNNER, name], input=json.dumps(blocks), cwd=work, capture_output=True,
                         text=True, timeout=RUN_TIMEOUT, env=server_env(APDMEM_STORE=str(tmp_path / "store"), **env))
    assert run.returncode == 0, f"a python block of {name} failed:\n{run.stderr[-4000:]}"
    return json.loads(run.stdout.splitlines()[-1])


def serves(blocks: list[dict]) -> bool:
    """Whether the blocks talk to a LangGraph server (at the address `SERVER`)."""
    return any(SERVER in b["code"] for b in blocks)


def cases() -> list:
    """One test per page (its unmarked blocks, in order) and one per marked block; those with a server are slow."""
    out = []
    for page in DOC_PAGES:
        name, blocks = str(page.relative_to(ROOT)), python_blocks(page)
        groups = {name: [b for b in blocks if not b["needs"]]} | {f"{name}:{b['line']}": [b] for b in blocks if b["needs"]}
        out += [pytest.param(page, group, id=case, marks=[pytest.mark.slow] * serves(group))
                for case, group in groups.items() if group]
    return out


@pytest.mark.parametrize("page, blocks", cases())
def test_python_blocks_run(page, blocks, tmp_path):
    name = str(page.relative_to(ROOT))
    for block in blocks:
        if block["needs"] and not os.environ.get(block["needs"]):
            pytest.skip(f"{name}:{block['line']} needs {block['needs']} ({block['why']})")
    (tmp_path / "store").mkdir()
    with langgraph_dev(tmp_path / "store", APDMEM_AUTH_SECRET=SECRET) if serves(blocks) else nullcontext() as url:
        env = {}
        if url:
            blocks = [{**b, "code": b["code"].replace(SERVER, url)} for b in blocks]
            env["APDMEM_TOKEN"] = make_token("alice", SECRET)
        printed = run_blocks(name, blocks, tmp_path, **env)
    for block, out in zip(blocks, printed):
        if block["output"] is not None:
            assert out == block["output"], f"{name}:{block['line']} printed other output than the page shows"


def test_the_runner_finds_every_block_and_fails_on_a_raising_one(tmp_path):
    """The runner sees the pages' blocks (the README's example among them), and a block that raises fails it."""
    readme = python_blocks(ROOT / "README.md")
    assert len(readme) == 1 and len(readme[0]["code"].splitlines()) <= 25 and readme[0]["needs"] is None
    assert sum(len(python_blocks(p)) for p in DOC_PAGES) >= 6
    page = tmp_path / "page.md"
    page.write_text("# a page\n\n```python\nx = 1\n```\n\n```python\nraise ValueError(f'broken {x}')\n```\n\n"
                    "1. a list item:\n\n   ```python\n   # docs-test: needs SOME_KEY (a reason)\n   print(2)\n   ```\n\n"
                    "   prints\n\n   ```output\n   2\n   ```\n")
    blocks = python_blocks(page)
    assert [(b["line"], b["needs"], b["why"], b["output"]) for b in blocks] == [
        (4, None, None, None), (8, None, None, None), (14, "SOME_KEY", "a reason", "2\n")]
    blocks = blocks[:2]
    with pytest.raises(AssertionError, match=r"(?s)page.md\", line 8.*ValueError: broken 1"):
        run_blocks("page.md", blocks, tmp_path)
