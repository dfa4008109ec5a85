"""Write compat_tests/data/keras22/: weights-only ``.h5`` files laid out as Keras 2.2.4's ``model.save_weights``
writes them, and what Keras computed with their weights, the fixtures of
``compat_tests/tests/formats/test_keras22_files.py``.

Keras before 2.3 made ``LSTM`` and ``GRU`` default to ``recurrent_activation="hard_sigmoid"`` (and ``GRU`` to
``reset_after=False``), and a weights-only file does not record the activation: only its ``keras_version``
attribute says which Keras wrote it. Keras 2.2.4 needs Python <= 3.7 and TensorFlow 1.x, which no longer install,
so the files are written here with h5py, reproducing Keras 2.2.4's layout
(``keras/engine/saving.py: save_weights_to_hdf5_group``) exactly:

- the root's attributes ``layer_names`` (the model's layers, a Sequential's input layer left out, as
  fixed-length byte strings: ``save_attributes_to_hdf5_group`` stores ``np.asarray`` of a list of bytes),
  ``backend`` (``b"tensorflow"``) and ``keras_version`` (``b"2.2.4"``, ``str(keras.__version__).encode()``);
- one group per layer, named after it (Keras 2.2's names count from 1: ``lstm_1``, ``lstm_2``), with the
  attribute ``weight_names`` (the variables' TensorFlow names, ``lstm_1/kernel:0``: Keras 2.2's cells build
  their weights in the layer's name scope) and one dataset per weight under that name (so inside a group
  ``lstm_1``, as ``lstm_1/lstm_1/kernel:0``).

What Keras computed comes from Keras 3 (the one this project's tests use, on the torch backend), running the
same weights in ``LSTM`` / ``GRU(reset_after=False)`` layers three ways: with ``recurrent_activation="sigmoid"``
(what a reader told "the weights were trained with sigmoid" must reproduce), with Keras 3's ``"hard_sigmoid"``
(``relu6(x + 3) / 6``) and with Keras 2.2.4's own hard_sigmoid, ``clip(0.2 * x + 0.5, 0, 1)``
(``keras/backend/tensorflow_backend.py``), passed as a callable: what such a file's layers actually computed,
and why reading it as sigmoid without a word is refused. Outputs are time-major ``[T, B, H]`` with the final
states ``output_h [L, B, H]`` (and ``output_c``); initial states are zero.

    PYTHONPATH=. .venv/bin/python scripts/make_keras22_fixtures.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "torch")

import h5py  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

OUT = Path("compat_tests/data/keras22")
KERAS_VERSION = "2.2.4"
T, B = 6, 2
SCALE = 2.0  # weights of a trained layer: pre-activations past the range where hard_sigmoid is near sigmoid

# name -> (layer class, its Keras 2.2.4 name prefix, units, input size, layers)
FIXTURES = {"lstm": ("LSTM", "lstm", 4, 3, 2), "gru": ("GRU", "gru", 3, 2, 1)}


def keras2_hard_sigmoid(x):
    """Keras 2.2.4's ``K.hard_sigmoid`` (TensorFlow backend): ``clip(0.2 * x + 0.5, 0, 1)``."""
    return keras.ops.clip(0.2 * x + 0.5, 0.0, 1.0)


ACTIVATIONS = {"sigmoid": "sigmoid", "hard_sigmoid_keras3": "hard_sigmoid", "hard_sigmoid_keras2": keras2_hard_sigmoid}


def keras22_weights(cls: str, units: int, input_size: int, rng) -> list[np.ndarray]:
    """A Keras 2.2.4 layer's weights: ``kernel [in, G*H]``, ``recurrent_kernel [H, G*H]``, ``bias [G*H]`` (its
    GRU's reset_after=False: one bias)."""
    gates = 4 if cls == "LSTM" else 3
    return [rng.uniform(-SCALE, SCALE, shape).astype(np.float32)
            for shape in ((input_size, gates * units), (units, gates * units), (gates * units,))]


def write_keras22(path: Path, layers: list[tuple[str, list[np.ndarray]]]) -> None:
    """``layers`` (name, weights) saved as Keras 2.2.4's ``save_weights_to_hdf5_group`` saves them."""
    with h5py.File(path, "w") as f:
        f.attrs["layer_names"] = np.asarray([name.encode("utf8") for name, _ in layers])
        f.attrs["backend"] = "tensorflow".encode("utf8")
        f.attrs["keras_version"] = str(KERAS_VERSION).encode("utf8")
        for name, weights in layers:
            g = f.create_group(name)
            weight_names = [f"{name}/{w}:0".encode("utf8") for w in ("kernel", "recurrent_kernel", "bias")]
            g.attrs["weight_names"] = np.asarray(weight_names)
            for weight_name, value in zip(weight_names, weights):
                dataset = g.create_dataset(weight_name, value.shape, dtype=value.dtype)
                dataset[:] = value


def run(cls: str, units: int, per_layer: list[list[np.ndarray]], x: np.ndarray, activation) -> dict[str, np.ndarray]:
    """Keras's LSTM / GRU(reset_after=False) stack holding ``per_layer`` on batch-major ``x``, with
    ``recurrent_activation=activation``: time-major output and final states."""
    h, c, y = [], [], x
    for weights in per_layer:
        options = {"reset_after": False} if cls == "GRU" else {}
        layer = getattr(keras.layers, cls)(units, return_sequences=True, return_state=True,
                                           recurrent_activation=activation, **options)
        layer.build((None, None, y.shape[-1]))
        layer.set_weights(weights)
        y, *states = (np.asarray(keras.ops.convert_to_numpy(a)) for a in layer(y))
        h.append(states[0])
        if cls == "LSTM":
            c.append(states[1])
    out = {"output": y.transpose(1, 0, 2), "output_h": np.stack(h)}
    return out | ({"output_c": np.stack(c)} if cls == "LSTM" else {})


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(224)
    arrays, provenance = {}, {"layout_of": f"Keras {KERAS_VERSION} save_weights (written with h5py {h5py.__version__})",
                              "outputs_by": f"Keras {keras.__version__} ({keras.backend.backend()} backend)",
                              "fixtures": {}}
    for name, (cls, prefix, units, input_size, num_layers) in FIXTURES.items():
        per_layer = [keras22_weights(cls, units, input_size if k == 0 else units, rng) for k in range(num_layers)]
        write_keras22(OUT / f"{name}.h5", [(f"{prefix}_{k + 1}", w) for k, w in enumerate(per_layer)])
        x = rng.uniform(-2, 2, (B, T, input_size)).astype(np.float32)
        arrays[f"{name}:x"] = x.transpose(1, 0, 2)
        for label, activation in ACTIVATIONS.items():
            arrays |= {f"{name}:{label}:{k}": v for k, v in run(cls, units, per_layer, x, activation).items()}
        provenance["fixtures"][name] = {
            "mode": "lstm" if cls == "LSTM" else "classic_gru", "layer": cls, "num_units": units,
            "input_size": input_size, "num_layers": num_layers, "direction": "unidirectional",
            "keras_version": KERAS_VERSION, "file": f"{name}.h5"}
    np.savez(OUT / "expected.npz", **arrays)
    (OUT / "provenance.json").write_text(json.dumps(provenance, indent=1) + "\n")


if __name__ == "__main__":
    main()
