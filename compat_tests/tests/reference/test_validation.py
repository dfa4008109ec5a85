"""Bad input: a clear ValueError/TypeError that names the argument, raised before any work."""

from __future__ import annotations

import re

import numpy as np
import pytest

import reference
from compat_tests.config import RNNConfig, make_case

F32 = np.float32


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"num_layers": 0}, ValueError, "num_layers"),
        ({"num_layers": 1.0}, TypeError, "num_layers"),
        ({"num_layers": True}, TypeError, "num_layers"),
        ({"num_units": float("nan")}, TypeError, "num_units"),
        ({"num_units": float("inf")}, TypeError, "num_units"),
        ({"input_size": -3}, ValueError, "input_size"),
        ({"input_size": "4"}, TypeError, "input_size"),
        ({"input_mode": "skip"}, ValueError, "input_mode"),
        ({"input_mode": "skip_input", "input_size": 3}, ValueError, "skip_input.*input_size == num_units"),
        ({"direction": "backward"}, ValueError, "direction"),
        ({"dtype": np.int32}, TypeError, "dtype"),
        ({"dtype": "bfloat16"}, TypeError, "dtype"),
        ({"dtype": None}, TypeError, "dtype must be float16, float32 or float64, got None"),  # np.dtype: float64
        ({"dropout": 1.5}, ValueError, "dropout"),
        ({"dropout": float("nan")}, ValueError, "dropout"),
        ({"dropout": "0.1"}, TypeError, "dropout"),
        ({"dropout": 10**400}, ValueError, r"dropout must be in \[0, 1\], got 1000.*\.\.\..*000$"),  # no float
        ({"seed": -1}, ValueError, "seed"),
    ],
)
def test_constructor_rejects(kwargs, error, match):
    args = {"num_layers": 1, "num_units": 4, "input_size": 2, **kwargs}
    with pytest.raises(error, match=match):
        reference.CudnnGRU(**args)


@pytest.mark.parametrize(("num_proj", "error"), [(0, ValueError), (4, ValueError), (5, ValueError),
                                                (2.0, TypeError), (True, TypeError)])
def test_lstm_rejects_bad_num_proj(num_proj, error):
    with pytest.raises(error, match="num_proj"):
        reference.CudnnLSTM(1, 4, 2, num_proj=num_proj)


def test_only_lstm_takes_num_proj():
    with pytest.raises(TypeError, match="num_proj"):
        reference.CudnnGRU(1, 4, 2, num_proj=2)


@pytest.mark.parametrize("mode", ["relu", "tanh", "gru", "classic_gru"])
def test_make_model_refuses_num_proj_for_a_mode_without_projection(mode):
    with pytest.raises(ValueError, match=f"num_proj must be None for rnn_mode='{mode}'.*'lstm'.*got 2"):
        reference.make_model(mode, 1, 4, 2, num_proj=2)


@pytest.mark.parametrize("mode", ["bogus", "LSTM", None])
def test_make_model_names_an_unknown_mode(mode):
    with pytest.raises(ValueError, match=r"Invalid rnn_mode: .*expecting one of 'relu', 'tanh', 'lstm', 'gru'"):
        reference.make_model(mode, 1, 4, 2)


def test_auto_select_resolves_like_tensorflow():
    assert reference.CudnnGRU(1, 4, 4, input_mode="auto_select").input_mode == "skip_input"
    assert reference.CudnnGRU(1, 4, 3, input_mode="auto_select").input_mode == "linear_input"


@pytest.fixture
def lstm():
    cfg = RNNConfig("lstm", num_layers=2, num_units=4, input_size=3, direction="bidirectional", seq_len=5,
                    batch=2, dtype="float32")
    model = cfg.model()
    case = make_case(cfg)
    return model, case, model.canonical_to_params(case.weights, case.biases)


def call(model, case, weights_buffer, **changes):
    args = dict(input_data=case.x, input_h=case.h0, params=weights_buffer, input_c=case.c0)
    args.update(changes)
    return model.forward(**args)


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        ({"input_data": np.zeros((5, 2), F32)}, ValueError, r"input_data must be 3-D"),
        ({"input_data": np.zeros((5, 2, 4), F32)}, ValueError, r"input_data must have shape \[T, B, input_size\]"),
        ({"input_data": np.zeros((0, 2, 3), F32)}, ValueError, r"input_data .*T >= 1"),
        ({"input_data": np.zeros((5, 2, 3), np.float64)}, TypeError, r"input_data must have dtype float32"),
        ({"input_data": [[[0.0] * 3] * 2] * 5}, TypeError, r"input_data must be a numpy.ndarray"),
        ({"input_h": np.zeros((4, 3, 4), F32)}, ValueError, r"input_h must have shape \[num_layers\*num_dirs, B, H\] = \(4, 2, 4\)"),
        ({"input_h": np.zeros((2, 2, 4), F32)}, ValueError, r"input_h must have shape"),
        ({"input_h": np.zeros((4, 2, 4), np.float16)}, TypeError, r"input_h must have dtype float32"),
        ({"input_c": np.zeros((4, 2, 5), F32)}, ValueError, r"input_c must have shape"),
        ({"params": np.zeros(7, F32)}, ValueError, r"params must have shape \[params_size\(\)\]"),
        ({"params": np.zeros((2, 3), F32)}, ValueError, r"params must be 1-D"),
        ({"sequence_lengths": [5, 0]}, ValueError, r"sequence_lengths must each be in 1..T = 1..5"),
        ({"sequence_lengths": [6, 1]}, ValueError, r"sequence_lengths must each be in 1..T"),
        ({"sequence_lengths": [5]}, ValueError, r"sequence_lengths must have shape \[B\] = \(2,\)"),
        ({"sequence_lengths": [5.0, 2.0]}, TypeError, r"sequence_lengths must be integers"),
        ({"sequence_lengths": [True, True]}, TypeError, r"sequence_lengths must be integers"),
        ({"sequence_lengths": [5, True]}, TypeError, r"sequence_lengths must be integers, got a bool among them"),
        ({"sequence_lengths": [[5], [2, 3]]}, ValueError, r"sequence_lengths must be integers of shape \[B\] = \(2,\)"),
        ({"sequence_lengths": [5, 2**70]}, ValueError, r"sequence_lengths must each be in 1..T = 1..5, got values in "
                                                       r"5..1180591620717411303424"),
        ({"sequence_lengths": [np.int64(5), 2**70]}, ValueError, r"sequence_lengths must each be in 1..T = 1..5, "
                                                                 r"got values in 5..1180591620717411303424"),
        ({"sequence_lengths": np.array([5, 2, 2**70], dtype=object)}, ValueError,
         r"sequence_lengths must have shape \[B\] = \(2,\), got \(3,\)"),
        ({"sequence_lengths": [2**63, 1]}, ValueError,  # NumPy reads int64 beside uint64 as float64
         r"sequence_lengths must each be in 1..T = 1..5, got values in 1..9223372036854775808"),
        ({"sequence_lengths": [np.uint64(5), np.int64(-1)]}, ValueError, r"got values in -1..5"),
        ({"sequence_lengths": []}, ValueError, r"sequence_lengths must have shape \[B\] = \(2,\), got \(0,\)"),
        ({"sequence_lengths": [5, "2"]}, TypeError, r"sequence_lengths must be integers, got str '2' among them"),
        ({"sequence_lengths": np.ma.masked_array([5, 9], mask=[False, True])}, TypeError,
         r"sequence_lengths must be a plain numpy.ndarray, got a masked array \(its mask would be ignored"),
        ({"input_data": np.ma.masked_array(np.zeros((5, 2, 3), F32))}, TypeError,
         r"input_data must be a plain numpy.ndarray, got a masked array"),
        ({"is_training": 1}, TypeError, r"is_training must be a bool"),
        ({"time_major": "yes"}, TypeError, r"time_major must be a bool"),
        ({"is_training": np.zeros(10**4)}, TypeError,  # the array shown cut short
         r"is_training must be a bool, got array\(\[0\., .{,60} \(ndarray\)$"),
    ],
)
def test_forward_rejects(lstm, changes, error, match):
    model, case, params = lstm
    with pytest.raises(error, match=match):
        call(model, case, params, **changes)


def test_lengths_of_mixed_integer_types_are_read_as_integers(lstm):
    """A list mixing NumPy's unsigned and signed integers (which NumPy itself reads as float64) is read as the
    integers it holds."""
    model, case, params = lstm
    want = call(model, case, params, sequence_lengths=np.array([5, 2]))
    got = call(model, case, params, sequence_lengths=[np.uint64(5), np.int64(2)])
    np.testing.assert_array_equal(got.output, want.output)


def test_lengths_held_as_python_integers_are_read_as_integers(lstm):
    """An object array of integers in range (NumPy makes one of Python ints it cannot prove fit int64, or a
    caller's ``dtype=object``) gives the result of the same lengths as int64."""
    model, case, params = lstm
    want = call(model, case, params, sequence_lengths=np.array([5, 2]))
    got = call(model, case, params, sequence_lengths=np.array([5, 2], dtype=object))
    for a, b in zip(got[:3], want[:3]):  # output, output_h, output_c
        np.testing.assert_array_equal(a, b)


def test_batch_major_errors_name_the_batch_major_shape(lstm):
    model, case, params = lstm
    with pytest.raises(ValueError, match=re.escape("input_h must have shape [B, num_layers*num_dirs, H] = (2, 4, 4)")):
        call(model, case, params, input_data=np.ascontiguousarray(case.x.transpose(1, 0, 2)), time_major=False)


def test_input_c_is_refused_without_a_cell_state():
    model = reference.CudnnGRU(1, 4, 3)
    x = np.zeros((2, 1, 3), F32)
    with pytest.raises(ValueError, match="input_c must be None"):
        model.forward(x, None, np.zeros(model.params_size(), F32), input_c=np.zeros((1, 1, 4), F32))


def test_errors_come_before_any_work(lstm, monkeypatch):
    """A bad last argument is reported without running a single step."""
    model, case, params = lstm
    import reference.model as model_module

    def boom(*args, **kwargs):
        raise AssertionError("work started before validation finished")

    monkeypatch.setattr(model_module, "run_layers", boom)
    with pytest.raises(ValueError, match="sequence_lengths"):
        call(model, case, params, sequence_lengths=[9, 9])


@pytest.mark.parametrize(
    ("which", "make", "error", "match"),
    [
        ("weights", lambda w: w[:-1], ValueError, r"weights must hold 32 tensors .*, got 31"),
        ("weights", lambda w: [w[0].T] + w[1:], ValueError, r"weights\[0\] \(pseudo_layer 0, lin_layer_id 0\) must have shape"),
        ("weights", lambda w: [w[0].astype(np.float64)] + w[1:], TypeError, r"weights\[0\] .* must have dtype float32"),
        ("weights", lambda w: np.stack([w[0], w[0]]), TypeError, r"weights must be a list"),
        ("biases", lambda b: b + [b[0]], ValueError, r"biases must hold 32 tensors"),
        ("biases", lambda b: b[:3] + [b[3][:-1]] + b[4:], ValueError, r"biases\[3\] \(pseudo_layer 0, lin_layer_id 3\)"),
        ("biases", lambda b: [np.ma.masked_array(b[0], mask=True)] + b[1:], TypeError,
         r"biases\[0\] .* must be a plain numpy.ndarray, got a masked array"),
    ],
)
def test_canonical_to_params_rejects(lstm, which, make, error, match):
    model, case, _ = lstm
    weights, biases = list(case.weights), list(case.biases)
    if which == "weights":
        weights = make(weights)
    else:
        biases = make(biases)
    with pytest.raises(error, match=match):
        model.canonical_to_params(weights, biases)


def test_params_to_canonical_rejects_wrong_size_and_dtype(lstm):
    model, _, params = lstm
    with pytest.raises(ValueError, match="params must have shape"):
        model.params_to_canonical(params[:-1])
    with pytest.raises(TypeError, match="params must have dtype float32"):
        model.params_to_canonical(params.astype(np.float64))


@pytest.mark.parametrize(("fields", "error", "match"), [
    ([], TypeError, "an RNNConfig must be a JSON object of its fields, got list"),
    ({"num_layers": 2}, ValueError, "needs at least 'mode'"),
    ({"mode": "gru", "colour": 1}, ValueError, "unknown RNNConfig fields: \\['colour'\\]"),
    ({"mode": "gru", "math_type": "tf32"}, ValueError, "math_type is not an RNNConfig field: .* reference-tf32"),
    ({"mode": "gru", "direction": "both"}, ValueError, "direction must be one of"),
    ({"mode": "gru", "input_mode": "auto_select"}, ValueError, "input_mode must be one of"),
    ({"mode": "gru", "num_units": 2.5}, TypeError, "num_units must be an int >= 1, got 2.5"),
    ({"mode": "gru", "batch": True}, TypeError, "batch must be an int >= 1, got True"),
    ({"mode": "gru", "seq_len": 0}, ValueError, "seq_len must be an int >= 1, got 0"),
    ({"mode": "gru", "seed": -5}, ValueError, "seed must be an int >= 0, got -5"),
    ({"mode": "gru", "time_major": "yes"}, TypeError, "time_major must be a bool, got 'yes'"),
    ({"mode": "gru", "initial_state": 0}, TypeError, "initial_state must be a bool, got 0"),
    ({"mode": "gru", "weight_scale": "big"}, TypeError, "weight_scale must be a number"),
    ({"mode": "gru", "weight_scale": float("nan")}, ValueError, "weight_scale must be finite and > 0, got nan"),
    ({"mode": "gru", "weight_scale": 0}, ValueError, "weight_scale must be finite and > 0, got 0"),
    ({"mode": "gru", "num_proj": 2}, ValueError, "num_proj needs mode 'lstm'"),
    ({"mode": "lstm", "num_proj": 4}, ValueError, "1 <= num_proj < num_units = 4, got 4"),
    ({"mode": "gru", "input_mode": "skip_input", "input_size": 7}, ValueError, "needs input_size == num_units"),
    ({"mode": "gru", "lengths": 5}, TypeError, "lengths must be None or a list of batch=2 ints, got 5"),
    ({"mode": "gru", "lengths": [1.5, 2]}, TypeError, "each of lengths must be an int >= 1, got 1.5"),
    ({"mode": "gru", "lengths": [0, 2]}, ValueError, "each of lengths must be an int >= 1, got 0"),
    ({"mode": "gru", "lengths": [1, 2, 3]}, ValueError, "batch=2 entries, each in 1..seq_len = 1..4"),
    ({"mode": "gru", "lengths": [1, 5]}, ValueError, "batch=2 entries, each in 1..seq_len = 1..4, got \\(1, 5\\)"),
])
def test_a_bad_config_is_refused_naming_the_field(fields, error, match):
    with pytest.raises(error, match=match):
        RNNConfig.from_dict(fields)


def test_a_config_is_normalised_to_plain_json_values():
    """NumPy scalars and lists (what code or a grid file hands over) become the types ``to_json`` writes,
    so a config equals its own JSON round trip."""
    cfg = RNNConfig("gru", num_units=np.int64(5), seq_len=np.int32(3), lengths=np.array([3, 1]), weight_scale=2,
                    time_major=np.bool_(False), seed=np.uint32(7))
    assert cfg == RNNConfig("gru", num_units=5, seq_len=3, lengths=(3, 1), weight_scale=2.0, time_major=False, seed=7)
    assert type(cfg.num_units) is int and type(cfg.lengths[0]) is int and type(cfg.weight_scale) is float
    assert type(cfg.time_major) is bool and RNNConfig.from_json(cfg.to_json()) == cfg


def _first_model_s_training_result(mode: str):
    """In a fresh worker process: its first model's training ``ForwardResult``."""
    model = {"relu": reference.CudnnRNNRelu, "tanh": reference.CudnnRNNTanh}[mode](1, 4, 3, dtype=np.float64)
    return model.forward(np.ones((2, 1, 3)), None, np.ones(model.params_size()), is_training=True)


def _first_model_s_backward(mode: str, fwd) -> str:
    """In a fresh worker process: its first model's backward on ``fwd``, or the error it raises."""
    model = {"relu": reference.CudnnRNNRelu, "tanh": reference.CudnnRNNTanh}[mode](1, 4, 3, dtype=np.float64)
    try:
        model.backward(fwd, np.ones((2, 1, 4)))
    except ValueError as exc:
        return str(exc)
    return "accepted"


def _in_a_fresh_process(fn, *args):
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        return pool.submit(fn, *args).result(timeout=120)


def test_a_result_from_a_model_in_another_process_is_refused():
    """Each process's first model: their tokens came from a counter that restarts in every process, so a
    relu ForwardResult sent from one worker matched the tanh model of another, and backward ran the tanh
    derivative on the relu trace."""
    fwd = _in_a_fresh_process(_first_model_s_training_result, "relu")
    assert "fwd comes from another model's forward()" in _in_a_fresh_process(_first_model_s_backward, "tanh", fwd)


def test_a_forward_result_keeps_lengths_of_its_own(lstm):
    """The caller's lengths are copied, and the copy the result keeps for backward cannot be changed."""
    model, case, params = lstm
    lengths = np.array([5, 2])
    fwd = call(model, case, params, sequence_lengths=lengths, is_training=True)
    lengths[1] = 5
    assert fwd.reserve.sequence_lengths.tolist() == [5, 2]
    with pytest.raises(ValueError, match="read-only"):
        fwd.reserve.sequence_lengths[1] = 5


@pytest.fixture(scope="module")
def gru_cells():
    from reference.cells import cells_from_tf
    from reference.formats import tf

    cfg = RNNConfig("gru", num_layers=2, num_units=4, input_size=3, direction="bidirectional", seq_len=5, batch=2,
                    dtype="float32")
    case, model = make_case(cfg), cfg.model()
    return cells_from_tf(model, tf.to_tf(model, case.weights, case.biases)), case


@pytest.mark.parametrize(("changes", "error", "match"), [
    ({"inputs": np.zeros((5, 2, 3), np.int32)}, TypeError, "inputs must have dtype float32"),
    ({"inputs": np.zeros((5, 2, 3), np.float64)}, TypeError, "inputs must have dtype float32"),
    ({"inputs": np.zeros((5, 2, 7), F32)}, ValueError, r"inputs must have shape \[T, B, input_width\] .* input width 3"),
    ({"inputs": np.zeros((0, 2, 3), F32)}, ValueError, r"inputs must have shape .*T >= 1"),
    ({"sequence_lengths": [5, 2.5]}, TypeError, "sequence_lengths must be integers"),
    ({"sequence_lengths": [5, 0]}, ValueError, r"sequence_lengths must each be in 1..T = 1..5"),
    ({"sequence_lengths": [5, 9]}, ValueError, r"sequence_lengths must each be in 1..T = 1..5"),
    ({"sequence_lengths": [5]}, ValueError, r"sequence_lengths must have shape \[B\] = \(2,\)"),
    ({"initial_h": np.zeros((1, 1, 4), F32)}, ValueError, r"initial_h must have shape \[L\*D, B, 4\] = \(4, 2, 4\)"),
    ({"initial_h": np.zeros((4, 2, 4), np.float64)}, TypeError, "initial_h must have dtype float32"),
    ({"initial_c": np.zeros((4, 2, 4), F32)}, ValueError, "initial_c must be None for CudnnCompatibleGRUCell cells"),
    ({"num_dirs": 1}, ValueError, r"cells\[1\] \(layer 1\) has input width 3, the stack needs 4"),
    ({"num_dirs": 3}, ValueError, "num_dirs must be 1 or 2, got 3"),
    ({"num_dirs": 2.0}, TypeError, r"num_dirs must be the int 1 or 2, got 2.0 \(float\)"),
    ({"cells": []}, TypeError, "cells must be a non-empty list"),
    ({"cells": "cells[:3]"}, ValueError, r"cells must hold num_dirs = 2 cells per layer, got 3"),
    ({"time_major": 0}, TypeError, "time_major must be a bool"),
])
def test_run_cells_rejects(gru_cells, changes, error, match):
    """Before, integer inputs ran to all-zero outputs, fractional, zero or negative lengths ran, and the
    rest failed inside NumPy naming no argument."""
    from reference.cells import run_cells

    cells, case = gru_cells
    args = dict(cells=cells, num_dirs=2, inputs=case.x, initial_h=case.h0, sequence_lengths=[5, 2])
    args.update(changes)
    if args["cells"] == "cells[:3]":
        args["cells"] = cells[:3]
    with pytest.raises(error, match=match):
        run_cells(**args)
    args = dict(cells=cells, num_dirs=2, inputs=case.x, initial_h=case.h0, sequence_lengths=[5, 2])
    assert run_cells(**args)[0].shape == (5, 2, 8)  # the control: as given, it runs


def test_run_cells_refuses_a_stack_of_mixed_cells(gru_cells):
    from reference.cells import run_cells

    cells, case = gru_cells
    other = RNNConfig("gru", num_layers=2, num_units=4, input_size=3, direction="bidirectional", dtype="float64")
    from reference.cells import cells_from_tf
    from reference.formats import tf

    mixed = cells[:3] + cells_from_tf(other.model(), tf.to_tf(other.model(), *make_case(other)[:2]))[3:]
    with pytest.raises(ValueError, match=r"cells\[3\] \(layer 1\) has dtype float64, the stack needs float32"):
        run_cells(mixed, 2, case.x)


@pytest.fixture(scope="module")
def lstm_cell():
    from reference.cells import cells_from_tf
    from reference.formats import tf

    cfg = RNNConfig("lstm", num_units=4, input_size=3, batch=2, dtype="float32")
    case, model = make_case(cfg), cfg.model()
    return cells_from_tf(model, tf.to_tf(model, case.weights, case.biases))[0]


def _zeros(*shape, dtype=F32):
    return np.zeros(shape, dtype)


@pytest.mark.parametrize(("inputs", "state", "error", "match"), [
    (_zeros(2, 3), (_zeros(1, 4), _zeros(2, 4)), ValueError, r"c must have shape \[B, 4\] = \(2, 4\), got \(1, 4\)"),
    (_zeros(2, 3), (_zeros(4), _zeros(2, 4)), ValueError, r"c must have shape \[B, 4\] = \(2, 4\), got \(4,\)"),
    (_zeros(2, 3, dtype=np.float64), (_zeros(2, 4, dtype=np.float64),) * 2, TypeError,
     r"inputs must be a numpy.ndarray of float32 with shape \[B, 3\], got float64"),
    (_zeros(2, 5), (_zeros(2, 4),) * 2, ValueError, r"inputs must have shape \[B, 3\] = \(2, 3\), got \(2, 5\)"),
    (_zeros(0, 3), (_zeros(0, 4),) * 2, ValueError, r"inputs must have shape \[B, 3\] with B >= 1, got \(0, 3\)"),
    ([[0.0] * 3] * 2, (_zeros(2, 4),) * 2, TypeError, r"inputs must be a numpy.ndarray of float32"),
    (_zeros(2, 3), _zeros(2, 4), TypeError, r"state must be the pair \(c, h\), got ndarray"),
])
def test_a_cell_called_on_its_own_checks_its_values(lstm_cell, inputs, state, error, match):
    """A cell called as TF calls one, ``cell(inputs, state)``: before, a ``[1, H]`` state was broadcast over
    the batch, float64 values ran through a float32 cell, and a wrong width failed inside NumPy."""
    with pytest.raises(error, match=match):
        lstm_cell(inputs, state)
    out, (c, h) = lstm_cell(_zeros(2, 3), (_zeros(2, 4), _zeros(2, 4)))  # the control, and its state goes on
    assert lstm_cell(_zeros(2, 3), [c, h])[0].shape == out.shape == (2, 4)


def test_a_cell_is_made_of_what_the_models_take():
    from reference.cells import BasicRNNCell

    with pytest.raises(ValueError, match="Invalid activation: 'sigmoid', expecting one of 'tanh', 'relu'"):
        BasicRNNCell(_zeros(7, 4), _zeros(4), activation="sigmoid")
    with pytest.raises(TypeError, match="BasicRNNCell kernel must be a float16, float32 or float64 array, got "
                                        "float128"):
        BasicRNNCell(_zeros(7, 4, dtype=np.longdouble), _zeros(4, dtype=np.longdouble))


def _lstm_and_tensors():
    model = reference.CudnnLSTM(1, 4, 3)
    return (model, *model.params_to_canonical(np.zeros(model.params_size(), F32)))


@pytest.mark.parametrize("fmt", ["tf", "torch", "keras", "onnx"])
def test_the_format_converters_check_the_canonical_lists(fmt):
    """Before, a short list failed inside ``np.concatenate`` and float64 tensors of a float32 model were
    written as float64."""
    from reference.formats import keras, onnx, tf, torch

    write = {"tf": tf.to_tf, "torch": torch.to_state_dict, "keras": keras.to_keras, "onnx": onnx.to_onnx}[fmt]
    model, weights, biases = _lstm_and_tensors()
    with pytest.raises(ValueError, match=r"weights must hold 8 tensors for CudnnLSTM\("):
        write(model, weights[:-1], biases)
    with pytest.raises(TypeError, match=r"biases\[0\] \(pseudo_layer 0, lin_layer_id 0\) must have dtype float32"):
        write(model, weights, [b.astype(np.float64) for b in biases])
    with pytest.raises(TypeError,
                       match=r"model must be a model such as reference.CudnnLSTM\(...\), got 'lstm' \(str\)"):
        write("lstm", weights, biases)
    assert write(model, weights, biases)  # the control


@pytest.mark.parametrize(("fmt", "given", "match"), [
    ("tf", [], "tensors must be a dict of tensors by TF variable name, got list"),
    ("torch", [], "state must be a dict of tensors by state_dict name, got list"),
    ("keras", {}, "layers must be a list with one list of Keras weights .* per layer, got dict"),
    ("keras", [np.zeros(3)], r"layers\[0\] must be a list of Keras weights .*, got ndarray"),
    ("onnx", [[np.zeros(3)]], r"layers\[0\] must be a dict of ONNX W, R and B, got list"),
    ("cells", None, "tensors must be a dict of tensors by TF variable name, got NoneType"),
])
def test_the_format_readers_check_what_they_are_given(fmt, given, match):
    from reference.cells import cells_from_tf
    from reference.formats import keras, onnx, tf, torch

    read = {"tf": tf.from_tf, "torch": torch.from_state_dict, "keras": keras.from_keras, "onnx": onnx.from_onnx,
            "cells": cells_from_tf}[fmt]
    model, weights, biases = _lstm_and_tensors()
    with pytest.raises(TypeError, match=match):
        read(model, given)
    with pytest.raises(TypeError, match=r"model must be a model such as reference.CudnnLSTM\(...\), got None"):
        read(None, given)


def test_a_scope_is_a_string(tmp_path):
    from reference import checkpoint
    from reference.cells import cells_from_tf
    from reference.formats import tf

    model, weights, biases = _lstm_and_tensors()
    for call in (lambda: tf.to_tf(model, weights, biases, scope=5),
                 lambda: cells_from_tf(model, tf.to_tf(model, weights, biases), scope=5),
                 lambda: checkpoint.save(tmp_path / "a.npz", model, weights, biases, scope=5)):
        with pytest.raises(TypeError, match="scope must be a str .* or None, got int"):
            call()
    config = {**checkpoint.model_config(model), "scope": 5}  # as a damaged file may say
    checkpoint.write_tensors(tmp_path / "b.npz", tf.to_tf(model, weights, biases), config)
    with pytest.raises(TypeError, match=r"b.npz: scope must be a str .* or None, got int"):
        checkpoint.load(tmp_path / "b.npz")


def test_a_checkpoint_s_arguments_are_checked(tmp_path):
    from reference import checkpoint

    model, weights, biases = _lstm_and_tensors()
    with pytest.raises(TypeError, match=r"model must be a model such as reference.CudnnLSTM\(...\), got 'lstm'"):
        checkpoint.save(tmp_path / "a.npz", "lstm", weights, biases)
    assert not (tmp_path / "a.npz").exists()
    checkpoint.save(tmp_path / "a.npz", model, weights, biases)
    with pytest.raises(TypeError, match="overrides must be a dict of config fields, got list"):
        checkpoint.load(tmp_path / "a.npz", overrides=["num_layers"])
    assert checkpoint.load(tmp_path / "a.npz", overrides={"dtype": np.float32}).model.dtype == F32  # as 'float32'
    with pytest.raises(ValueError, match="dtype is 'float32', not 'float64'"):
        checkpoint.load(tmp_path / "a.npz", overrides={"dtype": np.float64})


@pytest.mark.parametrize(("data", "match"), [
    (b"not an archive", r"neither a .npy array nor an .npz archive \(it starts with b'not an'\)"),
    (b"", r"neither a .npy array nor an .npz archive \(it starts with b''\)"),
    (b"\x80\x04\x95\x00", r"a pickle; refused"),
])
def test_an_npz_that_is_no_numpy_file_is_named_for_what_it_is(tmp_path, data, match):
    """Before, NumPy's reader took anything that is neither a zip nor a ``.npy`` for a pickle, and the
    message said the file held pickled data."""
    from reference import checkpoint

    path = tmp_path / "w.npz"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=f"w.npz: {match}"):
        checkpoint.load(path)
