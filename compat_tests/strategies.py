"""Hypothesis strategies, composed from small pieces, for RNN configurations.

Every draw is labelled, so a failing example prints as a readable config. Sizes stay small (the property
tests run many examples) and weight scales stay where the dynamics are not chaotic, so a tolerance
failure means an implementation difference rather than an ill-conditioned example (see
``compat_tests.conditioning``). ``rnn_configs(capabilities)`` draws only what a peer supports.
"""

from __future__ import annotations

from hypothesis import strategies as st

from .config import DTYPE_NAMES, MODE_NAMES, RNNConfig
from .peers.base import Capabilities

MAX_LAYERS = 3
MAX_UNITS = 8
MAX_INPUT = 8
MAX_TIME = 6
MAX_BATCH = 4
WEIGHT_SCALES = (0.5, 1.0, 2.0)


def modes(allowed: tuple[str, ...] = MODE_NAMES) -> st.SearchStrategy[str]:
    return st.sampled_from(allowed)


def dtypes(allowed: tuple[str, ...] = DTYPE_NAMES) -> st.SearchStrategy[str]:
    return st.sampled_from(allowed)


def directions() -> st.SearchStrategy[str]:
    return st.sampled_from(("unidirectional", "bidirectional"))


def seeds() -> st.SearchStrategy[int]:
    return st.integers(0, 2**32 - 1)


@st.composite
def lengths_for(draw: st.DrawFn, seq_len: int, batch: int) -> tuple[int, ...] | None:
    """``None`` (all full length) or one length per sequence in ``1..seq_len``."""
    if not draw(st.booleans(), label="ragged"):
        return None
    return tuple(draw(st.lists(st.integers(1, seq_len), min_size=batch, max_size=batch), label="lengths"))


@st.composite
def rnn_configs(
    draw: st.DrawFn,
    capabilities: Capabilities = Capabilities(),
    *,
    modes_: tuple[str, ...] | None = None,
    dtypes_: tuple[str, ...] | None = None,
    max_layers: int = MAX_LAYERS,
    max_units: int = MAX_UNITS,
    max_input: int = MAX_INPUT,
    max_time: int = MAX_TIME,
    max_batch: int = MAX_BATCH,
) -> RNNConfig:
    """A config the given capabilities support, drawn piece by piece (sizes capped by the ``max_*``)."""
    mode = draw(modes(modes_ or capabilities.modes), label="mode")
    dtype = draw(dtypes(dtypes_ or capabilities.dtypes), label="dtype")
    num_layers = draw(st.integers(1, min(max_layers, capabilities.max_layers or max_layers)), label="num_layers")
    num_units = draw(st.integers(1, max_units), label="num_units")
    skip = capabilities.skip_input and draw(st.booleans(), label="skip_input")
    input_size = num_units if skip else draw(st.integers(1, max_input), label="input_size")
    num_proj = None
    if mode == "lstm" and capabilities.projection and num_units > 1 and draw(st.booleans(), label="project"):
        num_proj = draw(st.integers(1, num_units - 1), label="num_proj")
    seq_len = draw(st.integers(1, max_time), label="seq_len")
    batch = draw(st.integers(1, max_batch), label="batch")
    lengths = draw(lengths_for(seq_len, batch), label="lengths") if capabilities.lengths else None
    time_major = draw(st.booleans(), label="time_major") if capabilities.batch_major else True
    return RNNConfig(
        mode=mode, num_layers=num_layers, num_units=num_units, input_size=input_size,
        direction=draw(directions(), label="direction") if capabilities.bidirectional else "unidirectional",
        input_mode="skip_input" if skip else "linear_input",
        num_proj=num_proj, seq_len=seq_len, batch=batch, lengths=lengths, time_major=time_major, dtype=dtype,
        weight_scale=draw(st.sampled_from(WEIGHT_SCALES), label="weight_scale"),
        initial_state=draw(st.booleans(), label="initial_state"),
        seed=draw(seeds(), label="seed"),
    )


def damaged(data, blob: bytes) -> bytes:
    """``blob`` (a file's bytes) with a few bytes overwritten, most often in the first 512 (headers, names, a
    config), perhaps cut short; drawn from ``data`` (``st.data()``)."""
    out = bytearray(blob)
    anywhere, header = st.integers(0, len(blob) - 1), st.integers(0, min(len(blob), 512) - 1)
    for at, value in data.draw(st.lists(st.tuples(header | anywhere, st.integers(0, 255)), min_size=1, max_size=6),
                               label="overwrite (offset, byte)"):
        out[at] = value
    cut = data.draw(st.none() | st.integers(0, len(blob) - 1), label="cut at")
    return bytes(out if cut is None else out[:cut])
