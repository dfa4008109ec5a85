"""Tensor files (safetensors, npz, npy): what must be refused (damaged, malformed, pickles, headers that claim
more than the file holds), writes that replace a file whole, and writers refusing names of another format."""

from __future__ import annotations

import io
import json
import pickle
import re
import struct
import warnings
import zipfile

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from compat_tests import cli
from compat_tests.config import RNNConfig, make_case
from compat_tests.strategies import damaged
from compat_tests.tests.conftest import Killed
from reference import checkpoint
from reference.formats import safetensors


def test_our_safetensors_files_interoperate_with_the_safetensors_package(tmp_path):
    st_numpy = pytest.importorskip("safetensors.numpy", reason="interop check against the safetensors package")
    tensors = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b/c": np.ones(4, np.float16),
               "d": np.array(3.5, np.float64)}
    safetensors.save(tmp_path / "ours.safetensors", tensors, {"k": "v"})
    theirs = st_numpy.load_file(tmp_path / "ours.safetensors")
    assert set(theirs) == set(tensors) and all(np.array_equal(theirs[k], tensors[k]) for k in tensors)
    st_numpy.save_file(tensors, tmp_path / "theirs.safetensors", metadata={"k": "v"})
    mine, meta = safetensors.load(tmp_path / "theirs.safetensors")
    assert meta == {"k": "v"} and all(np.array_equal(mine[k], tensors[k]) for k in tensors)


def _file(header: bytes, data: bytes = b"") -> bytes:
    return struct.pack("<Q", len(header)) + header + data


@pytest.mark.parametrize(("blob", "match"), [
    (b"\x01\x02", "shorter than"),
    (struct.pack("<Q", 10**9) + b"{}", "exceeds the file"),
    (struct.pack("<Q", 1000) + b"{}", "exceeds the file"),  # below the header cap, beyond the file
    (_file(b"nope"), "not JSON"),
    (_file(b'{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}'), "lies outside"),
    (_file(b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', bytes(7)), "lies outside"),  # 1 byte short
    (_file(b'{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', bytes(8)), "needs 12"),
    (_file(b'{"a":{"dtype":"X9","shape":[2],"data_offsets":[0,8]}}', bytes(8)), "malformed"),
    (_file(b'{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],'
           b'"data_offsets":[2,6]}}', bytes(6)), "overlap"),
    (_file(b'{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],'
           b'"data_offsets":[3,7]}}', bytes(7)), "overlap"),  # by one byte
    (_file(b'{"a":{"dtype":"U8","shape":"12","data_offsets":[0,2]}}', bytes(2)), "malformed shape"),
    (_file(b'{"a":{"dtype":"U8","shape":[true],"data_offsets":[0,1]}}', bytes(1)), "malformed shape"),
    (_file(b'{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}'), "needs"),
    (_file(b'{"a":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,0]}}'), "needs"),
    (_file(b'{"__metadata__":["x"]}'), "__metadata__"),
])
def test_malformed_safetensors_are_refused_with_a_reason(tmp_path, blob, match):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(blob)
    with pytest.raises(ValueError, match=match):
        safetensors.load(path)


@pytest.fixture
def gru_checkpoint(tmp_path):
    cfg = RNNConfig("gru", num_layers=2, num_units=4, input_size=3, direction="bidirectional", dtype="float32")
    case = make_case(cfg)
    path = tmp_path / "gru.safetensors"
    checkpoint.save(path, cfg.model(), case.weights, case.biases)
    return path, cfg


def _rewrite(path, change):
    tensors, config = checkpoint.read_tensors(path)
    change(tensors, config)
    checkpoint.write_tensors(path, tensors, config)


@pytest.mark.parametrize(("change", "error", "match"), [
    (lambda t, c: t.pop(next(k for k in sorted(t) if k.endswith("gates/kernel"))), ValueError,
     r"lacks .*gates/kernel'"),
    (lambda t, c: t.update({k: t[k][:, :-1] for k in t if k.endswith("cell_1/bidirectional_rnn/bw/"
                                                                       "cudnn_compatible_gru_cell/gates/kernel")}),
     ValueError, r"cell_1/bidirectional_rnn/bw/cudnn_compatible_gru_cell/gates/kernel' has shape"),
    (lambda t, c: t.update({k: v.astype(np.float64) for k, v in t.items() if k.endswith("gates/bias")}), TypeError,
     r"gates/bias' must be a float32 array"),
    (lambda t, c: t.update({"rnn/stray": np.zeros(2, np.float32)}), ValueError, "does not: \\['rnn/stray'\\]"),
    (lambda t, c: c.update(rnn_mode="lstm"), ValueError, "lacks .*cudnn_compatible_lstm_cell"),
    (lambda t, c: c.update(format="something-else"), ValueError, "not a cudnn-rnn-compat"),
    (lambda t, c: c.update(version=99), ValueError, "checkpoint version 99 is not supported"),
    (lambda t, c: c.update(rnn_mode="bogus"), ValueError, "Invalid rnn_mode: 'bogus', expecting one of"),
    (lambda t, c: c.update(num_proj=2), ValueError, "num_proj must be None for rnn_mode='gru'"),
    (lambda t, c: [c.pop("num_units"), c.pop("dtype")], ValueError, "config lacks 'num_units', 'dtype'"),
])
def test_bad_or_foreign_checkpoints_fail_naming_the_tensor(gru_checkpoint, change, error, match):
    path, _ = gru_checkpoint
    _rewrite(path, change)
    with pytest.raises(error, match=match):
        checkpoint.load(path)


def test_a_config_that_is_not_an_object_is_refused(tmp_path):
    safetensors.save(tmp_path / "c.safetensors", {"a": np.zeros(1, np.float32)}, {checkpoint.CONFIG_KEY: "[1, 2]"})
    with pytest.raises(ValueError, match="must be a JSON object"):
        checkpoint.load(tmp_path / "c.safetensors")


# Every format a file can come in, one file set each (the TF bundle is two files).
DAMAGEABLE = [("checkpoint", "gru.npz"), ("checkpoint", "gru.safetensors"), ("torch", "gru.npz"),
              ("torch", "gru.pt"), ("keras", "gru.npz"), ("keras", "gru.keras"), ("onnx", "gru.onnx"), ("tf", "gru")]


@pytest.fixture(scope="module")
def intact_files(tmp_path_factory):
    """A 2-layer bidirectional float32 GRU written in every format: ``{(format, name): {file: bytes}}``."""
    from compat_tests.interop import convert

    cfg = RNNConfig("gru", num_layers=2, num_units=3, input_size=2, direction="bidirectional", dtype="float32")
    case = make_case(cfg)
    files = {}
    for fmt, name in DAMAGEABLE:
        folder = tmp_path_factory.mktemp(fmt)
        convert.write(fmt, folder / name, cfg.model(), case.weights, case.biases)
        files[(fmt, name)] = {p.name: p.read_bytes() for p in folder.iterdir()}
    return files


@pytest.mark.parametrize(("fmt", "name"), DAMAGEABLE, ids=lambda v: v)
@given(data=st.data())
def test_a_damaged_file_loads_or_is_refused_naming_it(intact_files, fmt, name, data, tmp_path_factory):
    """Whatever a file's damage (zip CRCs, protobuf wire format, bundle checksums, JSON headers), reading it
    gives weights the model runs on or a ValueError/TypeError that names the file: never zipfile's,
    protobuf's or an IndexError from a parser, which the command line would show as a traceback."""
    from compat_tests.interop import convert

    files = intact_files[(fmt, name)]
    victim = data.draw(st.sampled_from(sorted(files)), label="damaged file")
    folder = tmp_path_factory.mktemp("damaged")
    for file, blob in files.items():
        (folder / file).write_bytes(damaged(data, blob) if file == victim else blob)
    told = data.draw(st.sampled_from([fmt, convert.AUTO]), label="--from")  # auto: detect reads names first
    try:
        model, weights, biases, *_ = convert.read(told, folder / name)
    except (ValueError, TypeError) as exc:
        assert str(folder / name) in str(exc), exc
        return
    x = np.zeros((2, 1, model.input_size), model.dtype)
    with np.errstate(all="ignore"):  # damaged weights may be inf or NaN: only their reading is under test
        model(x, None, *([None] if model.rnn_mode == "lstm" else []), model.canonical_to_params(weights, biases))


# Structural damage to a file's tensors: what a foreign exporter or a hand edit gets wrong.
TENSOR_EDITS = {
    "drop": lambda t, k: t.pop(k),
    "duplicate under a new name": lambda t, k: t.update({k + "_copy": t[k]}),
    "flatten": lambda t, k: t.update({k: t[k].reshape(-1)}),
    "transpose": lambda t, k: t.update({k: t[k].T.copy()}),
    "to a scalar": lambda t, k: t.update({k: np.zeros((), t[k].dtype)}),
    "empty rows": lambda t, k: t.update({k: t[k][:0] if t[k].ndim else t[k]}),
    "doubled rows": lambda t, k: t.update({k: np.concatenate([t[k], t[k]]) if t[k].ndim else t[k]}),
    "to float64": lambda t, k: t.update({k: t[k].astype(np.float64)}),
    "to int32": lambda t, k: t.update({k: t[k].astype(np.int32)}),
    "renumbered layer": lambda t, k: t.update({re.sub(r"(l|cell_|layer)0", r"\g<1>7", k, count=1): t.pop(k)}),
}


@pytest.mark.parametrize(("fmt", "mode", "with_config"), [("torch", "lstm", False), ("torch", "gru", True),
                                                          ("checkpoint", "lstm", False), ("checkpoint", "gru", True),
                                                          ("keras", "lstm", True)])
@given(data=st.data())
def test_a_file_with_wrong_tensors_loads_or_is_refused_naming_it(fmt, mode, with_config, data, tmp_path_factory):
    """Tensors dropped, added, reshaped, retyped or renamed, with or without the file's config (then read off
    names and shapes): a model that runs, or a ValueError/TypeError naming the file, never an IndexError."""
    from compat_tests.interop import convert

    cfg = RNNConfig(mode, num_layers=2, num_units=3, input_size=2, direction="bidirectional", dtype="float32",
                    num_proj=2 if mode == "lstm" and fmt != "keras" else None)
    case = make_case(cfg)
    path = tmp_path_factory.mktemp(fmt) / "w.npz"
    convert.write(fmt, path, cfg.model(), case.weights, case.biases)
    tensors, config = checkpoint.read_tensors(path)
    for edit in data.draw(st.lists(st.sampled_from(sorted(TENSOR_EDITS)), min_size=1, max_size=3), label="edits"):
        if tensors:
            TENSOR_EDITS[edit](tensors, data.draw(st.sampled_from(sorted(tensors)), label=f"tensor to {edit}"))
    checkpoint.write_tensors(path, tensors, config if with_config else None)
    try:
        model, weights, biases, *_ = convert.read(fmt, path)
    except (ValueError, TypeError) as exc:
        assert str(path) in str(exc), exc
        return
    model(np.zeros((2, 1, model.input_size), model.dtype), None, *([None] if model.rnn_mode == "lstm" else []),
          model.canonical_to_params(weights, biases))


@pytest.mark.parametrize("fmt", ["checkpoint", "torch", "keras", "onnx"])
def test_a_config_larger_than_its_file_is_refused_before_anything_of_its_size_is_made(fmt, tmp_path):
    """A file's config is read first and its expected tensors made from it: a config claiming 10^9 units
    over a few dozen values must fail on the count, not ask NumPy for exabytes."""
    from compat_tests.interop import convert, onnx_model

    cfg = RNNConfig("gru", num_units=3, input_size=2, dtype="float32")
    case = make_case(cfg)
    path = tmp_path / ("w.onnx" if fmt == "onnx" else "w.npz")
    convert.write(fmt, path, cfg.model(), case.weights, case.biases)
    if fmt == "onnx":
        import onnx

        proto = onnx.load(str(path))
        config = json.loads(proto.metadata_props[0].value)
        proto.metadata_props[0].value = json.dumps({**config, "num_units": 10**9})
        path.write_bytes(proto.SerializeToString())
        assert proto.metadata_props[0].key == onnx_model.META_KEY
    else:
        tensors, config = checkpoint.read_tensors(path)
        checkpoint.write_tensors(path, tensors, {**config, "num_units": 10**9})
    with pytest.raises(ValueError, match=f"{re.escape(str(path))}: .* hold \\d+ values in all, fewer than the "
                                         f"3000000006000000000 weights"):
        convert.read(fmt, path)


@pytest.mark.parametrize("suffix", [".npy", ".npz"])
@given(data=st.data())
def test_a_damaged_array_file_loads_or_is_refused_naming_it(suffix, data, tmp_path_factory):
    """``rnn-compat infer``'s inputs, lengths and states: NumPy's reader raises tokenize's TokenError or
    EOFError on a damaged ``.npy`` header and zipfile's errors on a damaged ``.npz``; none may get out."""
    folder = tmp_path_factory.mktemp("arrays")
    path = folder / f"x{suffix}"
    arrays = {"input_h": np.arange(24, dtype=np.float32).reshape(2, 3, 4), "lengths": np.array([3, 1])}
    np.save(path, arrays["input_h"]) if suffix == ".npy" else np.savez(path, **arrays)
    path.write_bytes(damaged(data, path.read_bytes()))
    try:
        loaded = checkpoint.load_arrays(path)
    except ValueError as exc:
        assert str(path) in str(exc), exc
        return
    assert isinstance(loaded, np.ndarray if suffix == ".npy" else dict)


def test_a_damaged_npy_header_is_refused_without_a_warning(tmp_path):
    """NumPy reads a header as a Python literal, which warns of an invalid escape where damage put a backslash
    before a comma: the file is refused naming it, and nothing is printed besides."""
    np.save(tmp_path / "x.npy", np.zeros(3, np.float32))
    blob = (tmp_path / "x.npy").read_bytes()
    assert b"'<f4'" in blob
    (tmp_path / "x.npy").write_bytes(blob.replace(b"'<f4'", b"'\\,4'"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match=re.escape(str(tmp_path / "x.npy"))):
            checkpoint.load_arrays(tmp_path / "x.npy")
    assert not caught, [str(w.message) for w in caught]


WRITTEN = [("checkpoint", "w.npz"), ("checkpoint", "w.safetensors"), ("torch", "w.safetensors"), ("torch", "w.pt"),
           ("keras", "w.npz"), ("keras", "w.keras"), ("keras", "w.weights.h5"), ("keras", "w.h5"), ("onnx", "w.onnx"),
           ("tf", "w"), ("infer", "y.npz"), ("infer", "y.npy")]


@pytest.mark.parametrize(("fmt", "name", "message"), [
    ("torch", "w.bin", r"a PyTorch file must end in \.pt or \.pth \(torch\.save's format\) or \.safetensors or "
                       r"\.npz, got 'w\.bin'"),
    ("onnx", "m.pb", r"an ONNX file must end in \.onnx, got 'm\.pb'"),
    ("checkpoint", "w.pt", r"tensor file path must end in \.safetensors or \.npz, got 'w\.pt'")], ids=lambda v: v[:12])
def test_a_writer_refuses_a_name_it_does_not_write(fmt, name, message, tmp_path):
    """Before anything is written (a name of another format would be read back as that format)."""
    from compat_tests.interop import convert

    cfg = RNNConfig("gru", num_units=3, input_size=2, dtype="float32")
    case = make_case(cfg)
    with pytest.raises(ValueError, match=message):
        convert.write(fmt, tmp_path / name, cfg.model(), case.weights, case.biases)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(("fmt", "name"), WRITTEN, ids=lambda v: v)
def test_a_write_that_dies_before_it_ends_leaves_the_old_file_whole(fmt, name, tmp_path, kill_before_replacing):
    """Every writer writes beside its file and replaces it last (reference.formats.files.replacing): killed
    at that last moment, the file it was overwriting is as it was and no partial file is left. A writer that
    wrote in place would change the old file here."""
    from compat_tests.interop import convert

    cfg = RNNConfig("gru", num_units=3, input_size=2, dtype="float32")
    case = make_case(cfg)
    model = cfg.model()
    out = tmp_path / "out"
    out.mkdir()

    def prepare(case):  # infer's checkpoint and input, written while writes still succeed
        checkpoint.save(tmp_path / "m.npz", model, case.weights, case.biases)
        np.save(tmp_path / "x.npy", case.x)

    def write(case):
        if fmt == "infer":
            assert cli.main(["infer", str(tmp_path / "m.npz"), str(tmp_path / "x.npy"), "--out", str(out / name),
                             "--force"]) == 0
        else:
            convert.write(fmt, out / name, model, case.weights, case.biases)

    prepare(case)
    write(case)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    case = case._replace(weights=[w + 1 for w in case.weights], x=case.x + 1)  # a second write changes every file
    prepare(case)
    kill_before_replacing()
    with pytest.raises(Killed):
        write(case)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_replacing_keeps_the_mode_and_the_link_and_gives_each_write_its_own_partial_file(tmp_path):
    import os

    from reference.formats.files import replacing

    target, link = tmp_path / "w.npz", tmp_path / "link.npz"
    target.write_bytes(b"old")
    os.chmod(target, 0o640)
    link.symlink_to(target)
    with replacing(link) as first, replacing(link) as second:
        assert first != second and first.parent == second.parent == tmp_path
        first.write_bytes(b"first")
        second.write_bytes(b"second")
    assert link.is_symlink() and target.read_bytes() == b"first"  # the outer write replaced last
    assert os.stat(target).st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.npz", "w.npz"]


@pytest.mark.parametrize("suffix", [".npy", ".npz"])
@pytest.mark.parametrize("version", [1, 2, 3])
def test_an_array_header_claiming_more_than_its_file_holds_is_refused_before_allocating(suffix, version,
                                                                                         tmp_path):
    """A damaged .npy header can claim 10^12 elements; NumPy would ask for 4 TB before finding 12 bytes.
    Version 3.0 (UTF-8, for field names) is checked as well: NumPy has no public reader for its header."""
    descr = "<f4" if version < 3 else [("\u00e9t\u00e9", "<f4")]
    header = repr({"descr": descr, "fortran_order": False, "shape": (10**12,)}).encode("utf-8")
    length_bytes = 2 if version == 1 else 4
    header += b" " * (-(8 + length_bytes + len(header) + 1) % 64) + b"\n"
    blob = (np.lib.format.MAGIC_PREFIX + bytes([version, 0]) + len(header).to_bytes(length_bytes, "little")
            + header + bytes(12))
    assert np.lib.format.read_magic(io.BytesIO(blob)) == (version, 0)
    path = tmp_path / f"x{suffix}"
    if suffix == ".npy":
        path.write_bytes(blob)
    else:
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("input_h.npy", blob)
    dtype = "float32" if version < 3 else re.escape(str(np.dtype(descr)))
    with pytest.raises(ValueError, match=f"{re.escape(str(path))}.*: its header claims \\[1000000000000\\] {dtype} "
                                         f"\\(4000000000000 bytes\\), but 12 bytes follow it"):
        checkpoint.load_arrays(path)


def test_arrays_with_every_header_version_load(tmp_path):
    """The claim check reads each header version NumPy writes (3.0 by hand) and lets honest files through."""
    arrays = {version: np.arange(6, dtype=np.float32).reshape(2, 3) + version[0] for version in [(1, 0), (2, 0), (3, 0)]}
    arrays[(3, 0)] = arrays[(3, 0)].view([("\u00e9t\u00e9", "<f4")])  # what 3.0 is for: UTF-8 field names
    for version, array in arrays.items():
        path = tmp_path / f"v{version[0]}.npy"
        with open(path, "wb") as f:
            np.lib.format.write_array(f, array, version=version)
        assert np.lib.format.read_magic(io.BytesIO(path.read_bytes())) == version
        loaded = checkpoint.load_arrays(path)
        assert loaded.dtype == array.dtype and np.array_equal(loaded, array)


def test_an_npz_member_that_is_not_an_array_is_refused(tmp_path):
    """NumPy hands such a member back as raw bytes, which the checkpoint reader then took for a tensor."""
    path = tmp_path / "w.npz"
    np.savez(path, **{"rnn/multi_rnn_cell/cell_0/basic_rnn_cell/kernel": np.zeros((5, 3), np.float32)})
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("README.txt", "weights of my RNN")
    with pytest.raises(ValueError, match=f"{re.escape(str(path))}: holds 'README.txt', which is not a .npy array"):
        checkpoint.load(path, {"rnn_mode": "tanh"})


@pytest.mark.parametrize("fmt", ["checkpoint", "torch"])
def test_a_layer_count_beyond_the_file_s_tensors_is_refused_before_the_model_is_made(fmt, tmp_path):
    """10^6 layers in a damaged config (or a torch name weight_ih_l999999999) took minutes and gigabytes to lay
    out before the tensors were even compared."""
    from compat_tests.interop import convert

    cfg = RNNConfig("gru", num_units=3, input_size=2, dtype="float32")
    case = make_case(cfg)
    path = tmp_path / "w.npz"
    convert.write(fmt, path, cfg.model(), case.weights, case.biases)
    tensors, config = checkpoint.read_tensors(path)
    if fmt == "checkpoint":
        config = {**config, "num_layers": 10**6}
    else:
        tensors["weight_ih_l999999"], config = tensors["weight_ih_l0"], None
    checkpoint.write_tensors(path, tensors, config)
    with pytest.raises(ValueError, match="the config's 1000000 layer\\(s\\) x 1 direction\\(s\\) are more than the "
                                         "file can hold"):
        convert.read(fmt, path)


def test_pickles_are_refused(tmp_path):
    pkl = tmp_path / "model.pt"
    pkl.write_bytes(pickle.dumps({"weight_ih_l0": np.zeros(3)}))
    with pytest.raises(ValueError, match="pickle-based files are refused"):
        checkpoint.read_tensors(pkl)
    obj = tmp_path / "objects.npz"
    np.savez(obj, a=np.array([{"x": 1}], dtype=object))
    with pytest.raises(ValueError, match="refused"):
        checkpoint.read_tensors(obj)
    archive = tmp_path / "torch_archive.npz"  # a zip holding a pickle, as torch.save writes (NumPy reads it as bytes)
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"weight_ih_l0": np.zeros(3)}))
    with pytest.raises(ValueError, match="holds a pickle"):
        checkpoint.read_tensors(archive)


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_a_pickle_under_a_suffix_of_no_format_is_named_a_pickle(protocol, tmp_path):
    """Known by its first bytes (PROTO opcode 0x80, then the protocol), not only by a .pt/.pkl suffix, so
    the message says why it is refused rather than that its type is unknown."""
    path = tmp_path / "weights.dat"
    path.write_bytes(pickle.dumps({"weight_ih_l0": [0.0]}, protocol=protocol))
    with pytest.raises(ValueError, match=f"{re.escape(str(path))}: pickle-based files are refused"):
        checkpoint.read_tensors(path)
    path.write_bytes(b"\x80\x06" + path.read_bytes()[2:])  # no pickle protocol (yet): an unknown file
    with pytest.raises(ValueError, match="unknown checkpoint type"):
        checkpoint.read_tensors(path)


@pytest.mark.parametrize("missing", [1, 60])
def test_an_array_file_short_of_its_data_by_less_than_its_header_is_named(missing, tmp_path):
    """The claim is held against the bytes after the header, not the whole file: a .npy cut short by fewer
    bytes than its header's length (here 128) is caught by that check, with its message."""
    path = tmp_path / "x.npy"
    np.save(path, np.zeros(100, np.float32))
    blob = path.read_bytes()
    assert len(blob) - 400 == 128 > missing
    path.write_bytes(blob[:-missing])
    with pytest.raises(ValueError, match=f"{re.escape(str(path))}: its header claims \\[100\\] float32 \\(400 "
                                         f"bytes\\), but {400 - missing} bytes follow it"):
        checkpoint.load_arrays(path)


def test_safetensors_are_written_aligned_and_read_as_writeable_arrays_of_their_own(tmp_path):
    """The format asks for the data to start at a multiple of 8 (readers may map it); a loaded array is the
    caller's to change."""
    for names in (["a"], ["abc"], ["abcdefg", "x"]):
        tensors = {n: np.arange(3, dtype=np.float32) for n in names}
        safetensors.save(tmp_path / "t.safetensors", tensors, {"k": "v"})
        raw = (tmp_path / "t.safetensors").read_bytes()
        assert (8 + struct.unpack("<Q", raw[:8])[0]) % 8 == 0, names
        loaded, _ = safetensors.load(tmp_path / "t.safetensors")
        for a in loaded.values():
            assert a.flags.writeable and a.flags.owndata
            a += 1
    with pytest.raises(TypeError, match="metadata must map str to str"):
        safetensors.save(tmp_path / "m.safetensors", {"a": np.ones(2, np.float32)}, {"step": 3})
