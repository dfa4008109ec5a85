"""Hypothesis strategies, composed from small pieces, for RNN configurations.

Every draw is labelled, so a failing example prints as a readable config. Sizes stay small (the property
tests run many examples) and weight scales stay where the dynamics are not chaotic, so a tolerance
failure means an implementation difference rather than an ill-conditioned example (see
``compat_tests.judge.conditioning``). ``rnn_configs(capabilities)`` draws only what a peer supports.
"""

from __future__ import annotations

from hypothesis import strategies as st

from .config import BIAS_MODE_NAMES, DTYPE_NAMES, MODE_NAMES, RNNConfig
from .pairwise import pairwise
from .peers.base import Capabilities

MAX_LAYERS = 3
MAX_UNITS = 8
MAX_INPUT = 8
MAX_TIME = 6
MAX_BATCH = 4
WEIGHT_SCALES = (0.5, 1.0, 2.0)
# Sizes small enough for properties that write and read files or run a framework each example.
SMALL = dict(max_layers=2, max_units=5, max_input=4, max_time=5, max_batch=3)
# What ``rnn_configs(..., require=...)`` can insist on: each feature drawn always instead of sometimes.
FEATURES = ("layers", "bidirectional", "ragged", "batch_major", "projection", "skip_input")


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
def ragged_lengths(draw: st.DrawFn, seq_len: int, batch: int) -> tuple[int, ...]:
    """One length per sequence in ``1..seq_len``, at least one of them short (``seq_len >= 2``)."""
    lengths = draw(st.lists(st.integers(1, seq_len), min_size=batch, max_size=batch), label="lengths")
    if min(lengths) == seq_len:
        lengths[draw(st.integers(0, batch - 1), label="short one")] = draw(st.integers(1, seq_len - 1), label="short")
    return tuple(lengths)


def _offers(capabilities: Capabilities, feature: str) -> bool:
    if feature == "layers":
        return capabilities.max_layers is None or capabilities.max_layers >= 2
    if feature == "projection":
        return capabilities.projection and "lstm" in capabilities.modes
    return getattr(capabilities, {"ragged": "lengths"}.get(feature, feature))


# What the strategies draw from when no peer's capabilities narrow it: every feature, every bias mode, any fill.
EVERYTHING = Capabilities(bias_modes=BIAS_MODE_NAMES, padding_fill=True, cell_clip=True, packed=True)


@st.composite
def rnn_configs(
    draw: st.DrawFn,
    capabilities: Capabilities = EVERYTHING,
    *,
    modes_: tuple[str, ...] | None = None,
    dtypes_: tuple[str, ...] | None = None,
    max_layers: int = MAX_LAYERS,
    max_units: int = MAX_UNITS,
    max_input: int = MAX_INPUT,
    max_time: int = MAX_TIME,
    max_batch: int = MAX_BATCH,
    require: frozenset[str] = frozenset(),
    bias_modes_: tuple[str, ...] = ("double",),
    padding_fills_: tuple[float, ...] = (0.0,),
    cell_clips_: tuple[tuple[float, float] | None, ...] = (None,),
    packed_: tuple[bool, ...] = (False,),
) -> RNNConfig:
    """A config the given capabilities support, drawn piece by piece (sizes capped by the ``max_*``).

    ``bias_modes_``: the bias modes drawn from (``config.BIAS_MODE_NAMES``), those of them the capabilities have
    (``Capabilities.bias_modes``; none of them there is an error); only ``"double"`` by default, which every
    other test runs, and then nothing is drawn for it. ``padding_fills_``: the ``padding_fill`` values drawn
    from where the config has lengths and the capabilities have ``padding_fill`` (zeros otherwise); only 0.0
    by default, likewise. ``cell_clips_``: the LSTM's ``cell_clip`` drawn from where the mode is ``lstm`` and
    the capabilities have ``cell_clip`` (unclipped otherwise); only ``None`` by default. ``packed_``: whether
    the sequences are packed, drawn from where the capabilities have ``packed`` (unpacked otherwise); only
    ``False`` by default. A packed config is time-major, its lengths sorted by decreasing length, unfilled.

    ``require`` names :data:`FEATURES` every drawn config has (each must be among the capabilities):
    ``layers`` (two or more), ``bidirectional``, ``ragged`` (some sequence shorter than ``seq_len``),
    ``batch_major``, ``projection`` (LSTM only: the mode is then ``lstm``), ``skip_input``."""
    unknown_modes = [m for m in bias_modes_ if m not in BIAS_MODE_NAMES]
    if not bias_modes_ or unknown_modes:
        raise ValueError(f"bias_modes_ must name bias modes among {BIAS_MODE_NAMES}, got {bias_modes_!r}")
    bias_modes_ = tuple(m for m in bias_modes_ if m in capabilities.bias_modes)
    if not bias_modes_:
        raise ValueError(f"bias_modes_ names no bias mode the capabilities {capabilities} offer")
    unknown = set(require) - set(FEATURES)
    if unknown:
        raise ValueError(f"require must name features among {FEATURES}, got {sorted(unknown)}")
    lacking = [f for f in require if not _offers(capabilities, f)]
    if lacking:
        raise ValueError(f"require names {lacking}, which the capabilities {capabilities} do not offer")
    choose = lambda feature, offered, label: offered and (feature in require or draw(st.booleans(), label=label))  # noqa: E731
    mode = draw(modes(("lstm",) if "projection" in require else modes_ or capabilities.modes), label="mode")
    dtype = draw(dtypes(dtypes_ or capabilities.dtypes), label="dtype")
    most_layers = min(max_layers, capabilities.max_layers or max_layers)
    num_layers = draw(st.integers(2 if "layers" in require else 1, most_layers), label="num_layers")
    num_units = draw(st.integers(2 if "projection" in require else 1, max_units), label="num_units")
    skip = choose("skip_input", capabilities.skip_input, "skip_input")
    input_size = num_units if skip else draw(st.integers(1, max_input), label="input_size")
    num_proj = None
    if mode == "lstm" and num_units > 1 and choose("projection", capabilities.projection, "project"):
        num_proj = draw(st.integers(1, num_units - 1), label="num_proj")
    seq_len = draw(st.integers(2 if "ragged" in require else 1, max_time), label="seq_len")
    batch = draw(st.integers(1, max_batch), label="batch")
    lengths = None
    if "ragged" in require:
        lengths = draw(ragged_lengths(seq_len, batch), label="lengths")
    elif capabilities.lengths:
        lengths = draw(lengths_for(seq_len, batch), label="lengths")
    clip = None
    if mode == "lstm" and capabilities.cell_clip and len(cell_clips_) > 1:
        clip = draw(st.sampled_from(cell_clips_), label="cell_clip")
    elif mode == "lstm" and capabilities.cell_clip:
        clip = cell_clips_[0]
    fill = 0.0
    if lengths is not None and capabilities.padding_fill and len(padding_fills_) > 1:
        fill = draw(st.sampled_from(padding_fills_), label="padding_fill")
    elif lengths is not None and capabilities.padding_fill:
        fill = padding_fills_[0]
    packed = False
    if capabilities.packed and len(packed_) > 1:
        packed = draw(st.sampled_from(packed_), label="packed")
    elif capabilities.packed:
        packed = packed_[0]
    if packed and "batch_major" in require:
        raise ValueError("require names batch_major, and packed_ only True: a packed config is time-major")
    if packed:  # cuDNN's packed layout: time-major, sorted by decreasing length, no padding to fill
        lengths, fill = None if lengths is None else tuple(sorted(lengths, reverse=True)), 0.0
    time_major = packed or not choose("batch_major", capabilities.batch_major, "batch_major")
    bidirectional = choose("bidirectional", capabilities.bidirectional, "bidirectional")
    return RNNConfig(
        mode=mode, num_layers=num_layers, num_units=num_units, input_size=input_size,
        direction="bidirectional" if bidirectional else "unidirectional",
        input_mode="skip_input" if skip else "linear_input",
        num_proj=num_proj, seq_len=seq_len, batch=batch, lengths=lengths, time_major=time_major, dtype=dtype,
        weight_scale=draw(st.sampled_from(WEIGHT_SCALES), label="weight_scale"),
        initial_state=draw(st.booleans(), label="initial_state"),
        seed=draw(seeds(), label="seed"),
        bias_mode=draw(st.sampled_from(bias_modes_), label="bias_mode") if len(bias_modes_) > 1 else bias_modes_[0],
        padding_fill=fill,
        cell_clip=clip,
        packed=packed,
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


# How an HDF5 file's member can point outside the file (``compat_tests.interop.hdf5_tree`` refuses each).
HDF5_POINTERS = ("external_storage", "external_link", "soft_link", "virtual_dataset", "plugin_filter")


@st.composite
def hdf5_pointers(draw: st.DrawFn, datasets: int) -> tuple[str, int, bool, bool]:
    """A member of an HDF5 file of ``datasets`` datasets that points outside it: ``(kind, at, beside,
    relative)``, one of :data:`HDF5_POINTERS`, put in place of the file's dataset number ``at`` or (``beside``)
    as a new member of that dataset's group, its target named by a relative path (``relative``) or an
    absolute one."""
    return (draw(st.sampled_from(HDF5_POINTERS), label="kind"), draw(st.integers(0, datasets - 1), label="at"),
            draw(st.booleans(), label="beside"), draw(st.booleans(), label="relative"))


def rung_configs(rung, capabilities: Capabilities) -> st.SearchStrategy[RNNConfig]:
    """Configs of one rung of the GPU ladder (``compat_tests.gpu.ladder.Rung``) for a peer with ``capabilities``:
    the rung's dtypes and bias modes, only the features it offers, every feature it requires."""
    offers = rung.offers
    limited = Capabilities(modes=capabilities.modes, dtypes=rung.dtypes, bias_modes=capabilities.bias_modes,
                           padding_fill=capabilities.padding_fill, cell_clip=capabilities.cell_clip,
                           packed=capabilities.packed, skip_input="skip_input" in offers,
                           projection="projection" in offers, lengths="ragged" in offers,
                           batch_major="batch_major" in offers, bidirectional="bidirectional" in offers,
                           max_layers=None if "layers" in offers else 1)
    return rnn_configs(limited, modes_=rung.modes, require=rung.require, bias_modes_=rung.bias_modes,
                       padding_fills_=rung.padding_fills, cell_clips_=rung.cell_clips, packed_=rung.packed)


def examples(dev: int) -> int:
    """``max_examples`` for a property whose every example is slow (a child process): ``dev`` under the dev
    profile, scaled as the loaded profile scales its own count against dev's (ci: a third, thorough: 6.7x).
    Called as the test module is imported, after pytest has loaded the profile."""
    from hypothesis import settings

    return max(1, round(dev * settings.default.max_examples / settings.get_profile("dev").max_examples))


# Set by conftest.py's pytest_configure: whether this run sweeps whole (the thorough profile); test modules are
# imported after it, so a parametrized sweep (``swept``) is chosen as the module is collected.
WHOLE_SWEEPS = False


def swept(rows) -> list[tuple]:
    """The rows of a sweep this run takes: every row under the thorough profile (:data:`WHOLE_SWEEPS`), else
    the :func:`pairwise` rows."""
    return list(rows) if WHOLE_SWEEPS else pairwise(list(rows))
