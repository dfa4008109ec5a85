"""The documentation's examples run: every code block of README.md, docs/*.md and benchmarks/README.md.

Per file, in a temporary folder and in the file's order (so a command may use what an earlier block wrote):

- ``python`` blocks are executed in one namespace per file, so a later block may use an earlier one's names;
- ``sh`` blocks run a command a line (``\\`` continues one) through ``bash`` in a subprocess, where
  ``rnn-compat`` (also spelled ``.venv/bin/rnn-compat``) is ``sys.executable -m compat_tests.cli`` and
  ``python`` (``.venv/bin/python``) is ``sys.executable``; ``examples/`` is there as in the working tree, and
  a command that names the suite's own tests (``compat_tests/...``) runs from the working tree. A command
  must exit 0 unless its comment says ``# exit status N``;
- ``json`` and ``toml`` blocks must parse; ``text`` blocks are output and are not run;
- a block whose info string says ``no-test: REASON`` is not run, and must say why.

Any other block (no language, or another one) fails: say what it is.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[3]


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md"]


README_MAX_LINES = 250


COMMAND_TIMEOUT = 300


FENCE = re.compile(r"^(`{3,})(.*)$")


EXIT_STATUS = re.compile(r"#.*\bexit status (\d+)")


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def shown(path: Path) -> str:
    """``path`` as the messages name it: from the working tree where it lies there."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    info: str
    text: str

    @property
    def language(self) -> str:
        return self.info.split()[0] if self.info.split() else ""

    @property
    def where(self) -> str:
        return f"{shown(self.path)}:{self.line}"

    @property
    def no_test(self) -> str | None:
        """The reason given after ``no-test:``, ``""`` where none is, ``None`` for a block that runs."""
        m = re.search(r"\bno-test\b:?(.*)$", self.info)
        return None if m is None else m.group(1).strip()


def blocks(path: Path) -> list[Block]:
    found, lines, i = [], path.read_text(encoding="utf-8").splitlines(), 0
    while i < len(lines):
        m = FENCE.match(lines[i].strip())
        if m is None:
            i += 1
            continue
        fence, start = m.group(1), i
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == fence), None)
        assert end is not None, f"{shown(path)}:{start + 1}: a code block that is never closed"
        found.append(Block(path, start + 1, m.group(2).strip(), "\n".join(lines[start + 1:end]) + "\n"))
        i = end + 1
    return found


def commands(block: Block) -> list[tuple[int, str]]:
    """``(line, command)`` for each command of a shell block: lines joined where ``\\`` continues them, blank
    and comment-only lines left out."""
    out, pending, first = [], "", 0
    for n, line in enumerate(block.text.splitlines(), block.line + 1):
        if not pending:
            first = n
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1].strip() + " "
            continue
        command, pending = (pending + line.strip()).strip(), ""
        if command and not command.startswith("#"):
            out.append((first, command))
    assert not pending, f"{block.where}: a command ends in a line continuation"
    return out


@pytest.fixture(scope="module")
def shims(tmp_path_factory) -> Path:
    """A folder for the front of ``PATH``: ``rnn-compat`` and ``python`` as this interpreter runs them."""
    folder = tmp_path_factory.mktemp("bin")
    for name, target in (("rnn-compat", f'"{sys.executable}" -m compat_tests.cli'), ("python", f'"{sys.executable}"')):
        (folder / name).write_text(f'#!/bin/sh\nexec {target} "$@"\n')
        (folder / name).chmod(0o755)
    return folder


def run_command(block: Block, line: int, command: str, folder: Path, shims: Path) -> None:
    expected = int(m.group(1)) if (m := EXIT_STATUS.search(command)) else 0
    runnable = re.sub(r"(?<![\w/.-])\.venv/bin/", "", command)
    words = shlex.split(runnable, comments=True)
    in_tree = any(word == "compat_tests" or word.startswith("compat_tests/") for word in words)
    env = {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run(["bash", "-c", runnable], cwd=ROOT if in_tree else folder, env=env, capture_output=True,
                          text=True, timeout=COMMAND_TIMEOUT)
    assert done.returncode == expected, (
        f"{shown(block.path)}:{line}: `{command}` exited with status {done.returncode}, not {expected}\n"
        f"--- stdout (end)\n{done.stdout[-3000:]}\n--- stderr (end)\n{done.stderr[-3000:]}")


@contextmanager
def cluster_for(path: Path, folder: Path) -> Iterator[None]:
    """For docs/fleet.md, the cluster its commands use: a scheduler and two workers of two environments
    (OpenBLAS's kernels chosen apart), its ``scheduler.json`` in ``folder``; nothing for the other files."""
    if path.name != "fleet.md":
        yield
        return
    pytest.importorskip("distributed", reason="docs/fleet.md's commands need dask.distributed (the fleet extra)")
    from compat_tests.report import fleet

    specs = [fleet.WorkerSpec(), fleet.WorkerSpec(env=(("OPENBLAS_CORETYPE", "Sandybridge"),))]
    with fleet.local_cluster(specs) as (_, _, file):
        shutil.copy(file, folder / "scheduler.json")
        yield


@pytest.mark.parametrize("path", DOCS, ids=[shown(p) for p in DOCS])
def test_every_example_runs(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shims: Path) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    with cluster_for(path, tmp_path):
        _run_blocks(path, tmp_path, shims)


def _run_blocks(path: Path, tmp_path: Path, shims: Path) -> None:
    namespace: dict = {"__name__": "__doc_example__"}
    for block in blocks(path):
        if block.no_test is not None or block.language == "text":
            continue
        if block.language == "python":
            code = compile(block.text, block.where, "exec", dont_inherit=True)
            exec(code, namespace)  # noqa: S102 - the docs' own examples
        elif block.language in ("sh", "bash"):
            for line, command in commands(block):
                run_command(block, line, command, tmp_path, shims)
        elif block.language == "json":
            json.loads(block.text)
        elif block.language == "toml":
            tomllib.loads(block.text)
        else:
            pytest.fail(f"{block.where}: a ```{block.info} block: say what it is (python, sh, json, toml, or text "
                        f"for output), or mark it `no-test: REASON`")


@pytest.mark.parametrize("path", DOCS, ids=[shown(p) for p in DOCS])
def test_a_block_not_run_says_why(path: Path) -> None:
    for block in blocks(path):
        assert block.no_test != "", f"{block.where}: `no-test` needs its reason: ```{block.language} no-test: WHY"


@pytest.mark.parametrize("path", DOCS, ids=[shown(p) for p in DOCS])
def test_links_lead_to_files(path: Path) -> None:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        where = f"{shown(path)}: a link to {target}"
        assert (path.parent / target.split("#")[0]).exists(), f"{where}: no such file"


def test_readme_stays_an_introduction() -> None:
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, (f"README.md has {lines} lines, more than {README_MAX_LINES}: move the detail "
                                       f"into docs/")


def test_the_runner_reads_blocks_and_fails_a_broken_command(tmp_path: Path, shims: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("text\n\n```sh\n# a comment\ntrue \\\n  --and-more\nfalse   # exit status 1: as it should\n```\n\n"
                   "```sh no-test: needs a GPU\nnvidia-smi\n```\n\n````text\n```\n````\n")
    found = blocks(doc)
    assert [(b.line, b.language, b.no_test) for b in found] == [(3, "sh", None), (10, "sh", "needs a GPU"),
                                                                (14, "text", None)]
    assert commands(found[0]) == [(5, "true --and-more"), (7, "false   # exit status 1: as it should")]
    for line, command in commands(found[0]):
        run_command(found[0], line, command, tmp_path, shims)
    with pytest.raises(AssertionError, match=r"doc.md:5: `true  # exit status 3` exited with status 0, not 3"):
        run_command(found[0], 5, "true  # exit status 3", tmp_path, shims)
