"""The ctypes binding against cuDNN's own C headers, on a CPU: every declared function's argument count,
argument types and return type, and every enum value the backend passes.

A wrong declaration would not fail cleanly on a GPU (ctypes passes what it is told; cuDNN reads a
``size_t`` where an ``int`` was pushed, or writes 8 bytes into a 4-byte ``c_int``), so it is caught here,
wherever the headers are installed: the ``gpu`` extra's ``nvidia-cudnn-cu13`` wheel ships them beside the
library. Elsewhere these tests skip with that reason, except the first, which needs no headers.
"""

from __future__ import annotations

import ast
import inspect
import re
from ctypes import POINTER, c_float, c_int, c_size_t, c_uint32, c_ulonglong, c_void_p
from pathlib import Path

import pytest

import cudnn_backend
from compat_tests.gpu import cudnn_headers, fake_cuda
from cudnn_backend import _lib
from cudnn_backend.descriptors import RNNDescriptor
from reference.layout import BIAS_MODES

FUNCTION_NAME = re.compile(r"^cudnn[A-Z]\w+$")


INCLUDE_DIRS = cudnn_headers.find_include_dirs(_lib.candidates())


HEADERS = cudnn_headers.read(INCLUDE_DIRS[0]) if INCLUDE_DIRS else None


needs_headers = pytest.mark.skipif(
    HEADERS is None, reason="no cuDNN headers (cudnn_version.h) beside any libcudnn.so.9 candidate or in "
                            "/usr/include; `make test-cudnn-host` installs them (so does the gpu extra)")


# Every enum value the backend hands cuDNN, with the header's name for it.
ENUM_VALUES = [
    ("CUDNN_DATA_FLOAT", _lib.DATA_TYPE["float32"]),
    ("CUDNN_DATA_DOUBLE", _lib.DATA_TYPE["float64"]),
    ("CUDNN_DATA_HALF", _lib.DATA_TYPE["float16"]),
    ("CUDNN_DATA_FLOAT", _lib.MATH_PREC["float32"]),
    ("CUDNN_DATA_DOUBLE", _lib.MATH_PREC["float64"]),
    ("CUDNN_DATA_FLOAT", _lib.MATH_PREC["float16"]),
    ("CUDNN_RNN_RELU", _lib.RNN_MODE["relu"]),
    ("CUDNN_RNN_TANH", _lib.RNN_MODE["tanh"]),
    ("CUDNN_LSTM", _lib.RNN_MODE["lstm"]),
    ("CUDNN_GRU", _lib.RNN_MODE["gru"]),
    ("CUDNN_UNIDIRECTIONAL", _lib.DIRECTION["unidirectional"]),
    ("CUDNN_BIDIRECTIONAL", _lib.DIRECTION["bidirectional"]),
    ("CUDNN_LINEAR_INPUT", _lib.INPUT_MODE["linear_input"]),
    ("CUDNN_SKIP_INPUT", _lib.INPUT_MODE["skip_input"]),
    ("CUDNN_DEFAULT_MATH", _lib.MATH_TYPE["default"]),
    ("CUDNN_TENSOR_OP_MATH", _lib.MATH_TYPE["tensor_op"]),
    ("CUDNN_FMA_MATH", _lib.MATH_TYPE["fma"]),
    ("CUDNN_RNN_ALGO_STANDARD", _lib.ALGO["standard"]),
    ("CUDNN_RNN_ALGO_PERSIST_STATIC", _lib.ALGO["persist_static"]),
    ("CUDNN_RNN_ALGO_PERSIST_DYNAMIC", _lib.ALGO["persist_dynamic"]),
    ("CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H", _lib.ALGO["persist_static_small_h"]),
    ("CUDNN_RNN_DOUBLE_BIAS", _lib.DOUBLE_BIAS),
    ("CUDNN_RNN_DOUBLE_BIAS", BIAS_MODES["double"].cudnn),
    ("CUDNN_RNN_SINGLE_INP_BIAS", BIAS_MODES["single_inp"].cudnn),
    ("CUDNN_RNN_SINGLE_REC_BIAS", BIAS_MODES["single_rec"].cudnn),
    ("CUDNN_RNN_NO_BIAS", BIAS_MODES["none"].cudnn),
    ("CUDNN_FWD_MODE_INFERENCE", _lib.FWD_INFERENCE),
    ("CUDNN_FWD_MODE_TRAINING", _lib.FWD_TRAINING),
    ("CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED", _lib.SEQ_MAJOR_UNPACKED),
    ("CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED", _lib.SEQ_MAJOR_PACKED),
    ("CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED", _lib.BATCH_MAJOR_UNPACKED),
    ("CUDNN_RNN_PADDED_IO_ENABLED", _lib.PADDED_IO_ENABLED),
    ("CUDNN_WGRAD_MODE_ADD", _lib.WGRAD_MODE_ADD),
] + [(name, code) for code, name in _lib.STATUS_NAMES.items()]


def _string_constants(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def test_every_cudnn_function_the_backend_names_is_declared():
    """A function called without a ``SIGNATURES`` entry would get ctypes' defaults (``int`` arguments)."""
    package = Path(cudnn_backend.__file__).parent
    named = {s for path in package.glob("*.py") for s in _string_constants(path) if FUNCTION_NAME.match(s)}
    assert {"cudnnRNNForward", "cudnnCreate", "cudnnDestroyRNNDataDescriptor"} <= named  # the scan finds them
    assert named - set(_lib.SIGNATURES) == set()


@needs_headers
def test_the_headers_are_those_of_the_library_when_it_loads():
    try:
        lib = _lib.load()
    except _lib.LibraryNotFound as exc:
        pytest.skip(f"libcudnn.so.9 does not load here ({exc}); the headers alone are checked")
    if fake_cuda.is_fake(lib):
        pytest.skip("compat_tests.gpu.fake_cuda is in place of libcudnn.so.9; the headers alone are checked")
    major, minor, _ = HEADERS.version
    assert (major, minor) == (lib.version // 10000, lib.version // 100 % 100), (HEADERS.include_dir, lib.path)


@needs_headers
def test_declared_signatures_match_the_headers():
    assert len(_lib.SIGNATURES) >= 30
    assert cudnn_headers.mismatches(_lib.SIGNATURES, HEADERS) == []


@needs_headers
def test_enum_values_match_the_headers():
    wrong = [f"{c_name}: the backend passes {value}, {HEADERS.include_dir} has {HEADERS.constants.get(c_name)}"
             for c_name, value in ENUM_VALUES if HEADERS.constants.get(c_name) != value]
    assert wrong == []


def _squashed(names) -> list[str]:
    """``dev_seq_lengths`` and ``devSeqLengths`` alike: lower case, no underscores."""
    return [n.replace("_", "").lower() for n in names]


@needs_headers
def test_the_fake_reads_each_argument_by_the_name_the_header_gives_it():
    """``fake_cuda`` answers each call through its parameters' names. Named as the header names each position,
    the fake is an independent reading of the order, so a backend that passes arguments out of order (two
    pointers, or two sizes, that ctypes cannot tell apart) disagrees with the reference through it
    (``test_cudnn_plumbing.py``). One-argument functions (the creators) have no order to check."""
    checked = []
    for name in _lib.SIGNATURES:
        method = getattr(fake_cuda.FakeCudnn, "_" + name, None)
        parameters = list(inspect.signature(method).parameters)[1:] if method else []
        if len(parameters) > 1:
            assert _squashed(parameters) == _squashed(HEADERS.prototypes[name].argnames), name
            checked.append(name)
    assert {"cudnnRNNForward", "cudnnRNNBackwardData_v8", "cudnnRNNBackwardWeights_v8", "cudnnSetRNNDescriptor_v8",
            "cudnnSetRNNDataDescriptor", "cudnnGetRNNWeightParams"} <= set(checked)


@needs_headers
@pytest.mark.parametrize("name", ["cudnnSetRNNDescriptor_v8", "cudnnGetRNNDescriptor_v8"])
def test_the_rnn_descriptor_fields_are_in_the_headers_order(name):
    """``RNNDescriptor.set``/``get`` pass their fields in ``FIELDS`` order: four of them are plain ``int32_t``
    sizes, told apart by name only."""
    argnames = HEADERS.prototypes[name].argnames
    assert _squashed(RNNDescriptor.FIELDS) == _squashed(argnames[1:13])
    assert argnames[0] == "rnnDesc" and argnames[13:] == ("dropoutDesc", "auxFlags")


@needs_headers
@pytest.mark.parametrize(("name", "change", "expected"), [
    ("cudnnRNNForward", lambda a: a[:14] + [c_int] + a[15:], "argument 14 declared c_int, the header has size_t"),
    ("cudnnGetRNNWeightSpaceSize", lambda a: a[:2] + [POINTER(c_int)], "argument 2 declared LP_c_int"),
    ("cudnnSetRNNDescriptor_v8", lambda a: a[:-1], "14 arguments declared, the header has 15"),
    ("cudnnSetDropoutDescriptor", lambda a: a[:2] + [c_size_t] + a[3:], "argument 2 declared c_ulong"),
    ("cudnnGetRNNDescriptor_v8", lambda a: a[:-1] + [POINTER(c_size_t)], "argument 14 declared LP_c_ulong"),
    ("cudnnSetRNNDataDescriptor", lambda a: a[:1] + [c_uint32] + a[2:], None),  # an enum is a signed int
])
def test_the_check_catches_a_wrong_declaration(name, change, expected):
    argtypes, restype = _lib.SIGNATURES[name]
    problems = cudnn_headers.mismatches({name: (change(list(argtypes)), restype)}, HEADERS)
    assert len(problems) == 1 and (expected is None or expected in problems[0]), problems


@needs_headers
def test_the_check_catches_a_wrong_return_type():
    assert cudnn_headers.mismatches({"cudnnGetVersion": ([], None)}, HEADERS) != []
    assert cudnn_headers.mismatches({"cudnnRNNForward": (_lib.SIGNATURES["cudnnRNNForward"][0], c_size_t)},
                                    HEADERS) != []
    assert cudnn_headers.mismatches({"cudnnNoSuchFunction": ([], None)}, HEADERS) != []


def test_the_reader_understands_the_header_idioms(tmp_path):
    """The reader on a made-up header that uses each idiom of cuDNN's; needs no cuDNN."""
    (tmp_path / "cudnn_version.h").write_text(
        "#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 1\n#define CUDNN_PATCHLEVEL 2\n")
    (tmp_path / "cudnn_demo.h").write_text("""
#define DEMO_FLAG (1U << 3) /* a flag */
typedef struct demoStruct *demoHandle_t;
typedef enum {
    DEMO_A = 0, /**< first, */
    DEMO_B,
    DEMO_OLD CUDNN_DEPRECATED_ENUM = 0x10,
    DEMO_C,
} demoKind_t;
// cudnnStatus_t CUDNNWINAPI cudnnCommentedOut(int a);
typedef enum { CUDNN_STATUS_SUCCESS = 0 } cudnnStatus_t;
CUDNN_DEPRECATED cudnnStatus_t CUDNNWINAPI
cudnnDemo(demoHandle_t handle, demoKind_t kind, const int32_t lengths[], void **out,
          size_t *size, unsigned long long seed, float alpha);
const char *CUDNNWINAPI
cudnnDemoName(void);
""")
    (tmp_path / "cudnn_demo_v9.h").write_text("cudnnStatus_t CUDNNWINAPI cudnnDemo(int only);\n")  # a copy: skipped
    headers = cudnn_headers.read(tmp_path)
    assert headers.version == (9, 1, 2)
    assert [headers.constants[n] for n in ("DEMO_FLAG", "DEMO_A", "DEMO_B", "DEMO_OLD", "DEMO_C")] == [8, 0, 1, 16, 17]
    assert set(headers.prototypes) == {"cudnnDemo", "cudnnDemoName"}
    demo = headers.prototypes["cudnnDemo"]
    assert demo.restype == "cudnnStatus_t" and headers.prototypes["cudnnDemoName"].argtypes == ()
    assert demo.argnames == ("handle", "kind", "lengths", "out", "size", "seed", "alpha")
    assert headers.prototypes["cudnnDemoName"].argnames == ()
    assert [headers.kind(t) for t in demo.argtypes] == [
        ("ptr", None), ("int", 4, True), ("ptr", ("int", 4, True)), ("ptr", ("ptr", None)),
        ("ptr", ("int", 8, False)), ("int", 8, False), ("float", 4)]
    declared = ([c_void_p, c_int, c_void_p, POINTER(c_void_p), POINTER(c_size_t), c_ulonglong, c_float], None)
    assert cudnn_headers.mismatches({"cudnnDemo": declared}, headers) == []
    swapped = ([c_void_p, c_int, c_void_p, POINTER(c_void_p), POINTER(c_size_t), c_float, c_ulonglong], None)
    assert len(cudnn_headers.mismatches({"cudnnDemo": swapped}, headers)) == 2
    with pytest.raises(ValueError, match="unknown C type"):
        headers.kind("mysteryType_t")
