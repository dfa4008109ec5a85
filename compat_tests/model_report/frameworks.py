"""A user's model file run in its own framework, as it is (not through our readers' import): the whole ONNX graph
in onnxruntime, the whole Keras model in Keras, a TorchScript archive in PyTorch, on one input, with the
recurrent stack's outputs taken from inside the run, so that they can be compared with the float64 truth.

What each kind of file gives (:func:`run_file`; :func:`unavailable` says beforehand what cannot run here):

- ONNX (``onnx``): the graph is run whole by onnxruntime (CPU, one thread), the last recurrent node's ``Y``
  and every recurrent node's ``Y_h`` exposed as extra graph outputs. ``X`` is the graph's first input that is
  not an initializer; whether it is time- or batch-major is read off the graph (:func:`_onnx_batch_major`).
  Sequence lengths go to the graph input wired to the nodes' ``sequence_lens``; a graph without one ignores
  them, and what it computes is returned as it is (the caller tells "lengths ignored" from it).
- Keras (``keras``, a ``.keras`` or full-model ``.h5``/``.hdf5`` file): the model is loaded
  (``safe_mode=True``: no Lambda's code is deserialised) and run, batch-major, up to its recurrent layers.
  Keras is given no lengths (a Keras model masks as its own layers say).
- PyTorch (``torch``): a TorchScript archive (``torch.jit.save``) is loaded and called on ``x``; a state_dict
  holds no function to run, and a pickled ``nn.Module`` is not unpickled (its code would run).
- TensorFlow (``tf``, ``checkpoint``): not run (TensorFlow is not a dependency).

Initial states are zeros throughout (what every framework starts from when given none). Optional packages
(onnx, onnxruntime, keras, torch) are imported inside the functions that need them.
"""

from __future__ import annotations

import importlib.util
import os
import zipfile
from pathlib import Path
from typing import NamedTuple

import numpy as np

from compat_tests.optional import require

FORMATS = ("onnx", "keras", "torch", "tf", "checkpoint")
FRAMEWORKS = {"onnx": "onnxruntime", "keras": "keras", "torch": "torch", "tf": "tensorflow",
              "checkpoint": "tensorflow"}
KERAS_MODEL_SUFFIXES = (".keras", ".h5", ".hdf5")
RECURRENT_MODULES = ("LSTM", "GRU", "RNN")  # a TorchScript module's original_name
# Ops through which a graph's input reaches the first recurrent node's X unchanged but for the order of its
# axes (Transpose), its type (Cast) or nothing; anything else leaves the layout to the input's dims.
PASS_THROUGH = ("Identity", "Cast", "Dropout", "Transpose")
MAX_TRACE = 10_000  # nodes looked at tracing a graph input's uses (a graph is a file's word)

STATE_DICT = "a state_dict holds weights, not the function: PyTorch runs these weights as torch-cpu does (above)"
PICKLED_MODULE = ("a pickled module runs its own code when loaded: not run (save a state_dict or a TorchScript "
                  "archive)")
KERAS_WEIGHTS = "a Keras weights file (.weights.h5) holds no architecture: Keras needs the model's code to run it"


class FrameworkRun(NamedTuple):
    """One run of a file in its own framework.

    ``framework``: its name and version (``"onnxruntime 1.32.0"``, ``"keras 3.15.1 (torch backend)"``,
    ``"torch 2.13.0+cpu (TorchScript)"``). ``output``: ``[T, B, D*H]``, time-major, the last recurrent layer's
    output sequence (forward half, then backward half), as the framework computed it (zeros past each length
    where it was given lengths); ``None`` where the model does not expose it. ``output_h``: ``[L*D, B, H]``,
    every recurrent layer's final hidden states in cuDNN's order (layer-major, then direction), or ``None``."""

    framework: str
    output: np.ndarray | None
    output_h: np.ndarray | None


def _format(path, fmt: str) -> str:
    """``fmt`` checked (``"auto"``: the format ``compat_tests.interop.convert.detect`` tells from the file)."""
    if fmt == "auto":
        from compat_tests.interop.convert import detect

        return detect(path)
    if fmt not in FORMATS:
        raise ValueError(f"{path}: unknown format {fmt!r}, expecting one of {', '.join(FORMATS)} (or auto)")
    return fmt


def framework_of(path, fmt: str) -> str:
    """The framework that runs the file: ``"onnxruntime"`` (fmt ``"onnx"``), ``"keras"`` (fmt ``"keras"``),
    ``"torch"`` (fmt ``"torch"``), ``"tensorflow"`` (fmt ``"tf"`` or ``"checkpoint"``). An unknown ``fmt`` is a
    ValueError naming the file."""
    return FRAMEWORKS[_format(path, fmt)]


def unavailable(path, fmt: str) -> str | None:
    """None where :func:`run_file` can run this file here, else one sentence saying why not: the framework is not
    installed, or the file holds no function to run (a state_dict, a Keras weights file, a tensor file), or
    running it would run code the file carries (a pickled ``nn.Module``). Looks at the file's kind only (a
    zip's member names, an HDF5 file's attributes, a ``torch.save`` pickle parsed, never unpickled); what is
    wrong inside a file of a runnable kind is :func:`run_file`'s ValueError. A file that cannot be opened as
    its format says is a ValueError naming it."""
    fmt = _format(path, fmt)
    if fmt == "onnx":
        for package in ("onnx", "onnxruntime"):
            if importlib.util.find_spec(package) is None:
                return f"{package} is not installed here: the ONNX graph is not run in onnxruntime"
        return None
    if fmt in ("tf", "checkpoint"):
        if Path(path).suffix != ".pb":  # (a tensor bundle or a tensor file, like a state_dict)
            return "a TensorFlow checkpoint holds variables, not the function: the peers run its weights (above)"
        if importlib.util.find_spec("tensorflow") is None:
            return "TensorFlow is not installed here: the frozen graph is not run in its own framework"
        return ("running a frozen graph in TensorFlow is not implemented (its CudnnRNN ops run on a GPU only; its "
                "weights are read and run by the peers above)")
    if fmt == "keras":
        return _keras_unavailable(Path(path))
    return _torch_unavailable(Path(path))


def _keras_unavailable(path: Path) -> str | None:
    if path.name.endswith(".weights.h5"):
        return KERAS_WEIGHTS
    if path.suffix not in KERAS_MODEL_SUFFIXES:
        return (f"a tensor file ({path.suffix or 'no suffix'}) holds the layers' weights, not the model: Keras "
                f"needs a .keras or .h5 model file to run it")
    if path.suffix != ".keras":  # a legacy .h5 model carries its config in model_config; weights alone do not
        from compat_tests.interop import hdf5_tree  # (read in a child process: the HDF5 library may crash)

        try:
            attrs = hdf5_tree.read(path).attrs
        except ValueError as exc:
            raise ValueError(f"{path}: not a readable HDF5 file ({exc})") from None
        if "model_config" not in attrs:
            return ("a Keras weights file (an .h5 without model_config) holds no architecture: Keras needs the "
                    "model's code to run it")
    for package in ("keras", "h5py"):
        if importlib.util.find_spec(package) is None:
            return f"{package} is not installed here: the Keras model is not run in Keras"
    return None


def _torch_unavailable(path: Path) -> str | None:
    from reference import checkpoint
    from reference.formats import torch_archive

    if path.suffix in checkpoint.SUFFIXES:  # a state_dict in safetensors or .npz
        return STATE_DICT
    if not torch_archive.is_torch_file(path):
        raise ValueError(f"{path}: not a file torch.save or torch.jit.save wrote (a zip or a pickle)")
    if _is_torchscript(path):
        if importlib.util.find_spec("torch") is None:
            return "torch is not installed here: the TorchScript archive is not run in its own framework"
        return None
    try:
        with torch_archive.open_file(path) as archive:
            obj = archive.obj  # parsed, never unpickled
    except ValueError as exc:
        raise ValueError(f"{path}: not a readable torch.save file ({exc})") from None
    return PICKLED_MODULE if _holds_module(obj) else STATE_DICT


def _is_torchscript(path: Path) -> bool:
    """Whether ``path`` is a TorchScript archive: a zip with ``ROOT/code/`` or ``ROOT/constants.pkl`` (member
    names only; nothing is read)."""
    if not zipfile.is_zipfile(path):
        return False
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise ValueError(f"{path}: not a readable zip ({exc})") from None
    return any((n.count("/") >= 2 and n.split("/")[1] == "code") or (n.count("/") == 1 and n.endswith("/constants.pkl"))
               for n in names)


def _holds_module(obj, limit: int = 100_000) -> bool:
    """Whether a parsed ``torch.save`` pickle holds a pickled ``nn.Module`` (an object whose state has
    ``_parameters`` and ``_modules``) anywhere within it."""
    from reference.formats.torch_archive import Opaque

    todo, seen = [obj], set()
    while todo and len(seen) < limit:
        node = todo.pop()
        if id(node) in seen or not isinstance(node, (Opaque, dict, list, tuple)):
            continue
        seen.add(id(node))
        if isinstance(node, Opaque):
            if isinstance(node.state, dict) and isinstance(node.state.get("_parameters"), dict) \
                    and isinstance(node.state.get("_modules"), dict):
                return True
            todo.append(node.state)
        else:
            todo.extend(node.values() if isinstance(node, dict) else node)
    return False


def run_file(path, fmt: str, x: np.ndarray, lengths: np.ndarray | None, options: dict) -> FrameworkRun:
    """The file at ``path`` (format ``fmt``) run in its own framework on ``x`` (float, time-major ``[T, B,
    input_size]``, in the file's dtype; cast to the dtype the model's input declares) with zero initial
    states. ``lengths`` (int ``[B]``, each in ``[0, T]``, or None): given to an ONNX graph's ``sequence_lens``
    input, where it has one; Keras models and TorchScript modules are called on ``x`` alone. ``options``: the
    reader options the user gave; ``node`` (ONNX: the recurrent node whose ``Y``/``Y_h`` are taken, in the
    main graph) and ``module`` (TorchScript: the recurrent module whose sizes the outputs are checked
    against) are used, the rest ignored. A file :func:`unavailable` refuses, a bad argument, or a model that
    cannot be run as given is a ValueError (TypeError for an argument of the wrong type) naming the file; a
    file that cannot be opened, the OSError that names it."""
    fmt = _format(path, fmt)
    if not isinstance(x, np.ndarray) or x.ndim != 3 or not np.issubdtype(x.dtype, np.floating):
        raise TypeError(f"{path}: x must be a float array [T, B, input_size], got "
                        f"{type(x).__name__} {getattr(x, 'dtype', '')} of shape {list(np.shape(x))}")
    T, B = x.shape[:2]
    if lengths is not None:
        lengths = np.asarray(lengths)
        if lengths.shape != (B,) or not np.issubdtype(lengths.dtype, np.integer):
            raise TypeError(f"{path}: lengths must be an integer array [B] = [{B}], got {lengths.dtype} of shape "
                            f"{list(lengths.shape)}")
        if lengths.size and (lengths.min() < 0 or lengths.max() > T):
            raise ValueError(f"{path}: lengths must lie in [0, {T}], got {lengths.tolist()}")
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"{path}: options must be a dict, got {type(options).__name__}")
    options = dict(options or {})
    if fmt not in ("tf", "checkpoint"):  # (a TF checkpoint is named by its PREFIX, no file of that name)
        with open(path, "rb"):  # a missing or unreadable file: the OSError that names it, as for every reader
            pass
    reason = unavailable(path, fmt)
    if reason is not None:
        raise ValueError(f"{path}: {reason}")
    if fmt == "onnx":
        return _run_onnx(Path(path), x, lengths, options)
    if fmt == "keras":
        return _run_keras(Path(path), x)
    return _run_torchscript(Path(path), x, options)


# ONNX


def _run_onnx(path: Path, x: np.ndarray, lengths: np.ndarray | None, options: dict) -> FrameworkRun:
    """The graph run whole in onnxruntime with the recurrent nodes' ``Y``/``Y_h`` exposed (see the module's
    docstring). ``Y`` is ``[T, D, B, H]`` (``layout=0``) or ``[B, T, D, H]`` (``layout=1``); ``Y_h`` ``[D, B,
    H]`` or ``[B, D, H]``."""
    onnx = require("onnx", "running an ONNX file in onnxruntime")
    ort = require("onnxruntime", "running an ONNX file in onnxruntime")
    from google.protobuf.message import DecodeError
    from onnx import helper

    from compat_tests.interop.onnx_model import elsewhere, listed, recurrent_nodes
    from compat_tests.interop.onnx_stack import batch_major, node_name

    try:  # the model's own bytes: no other file is opened on its say-so
        proto = onnx.load(str(path), load_external_data=False)
    except DecodeError as exc:
        raise ValueError(f"{path}: not a readable ONNX model ({exc})") from None
    outside = elsewhere(proto)
    if outside:
        raise ValueError(f"{path}: {outside}; a model is run from its own bytes alone, so it is refused (nothing it "
                         f"points at was opened): save it with its weights inside (onnx.save(..., "
                         f"save_as_external_data=False))")
    graph = proto.graph
    nodes = [n for n, where, _ in recurrent_nodes(graph) if where == "the main graph"]
    if not nodes:
        raise ValueError(f"{path}: the graph has no GRU, LSTM or RNN node in its main graph, whose outputs could be "
                         f"exposed (its recurrent nodes: {listed(graph)})")
    wanted = options.get("node")
    if wanted is not None:
        picked = [n for n in nodes if n.name == wanted]
        if len(picked) != 1:
            raise ValueError(f"{path}: {len(picked)} recurrent nodes of the main graph are named {wanted!r}, not "
                             f"one (its recurrent nodes: {listed(graph)})")
        nodes = picked
    inits = {t.name for t in graph.initializer}
    fed = [i for i in graph.input if i.name not in inits]
    if not fed:
        raise ValueError(f"{path}: the graph has no input to feed x to (every input is an initializer)")
    X = fed[0]
    x = x.astype(_np_dtype(X, path), copy=False)
    T, B = x.shape[:2]
    feed = {X.name: np.ascontiguousarray(x.transpose(1, 0, 2)) if _onnx_batch_major(graph, X, nodes[0], T, B)
            else x}
    roles = _input_roles(graph, nodes, X.name)
    for i in fed[1:]:
        role = roles.get(i.name)
        if role is None:
            raise ValueError(f"{path}: the graph input {i.name!r} is neither X, nor wired to the recurrent nodes' "
                             f"sequence_lens, initial_h or initial_c: what to feed it is unknown")
        if len(role) > 1:
            raise ValueError(f"{path}: the graph input {i.name!r} reaches the recurrent nodes as "
                             f"{' and '.join(sorted(role))}: what to feed it is unclear")
        (role,) = role
        dims = _dims(i)
        if role == "sequence_lens":
            if dims is not None and len(dims) != 1:
                raise ValueError(f"{path}: the graph input {i.name!r} (sequence_lens) has rank {len(dims)}, not 1")
            feed[i.name] = (np.full(B, T) if lengths is None else lengths).astype(_np_dtype(i, path))
        else:
            feed[i.name] = np.zeros(_state_shape(graph, dims, nodes, i.name, B), _np_dtype(i, path))

    last = nodes[-1]
    y_name = last.output[0] if len(last.output) > 0 else ""
    h_names = [n.output[1] if len(n.output) > 1 else "" for n in nodes]
    wanted_outputs = ([y_name] if y_name else []) + (h_names if all(h_names) else [])
    if not wanted_outputs:
        return FrameworkRun(f"onnxruntime {ort.__version__}", None, None)
    types = _value_types(onnx, proto)
    present = {o.name for o in graph.output}
    for name in wanted_outputs:
        if name not in present:
            graph.output.append(helper.make_tensor_value_info(name, types.get(name, X.type.tensor_type.elem_type),
                                                              None))
            present.add(name)
    errors = _ort_errors(ort)
    options_ = ort.SessionOptions()
    options_.intra_op_num_threads = 1
    try:
        session = ort.InferenceSession(proto.SerializeToString(), options_, providers=["CPUExecutionProvider"])
    except errors as exc:
        raise ValueError(f"{path}: onnxruntime cannot load the graph: {type(exc).__name__}: {exc}") from None
    try:
        results = dict(zip(wanted_outputs, session.run(wanted_outputs, feed)))
    except errors as exc:
        raise ValueError(f"{path}: onnxruntime cannot run the graph on x [{T}, {B}, {x.shape[2]}]: "
                         f"{type(exc).__name__}: {exc}") from None
    output = output_h = None
    if y_name:
        Y = results[y_name]
        if Y.ndim != 4:
            raise ValueError(f"{path}: node {node_name(last)}'s Y has shape {list(Y.shape)}, not 4 axes")
        Y = Y.transpose(1, 2, 0, 3) if batch_major(last) else Y  # [B, T, D, H] -> [T, D, B, H]
        output = np.ascontiguousarray(Y.transpose(0, 2, 1, 3)).reshape(Y.shape[0], Y.shape[2], -1)
    if all(h_names):
        hs = []
        for n, name in zip(nodes, h_names):
            h = results[name]
            if h.ndim != 3:
                raise ValueError(f"{path}: node {node_name(n)}'s Y_h has shape {list(h.shape)}, not 3 axes")
            hs.append(h.transpose(1, 0, 2) if batch_major(n) else h)
        output_h = np.ascontiguousarray(np.concatenate(hs, axis=0))
    return FrameworkRun(f"onnxruntime {ort.__version__}", output, output_h)


def _ort_errors(ort) -> tuple:
    """onnxruntime's exception classes (its pybind module's; none derives from a Python error class)."""
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    return (RuntimeError, *(c for c in vars(state).values() if isinstance(c, type) and issubclass(c, Exception)))


def _np_dtype(info, path: Path):
    """The NumPy dtype of a graph input's declared element type."""
    from onnx import helper

    elem = info.type.tensor_type.elem_type
    try:
        return helper.tensor_dtype_to_np_dtype(elem)
    except (KeyError, ValueError, TypeError):
        raise ValueError(f"{path}: the graph input {info.name!r} has element type {elem}, which NumPy has no dtype "
                         f"for") from None


def _dims(info) -> list | None:
    """A graph input's declared dims: an int where fixed, its name (a str) where symbolic, None where neither;
    None for an input of unknown rank."""
    t = info.type.tensor_type
    if not t.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else d.dim_param if d.HasField("dim_param") else None
            for d in t.shape.dim]


def _value_types(onnx, proto) -> dict[str, int]:
    """Every value's element type that shape inference finds (empty where it fails on the graph)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(proto)
    except Exception:  # (an inference failure leaves the types to the fallback: the input's)
        return {}
    return {v.name: v.type.tensor_type.elem_type for v in [*inferred.graph.value_info, *inferred.graph.output]
            if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type}


def _onnx_batch_major(graph, X, node, T: int, B: int) -> bool:
    """Whether the graph's input ``X`` is batch-major ``[B, T, I]`` (else time-major ``[T, B, I]``).

    Traced from the first recurrent node's X input back to ``X`` through ops that move no element but by
    reordering axes (:data:`PASS_THROUGH`): the node's ``layout`` says where its time and batch axes lie, and
    each Transpose on the way moves them (PyTorch's exporter writes batch_first modules as ``Transpose(perm=[1,
    0, 2])`` before a ``layout=0`` node). Where the trace meets any other op, the input's declared dims decide
    where they pin it: fixed sizes that fit ``(T, B)`` one way only, or a symbolic dim named like a batch
    (``batch``, ``batch_size``, ``N``) on axis 0 or 1. Where nothing pins it, time-major is assumed."""
    from compat_tests.interop.onnx_stack import attributes, batch_major

    producers = {out: n for n in graph.node for out in n.output if out}
    axes = [1, 0, 2] if batch_major(node) else [0, 1, 2]  # the node's X's (time, batch, feature) axes
    name = node.input[0]
    for _ in range(len(graph.node) + 1):
        if name == X.name:
            if sorted(axes) == [0, 1, 2] and axes[2] == 2:
                return axes[:2] == [1, 0]
            break
        op = producers.get(name)
        if op is None or op.op_type not in PASS_THROUGH or not op.input:
            break
        if op.op_type == "Transpose":
            perm = attributes(op).get("perm", [2, 1, 0])
            if sorted(perm) != [0, 1, 2]:
                break
            axes = [perm[a] for a in axes]
        name = op.input[0]
    dims = _dims(X) or []
    if len(dims) == 3:
        d0, d1 = dims[0], dims[1]
        fixed = [(k, d) for k, d in enumerate((d0, d1)) if isinstance(d, int) and d > 0]
        if len(fixed) == 2 and T != B:
            if (d0, d1) == (B, T):
                return True
            if (d0, d1) == (T, B):
                return False
        elif len(fixed) == 1 and T != B:
            k, d = fixed[0]
            if d in (T, B):
                return (k == 0) == (d == B)
        batchlike = [k for k, d in enumerate((d0, d1)) if isinstance(d, str)
                     and d.lower() in ("batch", "batch_size", "batchsize", "n", "b")]
        if len(batchlike) == 1:
            return batchlike[0] == 0
    return False


def _upstream(graph, name: str) -> set[str]:
    """Every value ``name`` is computed from, itself included, through the graph's nodes."""
    producers = {out: n for n in graph.node for out in n.output if out}
    todo, seen = [name], set()
    while todo and len(seen) < MAX_TRACE:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        op = producers.get(v)
        if op is not None:
            todo.extend(i for i in op.input if i)
    return seen


STATE_INPUTS = ((4, "sequence_lens"), (5, "initial_h"), (6, "initial_c"))  # a recurrent node's inputs


def _input_roles(graph, nodes, x_name: str) -> dict[str, set[str]]:
    """The graph inputs (but ``x_name``) that reach the recurrent ``nodes``' ``sequence_lens`` (input 4),
    ``initial_h`` (5) or ``initial_c`` (6, an LSTM's), through any ops: name -> the roles it reaches."""
    inputs = {i.name for i in graph.input} - {x_name}
    roles: dict[str, set[str]] = {}
    for node in nodes:
        for k, role in STATE_INPUTS:
            if len(node.input) > k and node.input[k]:
                for name in _upstream(graph, node.input[k]) & inputs:
                    roles.setdefault(name, set()).add(role)
    return roles


def _state_shape(graph, dims: list | None, nodes, name: str, B: int) -> tuple[int, ...]:
    """The shape of the zeros fed to the initial-state graph input ``name``: its fixed dims, and where a dim is
    not fixed, that of the states of all the nodes it reaches stacked as ONNX lays one node's out
    (``[L*D, B, H]``; ``layout=1``: ``[B, L*D, H]``)."""
    from compat_tests.interop.onnx_stack import attributes, batch_major

    fed = [n for n in nodes if any(len(n.input) > k and n.input[k] and name in _upstream(graph, n.input[k])
                                   for k in (5, 6))] or nodes[:1]
    LD = sum(2 if attributes(n).get("direction", b"forward") in ("bidirectional", b"bidirectional") else 1
             for n in fed)
    H = int(attributes(fed[0]).get("hidden_size", 0))
    canonical = [B, LD, H] if batch_major(fed[0]) else [LD, B, H]
    if dims is None or len(dims) != 3:
        return tuple(canonical)
    return tuple(d if isinstance(d, int) and d > 0 else c for d, c in zip(dims, canonical))


# Keras


def _import_keras():
    """``keras``, on the torch backend unless the caller chose another before its first import."""
    os.environ.setdefault("KERAS_BACKEND", "torch")
    return require("keras", "running a Keras model in Keras")


def _run_keras(path: Path, x: np.ndarray) -> FrameworkRun:
    """The model loaded (``compile=False, safe_mode=True``) and run on ``x`` made batch-major, as a model of its
    own inputs and its top-level recurrent layers' outputs (``LSTM``, ``GRU``, ``SimpleRNN``, each alone or in
    a ``Bidirectional``), whatever lies after them (a Dense head) left out.

    ``output``: the last recurrent layer's sequence, where it returns sequences (a ``Bidirectional``'s merged
    by ``concat``, or not merged); ``None`` where it returns its last step only (``return_sequences=False``),
    or merges directions by sum, mul or ave, which cannot be split. ``output_h``: where every recurrent layer
    exposes its final hidden states, ``[L*D, B, H]``: a layer built with ``return_state=True`` returns them,
    and one with ``return_sequences=False`` returns its last step, which is its final state (a
    ``Bidirectional``'s: the forward direction's last step beside the backward one's, its final state too);
    ``None`` where any recurrent layer returns its sequence alone (final states are not derived from
    sequences). So the common ``LSTM -> Dense`` model gives ``output_h`` and no ``output``. A model whose
    recurrent layers lie only inside a nested model gives neither (``None``, ``None``): their outputs are not
    the outer model's to take."""
    keras = _import_keras()
    try:
        model = keras.saving.load_model(str(path), compile=False, safe_mode=True)
    except Exception as exc:  # Keras raises whatever its layers' deserialisation raises
        raise ValueError(f"{path}: Keras cannot load the model: {type(exc).__name__}: {exc}") from None
    framework = f"keras {keras.__version__} ({keras.backend.backend()} backend)"
    layers = [layer for layer in getattr(model, "layers", []) if _keras_recurrent(keras, layer)]
    if not layers:
        if _keras_nested_recurrent(keras, model):
            return FrameworkRun(framework, None, None)
        raise ValueError(f"{path}: the Keras model has no LSTM, GRU or SimpleRNN layer")
    inputs = model.inputs
    if not inputs or len(inputs) != 1:
        raise ValueError(f"{path}: the Keras model has {len(inputs or [])} inputs; a model of one input (the "
                         f"sequence) is run")
    outputs, counts = [], []
    for layer in layers:
        try:
            out = keras.tree.flatten(layer.output)
        except (AttributeError, ValueError) as exc:  # a layer called more than once has no one output
            raise ValueError(f"{path}: the recurrent layer {layer.name!r} has no single output to take: "
                             f"{exc}") from None
        outputs.extend(out)
        counts.append(len(out))
    sub = keras.Model(inputs[0], outputs)
    try:
        got = sub(np.ascontiguousarray(x.transpose(1, 0, 2)), training=False)
    except Exception as exc:  # shapes or dtypes the model refuses
        raise ValueError(f"{path}: Keras cannot run the model on x [T, B, I] = {list(x.shape)} (given batch-major): "
                         f"{type(exc).__name__}: {exc}") from None
    got = [keras.ops.convert_to_numpy(g) for g in keras.tree.flatten(got)]
    sequences, finals, start = [], [], 0
    for layer, count in zip(layers, counts):
        sequence, final = _keras_layer_outputs(keras, layer, got[start:start + count])
        sequences.append(sequence)
        finals.append(final)
        start += count
    output = None if sequences[-1] is None else np.ascontiguousarray(sequences[-1].transpose(1, 0, 2))
    output_h = None if any(f is None for f in finals) else np.ascontiguousarray(np.concatenate(finals, axis=0))
    return FrameworkRun(framework, output, output_h)


def _keras_recurrent(keras, layer) -> bool:
    rnns = (keras.layers.LSTM, keras.layers.GRU, keras.layers.SimpleRNN)
    if isinstance(layer, keras.layers.Bidirectional):
        return isinstance(layer.forward_layer, rnns)
    return isinstance(layer, rnns)


def _keras_nested_recurrent(keras, model, depth: int = 0) -> bool:
    """Whether a model nested in ``model`` (at any depth up to 16) holds a recurrent layer."""
    for layer in getattr(model, "layers", []):
        if layer is not model and isinstance(layer, keras.Model) and depth < 16:
            if any(_keras_recurrent(keras, inner) for inner in layer.layers) or \
                    _keras_nested_recurrent(keras, layer, depth + 1):
                return True
    return False


def _keras_layer_outputs(keras, layer, got: list[np.ndarray]) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(sequence [B, T, D*H] or None, final hidden states [D, B, H] or None)`` of one recurrent layer from its
    flattened outputs ``got`` (see :func:`_run_keras`)."""
    bidirectional = isinstance(layer, keras.layers.Bidirectional)
    inner = layer.forward_layer if bidirectional else layer
    merge = getattr(layer, "merge_mode", "concat") if bidirectional else "concat"
    lstm = isinstance(inner, keras.layers.LSTM)
    D, H = (2 if bidirectional else 1), int(inner.units)
    n_out = 2 if merge is None and bidirectional else 1
    outs, states = got[:n_out], got[n_out:]
    if merge in ("concat", None):
        merged = np.concatenate(outs, axis=-1) if len(outs) > 1 else outs[0]
    else:
        merged = None  # sum, mul, ave: the directions cannot be told apart
    sequence = merged if inner.return_sequences else None
    final = None
    if inner.return_state and states:
        per = 2 if lstm else 1  # (h, c) or h per direction
        final = np.stack([states[d * per] for d in range(D)])
    elif not inner.return_sequences and merged is not None:
        final = np.stack([merged[:, d * H:(d + 1) * H] for d in range(D)])
    return sequence, final


# TorchScript


def _run_torchscript(path: Path, x: np.ndarray, options: dict) -> FrameworkRun:
    """The archive loaded with ``torch.jit.load`` (on the CPU, in eval mode) and called on ``x`` as a tensor of
    its parameters' dtype. The module's recurrent submodule (an ``nn.LSTM``/``GRU``/``RNN``, by its
    ``original_name``; ``options["module"]`` picks one by path where there are several, else the last) gives
    the sizes ``L``, ``D``, ``H`` (from its parameters' names and shapes) and ``batch_first``: its attribute
    where the archive keeps it (a scripted module), else the ``batch_first`` constant of the first recurrent
    op in the module's graph (a traced one), else time-major is assumed. A module with no ``forward`` but an
    ``nn.LSTM``'s scripted overloads (a bare scripted ``nn.LSTM``) is called through its tensor overload.

    The call's result (or its first element, for a tuple) is ``output`` where it is ``[T, B, D*H]``
    (``[B, T, D*H]`` batch_first); anything else (a head's output) gives ``None``. Its second element (its
    first, where a tuple: an LSTM's ``(h, c)``) is ``output_h`` where it is ``[L*D, B, H]``. Lengths cannot
    be given (a PackedSequence is built by the module's own code). A traced module replays what its trace
    recorded, training-mode dropout included."""
    torch = require("torch", "running a TorchScript archive in PyTorch")
    framework = f"torch {torch.__version__} (TorchScript)"
    try:
        module = torch.jit.load(str(path), map_location="cpu")
    except (RuntimeError, ValueError) as exc:
        raise ValueError(f"{path}: torch.jit.load cannot load the archive: {exc}") from None
    module.eval()
    rnn, L, D, H = _script_rnn(path, module, options.get("module"))
    batch_first = _script_batch_first(module, rnn)
    params = list(module.parameters())
    dtype = params[0].dtype if params else torch.float32
    T, B = x.shape[:2]
    tensor = torch.from_numpy(np.ascontiguousarray(x.transpose(1, 0, 2) if batch_first else x)).to(dtype)
    methods = module._c._method_names()
    try:
        with torch.no_grad():
            if "forward" in methods:
                result = module(tensor)
            elif "forward__0" in methods:  # a bare scripted nn.LSTM/GRU/RNN: its overloads, tensor first
                result = module.forward__0(tensor, None)
            else:
                raise ValueError(f"{path}: the TorchScript module has no forward method (methods: {methods[:8]})")
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"{path}: the TorchScript module cannot be called on x (shape "
                         f"{list(tensor.shape)}, {'batch_first' if batch_first else 'time-major'}): {exc}") from None
    first = result[0] if isinstance(result, (tuple, list)) and result else result
    output = output_h = None
    if isinstance(first, torch.Tensor) and first.ndim == 3:
        y = first.detach().cpu().numpy()
        y = y.transpose(1, 0, 2) if batch_first else y
        if y.shape == (T, B, D * H):
            output = np.ascontiguousarray(y)
    second = result[1] if isinstance(result, (tuple, list)) and len(result) > 1 else None
    if isinstance(second, (tuple, list)) and second:
        second = second[0]
    if isinstance(second, torch.Tensor) and tuple(second.shape) == (L * D, B, H):
        output_h = np.ascontiguousarray(second.detach().cpu().numpy())
    return FrameworkRun(framework, output, output_h)


def _script_rnn(path: Path, module, wanted: str | None):
    """``(submodule, L, D, H)`` of the TorchScript module's recurrent submodule (see :func:`_run_torchscript`)."""
    found = {name: sub for name, sub in module.named_modules() if getattr(sub, "original_name", "") in
             RECURRENT_MODULES}
    if not found:
        raise ValueError(f"{path}: the TorchScript module holds no nn.LSTM, nn.GRU or nn.RNN submodule")
    if wanted is not None:
        if wanted not in found:
            raise ValueError(f"{path}: no recurrent module at {wanted!r}; the module's recurrent modules: "
                             f"{sorted(found)}")
        name = wanted
    else:
        name = list(found)[-1]
    sub = found[name]
    params = {n: p for n, p in sub.named_parameters(recurse=False)}
    layers = [k for k in range(len(params)) if f"weight_hh_l{k}" in params]
    if not layers or "weight_hh_l0" not in params:
        raise ValueError(f"{path}: the recurrent module {name or '(the top level)'!r} has no weight_hh_l0")
    D = 2 if "weight_hh_l0_reverse" in params else 1
    H = int(params["weight_hh_l0"].shape[1])  # (an LSTM with proj_size: its hidden state's size)
    return sub, len(layers), D, H


def _script_batch_first(module, rnn) -> bool:
    """Whether the recurrent submodule reads batch-major input (see :func:`_run_torchscript`)."""
    value = getattr(rnn, "batch_first", None)
    if isinstance(value, bool):
        return value
    try:
        graph = module.inlined_graph
    except (AttributeError, RuntimeError):
        return False
    for node in graph.nodes():
        if node.kind() in ("aten::lstm", "aten::gru", "aten::rnn_tanh", "aten::rnn_relu"):
            if "bool batch_first)" not in str(node.schema()):
                continue  # the PackedSequence overload
            last = list(node.inputs())[-1]
            if last.node().kind() == "prim::Constant":
                value = last.toIValue()
                return value if isinstance(value, bool) else False
            return False
    return False


__all__ = ["FrameworkRun", "framework_of", "unavailable", "run_file"]


def fixed_sizes(path, fmt: str) -> tuple[int, int] | None:
    """``(T, B)`` where the file's model takes inputs of that length and batch only (an ONNX graph exported with
    fixed dims: onnxruntime refuses any other), else ``None``; where it fixes one of them only, the other is
    ``None`` in the pair."""
    if _format(path, fmt) != "onnx":
        return None
    onnx = require("onnx", "running an ONNX file in onnxruntime")
    from compat_tests.interop.onnx_model import recurrent_nodes

    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception:  # (an unreadable graph: run_file says why, in its unit)
        return None
    graph = proto.graph
    nodes = [n for n, where, _ in recurrent_nodes(graph) if where == "the main graph"]
    inits = {t.name for t in graph.initializer}
    fed = [i for i in graph.input if i.name not in inits]
    dims = _dims(fed[0]) if fed and nodes else None
    if not dims or len(dims) != 3:
        return None
    lead = [d if isinstance(d, int) and d > 0 else None for d in dims[:2]]
    if lead == [None, None]:
        return None
    T, B = lead[::-1] if _onnx_batch_major(graph, fed[0], nodes[0], -1, -2) else lead
    return T, B
