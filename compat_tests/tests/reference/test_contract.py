"""One contract for both backends (``reference.contract``): the cuDNN backend imports the contract and nothing
of the reference's engine, the contract's table of modes is the engine's, and the argument checks both
backends share refuse a bad call with the same error."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import cudnn_backend
import reference
from compat_tests.config import RNNConfig, make_case
from compat_tests.gpu import fake_cuda
from compat_tests.tests.helpers import ENGINE, imports_reached
from reference import contract
from reference.modes import MODES

BACKEND_DIR = Path(cudnn_backend.__file__).parent


def test_the_cudnn_backend_imports_the_contract_and_nothing_of_the_engine():
    """Every module ``cudnn_backend`` imports, followed through the reference's own modules, is no engine
    module: the reference modules it reaches are the contract, the checks, the layout, the precision and the
    packed layout."""
    found, seen = imports_reached(BACKEND_DIR.glob("*.py"))
    engine = [(path.name, module) for path, module in found
              if any(module == e or module.startswith(e + ".") for e in ENGINE)]
    assert not engine, f"the cuDNN backend reaches the engine: {engine}"
    assert {p.stem for p in seen} <= {"contract", "checks", "layout", "precision", "packing"}, seen
    assert "contract" in {p.stem for p in seen}
    for path in BACKEND_DIR.glob("*.py"):  # nor through the package: `import reference; reference.model.x`
        tree = ast.parse(path.read_text())
        dotted = {ast.unparse(node) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        assert not {name for name in dotted for e in ENGINE if name == e or name.startswith(e + ".")}, path.name


def test_the_contracts_mode_table_is_the_engines():
    assert list(contract.MODE_SHAPES) == list(MODES)
    for name, row in MODES.items():
        assert contract.MODE_SHAPES[name] == (row.gates, row.has_cell_state, row.supports_projection), name


@pytest.mark.parametrize("mode", list(MODES))
def test_a_models_config_attributes_are_the_contracts(mode):
    args = dict(num_layers=2, num_units=4, input_size=4, input_mode="auto_select", direction="bidirectional",
                dtype="float16", dropout=0.25, seed=3, num_proj=2 if mode == "lstm" else None)
    model = reference.make_model(mode, **args)
    config = contract.model_config(mode, **args)
    assert {name: getattr(model, name) for name in config.attributes()} == config.attributes()
    assert (model.gates, model.state_width, model._spec) == (config.gates, config.state_width, config.layout_spec())
    assert repr(model) == f"{type(model).__name__}({config.arguments()})"


CFG = RNNConfig("lstm", num_layers=2, num_units=4, input_size=3, direction="bidirectional", num_proj=2, seq_len=5,
                batch=2, dtype="float32")


F32 = np.float32


# Bad calls that the contract's checks refuse, as changes to a good forward call or to its backward.
FORWARD = [
    {"input_data": np.zeros((5, 2), F32)},
    {"input_data": np.zeros((5, 2, 4), F32)},
    {"input_data": np.zeros((0, 2, 3), F32)},
    {"input_data": np.zeros((5, 2, 3), np.float64)},
    {"input_h": np.zeros((4, 3, 2), F32)},
    {"input_h": np.zeros((4, 2, 4), F32)},
    {"input_c": np.zeros((4, 2, 2), F32)},
    {"input_c": np.zeros((2, 4, 4), F32), "time_major": False, "input_data": np.zeros((2, 5, 3), F32)},
    {"is_training": 1},
    {"time_major": "yes"},
]


BACKWARD = [
    {"output_backprop": np.zeros((5, 2, 3), F32)},
    {"output_backprop": np.zeros((5, 2), F32)},
    {"output_h_backprop": np.zeros((4, 2, 4), F32)},
    {"output_c_backprop": np.zeros((4, 2, 2), F32)},
]


def _error(call) -> tuple[type, str]:
    with pytest.raises((TypeError, ValueError)) as caught:
        call()
    return type(caught.value), str(caught.value)


@pytest.mark.parametrize(("stage", "changes"), [("forward", c) for c in FORWARD] + [("backward", c) for c in BACKWARD])
def test_both_backends_refuse_a_bad_call_alike(monkeypatch, stage, changes):
    fake_cuda.install(monkeypatch)
    case = make_case(CFG)
    errors = []
    for model in (CFG.model(), CFG.model(models=cudnn_backend.MODELS)):
        call = dict(input_data=case.x, input_h=case.h0, params=model.canonical_to_params(case.weights, case.biases),
                    input_c=case.c0)
        if stage == "forward":
            errors.append(_error(lambda: model.forward(**call | changes)))
        else:
            fwd = model.forward(**call)
            grads = dict(output_backprop=np.zeros(fwd.output.shape, F32), output_h_backprop=None,
                         output_c_backprop=None)
            errors.append(_error(lambda: model.backward(fwd, **grads | changes)))
    assert errors[0] == errors[1]


def test_a_mode_without_a_cell_state_refuses_one_in_both_backends(monkeypatch):
    fake_cuda.install(monkeypatch)
    cfg = RNNConfig("gru", num_layers=1, num_units=4, input_size=3, seq_len=2, batch=1, dtype="float32")
    errors = []
    for model in (cfg.model(), cfg.model(models=cudnn_backend.MODELS)):
        x = np.zeros((2, 1, 3), F32)
        params = np.zeros(model.params_size(), F32)
        errors.append(_error(lambda: model.forward(x, None, params, input_c=np.zeros((1, 1, 4), F32))))
    assert errors[0] == errors[1] == (ValueError, "input_c must be None for rnn_mode='gru' (no cell state)")
