"""Write compat_tests/data/tf_graphs/: TensorFlow 1 frozen graphs (``GraphDef`` files whose variables
``convert_variables_to_constants`` turned into ``Const`` nodes), built and frozen by TensorFlow 2.21's
``tf.compat.v1``, the fixtures of ``compat_tests/tests/formats/test_tf_graphs.py``.

- ``lstm_stack.pb``, ``lstm_uneven.pb``: LSTM stacks under TensorFlow's cell names
  (``rnn/multi_rnn_cell/cell_N/cudnn_compatible_lstm_cell/...``), computed by TensorFlow's ``LSTMBlockCell``
  kernel (the op behind ``CudnnCompatibleLSTMCell``) step by step; the frozen graph is run again by
  TensorFlow (imported into a fresh graph) and its outputs kept in ``outputs.npz``. ``lstm_uneven``'s layers
  differ in size (a chain).
- ``cudnn_*.pb``: graphs of ``tf.raw_ops.CudnnRNN``/``CudnnRNNV2``/``CudnnRNNV3`` over an opaque ``params``
  variable, as ``CudnnLSTM``/``CudnnGRU``/... build them. TensorFlow has no CPU kernel for these ops, so they
  are built and frozen, not run; the buffer's values are the fixture's canonical weights packed in cuDNN's
  layout by the reference (``RNNModel.canonical_to_params``), and the same canonical weights are saved by
  TensorFlow's ``tf.train.Saver`` under TensorFlow's canonical names (``cudnn_*.ckpt``) for the test to read
  back. Some graphs leave ``input_h``'s shape unknown, so the sizes come from the buffer's size.

TensorFlow is not a dependency of this project; this needs it once, in a separate environment:
    python -m venv /tmp/tf && /tmp/tf/bin/pip install tensorflow-cpu numpy
    PYTHONPATH=. /tmp/tf/bin/python scripts/make_tf_graph_fixtures.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import tensorflow as tf

from compat_tests.config import RNNConfig, make_case
from reference.formats import tf as tf_format

OUT = Path("compat_tests/data/tf_graphs")
V1 = tf.compat.v1
CELL_STACKS = {  # name -> one config a layer (a MultiRNNCell's cells), each one direction, time-major
    "lstm_stack": [RNNConfig("lstm", num_units=6, input_size=4, seq_len=5, batch=3, initial_state=False, seed=31, dtype="float32"),
                   RNNConfig("lstm", num_units=6, input_size=6, seq_len=5, batch=3, initial_state=False, seed=32, dtype="float32")],
    "lstm_uneven": [RNNConfig("lstm", num_units=6, input_size=4, seq_len=5, batch=3, initial_state=False, seed=33, dtype="float32"),
                    RNNConfig("lstm", num_units=3, input_size=6, seq_len=5, batch=3, initial_state=False, seed=34, dtype="float32")],
}
# name -> (op, config, CudnnRNN attributes, whether input_h's shape is left unknown)
CUDNN = {
    "cudnn_lstm_bidirectional_v3": ("CudnnRNNV3", RNNConfig("lstm", num_layers=3, num_units=5, input_size=4,
                                                            direction="bidirectional", seed=41, dtype="float32"), {}, False),
    "cudnn_gru_v1_unknown_state": ("CudnnRNN", RNNConfig("gru", num_layers=2, num_units=6, input_size=3, seed=42, dtype="float32"),
                                   {}, True),
    "cudnn_tanh_v2_auto_select": ("CudnnRNNV2", RNNConfig("tanh", num_layers=2, num_units=4, input_size=4,
                                                          input_mode="skip_input", seed=43, dtype="float32"),
                                  {"input_mode": "auto_select"}, False),
    "cudnn_lstm_projection_v3": ("CudnnRNNV3", RNNConfig("lstm", num_layers=2, num_units=6, input_size=3,
                                                         num_proj=4, seed=44, dtype="float32"), {}, False),
}
MODES = {"relu": "rnn_relu", "tanh": "rnn_tanh", "lstm": "lstm", "gru": "gru"}


def lstm_stack(name: str, layers: list[RNNConfig]) -> dict:
    cases = [make_case(cfg) for cfg in layers]
    first = layers[0]
    graph = tf.Graph()
    with graph.as_default():
        x = V1.placeholder(tf.float32, (first.seq_len, first.batch, first.input_size), name="x")
        inputs = tf.unstack(x)
        for k, (cfg, case) in enumerate(zip(layers, cases)):
            tensors = tf_format.to_tf(cfg.model(), case.weights, case.biases)
            prefix = f"rnn/multi_rnn_cell/cell_{k}/cudnn_compatible_lstm_cell"
            kernel = V1.get_variable(f"{prefix}/kernel", initializer=tensors[f"{tf_format.cell_prefix(cfg.model(), 0)}/kernel"])
            bias = V1.get_variable(f"{prefix}/bias", initializer=tensors[f"{tf_format.cell_prefix(cfg.model(), 0)}/bias"])
            h = c = tf.zeros((cfg.batch, cfg.num_units))
            zeros = tf.zeros((cfg.num_units,))
            outputs = []
            for x_t in inputs:
                step = tf.raw_ops.LSTMBlockCell(x=x_t, cs_prev=c, h_prev=h, w=kernel, wci=zeros, wcf=zeros, wco=zeros,
                                                b=bias, forget_bias=0.0, cell_clip=-1.0, use_peephole=False)
                h, c = step.h, step.cs
                outputs.append(h)
            tf.stack(outputs, name=f"layer{k}/output")
            tf.identity(h, name=f"layer{k}/output_h")
            tf.identity(c, name=f"layer{k}/output_c")
            inputs = outputs
        fetched = [f"layer{k}/{what}" for k in range(len(layers)) for what in ("output", "output_h", "output_c")]
        with V1.Session(graph=graph) as sess:
            sess.run(V1.global_variables_initializer())
            frozen = V1.graph_util.convert_variables_to_constants(sess, graph.as_graph_def(), fetched)
    (OUT / f"{name}.pb").write_bytes(frozen.SerializeToString())
    x_value = cases[0].x.astype(np.float32)
    run = tf.Graph()  # the frozen graph itself, run by TensorFlow
    with run.as_default():
        V1.import_graph_def(frozen, name="")
        with V1.Session(graph=run) as sess:
            values = sess.run([f"{n}:0" for n in fetched], {"x:0": x_value})
    return {f"{name}:x": x_value} | {f"{name}:{n}": v for n, v in zip(fetched, values)}


def cudnn_graph(name: str, op: str, cfg: RNNConfig, attrs: dict, unknown_state: bool) -> None:
    case = make_case(cfg)
    model = cfg.model()
    buffer = model.canonical_to_params(case.weights, case.biases)
    LD, H = cfg.num_layers * cfg.num_dirs, cfg.num_units
    scope = {"lstm": "cudnn_lstm", "gru": "cudnn_gru", "tanh": "cudnn_rnn_tanh", "relu": "cudnn_rnn_relu"}[cfg.mode]

    def build(with_op: bool) -> tf.Graph:
        """The graph; without the op, the same variables under the same names: TensorFlow places every node of
        a session's graph on a device with a kernel, and the CudnnRNN ops have none on a CPU, so the variables
        are read in a twin graph without it (convert_variables_to_constants reads them by name)."""
        graph = tf.Graph()
        with graph.as_default():
            x = V1.placeholder(tf.float32, (cfg.seq_len, cfg.batch, cfg.input_size), name="x")
            state = (None, None, None) if unknown_state else (LD, cfg.batch, cfg.num_proj or H)
            h = V1.placeholder(tf.float32, state, name="input_h")
            c = V1.placeholder(tf.float32, (None, None, None) if unknown_state else (LD, cfg.batch, H), name="input_c")
            params = V1.get_variable(f"{scope}/opaque_kernel", initializer=buffer)
            if with_op:
                kw = dict(input=x, input_h=h, input_c=c, params=params, rnn_mode=MODES[cfg.mode],
                          input_mode=attrs.get("input_mode", cfg.input_mode),
                          direction="bidirectional" if cfg.num_dirs == 2 else "unidirectional", is_training=False,
                          name=f"{scope}/CudnnRNN")
                if op == "CudnnRNNV3":
                    lengths = V1.placeholder(tf.int32, (cfg.batch,), name="sequence_lengths")
                    getattr(tf.raw_ops, op)(sequence_lengths=lengths, num_proj=cfg.num_proj or 0, time_major=True,
                                            **kw)
                else:
                    getattr(tf.raw_ops, op)(**kw)
        return graph

    twin = build(False)
    with V1.Session(graph=twin) as sess:
        sess.run(V1.variables_initializer(twin.get_collection(V1.GraphKeys.GLOBAL_VARIABLES)))
        frozen = V1.graph_util.convert_variables_to_constants(sess, build(True).as_graph_def(), [f"{scope}/CudnnRNN"])
    (OUT / f"{name}.pb").write_bytes(frozen.SerializeToString())
    canonical = tf.Graph()  # the same weights as TensorFlow's canonical save format names them, saved by its Saver
    with canonical.as_default():
        variables = [V1.get_variable(n, initializer=v) for n, v in tf_format.to_tf(model, case.weights,
                                                                                      case.biases).items()]
        with V1.Session(graph=canonical) as sess:
            sess.run(V1.global_variables_initializer())
            V1.train.Saver(variables).save(sess, str(OUT / f"{name}.ckpt"), write_meta_graph=False,
                                           write_state=False)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    arrays, provenance = {}, {"tensorflow": tf.__version__, "fixtures": {}}
    for name, layers in CELL_STACKS.items():
        arrays |= lstm_stack(name, layers)
        provenance["fixtures"][name] = {"layers": [json.loads(cfg.to_json()) for cfg in layers],
                                        "kernel": "LSTMBlockCell"}
    for name, (op, cfg, attrs, unknown_state) in CUDNN.items():
        cudnn_graph(name, op, cfg, attrs, unknown_state)
        provenance["fixtures"][name] = {"op": op, "config": json.loads(cfg.to_json()), "attributes": attrs,
                                        "input_h_shape_unknown": unknown_state}
    np.savez(OUT / "outputs.npz", **arrays)
    (OUT / "provenance.json").write_text(json.dumps(provenance, indent=1) + "\n")


if __name__ == "__main__":
    main()
