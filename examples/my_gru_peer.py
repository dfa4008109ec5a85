"""Your own implementation as a peer: the suite and the divergence report run against it.

This file stands for your code. ``my_gru`` is a one-layer GRU written the way many ports are, in NumPy
with PyTorch-style stacked weights; ``MyGRUPeer`` is the adapter the suite needs: what it can run
(``capabilities``: the strategies draw only that, the report lists the rest as skipped with the notes'
reasons), whether it can run here (``available``), and a forward pass from a ``Case`` (canonical weights
and arrays in the config's dtype and layout) to ``Outputs``. Load it with ``--plugin PATH.py:ATTR``::

    rnn-compat check --plugin examples/my_gru_peer.py:MY_GRU --peer my-gru \\
        --config '{"mode": "gru", "dtype": "float32", "seq_len": 20}'
    rnn-compat report --plugin examples/my_gru_peer.py:BOTH --backends my-gru,my-textbook-gru --grid quick
    RNN_COMPAT_PLUGINS=examples/my_gru_peer.py:BOTH pytest compat_tests --peers my-gru,my-textbook-gru

``my-textbook-gru`` is the same code with the textbook candidate ``tanh(W x + R (r * h) + b)``: the usual
porting mistake. It loads cuDNN's weights without complaint, and the suite fails it, printing the
config and the command that reproduces the failure.
"""

from __future__ import annotations

import numpy as np

from compat_tests.config import Case, Outputs, RNNConfig
from compat_tests.peers import Capabilities, Peer


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-v))


def my_gru(x: np.ndarray, h: np.ndarray, w_ih: np.ndarray, w_hh: np.ndarray, b_ih: np.ndarray,
           b_hh: np.ndarray, reset_after: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """x ``[T, B, I]``, h ``[B, H]``, weights ``[3H, I]``/``[3H, H]`` and biases ``[3H]`` stacked (r, z, n);
    returns the outputs ``[T, B, H]`` and the last state ``[B, H]``."""
    H = h.shape[1]
    outputs = []
    for x_t in x:
        gi = x_t @ w_ih.T + b_ih
        gh = h @ w_hh[:2 * H].T + b_hh[:2 * H]
        r = _sigmoid(gi[:, :H] + gh[:, :H])
        z = _sigmoid(gi[:, H:2 * H] + gh[:, H:2 * H])
        if reset_after:  # cuDNN's GRU: the reset gate scales the recurrent term, bias included
            n = np.tanh(gi[:, 2 * H:] + r * (h @ w_hh[2 * H:].T + b_hh[2 * H:]))
        else:  # the textbook GRU: the reset gate scales the state before its matrix
            n = np.tanh(gi[:, 2 * H:] + (r * h) @ w_hh[2 * H:].T + b_hh[2 * H:])
        h = (1 - z) * n + z * h
        outputs.append(h)
    return np.stack(outputs), h


class MyGRUPeer(Peer):
    def __init__(self, name: str, reset_after: bool):
        self.name, self.reset_after = name, reset_after
        self.capabilities = Capabilities(
            modes=("gru",), dtypes=("float32", "float64"), skip_input=False, projection=False, lengths=False,
            batch_major=False, bidirectional=False, max_layers=1, backward=False,
            notes=(("mode", "my_gru is a GRU"), ("dtype", "my_gru computes in its inputs' dtype; no float16"),
                   ("lengths", "my_gru runs every step"), ("num_layers", "my_gru is one layer")),
        )

    def available(self) -> tuple[bool, str]:
        return True, f"numpy {np.__version__}"

    def forward(self, cfg: RNNConfig, case: Case) -> Outputs:
        # Canonical weights of a one-layer unidirectional GRU (TensorFlow's order): input-side r, z, h, then
        # recurrent r, z, h; biases likewise. PyTorch stacks the same gates in the same order.
        w_ih, w_hh = np.concatenate(case.weights[:3]), np.concatenate(case.weights[3:])
        b_ih, b_hh = np.concatenate(case.biases[:3]), np.concatenate(case.biases[3:])
        h0 = case.h0[0] if case.h0 is not None else np.zeros((cfg.batch, cfg.num_units), case.x.dtype)
        output, h = my_gru(case.x, h0, w_ih, w_hh, b_ih, b_hh, reset_after=self.reset_after)
        return Outputs(output, h[None], None)


MY_GRU = MyGRUPeer("my-gru", reset_after=True)
MY_TEXTBOOK_GRU = MyGRUPeer("my-textbook-gru", reset_after=False)
BOTH = [MY_GRU, MY_TEXTBOOK_GRU]
