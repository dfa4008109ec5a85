"""Check, once, that tf.keras 2 (the ``tf_keras`` package) loads the legacy ``.h5`` models that
``compat_tests/interop/keras_file.py`` writes (``rnn-compat convert --to keras m.h5``) and runs them to the
reference's outputs; and that its own save of the loaded model holds the same groups, attributes and weights.

TensorFlow is not a dependency of this project; this needs it in a separate environment, as
``scripts/make_keras2_fixtures.py`` does:
    python -m venv /tmp/tf && /tmp/tf/bin/pip install tensorflow-cpu tf-keras
    PYTHONPATH=. /tmp/tf/bin/python scripts/check_tf_keras2_loads.py
It prints one line per model and exits non-zero if any fails.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # tf.keras is Keras 2 (tf_keras)

import numpy as np  # noqa: E402
import tf_keras as keras  # noqa: E402

import reference  # noqa: E402
from compat_tests.interop import hdf5_tree, keras_file  # noqa: E402

T, B, I, H = 6, 3, 4, 5


def check(mode: str, layers: int, direction: str, folder: Path, rng: np.random.Generator) -> list[str]:
    model = reference.make_model(mode, layers, H, I, direction=direction, dtype=np.float32)
    weight_shapes, bias_shapes = model.canonical_shapes()
    weights = [rng.uniform(-0.5, 0.5, s).astype(np.float32) for s in weight_shapes]
    biases = [rng.uniform(-0.5, 0.5, s).astype(np.float32) for s in bias_shapes]
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    want = model.forward(x, None, model.canonical_to_params(weights, biases)).output
    path = folder / f"{mode}_{layers}_{direction}.h5"
    keras_file.write(path, model, weights, biases)
    net = keras.models.load_model(path, compile=False)
    got = np.swapaxes(net.predict(np.swapaxes(x, 0, 1), verbose=0), 0, 1)
    problems = []
    error = float(np.max(np.abs(got - want)))
    if error > 1e-5:
        problems.append(f"outputs differ by {error:.3g}")
    net.save(folder / "resaved.h5")
    ours, theirs = (hdf5_tree.layout(p, leave_out=("model_config",)) for p in (path, folder / "resaved.h5"))
    if ours != theirs:
        diff = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
        problems.append(f"tf.keras 2's own save differs at {diff[:4]}")
    return problems


def main() -> int:
    rng = np.random.default_rng(0)
    failed = 0
    with tempfile.TemporaryDirectory() as folder:
        for mode in reference.MODELS:
            for layers, direction in ((2, "bidirectional"), (3, "unidirectional")):
                problems = check(mode, layers, direction, Path(folder), rng)
                failed += bool(problems)
                verdict = "; ".join(problems) or "loads and runs to the reference"
                print(f"{mode:12} {layers} layers {direction:15}", verdict)
    print(f"tf_keras {keras.__version__}: {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
