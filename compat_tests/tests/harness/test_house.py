"""The house's structure, read from the code: no import cycle among the suite's modules, the tests apart from
them (in ``compat_tests/tests``, never installed, none importing another), each folder saying what it holds,
and the command line thin."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SUITE = ROOT / "compat_tests"
TESTS = SUITE / "tests"
MAX_TEST_LINES = 800
MAX_CLI_LINES = 500


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def suite_modules() -> dict[str, Path]:
    """Every module of ``compat_tests`` but its tests, by dotted name."""
    return {module_name(p): p for p in SUITE.rglob("*.py") if TESTS not in p.parents and "fake_site" not in p.parts}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that the module at ``path`` imports anywhere in it (at its top or inside a
    function), with the packages Python runs on the way to each (their ``__init__``), but its own."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if not target:
                continue
            found.add(target)
            parent = target.rpartition(".")[0]
            while parent and not (name == parent or name.startswith(parent + ".")):
                found.add(parent)
                parent = parent.rpartition(".")[0]
    found.discard(name)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_suite_s_modules_import_one_another_without_a_cycle():
    modules = suite_modules()
    graph = {name: imports_of(path, set(modules)) for name, path in modules.items()}
    assert graph["compat_tests.judge.tolerances"] >= {"compat_tests.judge.peer_exceptions", "compat_tests.peers"}
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle_through_a_function_s_import_and_a_package(tmp_path, monkeypatch):
    """The harness: a lazy import inside a function counts, and so does the package Python runs on the way."""
    pkg = tmp_path / "compat_tests"
    (pkg / "inner").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from .inner import b\n")
    (pkg / "inner" / "__init__.py").write_text("from .. import a\n")
    (pkg / "inner" / "b.py").write_text("")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    modules = {module_name(p): p for p in pkg.rglob("*.py")}
    graph = {name: imports_of(path, set(modules)) for name, path in modules.items()}
    assert cycles(graph) == [["compat_tests.a", "compat_tests.inner"]]


def test_the_tests_live_in_their_own_folder_and_import_no_other_test_module():
    """``ls compat_tests`` shows the suite's modules and folders; a test file's neighbours are reached through
    ``helpers.py``, never by importing another test module."""
    assert sorted(p.name for p in SUITE.rglob("test_*.py") if TESTS not in p.parents) == []
    offenders = []
    for path in TESTS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.relative_to(ROOT)} imports {n}" for n in names if n.rpartition(".")[2].startswith("test_")]
    assert offenders == []


def test_no_test_file_is_over_800_lines_and_each_folder_says_what_it_holds():
    long = {str(p.relative_to(ROOT)): n for p in TESTS.rglob("test_*.py")
            if (n := len(p.read_text().splitlines())) > MAX_TEST_LINES}
    assert long == {}
    folders = [f for f in [SUITE, *SUITE.rglob("*")] if f.is_dir() and any(f.glob("*.py")) and f.name != "fake_site"]
    silent = [str(f.relative_to(ROOT)) for f in folders
              if not (f / "__init__.py").exists() or not ast.get_docstring(ast.parse((f / "__init__.py").read_text()))]
    assert silent == []


def test_the_command_line_parses_and_dispatches():
    lines = len((SUITE / "cli.py").read_text().splitlines())
    assert lines < MAX_CLI_LINES, f"compat_tests/cli.py has {lines} lines: its commands' work belongs to their rooms"


def test_the_installed_package_holds_no_test_file(tmp_path):
    """The wheel ``pip install .`` installs: the suite's modules and data, no test. (Built from a copy of the
    sources: setuptools builds in the source tree.)"""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "reference", "cudnn_backend", "compat_tests"):
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy2
        copy(ROOT / name, source / name, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                             if (ROOT / name).is_dir() else {}))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                            str(tmp_path / "wheel"), str(source)], capture_output=True, text=True, timeout=300)
    if built.returncode != 0:
        pytest.fail(f"pip wheel failed: {built.stderr[-2000:]}")
    (wheel,) = (tmp_path / "wheel").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "compat_tests/cli.py" in names and "compat_tests/judge/tolerances.py" in names
    assert [n for n in names if n.startswith("compat_tests/tests/") or "/test_" in n] == []
