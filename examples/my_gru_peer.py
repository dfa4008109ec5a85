"""Your own implementation as a peer: the suite and the divergence report run against it.

This file stands for your code. ``my_gru`` is a one-layer GRU written the way many ports are, in NumPy
with PyTorch-style stacked weights; ``MyGRUPeer`` is the adapter the suite needs: what it can run
(``capabilities``: the strategies draw only that, the report lists the rest as skipped with the notes'
reasons), whether it can run here (``available``), and a forward pass from a ``Case`` (canonical weights
and arrays in the config's dtype and layout) to ``Outputs``, and (optional: ``backward=True`` in its
capabilities) gradients from the case's ``dy``/``dh`` to ``GradOutputs``. Load it with ``--plugin PATH.py:ATTR``::

    rnn-compat check --plugin examples/my_gru_peer.py:MY_GRU --peer my-gru \\
        --config '{"mode": "gru", "dtype": "float32", "seq_len": 20}'
    rnn-compat report --plugin examples/my_gru_peer.py:BOTH --backends my-gru,my-textbook-gru --grid quick
    RNN_COMPAT_PLUGINS=examples/my_gru_peer.py:BOTH pytest compat_tests --peers my-gru,my-textbook-gru

``my-textbook-gru`` is the same code with the textbook candidate ``tanh(W x + R (r * h) + b)``: the usual
porting mistake. It loads cuDNN's weights without complaint, and the suite fails it, printing the
config and the command that reproduces the failure.

Both are judged by the policy's default budgets, which a correct port meets. A peer whose arithmetic
differs by design (half-precision math, say) declares a budget of its own with its reason, and a known
divergence likewise: ``overrides`` and ``known_divergences`` on the class (README, "Your own
implementation as a peer"). A wrong port must not: the textbook GRU is another function, not rounding.
"""

from __future__ import annotations

import numpy as np

from compat_tests.config import Case, GradOutputs, Outputs, RNNConfig
from compat_tests.peers import Capabilities, Peer


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-v))


def my_gru(x: np.ndarray, h: np.ndarray, w_ih: np.ndarray, w_hh: np.ndarray, b_ih: np.ndarray,
           b_hh: np.ndarray, reset_after: bool = True, trace: list | None = None) -> tuple[np.ndarray, np.ndarray]:
    """x ``[T, B, I]``, h ``[B, H]``, weights ``[3H, I]``/``[3H, H]`` and biases ``[3H]`` stacked (r, z, n);
    returns the outputs ``[T, B, H]`` and the last state ``[B, H]``. A ``trace`` list gets each step's
    ``(h_prev, r, z, n, m)`` for :func:`my_gru_backward` (``m``: what the reset gate multiplies)."""
    H = h.shape[1]
    outputs = []
    for x_t in x:
        gi = x_t @ w_ih.T + b_ih
        gh = h @ w_hh[:2 * H].T + b_hh[:2 * H]
        r = _sigmoid(gi[:, :H] + gh[:, :H])
        z = _sigmoid(gi[:, H:2 * H] + gh[:, H:2 * H])
        if reset_after:  # cuDNN's GRU: the reset gate scales the recurrent term, bias included
            m = h @ w_hh[2 * H:].T + b_hh[2 * H:]
            n = np.tanh(gi[:, 2 * H:] + r * m)
        else:  # the textbook GRU: the reset gate scales the state before its matrix
            m = h
            n = np.tanh(gi[:, 2 * H:] + (r * h) @ w_hh[2 * H:].T + b_hh[2 * H:])
        if trace is not None:
            trace.append((h, r, z, n, m))
        h = (1 - z) * n + z * h
        outputs.append(h)
    return np.stack(outputs), h


def my_gru_backward(x: np.ndarray, trace: list, w_ih: np.ndarray, w_hh: np.ndarray, dy: np.ndarray,
                    dh: np.ndarray, reset_after: bool = True) -> tuple[np.ndarray, ...]:
    """Backpropagation through time of :func:`my_gru` from the gradients of its outputs ``dy [T, B, H]``
    and last state ``dh [B, H]``: returns the gradients of x, h, w_ih, w_hh, b_ih and b_hh."""
    H = dh.shape[1]
    dx, dw_ih, dw_hh = np.zeros_like(x), np.zeros_like(w_ih), np.zeros_like(w_hh)
    db_ih, db_hh = np.zeros(3 * H, x.dtype), np.zeros(3 * H, x.dtype)
    for t in reversed(range(len(x))):
        h, r, z, n, m = trace[t]
        dh = dh + dy[t]
        dn = dh * (1 - z) * (1 - n * n)  # through tanh: the candidate's pre-activation
        if reset_after:
            dm = dn * r  # m = h @ w_hn.T + b_hn
            dr, dh_prev = dn * m, z * dh + dm @ w_hh[2 * H:]
            dw_hh[2 * H:] += dm.T @ h
            db_hh[2 * H:] += dm.sum(0)
        else:
            d_rh = dn @ w_hh[2 * H:]  # r * h enters w_hn
            dr, dh_prev = d_rh * h, z * dh + d_rh * r
            dw_hh[2 * H:] += dn.T @ (r * h)
            db_hh[2 * H:] += dn.sum(0)
        d_rz = np.concatenate([dr * r * (1 - r), dh * (h - n) * z * (1 - z)], axis=1)  # through the sigmoids
        d_gi = np.concatenate([d_rz, dn], axis=1)
        dx[t] = d_gi @ w_ih
        dw_ih += d_gi.T @ x[t]
        db_ih += d_gi.sum(0)
        dw_hh[:2 * H] += d_rz.T @ h
        db_hh[:2 * H] += d_rz.sum(0)
        dh = dh_prev + d_rz @ w_hh[:2 * H]
    return dx, dh, dw_ih, dw_hh, db_ih, db_hh


class MyGRUPeer(Peer):
    def __init__(self, name: str, reset_after: bool):
        self.name, self.reset_after = name, reset_after
        self.capabilities = Capabilities(
            modes=("gru",), dtypes=("float32", "float64"), skip_input=False, projection=False, lengths=False,
            batch_major=False, bidirectional=False, max_layers=1, backward=True,
            notes=(("mode", "my_gru is a GRU"), ("dtype", "my_gru computes in its inputs' dtype; no float16"),
                   ("lengths", "my_gru runs every step"), ("num_layers", "my_gru is one layer")),
        )

    def available(self) -> tuple[bool, str]:
        return True, f"numpy {np.__version__}"

    def forward(self, cfg: RNNConfig, case: Case) -> Outputs:
        output, h = my_gru(case.x, *self._weights(cfg, case), reset_after=self.reset_after)
        return Outputs(output, h[None], None)

    def backward(self, cfg: RNNConfig, case: Case) -> GradOutputs:
        h0, w_ih, w_hh, b_ih, b_hh = self._weights(cfg, case)
        trace: list = []
        my_gru(case.x, h0, w_ih, w_hh, b_ih, b_hh, reset_after=self.reset_after, trace=trace)
        dh = case.dh[0] if case.dh is not None else np.zeros_like(h0)
        dx, dh0, dw_ih, dw_hh, db_ih, db_hh = my_gru_backward(case.x, trace, w_ih, w_hh, case.dy, dh,
                                                              reset_after=self.reset_after)
        # The suite compares parameter gradients in the reference's opaque layout, packed from canonical ones.
        d_params = cfg.model().canonical_to_params([*np.split(dw_ih, 3), *np.split(dw_hh, 3)],
                                                   [*np.split(db_ih, 3), *np.split(db_hh, 3)])
        return GradOutputs(dx, dh0[None], None, d_params)

    @staticmethod
    def _weights(cfg: RNNConfig, case: Case) -> tuple[np.ndarray, ...]:
        # Canonical weights of a one-layer unidirectional GRU (TensorFlow's order): input-side r, z, h, then
        # recurrent r, z, h; biases likewise. PyTorch stacks the same gates in the same order.
        w_ih, w_hh = np.concatenate(case.weights[:3]), np.concatenate(case.weights[3:])
        b_ih, b_hh = np.concatenate(case.biases[:3]), np.concatenate(case.biases[3:])
        h0 = case.h0[0] if case.h0 is not None else np.zeros((cfg.batch, cfg.num_units), case.x.dtype)
        return h0, w_ih, w_hh, b_ih, b_hh


MY_GRU = MyGRUPeer("my-gru", reset_after=True)
MY_TEXTBOOK_GRU = MyGRUPeer("my-textbook-gru", reset_after=False)
BOTH = [MY_GRU, MY_TEXTBOOK_GRU]
