"""Write compat_tests/data/tf_kernels/: outputs of TensorFlow's own RNN cell kernels on weights in TensorFlow's
cell formats (``reference.formats.tf``), the fixtures of ``compat_tests/tests/formats/test_tf_kernels.py``.

``LSTMBlockCell`` is the op behind ``LSTMBlockCell`` and so behind ``CudnnCompatibleLSTMCell`` (forget_bias 0,
no peepholes, no clipping); ``GRUBlockCell`` is TensorFlow's textbook GRU (the ``gru_cell`` format of
``classic_gru``). TensorFlow 2 has no kernel for ``CudnnCompatibleGRUCell`` (it was Python in tf.contrib) nor
a CPU kernel for the fused ``CudnnRNN`` ops. Layers are stacked here by feeding each layer's outputs to the
next; one direction only.

TensorFlow is not a dependency of this project; this needs it once, in a separate environment:
    python -m venv /tmp/tf && /tmp/tf/bin/pip install tensorflow-cpu numpy
    PYTHONPATH=. /tmp/tf/bin/python scripts/make_tf_kernel_fixtures.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import tensorflow as tf

from compat_tests.config import RNNConfig, make_case
from reference.formats import tf as tf_format

OUT = Path("compat_tests/data/tf_kernels")
FIXTURES = {
    "lstm_float32": RNNConfig("lstm", num_layers=2, num_units=6, input_size=4, seq_len=7, batch=3, dtype="float32",
                              seed=21),
    "lstm_float16": RNNConfig("lstm", num_units=5, input_size=3, seq_len=6, batch=2, dtype="float16", seed=22),
    "classic_gru_float32": RNNConfig("classic_gru", num_layers=2, num_units=6, input_size=4, seq_len=7, batch=3,
                                     dtype="float32", seed=23),
}


def lstm_step(t: dict, p: str, x, h, c):
    zeros = np.zeros(h.shape[1], h.dtype)
    out = tf.raw_ops.LSTMBlockCell(x=x, cs_prev=c, h_prev=h, w=t[f"{p}/kernel"], wci=zeros, wcf=zeros, wco=zeros,
                                   b=t[f"{p}/bias"], forget_bias=0.0, cell_clip=-1.0, use_peephole=False)
    return out.h.numpy(), out.cs.numpy()


def gru_step(t: dict, p: str, x, h, c):
    out = tf.raw_ops.GRUBlockCell(x=x, h_prev=h, w_ru=t[f"{p}/gates/kernel"], w_c=t[f"{p}/candidate/kernel"],
                                  b_ru=t[f"{p}/gates/bias"], b_c=t[f"{p}/candidate/bias"])
    return out.h.numpy(), None


def run(cfg: RNNConfig, tensors: dict, x, h0, c0):
    """TensorFlow's cells over ``x [T, B, I]``, layer after layer: ``(output, output_h, output_c)``."""
    model = cfg.model()
    step = lstm_step if cfg.mode == "lstm" else gru_step
    inputs, last_h, last_c = x, [], []
    for layer in range(cfg.num_layers):
        p = tf_format.cell_prefix(model, layer)
        h, c = h0[layer], None if c0 is None else c0[layer]
        outputs = []
        for x_t in inputs:
            h, c = step(tensors, p, x_t, h, c)
            outputs.append(h)
        inputs = np.stack(outputs)
        last_h.append(h)
        last_c.append(c)
    return inputs, np.stack(last_h), None if c0 is None else np.stack(last_c)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    arrays, provenance = {}, {"tensorflow": tf.__version__, "fixtures": {}}
    for name, cfg in FIXTURES.items():
        case = make_case(cfg)
        tensors = tf_format.to_tf(cfg.model(), case.weights, case.biases)
        output, output_h, output_c = run(cfg, tensors, case.x, case.h0, case.c0)
        named = {"x": case.x, "h0": case.h0, "c0": case.c0, "output": output, "output_h": output_h,
                 "output_c": output_c} | {f"tf:{k}": v for k, v in tensors.items()}
        arrays |= {f"{name}:{k}": v for k, v in named.items() if v is not None}
        provenance["fixtures"][name] = {"config": json.loads(cfg.to_json()),
                                        "kernel": "LSTMBlockCell" if cfg.mode == "lstm" else "GRUBlockCell"}
    np.savez(OUT / "captured.npz", **arrays)
    (OUT / "provenance.json").write_text(json.dumps(provenance, indent=1) + "\n")


if __name__ == "__main__":
    main()
