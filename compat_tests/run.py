"""Running a config (``compat_tests.config``'s data): the float64 truth, from the plain cells of
``reference.spec``; the reference engine's own run (the ``reference`` peer, the implementation under test);
and any backend's ``forward`` on a case.
"""

from __future__ import annotations

import functools

import numpy as np

import reference
from reference import spec

from .config import Case, GradOutputs, Outputs, RNNConfig


def forward_case(model, cfg: RNNConfig, case: Case, is_training: bool, params=None):
    """``model.forward`` (any backend's) on ``case`` in ``cfg``'s layout, with ``params`` or the case's
    canonical weights packed by ``model``. A packed config's input goes in packed (``reference.pack``), and its
    result's ``output`` stays packed (:func:`padded` unpacks it)."""
    if params is None:
        params = model.canonical_to_params(case.weights, case.biases)
    if cfg.packed:
        return model.forward(reference.pack(case.x, case.lengths), case.h0, params, input_c=case.c0,
                             is_training=is_training)
    return model.forward(case.x, case.h0, params, input_c=case.c0, is_training=is_training,
                         sequence_lengths=case.lengths, time_major=cfg.time_major, padding_fill=cfg.padding_fill)


def padded(cfg: RNNConfig, sequence, to_numpy=np.asarray) -> np.ndarray:
    """A sequence result of ``cfg`` as a NumPy array in its layout: a packed one (``reference.PackedSequence``,
    its ``data`` made NumPy by ``to_numpy``) unpacked to ``cfg.seq_len`` steps, zeros past each length; any
    other as ``to_numpy`` gives it."""
    if isinstance(sequence, reference.PackedSequence):
        packed = reference.PackedSequence(to_numpy(sequence.data), sequence.batch_sizes)
        return reference.unpack(packed, total_length=cfg.seq_len)[0]
    return to_numpy(sequence)


def packed_like(cfg: RNNConfig, case: Case, sequence: np.ndarray):
    """A padded sequence of ``case`` (``dy``, say) as a packed config's call takes it; unpacked ones as they are."""
    return reference.pack(sequence, case.lengths) if cfg.packed else sequence


def misaligned(xp, a):
    """``a`` copied to a device view one element past an allocation's start (``xp``: CuPy or the fake)."""
    return xp.concatenate([xp.zeros(1, a.dtype), xp.asarray(a).ravel()])[1:].reshape(a.shape)


def _reference_forward(cfg: RNNConfig, case: Case, dtype: str | None, is_training: bool, math_type: str = "fma"):
    model = cfg.model(dtype, **({} if math_type == "fma" else {"math_type": math_type}))
    case = case.astype(model.dtype)
    return model, case, forward_case(model, cfg, case, is_training)


def run_reference(cfg: RNNConfig, case: Case, dtype: str | None = None, math_type: str = "fma") -> Outputs:
    """The reference engine's forward pass (``reference.CudnnGRU`` etc.: the implementation under test, the
    ``reference`` peer) of ``case`` in ``dtype`` (default the config's); inference mode. Not the truth:
    that is :func:`ground_truth`. ``math_type``: the engine's (``"tf32"``: a float32 model's TF32 math)."""
    _, _, result = _reference_forward(cfg, case, dtype, is_training=False, math_type=math_type)
    return Outputs(padded(cfg, result.output), result.output_h, result.output_c)


@functools.lru_cache(maxsize=512)
def _float64_model(mode: str, num_layers: int, num_units: int, input_size: int, input_mode: str, direction: str,
                   num_proj: int | None, bias_mode: str, cell_clip: tuple[float, float] | None):
    """The float64 reference model of an architecture, made once (a model's layout takes longer to compute than
    a small config's truth); only its pure methods are used, ``canonical_to_params`` and its attributes."""
    return RNNConfig(mode, num_layers, num_units, input_size, direction, input_mode, num_proj, dtype="float64",
                     bias_mode=bias_mode, cell_clip=cell_clip).model()


def float64_model(cfg: RNNConfig):
    """``cfg.model("float64")``, shared by every config of its architecture (see :func:`_float64_model`)."""
    return _float64_model(cfg.mode, cfg.num_layers, cfg.num_units, cfg.input_size, cfg.input_mode, cfg.direction,
                          cfg.num_proj, cfg.bias_mode, cfg.cell_clip)


def _spec_call(cfg: RNNConfig, case: Case, dropout: float, masks) -> tuple:
    """The float64 network of ``cfg`` and the arguments of a ``reference.spec`` call on ``case``'s values."""
    case = case.astype(np.float64)
    net = spec.Network.of(float64_model(cfg))
    options = dict(lengths=None if cfg.packed else case.lengths, dropout=dropout, masks=masks,
                   time_major=cfg.time_major)
    return net, case, options


def ground_truth(cfg: RNNConfig, case: Case, *, dropout: float = 0.0, masks=(), math_type: str = "fma") -> Outputs:
    """The float64 truth on the case's exact values, from the plain cells of ``reference.spec`` (never the
    engine under test): what every peer is measured against. ``masks``: the dropout keep-masks of a
    training pass with ``dropout`` (in ``cfg``'s layout), as a model's ``reserve.dropout_masks`` holds them.
    ``math_type="tf32"``: the TF32 truth (every GEMM's operands rounded to TF32, ``reference.spec``)."""
    net, case, options = _spec_call(cfg, case, dropout, masks)
    out = spec.forward(net, case.weights, case.biases, packed_like(cfg, case, case.x), case.h0, case.c0, **options,
                       padding_fill=cfg.padding_fill, math_type=math_type)
    return Outputs(padded(cfg, out.output), out.output_h, out.output_c)


def run_reference_backward(cfg: RNNConfig, case: Case, dtype: str | None = None,
                           math_type: str = "fma") -> GradOutputs:
    """The reference engine's forward (training, no dropout) and backward of ``case`` in ``dtype`` (default
    the config's); not the truth: that is :func:`ground_truth_backward`."""
    model, case, fwd = _reference_forward(cfg, case, dtype, is_training=True, math_type=math_type)
    grads = model.backward(fwd, packed_like(cfg, case, case.dy), case.dh, case.dc)
    return GradOutputs(padded(cfg, grads.input), grads.input_h, grads.input_c, grads.params)


def ground_truth_backward(cfg: RNNConfig, case: Case, *, dropout: float = 0.0, masks=()) -> GradOutputs:
    """The float64 truth's gradients of ``case.dy``/``dh``/``dc`` on the case's exact values, from
    ``reference.spec`` (see :func:`ground_truth`), the parameters' packed in the opaque layout."""
    return ground_truth_both(cfg, case, dropout=dropout, masks=masks)[1]


def ground_truth_both(cfg: RNNConfig, case: Case, *, dropout: float = 0.0, masks=()) -> tuple[Outputs, GradOutputs]:
    """:func:`ground_truth` (with zeros past each length, whatever ``cfg.padding_fill``) and
    :func:`ground_truth_backward` of one forward pass of the spec."""
    net, case, options = _spec_call(cfg, case, dropout, masks)
    out, grads = spec.forward_and_backward(net, case.weights, case.biases, packed_like(cfg, case, case.x), case.h0,
                                           case.c0, packed_like(cfg, case, case.dy), case.dh, case.dc, **options)
    d_params = float64_model(cfg).canonical_to_params(grads.weights, grads.biases)
    return (Outputs(padded(cfg, out.output), out.output_h, out.output_c),
            GradOutputs(padded(cfg, grads.input), grads.input_h, grads.input_c, d_params))
