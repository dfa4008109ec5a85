"""Write compat_tests/data/tf_bundle/: TensorFlow checkpoints written by TensorFlow's own ``SaveV2`` op (the
V2 tensor bundle behind ``tf.train.Saver`` and ``tf.train.Checkpoint``), the fixtures of
``compat_tests/tests/formats/test_tf_bundle.py``, and ``expected.npz``, the arrays handed to ``SaveV2``.

TensorFlow is not a dependency of this project; this needs it once, in a separate environment:
    python -m venv /tmp/tf && /tmp/tf/bin/pip install tensorflow-cpu numpy
    PYTHONPATH=. /tmp/tf/bin/python scripts/make_tf_bundle_fixtures.py
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import tensorflow as tf

from compat_tests.config import RNNConfig, make_case
from reference.formats import tf as tf_format

OUT = Path("compat_tests/data/tf_bundle")

# name -> (config, variable scope, tensors that are not the RNN's, as a trained TF 1.x model has them)
FIXTURES = {
    "lstm_bi_scoped": (RNNConfig("lstm", num_layers=2, num_units=4, input_size=3, direction="bidirectional",
                                 dtype="float32", seed=11), "main",
                       lambda rng: {"global_step": np.array(1234, dtype=np.int64),
                                    "main/cudnn_lstm/opaque_kernel/Adam": rng.standard_normal(40).astype(np.float32),
                                    "main/note": np.array(b"written by SaveV2")}),
    "gru_double": (RNNConfig("gru", num_units=5, input_size=2, dtype="float64", seed=12), None, lambda rng: {}),
    "tanh_half": (RNNConfig("tanh", num_layers=2, num_units=3, input_size=2, dtype="float16", seed=13), None,
                  lambda rng: {}),
    "gru_sharded": (RNNConfig("gru", num_layers=2, num_units=3, input_size=2, dtype="float32", seed=14), None,
                    lambda rng: {}),
}
SHARDED = {"gru_sharded": 2}  # saved in this many pieces, then merged as a sharded tf.train.Saver does
# An index over 256 KiB, so that TensorFlow's table builder splits it into several data blocks; its tensors are
# generated (not kept in expected.npz): test_tf_bundle.many_names() builds the same dict.
MANY_NAMES = {f"{2 * i:04d}/{'x' * 250}": np.float16(i) for i in range(1200)}  # even: separators shorten


def save(prefix: Path, tensors: dict) -> None:
    names = sorted(tensors)
    tf.raw_ops.SaveV2(prefix=str(prefix), tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(tensors[n]) for n in names])


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    expected, provenance = {}, {"tensorflow": tf.__version__, "op": "tf.raw_ops.SaveV2", "fixtures": {}}
    for name, (cfg, scope, extras) in FIXTURES.items():
        case = make_case(cfg)
        tensors = tf_format.to_tf(cfg.model(), case.weights, case.biases, scope) | extras(np.random.default_rng(cfg.seed))
        shards = SHARDED.get(name, 1)
        if shards == 1:
            save(OUT / name, tensors)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                names = sorted(tensors)
                parts = [Path(tmp) / f"part{k}" for k in range(shards)]
                for k, part in enumerate(parts):
                    save(part, {n: tensors[n] for n in names[k::shards]})
                tf.raw_ops.MergeV2Checkpoints(checkpoint_prefixes=[str(p) for p in parts],
                                              destination_prefix=str(OUT / name))
        expected |= {f"{name}:{n}": a for n, a in tensors.items() if a.dtype.kind != "S"}
        provenance["fixtures"][name] = {"config": json.loads(cfg.to_json()), "scope": scope, "shards": shards}
    save(OUT / "many_names", MANY_NAMES)
    np.savez(OUT / "expected.npz", **expected)
    (OUT / "provenance.json").write_text(json.dumps(provenance, indent=1) + "\n")


if __name__ == "__main__":
    main()
