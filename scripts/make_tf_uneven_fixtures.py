"""Write compat_tests/data/tf_uneven/: a TensorFlow 1 ``MultiRNNCell`` of cells of different sizes, saved by
``tf.compat.v1.train.Saver`` (a tensor bundle), and what TensorFlow's ``dynamic_rnn`` computed with it: the
fixtures of ``compat_tests/tests/formats/test_tf_uneven.py``.

The stack is ``GRUCell(6) -> GRUCell(4) -> GRUCell(3)`` on 3 inputs (the ``gru_cell`` format, a textbook GRU:
``classic_gru``), weights drawn at random, run time-major on ``x [T, B, 3]`` from zero states. A cuDNN stack's
layers are all alike, so this is no one cuDNN model, but a chain of three one-layer ones. ``expected.npz`` holds
``x``, ``output`` (the last cell's) and ``output_h_{k}`` (each cell's final state).

TensorFlow is not a dependency of this project; this needs it once, in a separate environment (TF 2's
``tf.compat.v1.nn.rnn_cell`` cells live in tf_keras):
    python -m venv /tmp/tf && /tmp/tf/bin/pip install tensorflow-cpu tf-keras numpy
    TF_USE_LEGACY_KERAS=1 PYTHONPATH=. /tmp/tf/bin/python scripts/make_tf_uneven_fixtures.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

OUT = Path("compat_tests/data/tf_uneven")
SIZES, INPUT, T, B = (6, 4, 3), 3, 5, 2


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    tf.compat.v1.disable_eager_execution()
    rng = np.random.default_rng(512256128)
    x_value = rng.uniform(-1, 1, (T, B, INPUT)).astype(np.float32)
    x = tf.compat.v1.placeholder(tf.float32, [None, None, INPUT])
    stack = tf.compat.v1.nn.rnn_cell.MultiRNNCell([tf.compat.v1.nn.rnn_cell.GRUCell(n) for n in SIZES])
    y, states = tf.compat.v1.nn.dynamic_rnn(stack, x, dtype=tf.float32, time_major=True)
    variables = tf.compat.v1.global_variables()
    with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        for v in variables:  # weights of a trained size, not the initializer's
            session.run(v.assign(rng.uniform(-0.9, 0.9, v.shape).astype(np.float32)))
        tf.compat.v1.train.Saver().save(session, str(OUT / "gru_6_4_3"), write_meta_graph=False)
        output, finals = session.run([y, states], {x: x_value})
    (OUT / "checkpoint").unlink(missing_ok=True)  # the Saver's bookkeeping file: not a checkpoint's part
    arrays = {"x": x_value, "output": output} | {f"output_h_{k}": h for k, h in enumerate(finals)}
    np.savez(OUT / "expected.npz", **arrays)
    provenance = {"tensorflow": tf.__version__, "cells": "tf.compat.v1.nn.rnn_cell.GRUCell", "sizes": list(SIZES),
                  "input_size": INPUT, "mode": "classic_gru", "saved_by": "tf.compat.v1.train.Saver",
                  "outputs_by": "tf.compat.v1.nn.dynamic_rnn", "prefix": "gru_6_4_3",
                  "variables": [v.name for v in variables]}
    (OUT / "provenance.json").write_text(json.dumps(provenance, indent=1) + "\n")


if __name__ == "__main__":
    main()
