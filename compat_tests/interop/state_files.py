"""``rnn-compat infer``'s state files: the initial states ``--state`` reads (a state file of one's own, or an
earlier ``--out``), a chain's per-layer states, and the keys ``--out`` writes (the layout its arrays are in,
and a note where the model run is an approximation of the file's)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

# What ``infer --state`` reads: a state file of its own, or an earlier ``infer --out`` (whose output is skipped).
STATE_KEYS = {"h": ("input_h", "output_h"), "c": ("input_c", "output_c")}
# The key of ``infer --out``'s ``.npz`` that says the layout of its arrays, "time_major" or "batch_major".
LAYOUT_KEY = "layout"
# The key of ``infer --out``'s ``.npz`` that says the model run is an approximation of the file's (a dequantized one).
NOTE_KEY = "note"


def layout_name(batch_major: bool) -> str:
    return "batch_major" if batch_major else "time_major"


@contextmanager
def reading(what: str, path: str) -> Iterator[None]:
    """An OSError reading the file an argument names (missing, a folder, unreadable) names the argument, and
    the file it was about where that is another (one a checkpoint's index leads to)."""
    try:
        yield
    except OSError as exc:
        other = f" ({exc.filename})" if exc.filename is not None and str(exc.filename) != str(path) else ""
        raise type(exc)(f"{what} {path}: {exc.strerror or exc}{other}") from None


def initial_state(path: str, model, batch_major: bool = False, batch: int | None = None):
    """``(input_h, input_c)`` for ``model`` from the ``.npz`` at ``path``: ``input_h`` (and the LSTM's
    ``input_c``), or the ``output_h``/``output_c`` an earlier ``infer --out`` wrote, so that a long sequence
    runs in chunks (unidirectional models only: a backward direction ends at its chunk's first step).
    States are ``[L*D, B, H]`` (``[B, L*D, H]`` with ``--batch-major``); the model checks their shapes, and a
    file that says its layout (``infer --out`` does) must be in this run's, since at ``B = L*D`` the shapes
    cannot tell."""
    # every state of this model and input holds at most L*D * B * H float64 values (the output is not read at all)
    most = model.num_layers * model.num_dirs * (batch or 1) * model.num_units * 8
    arrays = _state_arrays(path, {k for keys in STATE_KEYS.values() for k in keys}, most, batch_major, batch,
                           "input_h and input_c (or output_h and output_c from infer --out)")
    return _layer_state(path, arrays, model, "")


def chain_initial_states(path: str, chain, batch_major: bool = False, batch: int | None = None):
    """``(initial_h, initial_c)``, a state per layer, for a chain of one-layer models (``reference.chain``) from
    the ``.npz`` at ``path``: ``input_h_0``, ``input_h_1``, ... (and the LSTM layers' ``input_c_K``), or the
    ``output_h_K``/``output_c_K`` an earlier ``infer --out`` of the chain wrote; each layer's as
    :func:`initial_state` reads one model's (``initial_c`` ``None`` for a chain without cell states)."""
    n = len(chain.models)
    keys = {f"{k}_{layer}" for keys in STATE_KEYS.values() for k in keys for layer in range(n)}
    most = max(m.num_dirs * (batch or 1) * m.num_units * 8 for m in chain.models)
    arrays = _state_arrays(path, keys, most, batch_major, batch,
                           f"input_h_K and input_c_K for K in 0..{n - 1} (or output_h_K and output_c_K from infer "
                           f"--out), one state per layer of the chain")
    states = [_layer_state(path, arrays, model, f"_{k}") for k, model in enumerate(chain.models)]
    cells = [c for _, c in states]
    return [h for h, _ in states], None if all(c is None for c in cells) else cells


def _state_arrays(path: str, keys: set[str], most: int, batch_major: bool, batch: int | None,
                  expected: str) -> dict:
    """The arrays of the ``--state`` file named ``keys`` (an ``output`` beside them is not read), each
    declaring at most ``most`` bytes before it is read, and the file's layout, if it says one, this run's."""
    from reference import checkpoint

    with reading("--state", path):
        declared = checkpoint.declared_arrays(path)  # headers only: nothing inflated before it is checked
    if declared is None:
        raise ValueError(f"--state {path} must be an .npz holding {expected}, not a single array")
    unknown = sorted(set(declared) - {"output", LAYOUT_KEY, NOTE_KEY} - keys)
    if unknown:
        raise ValueError(f"--state {path} holds {unknown}; expected {expected}")

    def check(name: str, array) -> None:
        limit = 256 if name == LAYOUT_KEY else most  # the layout: a short string
        if array.nbytes > limit:
            raise ValueError(f"--state {path}: {name} declares {list(array.shape)} {array.dtype} ({array.nbytes} "
                             f"bytes), more than this model's states for a batch of {batch} hold: refused before "
                             f"it is read")

    with reading("--state", path):
        arrays = checkpoint.load_arrays(path, [k for k in declared if k not in ("output", NOTE_KEY)], check)
    layout = arrays.pop(LAYOUT_KEY, None)
    if layout is not None and (layout.shape != () or str(layout) != layout_name(batch_major)):
        raise ValueError(f"--state {path} holds states in the layout {str(layout)!r}, this run's is "
                         f"{layout_name(batch_major)!r}: run with{'out' if batch_major else ''} --batch-major")
    return arrays


def _layer_state(path: str, arrays: dict, model, suffix: str):
    """``(h, c)`` of ``model`` among ``arrays`` under the names of :data:`STATE_KEYS` with ``suffix``."""
    from reference.modes import MODES

    state = {}
    for role, keys in STATE_KEYS.items():
        present = [k + suffix for k in keys if k + suffix in arrays]
        if len(present) > 1:
            raise ValueError(f"--state {path} holds both {present[0]} and {present[1]}: keep one")
        state[role] = arrays[present[0]] if present else None
    has_cell_state = MODES[model.rnn_mode].has_cell_state
    h, c = "input_h" + suffix, "input_c" + suffix
    if state["h"] is None:
        raise ValueError(f"--state {path} holds no {h} (or output_h{suffix})")
    if has_cell_state and state["c"] is None:
        raise ValueError(f"--state {path} holds no {c} (or output_c{suffix}): the LSTM's cell state is needed too")
    if not has_cell_state and state["c"] is not None:
        raise ValueError(f"--state {path} holds a cell state{f' for layer {suffix[1:]}' if suffix else ''}, but a "
                         f"{model.rnn_mode} model has none")
    if model.num_dirs == 2 and {"output_h" + suffix, "output_c" + suffix} & set(arrays):
        raise ValueError(f"--state {path} holds the final states of an earlier run, which cannot seed a "
                         f"bidirectional model's next chunk (its backward direction ended at that chunk's "
                         f"first step); name initial states {h}{f' (and {c})' if has_cell_state else ''}")
    return state["h"], state["c"]


def read_array(path: str, what: str):
    """The array of the ``.npy`` file an argument names (damaged files and archives refused, naming it)."""
    from reference import checkpoint

    with reading(what, path):
        if checkpoint.declared_arrays(path) is not None:  # (its members are not inflated)
            raise ValueError(f"{what} {path} must be a .npy array, not an .npz archive")
        return checkpoint.load_arrays(path)
