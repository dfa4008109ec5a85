"""TensorFlow's cell formats against TensorFlow's own kernels, kept as data.

``compat_tests/data/tf_kernels/`` holds what TensorFlow's ``LSTMBlockCell`` (the op behind
``CudnnCompatibleLSTMCell``) and ``GRUBlockCell`` (its textbook GRU) computed on weights in
``reference.formats.tf``'s cell formats, stacked over layers (``scripts/make_tf_kernel_fixtures.py``;
``provenance.json`` names the version). Read back through ``tf.from_tf``, the reference must reproduce them
within the tolerance policy: a wrong gate column order, bias rule or transpose in the format would not.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from compat_tests.config import Case, Outputs, RNNConfig
from compat_tests.judge.compare import Recorded, compare_peer
from reference.formats import tf as tf_format

DATA = Path(__file__).resolve().parents[2] / "data" / "tf_kernels"


PROVENANCE = json.loads((DATA / "provenance.json").read_text())


def captured(name: str) -> dict[str, np.ndarray]:
    with np.load(DATA / "captured.npz", allow_pickle=False) as data:
        return {k.split(":", 1)[1]: data[k] for k in data.files if k.startswith(f"{name}:")}


@pytest.mark.parametrize("name", sorted(PROVENANCE["fixtures"]))
def test_tensorflows_kernels_on_its_cell_formats_are_the_reference(name):
    cfg = RNNConfig.from_dict(PROVENANCE["fixtures"][name]["config"])
    arrays = captured(name)
    model = cfg.model()
    tensors = {k[len("tf:"):]: v for k, v in arrays.items() if k.startswith("tf:")}
    weights, biases = tf_format.from_tf(model, tensors)
    case = Case(weights, biases, arrays["x"], arrays["h0"], arrays.get("c0"), None)
    kernels = Recorded(f"tensorflow {PROVENANCE['fixtures'][name]['kernel']}",
                       outputs=Outputs(arrays["output"], arrays["output_h"], arrays.get("output_c")))
    verdict = compare_peer(kernels, cfg, case)
    assert verdict.passed, verdict.explain()
