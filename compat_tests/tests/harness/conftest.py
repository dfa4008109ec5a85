"""The harness tests' shared fixture: a folder holding a small GRU's checkpoint and an input for it."""

from __future__ import annotations

import numpy as np
import pytest

from compat_tests.tests.helpers import _model_files
from reference import checkpoint


@pytest.fixture
def gru_checkpoint(tmp_path, monkeypatch):
    """``tmp_path``, the working folder, holding ``m.npz`` (a small GRU's checkpoint) and ``x.npy`` (an input)."""
    cfg, case, model = _model_files(tmp_path)
    checkpoint.save(tmp_path / "m.npz", model, case.weights, case.biases)
    np.save(tmp_path / "x.npy", case.x)
    monkeypatch.chdir(tmp_path)
    return tmp_path
