"""Write compat_tests/data/keras2/: legacy ``.h5`` files that tf.keras 2 (the ``tf_keras`` package) saved, and
what Keras 2 itself computed with their weights, the fixtures of ``compat_tests/tests/formats/test_keras2_files.py``.

Two kinds of file:
- plain layers (``LSTM``, ``GRU`` with and without ``reset_after``, ``SimpleRNN``), whole models;
- the GPU-only layers ``CuDNNLSTM`` and ``CuDNNGRU`` (``tf.compat.v1.keras.layers``), which hand their weights to
  cuDNN as they are and store them in cuDNN's layout, not Keras's: a whole model and a weights-only file.
  They have no CPU kernel, so their outputs come from the same stack of ``LSTM`` / ``GRU(reset_after=True)``
  layers into which Keras 2 loaded the CuDNN file's weights (``load_weights``, which converts them with its own
  ``_convert_rnn_weights``).

Outputs are computed by a twin of each model whose recurrent layers also return their states, so the final
states of every layer are recorded too: ``output [T, B, D*H]`` (time-major), ``output_h [L*D, B, H]`` and,
for the LSTM, ``output_c``; initial states are zero.

TensorFlow is not a dependency of this project; this needs it once, in a separate environment:
    python -m venv /tmp/tf && /tmp/tf/bin/pip install tensorflow-cpu tf-keras
    PYTHONPATH=. /tmp/tf/bin/python scripts/make_keras2_fixtures.py
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # tf.keras is Keras 2 (tf_keras), as it was before TensorFlow 2.16

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

OUT = Path("compat_tests/data/keras2")
CUDNN = tf.compat.v1.keras.layers
T, B = 5, 2

# name -> (mode, layer class, its arguments, units, input size, layers, bidirectional, functional, Dense head)
FIXTURES = {
    "cudnn_lstm_bi": ("lstm", "CuDNNLSTM", {}, 4, 3, 2, True, False, False),
    "cudnn_gru": ("gru", "CuDNNGRU", {}, 5, 3, 2, False, True, True),
    "lstm": ("lstm", "LSTM", {}, 4, 3, 2, False, False, False),
    "gru_bi": ("gru", "GRU", {}, 3, 2, 2, True, True, False),
    "classic_gru": ("classic_gru", "GRU", {"reset_after": False}, 4, 3, 1, False, False, True),
    "relu_bi": ("relu", "SimpleRNN", {"activation": "relu"}, 3, 2, 1, True, False, False),
    "cudnn_gru_bi": ("gru", "CuDNNGRU", {}, 3, 4, 1, True, False, False),
}
WEIGHTS_ONLY = ("cudnn_lstm_bi", "cudnn_gru_bi")  # also saved with save_weights
TWIN = {"CuDNNLSTM": ("LSTM", {}), "CuDNNGRU": ("GRU", {"reset_after": True, "recurrent_activation": "sigmoid"})}


def layer_class(name: str):
    return getattr(CUDNN, name) if name.startswith("CuDNN") else getattr(keras.layers, name)


def build(cls: str, options: dict, units: int, input_size: int, num_layers: int, bidirectional: bool,
          functional: bool, head: bool, states: bool = False):
    """The model (``states``: functional, every recurrent layer returning its states too, which are outputs)."""
    inputs = keras.Input((None, input_size))
    x, finals = inputs, []
    layers = []
    for _ in range(num_layers):
        cell = layer_class(cls)(units, return_sequences=True, return_state=states, **options)
        layer = keras.layers.Bidirectional(cell) if bidirectional else cell
        layers.append(layer)
        if functional or states:
            out = layer(x)
            x, finals = (out[0], finals + list(out[1:])) if states else (out, finals)
    if head:
        layers.append(keras.layers.Dense(2))
        if functional or states:
            x = layers[-1](x)
    if functional or states:
        return keras.Model(inputs, [x, *finals] if states else x)
    return keras.Sequential([inputs, *layers])


def random_weights(model, rng) -> None:
    model.set_weights([rng.uniform(-0.6, 0.6, w.shape).astype(np.float32) for w in model.get_weights()])


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(2026)
    arrays, provenance = {}, {"tensorflow": tf.__version__, "tf_keras": keras.__version__, "fixtures": {}}
    for name, (mode, cls, options, units, input_size, num_layers, bidi, functional, head) in FIXTURES.items():
        keras.backend.clear_session()  # layer names from cu_dnnlstm, lstm, bidirectional again
        model = build(cls, options, units, input_size, num_layers, bidi, functional, head)
        random_weights(model, rng)
        model.save(OUT / f"{name}.h5")
        twin_cls, twin_options = TWIN.get(cls, (cls, options))
        twin = build(twin_cls, twin_options, units, input_size, num_layers, bidi, functional, head, states=True)
        with tempfile.TemporaryDirectory() as tmp:  # Keras 2 converts CuDNN weights as it loads them
            model.save_weights(Path(tmp) / "w.h5")
            twin.load_weights(Path(tmp) / "w.h5")
        if name in WEIGHTS_ONLY:
            model.save_weights(OUT / f"{name}.weights_only.h5")
        x = rng.uniform(-1, 1, (B, T, input_size)).astype(np.float32)
        out = [np.asarray(a) for a in twin(x)]
        y, finals = out[0] if not head else None, out[1:]
        if head:  # the stack's output is the Dense layer's input
            stack = keras.Model(twin.inputs, twin.layers[-1].input)
            y = np.asarray(stack(x))
        per = 2 if mode == "lstm" else 1  # states per direction: h (and c)
        h = [finals[k] for k in range(0, len(finals), per)]
        named = {"x": x.transpose(1, 0, 2), "output": y.transpose(1, 0, 2), "output_h": np.stack(h)}
        if mode == "lstm":
            named["output_c"] = np.stack([finals[k] for k in range(1, len(finals), per)])
        arrays |= {f"{name}:{k}": v for k, v in named.items()}
        provenance["fixtures"][name] = {
            "mode": mode, "layer": cls, "num_units": units, "input_size": input_size, "num_layers": num_layers,
            "direction": "bidirectional" if bidi else "unidirectional",
            "model": ("functional" if functional else "Sequential") + (" with a Dense head" if head else ""),
            "files": [f"{name}.h5"] + ([f"{name}.weights_only.h5"] if name in WEIGHTS_ONLY else [])}
    np.savez(OUT / "expected.npz", **arrays)
    (OUT / "provenance.json").write_text(json.dumps(provenance, indent=1) + "\n")


if __name__ == "__main__":
    main()
