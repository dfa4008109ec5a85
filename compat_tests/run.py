"""Running a config (``compat_tests.config``'s data): the float64 truth, from the plain cells of
``reference.spec``; the reference engine's own run (the ``reference`` peer, the implementation under test);
and any backend's ``forward`` on a case.
"""

from __future__ import annotations

import numpy as np

from reference import spec

from .config import Case, GradOutputs, Outputs, RNNConfig


def forward_case(model, cfg: RNNConfig, case: Case, is_training: bool, params=None):
    """``model.forward`` (any backend's) on ``case`` in ``cfg``'s layout, with ``params`` or the case's
    canonical weights packed by ``model``."""
    if params is None:
        params = model.canonical_to_params(case.weights, case.biases)
    return model.forward(case.x, case.h0, params, input_c=case.c0, is_training=is_training,
                         sequence_lengths=case.lengths, time_major=cfg.time_major, padding_fill=cfg.padding_fill)


def misaligned(xp, a):
    """``a`` copied to a device view one element past an allocation's start (``xp``: CuPy or the fake)."""
    return xp.concatenate([xp.zeros(1, a.dtype), xp.asarray(a).ravel()])[1:].reshape(a.shape)


def _reference_forward(cfg: RNNConfig, case: Case, dtype: str | None, is_training: bool):
    model = cfg.model(dtype)
    case = case.astype(model.dtype)
    return model, case, forward_case(model, cfg, case, is_training)


def run_reference(cfg: RNNConfig, case: Case, dtype: str | None = None) -> Outputs:
    """The reference engine's forward pass (``reference.CudnnGRU`` etc.: the implementation under test, the
    ``reference`` peer) of ``case`` in ``dtype`` (default the config's); inference mode. Not the truth:
    that is :func:`ground_truth`."""
    _, _, result = _reference_forward(cfg, case, dtype, is_training=False)
    return Outputs(result.output, result.output_h, result.output_c)


def _spec_call(cfg: RNNConfig, case: Case, dropout: float, masks) -> tuple:
    """The float64 network of ``cfg`` and the arguments of a ``reference.spec`` call on ``case``'s values."""
    case = case.astype(np.float64)
    net = spec.Network.of(cfg.model("float64"))
    options = dict(lengths=case.lengths, dropout=dropout, masks=masks, time_major=cfg.time_major)
    return net, case, options


def ground_truth(cfg: RNNConfig, case: Case, *, dropout: float = 0.0, masks=()) -> Outputs:
    """The float64 truth on the case's exact values, from the plain cells of ``reference.spec`` (never the
    engine under test): what every peer is measured against. ``masks``: the dropout keep-masks of a
    training pass with ``dropout`` (in ``cfg``'s layout), as a model's ``reserve.dropout_masks`` holds them."""
    net, case, options = _spec_call(cfg, case, dropout, masks)
    return Outputs(*spec.forward(net, case.weights, case.biases, case.x, case.h0, case.c0, **options,
                                 padding_fill=cfg.padding_fill))


def run_reference_backward(cfg: RNNConfig, case: Case, dtype: str | None = None) -> GradOutputs:
    """The reference engine's forward (training, no dropout) and backward of ``case`` in ``dtype`` (default
    the config's); not the truth: that is :func:`ground_truth_backward`."""
    model, case, fwd = _reference_forward(cfg, case, dtype, is_training=True)
    grads = model.backward(fwd, case.dy, case.dh, case.dc)
    return GradOutputs(grads.input, grads.input_h, grads.input_c, grads.params)


def ground_truth_backward(cfg: RNNConfig, case: Case, *, dropout: float = 0.0, masks=()) -> GradOutputs:
    """The float64 truth's gradients of ``case.dy``/``dh``/``dc`` on the case's exact values, from
    ``reference.spec`` (see :func:`ground_truth`), the parameters' packed in the opaque layout."""
    net, case, options = _spec_call(cfg, case, dropout, masks)
    grads = spec.backward(net, case.weights, case.biases, case.x, case.h0, case.c0, case.dy, case.dh, case.dc,
                          **options)
    d_params = cfg.model("float64").canonical_to_params(grads.weights, grads.biases)
    return GradOutputs(grads.input, grads.input_h, grads.input_c, d_params)
