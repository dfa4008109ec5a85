"""Optional dependencies: what needs which package, said in one clear error rather than a traceback.

The reference, ``rnn-compat infer``, ``convert`` between every format but ONNX graphs and Keras's own
files, and a report of the reference alone need NumPy only (``pip install -e .``); the suite, ONNX graphs
(onnx) and Keras's ``.keras``/``.h5`` files (h5py) need the ``test`` extra (``pip install -e '.[test]'``,
which ``make test`` installs).
"""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingDependency(ModuleNotFoundError):
    """An optional package that one feature needs is not installed; the message says which and how."""


def require(module: str, feature: str, install: str = "pip install -e '.[test]'") -> ModuleType:
    """``import module``, or :class:`MissingDependency` naming ``feature`` and how to install the package."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module.split(".")[0]:  # the package is there but broken: its own error says why
            raise
        raise MissingDependency(f"{feature} needs the {module.split('.')[0]} package, which is not installed "
                                f"({install} installs it)", name=exc.name) from None
