"""Embedded config grids for ``rnn-compat report``, and the plan that crosses them with the backends.

A grid is a list of ``(study, config)``; ``plan`` turns it into work units, one per backend that can run
the config (``compat``, and ``published`` in float32) or one per config (``gru_variant``, and ``published`` in
float64: computed by the float64 truth of reference.spec), and counts what was left out and why. A grid may
also come from a JSON file: a list of objects ``{"study": "compat" | "gru_variant" | "published", "config":
{RNNConfig fields}}``; a ``published`` entry's config is cuDNN's published sample's
(``compat_tests.judge.published.config(mode, dtype)``).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from ..judge import published
from ..pairwise import pairwise
from ..config import BIAS_MODE_NAMES, DTYPE_NAMES, MODE_NAMES, RNNConfig, json_loads
from ..peers import Peer
from .units import STUDIES, Unit

Spec = tuple[str, RNNConfig]


def _compat(configs) -> list[Spec]:
    return [("compat", cfg.with_(dtype=dtype)) for cfg in configs for dtype in DTYPE_NAMES]


def _features(num_units: int, input_size: int, seq_len: int, batch: int, seed: int,
              every: bool = True) -> list[RNNConfig]:
    """Every mode x 1-3 layers x both directions x both input modes x equal/ragged lengths x both layouts
    (LSTM additionally with a projection); not ``every``: the rows of that product that hold every pair of
    its values (``compat_tests.pairwise``), each config with the seed it has in the whole product."""
    ragged = tuple(max(1, seq_len - (seq_len * k) // batch) for k in range(batch))
    rows = list(itertools.product(MODE_NAMES, (1, 2, 3), ("unidirectional", "bidirectional"),
                                  ("linear_input", "skip_input"), (None, ragged), (True, False)))
    kept = set(rows if every else pairwise(rows))
    configs = []
    for k, (mode, layers, direction, input_mode, lengths, time_major) in enumerate(rows):
        if (mode, layers, direction, input_mode, lengths, time_major) not in kept:
            continue
        cfg = RNNConfig(mode, layers, num_units, num_units if input_mode == "skip_input" else input_size,
                        direction, input_mode, None, seq_len, batch, lengths, time_major, seed=seed + k)
        configs.append(cfg)
        if mode == "lstm" and input_mode == "linear_input":
            configs.append(cfg.with_(num_proj=max(1, num_units // 2), seed=seed + 10_000 + k))
    return configs


def _bias_modes(num_units: int, input_size: int, seq_len: int, seed: int) -> list[RNNConfig]:
    """Every mode under every bias mode but the double bias (every other config's): a ragged bidirectional
    two-layer stack, batch 4."""
    T = seq_len
    return [RNNConfig(mode, 2, num_units, input_size, "bidirectional", seq_len=T, batch=4, lengths=(T, 5, 2, 1),
                      bias_mode=bias_mode, seed=seed + k)
            for k, (mode, bias_mode) in enumerate(itertools.product(MODE_NAMES, BIAS_MODE_NAMES[1:]))]


def _padding_fills(num_units: int, input_size: int, seq_len: int, seed: int) -> list[RNNConfig]:
    """Every mode with paddingFill -1 and NaN past each length (zeros are every other ragged config's): a
    ragged bidirectional two-layer stack, batch 4, time-major with one fill and batch-major with the other."""
    T = seq_len
    return [RNNConfig(mode, 2, num_units, input_size, "bidirectional", seq_len=T, batch=4, lengths=(T, 5, 2, 1),
                      time_major=k % 2 == 0, padding_fill=fill, seed=seed + k)
            for k, (mode, fill) in enumerate(itertools.product(MODE_NAMES, (-1.0, "nan")))]


def _cell_clips(num_units: int, input_size: int, seq_len: int, seed: int) -> list[RNNConfig]:
    """LSTMs with their cell state clipped at [-0.25, 0.25] and [-1, 0.5] (weight scale 2, so the clips
    engage): a plain layer and a ragged bidirectional two-layer stack, batch 4."""
    T = seq_len
    return [RNNConfig("lstm", layers, num_units, input_size, direction, seq_len=T, batch=4,
                      lengths=(T, 5, 2, 1) if layers == 2 else None, weight_scale=2.0, cell_clip=clip, seed=seed + k)
            for k, (clip, (layers, direction)) in enumerate(itertools.product(
                ((-0.25, 0.25), (-1.0, 0.5)), ((1, "unidirectional"), (2, "bidirectional"))))]


def _packed(num_units: int, input_size: int, seq_len: int, seed: int) -> list[RNNConfig]:
    """Every mode (the textbook GRU included) with its sequences packed (cuDNN's SEQ_MAJOR_PACKED): a ragged
    bidirectional two-layer stack, batch 4, lengths sorted."""
    T = seq_len
    return [RNNConfig(mode, 2, num_units, input_size, "bidirectional", seq_len=T, batch=4, lengths=(T, 5, 2, 1),
                      packed=True, seed=seed + k) for k, mode in enumerate(MODE_NAMES)]


def _drift(modes, num_units: int, seq_len: int, seed: int, **shape) -> list[RNNConfig]:
    """Long sequences: error as a function of the time step."""
    return [RNNConfig(mode, num_units=num_units, input_size=num_units, seq_len=seq_len, batch=4, seed=seed + k,
                      **shape) for k, mode in enumerate(modes)]


def _gru_variants(lengths, scales, seed: int) -> list[Spec]:
    return [("gru_variant", RNNConfig("gru", num_units=16, input_size=8, seq_len=t, batch=8, weight_scale=s,
                                      dtype="float64", seed=seed + k))
            for k, (t, s) in enumerate(itertools.product(lengths, scales))]


def _published() -> list[Spec]:
    """cuDNN's published sample (T=20, 2 layers, H=I=512, B=64), per mode: the float64 truth and every backend's
    float32 run beside cuDNN's own checksums; the seed changes nothing (the sample's arrays are constant)."""
    return [("published", published.config(mode, dtype))
            for mode in published.modes() for dtype in ("float64", "float32")]


def _small_stacks(mode: str, num_units: int, input_size: int, seq_len: int, base: int) -> list[RNNConfig]:
    """A plain layer, a ragged bidirectional stack, a batch-major ragged stack (projected for LSTM), a
    skip_input stack; batch 4."""
    T = seq_len
    return [
        RNNConfig(mode, 1, num_units, input_size, seq_len=T, batch=4, seed=base + 1),
        RNNConfig(mode, 2, num_units, input_size, "bidirectional", seq_len=T, batch=4, lengths=(T, 7, 3, 1),
                  seed=base + 2),
        RNNConfig(mode, 2, num_units, input_size, seq_len=T, batch=4, time_major=False, lengths=(4, T, 1, 9),
                  num_proj=input_size if mode == "lstm" else None, seed=base + 3),
        RNNConfig(mode, 2, num_units, num_units, input_mode="skip_input", seq_len=T, batch=4, seed=base + 4),
    ]


def quick_grid(seed: int = 0) -> list[Spec]:
    """Seconds on 2 cores: per mode a plain layer, a ragged bidirectional stack, a batch-major ragged
    stack (projected for LSTM), a skip_input stack; short drift runs; a small GRU-variant sweep."""
    base = seed * 100_000
    configs = [cfg for mode in MODE_NAMES for cfg in _small_stacks(mode, 8, 5, 10, base)]
    configs += _drift(("gru", "lstm"), 16, 200, base + 50)
    return _compat(configs) + _gru_variants((1, 10, 100), (0.5, 1.0, 2.0), base + 90)


def window_grid(seed: int = 0) -> list[Spec]:
    """A GPU window's (``scripts/gpu_run.sh``): cuDNN's published sample first (real cuDNN beside its own
    published numbers), every mode, dtype and feature at least once in small stacks, per mode a wider
    bidirectional three-layer stack (H=64, T=40, B=8), drift to T=300 for GRU, LSTM and tanh, and a GRU-variant
    sweep to T=300, every mode under each bias mode but the double bias, with two padding fills and packed, and
    clipped LSTMs, in float32; about 350 units, a minute or two of 8 workers on a GPU machine."""
    base = seed * 100_000
    configs = [cfg for mode in MODE_NAMES for cfg in _small_stacks(mode, 16, 8, 12, base)
               + [RNNConfig(mode, 3, 64, 32, "bidirectional", seq_len=40, batch=8, seed=base + 5)]]
    configs += _drift(("gru", "lstm", "tanh"), 32, 300, base + 50)
    biases = [("compat", cfg.with_(dtype="float32")) for cfg in _bias_modes(16, 8, 12, base + 70)
              + _padding_fills(16, 8, 12, base + 80) + _cell_clips(16, 8, 12, base + 85)
              + _packed(16, 8, 12, base + 87)]
    return (_published() + _compat(configs) + biases
            + _gru_variants((1, 10, 100, 300), (0.5, 1.0, 2.0), base + 90))


def default_grid(seed: int = 0) -> list[Spec]:
    """About two minutes on 2 cores: cuDNN's published sample (the float64 truth and every backend's float32 beside
    cuDNN's own checksums); the feature combinations at H=16, T=12 and at H=64, T=40, every pair of feature values
    (mode, layers, direction, input mode, lengths, layout) met at least once; every mode under each bias mode but
    the double bias, with two padding fills and packed; clipped LSTMs; drift to T=1000 for GRU, LSTM and tanh at
    weight scales 1 and 2 (2: close to chaotic); the GRU-variant sweep over T in 1..1000 and weight scales
    0.25..4. What it leaves out (:data:`LEFT_OUT`): every combination of the features, which ``full`` runs."""
    base = seed * 100_000
    configs = (_features(16, 16, 12, 4, base, every=False) + _features(64, 32, 40, 8, base + 20_000, every=False)
               + _bias_modes(16, 8, 12, base + 7_000) + _padding_fills(16, 8, 12, base + 7_500)
               + _cell_clips(16, 8, 12, base + 7_600) + _packed(16, 8, 12, base + 7_700)
               + _drift(("gru", "lstm", "tanh"), 32, 1000, base + 5_000)
               + _drift(("gru", "lstm", "tanh"), 32, 1000, base + 6_000, weight_scale=2.0))
    return _published() + _compat(configs) + _gru_variants((1, 3, 10, 30, 100, 300, 1000),
                                                           (0.25, 0.5, 1.0, 2.0, 4.0), base + 9_000)


def full_grid(seed: int = 0) -> list[Spec]:
    """The default grid with every combination of the features (at H=16, T=12 and H=64, T=40), plus wide layers
    (H=128, T=100), a second seed of the feature grid, bidirectional two-layer drift runs to T=1000 for every
    mode, and weight scale 8 in the GRU-variant sweep."""
    base = seed * 100_000
    every = _features(16, 16, 12, 4, base) + _features(64, 32, 40, 8, base + 20_000)
    extra = (_features(128, 64, 100, 8, base + 30_000) + _features(16, 16, 12, 4, base + 40_000)
             + _drift(MODE_NAMES, 32, 1000, base + 60_000, num_layers=2, direction="bidirectional"))
    return default_grid(seed) + _compat(every + extra) + _gru_variants((1, 3, 10, 30, 100, 300, 1000), (8.0,),
                                                                       base + 95_000)


# What a built-in grid leaves out, said on its report's page (a grid file's report says nothing: it is the user's).
LEFT_OUT = {
    "quick": "Grid quick: a few small stacks per mode, short drift and a small GRU-variant sweep; --grid default "
             "covers every pair of features, the bias modes, fills, clips, packing, drift to T=1000 and cuDNN's "
             "published sample.",
    "default": "Grid default: every pair of feature values (mode, layers, direction, input mode, lengths, layout) "
               "at two sizes, not every combination of them: --grid full runs every combination, wider layers and "
               "longer bidirectional drift.",
    "window": "Grid window: a GPU window's, every mode, dtype and feature at least once in small stacks.",
}


GRIDS = {"quick": quick_grid, "window": window_grid, "default": default_grid, "full": full_grid}


def load_grid(name: str, seed: int) -> list[Spec]:
    """An embedded grid by name, or a JSON grid file."""
    if name in GRIDS:
        return GRIDS[name](seed)
    path = Path(name)
    if not path.is_file():
        raise ValueError(f"--grid must be one of {', '.join(GRIDS)} or a JSON grid file, got {name!r}")
    entries = json_loads(path.read_bytes(), f"grid file {name}")
    if not isinstance(entries, list) or not entries:
        raise ValueError(f'grid file {name} must hold a non-empty JSON list of {{"study": ..., "config": {{...}}}} '
                         f"objects, got {type(entries).__name__}{'' if entries else ' (empty)'}")
    specs = []
    for k, entry in enumerate(entries):
        if not isinstance(entry, dict) or set(entry) != {"study", "config"}:
            raise ValueError(f"grid file {name}: entry {k} must be an object with exactly the keys 'study' and "
                             f"'config', got {json.dumps(entry)[:80]}")
        if entry["study"] not in STUDIES:
            raise ValueError(f"grid file {name}: entry {k}: unknown study {entry['study']!r}, expecting {STUDIES}")
        try:
            cfg = RNNConfig.from_dict(entry["config"])
        except (ValueError, TypeError) as exc:
            raise ValueError(f"grid file {name}: entry {k}: {exc}") from None
        if entry["study"] == "gru_variant" and cfg.mode != "gru":
            raise ValueError(f"grid file {name}: entry {k}: the gru_variant study compares cuDNN's GRU with the "
                             f"textbook GRU under the same weights, so its config's mode must be 'gru', got "
                             f"{cfg.mode!r}")
        if entry["study"] == "published" and not published.is_sample(cfg):
            raise ValueError(f"grid file {name}: entry {k}: the published study runs cuDNN's published sample, so "
                             f"its config must be compat_tests.judge.published.config(mode, dtype) for a mode among "
                             f"{published.modes()} and a dtype among {published.DTYPES}, got {cfg.short()}")
        specs.append((entry["study"], cfg))
    return specs


def plan(specs: list[Spec], backends: list[Peer]) -> tuple[list[Unit], list[tuple[str, str, RNNConfig]]]:
    """Work units in a stable order, and ``(backend, reason, config)`` for every pair that cannot run."""
    units, skipped = [], []
    for study, cfg in specs:
        if study == "gru_variant" or (study == "published" and cfg.dtype == "float64"):
            units.append(Unit(study, "reference", cfg))  # the float64 truth of reference.spec
            continue
        for peer in backends:
            why = peer.unsupported(cfg)
            if why:
                skipped.append((peer.name, why, cfg))
            else:
                units.append(Unit(study, peer.name, cfg))
    seen, unique = set(), []
    for u in units:  # a grid may list a config twice; run it once
        if u.id not in seen:
            seen.add(u.id)
            unique.append(u)
    left_out = {(backend, cfg.to_json()): (backend, why, cfg) for backend, why, cfg in skipped}  # and count it once
    return unique, list(left_out.values())
