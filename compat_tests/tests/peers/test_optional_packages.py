"""The suite collects without any one optional package: no test module, conftest or helper they import
needs one at import time (a test that needs it skips instead), so a machine that lacks one (the GPU image
lacks onnx, onnxscript, keras, h5py, jsonschema, safetensors and dask.distributed; a CPU-only install may lack
torch, onnxruntime or matplotlib) still runs the rest.

Each package is hidden in turn (``compat_tests/gpu/fake_site``'s hook, which ``RNN_COMPAT_HIDE`` drives; the
CUDA fakes are in place too, as on a GPU) and ``pytest --collect-only -q`` over the whole suite must report
no error. One collection a package: hiding them all at once would let a module skipped for one package hide
an unguarded import of another after it. The collections are forked from one process that imports torch
once, after forking the one that hides it (torch takes most of a collection's time), and run with
``--assert=plain`` (rewriting every module's asserts would double their time, and changes no import).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


FAKE_SITE = ROOT / "compat_tests" / "gpu" / "fake_site"


OPTIONAL = ("torch", "onnx", "onnxscript", "keras", "h5py", "jsonschema", "safetensors", "onnxruntime",
            "matplotlib", "distributed")


def _python(hidden: tuple[str, ...], *args: str) -> subprocess.CompletedProcess:
    """``python ARGS`` from the repository root under ``fake_site`` with the packages ``hidden`` made
    unimportable (none: ``RNN_COMPAT_HIDE`` unset)."""
    env = {k: v for k, v in os.environ.items() if k != "RNN_COMPAT_HIDE"}
    env["PYTHONPATH"] = os.pathsep.join([str(FAKE_SITE), str(ROOT)])
    if hidden:
        env["RNN_COMPAT_HIDE"] = ",".join(hidden)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


# Prints, as JSON, how each package named in argv is found (find_spec, which runs none of it) and how
# importing a submodule of onnx ends.
PROBE = """
import importlib, importlib.util, json, sys

def hidden(exc):
    return f"hidden as {exc.name}" if "RNN_COMPAT_HIDE" in str(exc) else f"missing {exc.name}"

def found(name):
    try:
        return "found" if importlib.util.find_spec(name) else "absent"
    except ModuleNotFoundError as exc:
        return hidden(exc)

try:
    importlib.import_module("onnx.helper")
    submodule = "imported"
except ModuleNotFoundError as exc:
    submodule = hidden(exc)
print(json.dumps({"packages": {n: found(n) for n in sys.argv[1:]}, "onnx.helper": submodule}))
"""


def test_the_hook_hides_exactly_the_named_packages():
    """What ``RNN_COMPAT_HIDE`` names cannot be found or imported (a submodule neither, the error naming the
    package, as where it is not installed); every other package is found as it is here, and with
    ``RNN_COMPAT_HIDE`` unset nothing is hidden. Each package is hidden in one run and not in another."""
    here = {n: "found" if importlib.util.find_spec(n) else "absent" for n in OPTIONAL}
    onnx_here = "imported" if here["onnx"] == "found" else "missing onnx"
    for hidden in (OPTIONAL[::2], OPTIONAL[1::2], ()):
        run = _python(hidden, "-c", PROBE, *OPTIONAL)
        assert run.returncode == 0, run.stderr[-3000:]
        seen = json.loads(run.stdout.splitlines()[-1])
        assert seen["packages"] == {n: f"hidden as {n}" if n in hidden else here[n] for n in OPTIONAL}, hidden
        assert seen["onnx.helper"] == ("hidden as onnx" if "onnx" in hidden else onnx_here), hidden


# Forks one collection a package named in argv[2:], that package hidden, each writing its output to
# argv[1]/PACKAGE.txt; prints the exit statuses as JSON. torch is imported once, after its own child.
COLLECT = """
import gc, importlib.util, json, os, sys, traceback
import pytest
import sitecustomize  # compat_tests/gpu/fake_site's, run at startup

def collect(package, log):
    os.dup2(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
    os.dup2(1, 2)
    sitecustomize.hide([package])
    try:
        importlib.util.find_spec(package)
    except ModuleNotFoundError:
        return int(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "--assert=plain", "compat_tests"]))
    print(f"{package} is not hidden: imported before its collection, or the hook failed")
    return 3

out, codes = sys.argv[1], {}
for package in sys.argv[2:]:
    sys.stdout.flush()
    gc.freeze()  # the children's collections leave what this process imported alone (no copy of its pages)
    pid = os.fork()
    if pid == 0:  # the child never returns to this loop
        code = 4
        try:
            code = collect(package, os.path.join(out, package + ".txt"))
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    codes[package] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if package == "torch":
        try:
            import torch
        except ImportError:
            pass
print(json.dumps(codes))
"""


def test_the_suite_collects_without_each_package(tmp_path):
    """``pytest --collect-only -q`` over the suite with each optional package hidden in turn: every module
    imports (or skips itself), none is an error, whatever package is missing."""
    run = _python((), "-c", COLLECT, str(tmp_path), *OPTIONAL)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    codes = json.loads(run.stdout.splitlines()[-1])
    failed = {}
    for package in OPTIONAL:
        output = (tmp_path / f"{package}.txt").read_text()
        if codes[package] != 0 or "ERROR collecting" in output or " tests collected" not in output.splitlines()[-1]:
            failed[package] = f"--- {package} hidden: exit status {codes[package]}\n{output[-4000:]}"
    assert not failed, "\n".join(failed.values())


def test_a_fleet_run_without_dask_says_which_extra_installs_it(tmp_path):
    """``--scheduler`` where dask.distributed is missing: exit status 2 and one line naming the package and the
    extra, before any process starts or any file is written."""
    out = tmp_path / "run"
    run = _python(("distributed",), "-m", "compat_tests.cli", "report", "--grid", "quick", "--backends",
                  "reference", "--scheduler", "local:1", "--out", str(out))
    assert run.returncode == 2, run.stdout[-2000:] + run.stderr[-2000:]
    assert "a Dask fleet (rnn-compat report --scheduler) needs the distributed package, which is not installed " \
           "(pip install -e '.[fleet]' installs it)" in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert not out.exists() or not any(out.iterdir())
