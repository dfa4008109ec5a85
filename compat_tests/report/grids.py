"""Embedded config grids for ``rnn-compat report``."""

from __future__ import annotations

from ..config import MODE_NAMES, RNNConfig


def quick_grid(seed: int = 0) -> list[RNNConfig]:
    """Per mode: a plain layer, a ragged bidirectional stack, a batch-major ragged stack (projected for
    LSTM) and a skip_input stack; every dtype. Small enough to run in seconds on 2 cores."""
    configs = []
    for mode in MODE_NAMES:
        shapes = [
            dict(num_layers=1, num_units=8, input_size=5, seq_len=10, batch=4),
            dict(num_layers=2, num_units=8, input_size=5, seq_len=10, batch=4, direction="bidirectional",
                 lengths=(10, 7, 3, 1)),
            dict(num_layers=2, num_units=8, input_size=5, seq_len=10, batch=4, time_major=False,
                 lengths=(4, 10, 1, 9), num_proj=5 if mode == "lstm" else None),
            dict(num_layers=2, num_units=8, input_size=8, seq_len=10, batch=4, input_mode="skip_input"),
        ]
        for i, shape in enumerate(shapes):
            for dtype in ("float16", "float32", "float64"):
                configs.append(RNNConfig(mode, dtype=dtype, seed=seed * 1000 + i, **shape))
    return configs


GRIDS = {"quick": quick_grid}
