"""PyTorch's ``state_dict`` names for ``nn.RNN`` / ``nn.LSTM`` / ``nn.GRU`` (NumPy arrays, no torch needed).

``weight_ih_l{k}[_reverse]`` stacks the canonical input matrices (PyTorch's gate orders equal cuDNN's:
GRU r, z, n; LSTM i, f, g, o), ``weight_hh_l{k}`` the recurrent ones, ``bias_ih``/``bias_hh`` the two bias
sets, ``weight_hr_l{k}`` the LSTM projection. A single cell (``nn.RNNCell``, ``nn.LSTMCell``, ``nn.GRUCell``)
names a one-layer module's tensors without the suffix: ``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh``.
PyTorch has no textbook GRU and no skip_input. A
module built with ``bias=False`` has no bias tensor: cuDNN's ``CUDNN_RNN_NO_BIAS``, ``bias_mode="none"``
(:func:`config_from_state_dict` tells it from the names); a state_dict that lacks only some biases is
refused, and PyTorch has no single bias modes.
"""

from __future__ import annotations

import numpy as np

from .canonical import (PseudoLayerTensors, by_pseudo_layer, check_bias_mode, check_cell_clip, check_fits,
                        check_mapping, check_model, check_tensor, flatten, matrix_shape, zeros)


HELD = ("double", "none")  # bias=True, bias=False


def _suffix(model, pl: int) -> str:
    layer, direction = divmod(pl, model.num_dirs)
    return f"_l{layer}" + ("_reverse" if direction else "")


def _supported(model) -> None:
    check_model(model)
    check_bias_mode(model, "PyTorch's state_dict", HELD)
    check_cell_clip(model, "PyTorch's state_dict")
    if model.rnn_mode == "classic_gru":
        raise ValueError("PyTorch has no textbook GRU (its nn.GRU is the cuDNN variant)")
    if model.input_mode == "skip_input":
        raise ValueError("PyTorch has no skip_input mode")


def to_state_dict(model, weights: list[np.ndarray], biases: list[np.ndarray],
                  cell: bool = False) -> dict[str, np.ndarray]:
    """``model``'s state_dict as ``nn.RNN``/``nn.LSTM``/``nn.GRU`` name it, or (``cell``) as ``nn.RNNCell``/
    ``nn.LSTMCell``/``nn.GRUCell`` do (``weight_ih``, ...: one layer, one direction, no projection)."""
    _supported(model)
    if cell:
        check_cell(model)
        return {k[:-len(CELL_SUFFIX)]: v for k, v in to_state_dict(model, weights, biases).items()}
    out = {}
    for pl, t in enumerate(by_pseudo_layer(model, weights, biases)):
        s = _suffix(model, pl)
        out[f"weight_ih{s}"] = np.concatenate(t.W)
        out[f"weight_hh{s}"] = np.concatenate(t.R)
        if t.b_W is not None:  # bias_mode "none": bias=False
            out[f"bias_ih{s}"] = np.concatenate(t.b_W)
            out[f"bias_hh{s}"] = np.concatenate(t.b_R)
        if t.P is not None:
            out[f"weight_hr{s}"] = t.P
    return out


# A single cell's (nn.RNNCell, nn.LSTMCell, nn.GRUCell) names: a one-layer module's without the layer suffix.
CELL_NAMES = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
CELL_SUFFIX = "_l0"
CELLS = {"relu": "nn.RNNCell(nonlinearity='relu')", "tanh": "nn.RNNCell", "lstm": "nn.LSTMCell", "gru": "nn.GRUCell"}


def check_cell(model) -> None:
    """A model that a single cell's names can hold: one layer, one direction, no projection."""
    if model.num_layers != 1 or model.num_dirs != 1 or model.num_proj:
        raise ValueError(f"a single cell's names (weight_ih, weight_hh, bias_ih, bias_hh: {CELLS.get(model.rnn_mode)}) "
                         f"hold one layer of one direction without projection, not {model!r}")


def is_cell(state) -> bool:
    """Whether a module's entries are named as a single cell's (``weight_ih``, no layer suffix)."""
    return "weight_ih" in state and "weight_ih" + CELL_SUFFIX not in state


def layer_names(state: dict) -> dict:
    """A module's entries under ``nn.RNN``'s names: a single cell's ``weight_ih``, ... become layer 0's
    ``weight_ih_l0``, ... (the same one-layer network); others are left as they are."""
    if not is_cell(state):
        return state
    return {(k + CELL_SUFFIX if k in CELL_NAMES else k): v for k, v in state.items()}


def from_state_dict(model, state: dict[str, np.ndarray]) -> tuple[list, list]:
    """The canonical lists of ``model`` from a state_dict (an ``nn.RNN``'s, or a single cell's); errors name the
    tensor."""
    _supported(model)
    check_mapping("state", state, "tensors by state_dict name")
    state = layer_names(state)
    check_fits(model, sum(np.size(v) for v in state.values()), "the state_dict's tensors")
    expected = {k: v.shape for k, v in to_state_dict(model, *zeros(model)).items()}
    for name, shape in expected.items():
        if name not in state:
            lacks_every_bias = name.startswith("bias_") and not any(n.startswith("bias_") for n in state)
            raise ValueError(f"state_dict lacks {name!r} (expected shape {list(shape)}) for {model!r}"
                             + (": it has no bias at all, a module built with bias=False, bias_mode 'none'"
                                if lacks_every_bias else ""))
        check_tensor(repr(name), state[name], model.dtype, shape, repr(model))
    extra = sorted(set(state) - set(expected))
    if extra:
        raise ValueError(f"state_dict has tensors {model!r} does not: {extra[:3]}")
    G, H = len(model.gates), model.num_units
    groups = []
    for pl in range(model.num_layers * model.num_dirs):
        s = _suffix(model, pl)
        blocks = {n: [state[f"{n}{s}"][g * H:(g + 1) * H].copy() for g in range(G)] if f"{n}{s}" in expected else None
                  for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}
        groups.append(PseudoLayerTensors(W=blocks["weight_ih"], R=blocks["weight_hh"], b_W=blocks["bias_ih"],
                                         b_R=blocks["bias_hh"],
                                         P=state[f"weight_hr{s}"].copy() if model.num_proj else None))
    return flatten(model, groups)


RNN_FIRST_WEIGHT = "weight_ih_l0"
FIRST_WEIGHTS = (RNN_FIRST_WEIGHT, "weight_ih")  # a module's, a single cell's
KNOWN_BY = "'weight_ih_l0', or a single cell's 'weight_ih'"


def module_tensors(state: dict) -> dict[str, dict]:
    """The entries of each recurrent module (``nn.RNN``, ``nn.LSTM``, ``nn.GRU``, or a single ``nn.RNNCell``,
    ``nn.LSTMCell``, ``nn.GRUCell``) in a whole model's ``state_dict``, by the module's path (``"encoder.rnn"``;
    ``""`` for a bare module's state_dict), each under ``nn.RNN``'s names (``weight_ih_l0``, ...; a cell's
    ``weight_ih`` is layer 0's, :func:`layer_names`): a module is known by its ``weight_ih_l0`` (a cell by its
    ``weight_ih``), and its entries are the names that continue its path with no further dot. Other modules'
    entries (an embedding, a head) are left out."""
    prefixes = dict.fromkeys(name[: -len(first)] for name in state for first in FIRST_WEIGHTS
                             if isinstance(name, str) and name.endswith(first))
    return {p[:-1]: layer_names({n[len(p):]: v for n, v in state.items() if n.startswith(p) and "." not in n[len(p):]})
            for p in prefixes if p == "" or p.endswith(".")}


def pick_module(modules: dict, module: str | None = None) -> str:
    """The path of the one recurrent module of ``modules`` (``{path: ...}``, :func:`module_tensors`) that
    ``module`` names, or of the only one; errors list the paths found."""
    if not modules:
        raise ValueError(f"holds no recurrent module's weights (no {KNOWN_BY})")
    if module is None and len(modules) > 1:
        raise ValueError(f"holds {len(modules)} recurrent modules, {sorted(modules)}: say which (module / --module)")
    if module is not None and module not in modules:
        raise ValueError(f"holds no recurrent module {module!r}; it holds {sorted(modules)}")
    return module if module is not None else next(iter(modules))


def config_from_state_dict(state: dict[str, np.ndarray], rnn_mode: str | None = None) -> dict:
    """What a state_dict's names and shapes tell about the network; relu and tanh need ``rnn_mode``."""
    state = layer_names(state)
    if "weight_ih_l0" not in state or "weight_hh_l0" not in state:
        raise ValueError("not a PyTorch RNN state_dict: no 'weight_ih_l0' / 'weight_hh_l0' (nor a single cell's "
                         "'weight_ih' / 'weight_hh')")
    for name in ("weight_ih_l0", "weight_hh_l0", "weight_hr_l0"):
        if name in state:
            matrix_shape(name, np.shape(state[name]))
    w_ih, w_hh = state["weight_ih_l0"], state["weight_hh_l0"]
    proj = state["weight_hr_l0"].shape[0] if "weight_hr_l0" in state else None
    H = state["weight_hr_l0"].shape[1] if proj else w_hh.shape[1]
    G, rest = divmod(w_hh.shape[0], H)
    modes = {1: ("relu", "tanh"), 3: ("gru",), 4: ("lstm",)}.get(G if not rest else 0)
    if modes is None:
        raise ValueError(f"weight_hh_l0 has {w_hh.shape[0]} rows for hidden size {H}: not 1, 3 or 4 gates")
    if rnn_mode is None and len(modes) > 1:
        raise ValueError("relu and tanh RNNs have the same weights: say which (rnn_mode / --mode)")
    mode = rnn_mode or modes[0]
    if mode not in modes:
        raise ValueError(f"the state_dict holds {G}-gate cells, which cannot be a {mode!r} RNN")
    indices = [k[len("weight_ih_l"):].split("_")[0] for k in state if k.startswith("weight_ih_l")]
    if not all(i.isdigit() for i in indices):
        raise ValueError(f"weight_ih_l<N> names must end in a layer number, got "
                         f"{sorted('weight_ih_l' + i for i in indices if not i.isdigit())}")
    layers = 1 + max(map(int, indices))
    return {"rnn_mode": mode, "num_layers": layers, "num_units": H, "input_size": w_ih.shape[1],
            "input_mode": "linear_input",
            "direction": "bidirectional" if "weight_ih_l0_reverse" in state else "unidirectional",
            "num_proj": proj, "dtype": w_ih.dtype.name,
            **({} if any(k.startswith("bias_") for k in state) else {"bias_mode": "none"})}
