"""What every peer adapter offers: availability, a declared feature set, and a forward pass.

Peers receive canonical weights (the common currency, see ``compat_tests.config.Case``) and convert
them to their own format at the edge. A peer declares what it supports in :class:`Capabilities`; the
Hypothesis strategies draw only supported configs, and :meth:`Peer.unsupported` explains the rest.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from ..config import BIAS_MODE_NAMES, DTYPE_NAMES, MODE_NAMES, Case, GradOutputs, Outputs, RNNConfig


@dataclass(frozen=True)
class Capabilities:
    """The configurations a peer can run; every ``reason_*`` says why a feature is missing."""

    modes: tuple[str, ...] = MODE_NAMES
    dtypes: tuple[str, ...] = DTYPE_NAMES
    skip_input: bool = True
    projection: bool = True
    lengths: bool = True
    batch_major: bool = True
    bidirectional: bool = True
    max_layers: int | None = None  # None: stacks of any depth
    backward: bool = True
    # cuDNN's cudnnRNNBiasMode_t by name (config.BIAS_MODE_NAMES); by default the double bias only, which every
    # peer written before the other modes takes (the canonical lists of a single mode are half as long)
    bias_modes: tuple[str, ...] = ("double",)
    # cuDNN's paddingFill: outputs past each length hold a value of the caller's; without it only zeros (every
    # peer written before it pads with zeros)
    padding_fill: bool = False
    # the LSTM's cell clipping (cudnnRNNSetClip_v9); without it, unclipped cell states only
    cell_clip: bool = False
    # cuDNN's SEQ_MAJOR_PACKED layout (reference.PackedSequence, PyTorch's PackedSequence) in and out
    packed: bool = False
    notes: tuple[tuple[str, str], ...] = ()  # (feature, why it is missing or emulated)

    def __post_init__(self) -> None:
        for field, allowed in (("modes", MODE_NAMES), ("dtypes", DTYPE_NAMES), ("bias_modes", BIAS_MODE_NAMES)):
            if not getattr(self, field) or not set(getattr(self, field)) <= set(allowed):
                raise ValueError(f"Capabilities.{field} must be a non-empty subset of {allowed}, "
                                 f"got {getattr(self, field)}")
        for name in ("skip_input", "projection", "lengths", "batch_major", "bidirectional", "backward",
                     "padding_fill", "cell_clip", "packed"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"Capabilities.{name} must be a bool, got {getattr(self, name)!r}")
        if self.max_layers is not None and (isinstance(self.max_layers, bool) or not isinstance(self.max_layers, int)
                                            or self.max_layers < 1):
            raise ValueError(f"Capabilities.max_layers must be None (any depth) or an int >= 1, "
                             f"got {self.max_layers!r}")

    def unsupported(self, cfg: RNNConfig) -> str | None:
        """``None`` if ``cfg`` can run here, else the reason it cannot."""
        why = dict(self.notes)
        if cfg.mode not in self.modes:
            return why.get("mode", f"mode {cfg.mode!r} not supported")
        if cfg.dtype not in self.dtypes:
            return why.get("dtype", f"dtype {cfg.dtype} not supported")
        if cfg.bias_mode not in self.bias_modes:
            return why.get("bias_mode", f"bias_mode {cfg.bias_mode!r} not supported")
        if cfg.input_mode == "skip_input" and not self.skip_input:
            return why.get("skip_input", "skip_input not supported")
        if cfg.num_proj is not None and not self.projection:
            return why.get("projection", "LSTM projection not supported")
        if cfg.lengths is not None and not self.lengths:
            return why.get("lengths", "sequence lengths not supported")
        if cfg.cell_clip is not None and not self.cell_clip:
            return why.get("cell_clip", f"cell_clip {cfg.cell_clip} not supported (an unclipped LSTM only)")
        if cfg.fills_padding and not self.padding_fill:
            return why.get("padding_fill", f"padding_fill {cfg.padding_fill!r} not supported (only zeros)")
        if cfg.packed and not self.packed:
            return why.get("packed", "packed sequences not supported")
        if not cfg.time_major and not self.batch_major:
            return why.get("batch_major", "batch-major layout not supported")
        if cfg.num_dirs == 2 and not self.bidirectional:
            return why.get("bidirectional", "bidirectional layers not supported")
        if self.max_layers is not None and cfg.num_layers > self.max_layers:
            return why.get("num_layers", f"stacks of more than {self.max_layers} layer(s) not supported")
        return None


class Peer(ABC):
    """One implementation under test.

    A plugin peer may declare its own exceptions to the tolerance policy, each with its reason:
    ``overrides`` (``compat_tests.policy.Override`` naming this peer: a budget of its own for a dtype and
    quantity) and ``known_divergences`` (``compat_tests.policy.Divergence`` naming this peer, in one of
    ``policy.PEER_AREAS``: the test expects the divergence, strictly). They travel with the peer: checked
    when the plugin loads (``policy.problem``), read from the peer by the policy's lookups, listed in
    reports and by ``rnn-compat peers``. The built-in peers' are tables: ``tolerances.OVERRIDES`` and
    ``known_divergences.KNOWN``."""

    name: str
    capabilities: Capabilities
    needs_gpu: bool = False  # a fleet run sends its units only to workers that declare the resource GPU
    tf32: bool = False  # its float32 GEMMs may read TF32 operands: conditioned at TF32's rounding size too
    tf32_in_every_gemm: bool = False  # with tf32: every GEMM does (not only those its kernels choose to)
    overrides: tuple = ()
    known_divergences: tuple = ()

    @abstractmethod
    def available(self) -> tuple[bool, str]:
        """``(True, version)`` or ``(False, why)``; never raises."""

    def unsupported(self, cfg: RNNConfig) -> str | None:
        return self.capabilities.unsupported(cfg)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    @abstractmethod
    def forward(self, cfg: RNNConfig, case: Case) -> Outputs:
        """Inference forward pass of ``case`` (config's dtype and layout); NumPy results."""

    def backward(self, cfg: RNNConfig, case: Case) -> GradOutputs:
        """Training forward, then the gradients of ``case.dy``/``dh``/``dc`` (peers with ``backward``)."""
        raise NotImplementedError(f"{self.name} has no backward pass")


def availability(peer: Peer) -> tuple[bool, str]:
    """``peer.available()`` held to its contract (never raises, returns ``(bool, str)``): a plugin's that
    raises or returns something else makes its peer unavailable, saying so, instead of stopping the command
    (``rnn-compat peers`` is how one finds out what is wrong with a peer)."""
    try:
        result = peer.available()
    except Exception as exc:
        return False, f"{type(peer).__name__}.available() raised {type(exc).__name__}: {exc}"
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], bool)
            and isinstance(result[1], str)):
        return False, f"{type(peer).__name__}.available() returned {result!r:.80}, not (bool, str)"
    return result
