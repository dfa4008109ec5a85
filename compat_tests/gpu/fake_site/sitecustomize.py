"""Puts ``compat_tests.gpu.fake_cuda`` in place of CuPy and libcudnn in every Python process started with this
folder on ``PYTHONPATH`` (worker processes included), so that ``scripts/gpu_run.sh`` runs end to end on a
CPU (``test_gpu_run.py``). A dry run of the script's own plumbing: its numbers are the reference's.
``FAKE_CUDA_UNAVAILABLE=REASON`` makes the backend unavailable instead, for that reason.

``RNN_COMPAT_HIDE=onnx,keras`` (comma-separated top-level package names; none by default) makes those
packages unimportable in these processes, as on a machine that lacks them (the GPU image lacks onnx,
onnxscript, keras, h5py, jsonschema, safetensors): ``import onnx`` or ``import onnx.helper`` raises
``ModuleNotFoundError`` naming the hidden package (``exc.name == "onnx"``), before any other finder looks
(``test_optional_packages.py``); :func:`hide` does the same from within a process.
"""

import importlib.abc
import os
import sys


class Hide(importlib.abc.MetaPathFinder):
    """A finder, first on ``sys.meta_path``, that refuses every module of the packages ``hidden``."""

    def __init__(self, hidden):
        self.hidden = frozenset(hidden)

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.hidden:
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by RNN_COMPAT_HIDE)", name=name)
        return None


def hide(names) -> None:
    """Makes the packages ``names`` unimportable in this process from now on (those already imported stay)."""
    sys.meta_path.insert(0, Hide(names))


_hidden = [n.strip() for n in os.environ.get("RNN_COMPAT_HIDE", "").split(",") if n.strip()]
if _hidden:  # before the fake, so that nothing it imports can reach a hidden package either
    hide(_hidden)

from compat_tests.gpu import fake_cuda  # noqa: E402

fake_cuda.install()
if os.environ.get("FAKE_CUDA_UNAVAILABLE"):  # a GPU whose cuDNN backend cannot start, for this reason
    import cudnn_backend

    cudnn_backend.available = lambda: (False, os.environ["FAKE_CUDA_UNAVAILABLE"])
