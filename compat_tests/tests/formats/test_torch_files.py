"""PyTorch's own files (``torch.save``, its zip format and its legacy one, and ``torch.jit.save``'s TorchScript
archives), read without unpickling (``reference.formats.torch_archive``): every tensor as torch holds it,
state_dicts found in checkpoints, whole models and scripted ones, code a file names or holds never run, damaged
and malformed files refused naming why; and written with NumPy alone
(``reference.formats.torch_save``): what torch.save writes, byte for byte, which torch loads and runs."""

from __future__ import annotations

import collections
import io
import pickle
import pickletools
import struct
import warnings
import zipfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reference
from compat_tests import cli
from compat_tests.config import Outputs, make_case
from compat_tests.judge.compare import assert_agree_within_policy
from compat_tests.peers import PEERS
from compat_tests.run import run_reference
from compat_tests.strategies import damaged, examples, rnn_configs
from reference import checkpoint
from reference.formats import safetensors, torch_archive, torch_save
from reference.formats import torch as torch_format

torch = pytest.importorskip("torch", reason="the files under test are written by torch.save")


MODULES = {"relu": ("RNN", {"nonlinearity": "relu"}), "tanh": ("RNN", {"nonlinearity": "tanh"}),
           "gru": ("GRU", {}), "lstm": ("LSTM", {})}


DTYPES = {"float16": torch.float16, "float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


class Net(torch.nn.Module):
    """A whole model around the recurrent module, as users save it."""

    def __init__(self, rnn: torch.nn.Module):
        super().__init__()
        self.embed = torch.nn.Linear(2, rnn.input_size)
        self.encoder = torch.nn.Sequential()
        self.encoder.add_module("rnn", rnn)
        self.head = torch.nn.Linear(rnn.hidden_size, 2)


# How the recurrent module lies in the saved object: (the object, the module's path in it).
CONTAINERS = {
    "state_dict": lambda rnn: (rnn.state_dict(), ""),
    "module": lambda rnn: (rnn, ""),
    "model state_dict": lambda rnn: (Net(rnn).state_dict(), "encoder.rnn"),
    "model": lambda rnn: (Net(rnn), "encoder.rnn"),
    "training checkpoint": lambda rnn: ({"epoch": 3, "model": Net(rnn).state_dict(), "best": 0.25,
                                         "optimizer": torch.optim.SGD(rnn.parameters(), lr=0.1).state_dict(),
                                         "history": [1.5, (2, "x"), None, b"\x00\xff"]}, "model.encoder.rnn"),
}


@st.composite
def torch_rnns(draw, dtypes=tuple(sorted(DTYPES))):
    mode = draw(st.sampled_from(sorted(MODULES)), label="mode")
    cls, kwargs = MODULES[mode]
    hidden = draw(st.integers(2, 5), label="hidden")
    if mode == "lstm" and draw(st.booleans(), label="projection"):
        kwargs = {**kwargs, "proj_size": draw(st.integers(1, hidden - 1), label="proj_size")}
    torch.manual_seed(draw(st.integers(0, 2**16), label="seed"))
    rnn = getattr(torch.nn, cls)(draw(st.integers(1, 4), label="input_size"), hidden,
                                 num_layers=draw(st.integers(1, 3), label="num_layers"),
                                 bidirectional=draw(st.booleans(), label="bidirectional"),
                                 bias=draw(st.booleans(), label="bias"), **kwargs)
    return mode, rnn.to(DTYPES[draw(st.sampled_from(dtypes), label="dtype")])


def _numpy(t) -> np.ndarray:
    t = t.detach()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()  # bfloat16 widens to float32, exactly


@given(rnn=torch_rnns(), container=st.sampled_from(sorted(CONTAINERS)), protocol=st.sampled_from([2, 3, 4, 5]),
       legacy=st.booleans())
def test_a_torch_save_file_reads_as_torch_holds_it(rnn, container, protocol, legacy, tmp_path_factory):
    """Every tensor bit for bit (bfloat16 widened to float32), from a bare state_dict, the module object, a
    whole model (object or state_dict) and a training checkpoint, in every pickle protocol and both formats
    (the zip, the legacy stream); then the model ``convert`` reads carries the canonical tensors of that
    state_dict."""
    from compat_tests.interop import convert

    mode, module = rnn
    obj, path_in_file = CONTAINERS[container](module)
    path = tmp_path_factory.mktemp("torch") / "weights.pt"
    torch.save(obj, path, pickle_protocol=protocol, _use_new_zipfile_serialization=not legacy)
    want = {k: _numpy(v) for k, v in module.state_dict().items()}
    got, nonlinearity = torch_archive.load_state_dict(path)
    assert sorted(got) == sorted(want)
    for name, array in want.items():
        assert got[name].dtype == array.dtype and got[name].shape == array.shape, name
        assert got[name].tobytes() == array.tobytes() and got[name].flags.c_contiguous, name
    with torch_archive.open_file(path) as opened:
        assert isinstance(opened, torch_archive.LegacyFile if legacy else torch_archive.Archive)
        assert list(torch_archive.rnn_modules(opened.obj)) == [path_in_file]
    told = container in ("module", "model") and mode in ("relu", "tanh")  # an nn.RNN object says its nonlinearity
    assert nonlinearity == (mode if told else None)

    overrides = {"module": path_in_file, "rnn_mode": None if told or mode not in ("relu", "tanh") else mode}
    model, weights, biases, *_ = convert.read("torch", path, overrides)
    assert model.rnn_mode == mode
    expected_weights, expected_biases = torch_format.from_state_dict(model, want)
    for got_tensor, want_tensor in zip(weights + biases, expected_weights + expected_biases, strict=True):
        assert got_tensor.tobytes() == want_tensor.tobytes()


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_views_offsets_and_shared_storages_read_as_torch_holds_them(legacy, tmp_path):
    base = torch.arange(60, dtype=torch.float64).reshape(5, 12)
    subclass = torch.arange(4.0).as_subclass(TensorSubclass)  # pickled through _rebuild_from_type_v2
    tagged = torch.arange(3.0)
    tagged.note = "attributes of its own"  # likewise
    tensors = {"whole": base, "rows": base[1:4], "columns": base[:, 3:9:2], "transposed": base.T,
               "element": base[2, 5], "empty": base[:0, 2:4], "int16": torch.arange(7, dtype=torch.int16),
               "flags": torch.tensor([True, False, True]), "complex": torch.tensor([1 + 2j, -3j]),
               "subclass": subclass, "tagged": tagged}
    torch.save(tensors, tmp_path / "views.pt", _use_new_zipfile_serialization=not legacy)
    with torch_archive.open_file(tmp_path / "views.pt") as archive:
        shared = ("whole", "rows", "columns", "transposed", "element", "empty")
        assert len({archive.obj[k].storage.key for k in shared}) == 1
        for name, tensor in tensors.items():
            got = archive.array(archive.obj[name])
            want = tensor.numpy()
            assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want), name


@st.composite
def plain_values(draw):
    scalars = (st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8) | st.booleans()
               | st.none() | st.binary(max_size=8))
    keys = st.text(max_size=4) | st.integers(-5, 5)
    return draw(st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                             | st.dictionaries(keys, inner, max_size=4), max_leaves=20))


@given(value=plain_values(), protocol=st.sampled_from([2, 3, 4, 5]))
def test_the_pickle_interpreter_builds_what_pickle_would(value, protocol):
    """Plain data (what a checkpoint holds beside its tensors) comes out as the value that was pickled (compared
    with the value itself: nothing here is unpickled)."""
    assert torch_archive.parse_pickle(pickle.dumps(value, protocol=protocol)) == value


def test_shared_and_self_referencing_containers_are_built_as_pickled():
    shared = [1, 2]
    loop: list = [0]
    loop.append(loop)
    got = torch_archive.parse_pickle(pickle.dumps({"a": shared, "b": shared, "loop": loop}, protocol=2))
    assert got["a"] is got["b"] and got["loop"][1] is got["loop"]
    assert torch_archive.parse_pickle(pickle.dumps({1, 2}, protocol=2)) in ((1, 2), (2, 1))


def test_code_a_file_names_is_never_run(tmp_path):
    """A pickle that would open (create) a file when unpickled (its opcodes reduce ``io.open`` on the path,
    which any unpickler calls; checked with ``pickletools``, since unpickling it would run it): the reader
    does not open it, reads the weights beside it, and refuses it where the weights should be, naming it."""
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return open, (str(marker), "w")

    rnn = torch.nn.GRU(2, 3)
    torch.save({"rnn": rnn.state_dict(), "extra": Payload()}, tmp_path / "beside.pt")
    torch.save({**rnn.state_dict(), "weight_hh_l0": Payload()}, tmp_path / "inside.pt")
    with zipfile.ZipFile(tmp_path / "beside.pt") as z:
        ops = [(op.name, arg) for op, arg, _ in pickletools.genops(z.read("beside/data.pkl")) if op.name != "BINPUT"]
    call = ops.index(("GLOBAL", "io open"))  # the payload is live: io.open(marker, "w")
    assert ops[call:call + 5] == [("GLOBAL", "io open"), ("BINUNICODE", str(marker)), ("BINUNICODE", "w"),
                                  ("TUPLE2", None), ("REDUCE", None)], ops[call:call + 5]
    got, _ = torch_archive.load_state_dict(tmp_path / "beside.pt")
    assert got["weight_ih_l0"].tobytes() == rnn.weight_ih_l0.detach().numpy().tobytes()
    with pytest.raises(ValueError, match=r"'weight_hh_l0' is not a tensor but a io\.open"):
        torch_archive.load_state_dict(tmp_path / "inside.pt")
    assert not marker.exists()


def test_a_file_without_a_recurrent_module_says_what_it_holds(tmp_path):
    torch.save(torch.nn.Linear(2, 3), tmp_path / "linear.pt")
    with pytest.raises(ValueError, match=r"holds no recurrent module \(no 'weight_ih_l0', or a single cell's "
                                         r"'weight_ih'\); it holds objects of torch\.nn\.modules\.linear\.Linear"):
        torch_archive.load_state_dict(tmp_path / "linear.pt")
    torch.save({"lr": 0.1, "weights": [torch.ones(2)]}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match=r"it holds a dict of 2 entries \('lr', 'weights'\)"):
        torch_archive.load_state_dict(tmp_path / "other.pt")


def test_several_recurrent_modules_are_told_apart_by_path(tmp_path, capsys):
    encoder, decoder = torch.nn.GRU(2, 3), torch.nn.RNN(3, 4, nonlinearity="relu")
    torch.save({"encoder": encoder, "decoder": decoder.state_dict()}, tmp_path / "two.pt")
    with pytest.raises(ValueError, match=r"holds 2 recurrent modules, \['decoder', 'encoder'\]: say which"):
        torch_archive.load_state_dict(tmp_path / "two.pt")
    got, _ = torch_archive.load_state_dict(tmp_path / "two.pt", "encoder")
    assert got["weight_hh_l0"].tobytes() == encoder.weight_hh_l0.detach().numpy().tobytes()
    with pytest.raises(ValueError, match=r"holds no recurrent module 'encoder.rnn'; it holds \['decoder', 'encoder'\]"):
        torch_archive.load_state_dict(tmp_path / "two.pt", "encoder.rnn")
    base = ["convert", "--from", "torch", "--to", "checkpoint", str(tmp_path / "two.pt"), str(tmp_path / "d.npz")]
    assert cli.main(base + ["--module", "decoder"]) == 2  # a state_dict does not say relu from tanh
    assert "relu and tanh RNNs have the same weights: say which" in capsys.readouterr().err
    assert cli.main(base + ["--module", "decoder", "--mode", "relu"]) == 0
    assert checkpoint.load(tmp_path / "d.npz").model.rnn_mode == "relu"
    assert cli.main(["convert", "--from", "onnx", "--to", "checkpoint", "--module", "decoder", "a.onnx", "b.npz"]) == 2
    assert "--module applies to PyTorch files (--from torch), not to --from onnx" in capsys.readouterr().err


def test_a_whole_model_state_dict_in_a_tensor_file_reads_its_recurrent_module(tmp_path):
    """The same module paths in a safetensors or .npz state_dict of a whole model: other modules' tensors
    are left out, several recurrent modules need a path."""
    from compat_tests.interop import convert

    net = Net(torch.nn.LSTM(3, 4, num_layers=2))
    state = {k: v.detach().numpy() for k, v in net.state_dict().items()}
    safetensors.save(tmp_path / "net.safetensors", state)
    model, weights, biases, *_ = convert.read("torch", tmp_path / "net.safetensors")
    assert (model.rnn_mode, model.num_layers, model.num_units) == ("lstm", 2, 4)
    own = {k[len("encoder.rnn."):]: v for k, v in state.items() if k.startswith("encoder.rnn.")}
    for got, want in zip(weights + biases, sum(torch_format.from_state_dict(model, own), []), strict=True):
        assert got.tobytes() == want.tobytes()
    np.savez(tmp_path / "two.npz", **state, **{"other." + k: v for k, v in own.items()})
    with pytest.raises(ValueError, match=r"holds 2 recurrent modules, \['encoder.rnn', 'other'\]: say which"):
        convert.read("torch", tmp_path / "two.npz")
    assert convert.read("torch", tmp_path / "two.npz", {"module": "other"}).model.num_layers == 2
    with pytest.raises(ValueError, match="holds no recurrent module 'decoder'"):
        convert.read("torch", tmp_path / "two.npz", {"module": "decoder"})
    convert.write("torch", tmp_path / "ours.npz", model, weights, biases)  # one model's tensors and its config
    with pytest.raises(ValueError, match="carries one model's weights \\(and its config\\), not a module 'rnn'"):
        convert.read("torch", tmp_path / "ours.npz", {"module": "rnn"})
    assert convert.read("torch", tmp_path / "ours.npz").model.num_units == 4


class TensorSubclass(torch.Tensor):
    """A subclass of ``torch.Tensor``, which torch.save pickles through ``_rebuild_from_type_v2``."""


class GRUWithHead(torch.nn.GRU):
    """A recurrent module with a submodule of its own: the submodule's entries sit beside its weights."""

    def __init__(self):
        super().__init__(3, 4)
        self.head = torch.nn.Linear(4, 2)


def test_a_recurrent_modules_own_submodules_are_left_out(tmp_path):
    module = GRUWithHead()
    torch.save(module.state_dict(), tmp_path / "sd.pt")
    got, _ = torch_archive.load_state_dict(tmp_path / "sd.pt")
    assert sorted(got) == ["bias_hh_l0", "bias_ih_l0", "weight_hh_l0", "weight_ih_l0"]
    assert got["weight_hh_l0"].tobytes() == module.weight_hh_l0.detach().numpy().tobytes()


def _pickle(entries: dict, legacy: bool = False) -> bytes:
    """A protocol-2 pickle of ``{name: (storage kind, key, numel, offset, size, stride)}`` as torch.save
    writes a state_dict (``legacy``: in its legacy format, whose storage ids end in a view's, ``None``), or
    ``{name: raw opcode bytes}`` for a value written as is."""
    out = bytearray(b"\x80\x02}(")  # PROTO 2, EMPTY_DICT, MARK
    for name, value in entries.items():
        out += b"X" + struct.pack("<I", len(name.encode())) + name.encode()
        if isinstance(value, bytes):
            out += value
            continue
        kind, key, numel, offset, size, stride = value
        ints = lambda xs: b"(" + b"".join(b"J" + struct.pack("<i", x) for x in xs) + b"t"  # MARK BININT... TUPLE
        out += b"ctorch._utils\n_rebuild_tensor_v2\n("
        out += b"(X\x07\x00\x00\x00storagectorch\n" + kind.encode() + b"\n"
        out += b"X" + struct.pack("<I", len(key)) + key.encode() + b"X\x03\x00\x00\x00cpu" + b"J" + struct.pack("<i", numel)
        out += (b"N" if legacy else b"") + b"tQ"  # a legacy storage id ends in a view's, None
        out += b"J" + struct.pack("<i", offset) + ints(size) + ints(stride) + b"\x89}tR"
    return bytes(out + b"u.")  # SETITEMS, STOP


def _archive(path, pkl: bytes, members: dict[str, bytes], compress: bool = False, root: str = "archive") -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as z:
        z.writestr(f"{root}/data.pkl", pkl)
        z.writestr(f"{root}/byteorder", b"little")
        z.writestr(f"{root}/version", b"3\n")
        for name, blob in members.items():
            z.writestr(f"{root}/{name}", blob)


def _legacy_file(path, pkl: bytes, storages: list[tuple[int, bytes]], keys=("0",), after: bytes = b"",
                 magic: int = torch_archive.LEGACY_MAGIC, version: int = torch_archive.LEGACY_PROTOCOL) -> None:
    """A file in torch.save's legacy format: its three leading pickles, the object's pickle ``pkl``, the list of
    storage ``keys`` (pickled; bytes: as they are), each storage as ``(element count, bytes)``, then ``after``."""
    sizes = {"protocol_version": 1001, "little_endian": True, "type_sizes": {"short": 2, "int": 4, "long": 4}}
    head = b"".join(pickle.dumps(v, protocol=2) for v in (magic, version, sizes))
    body = b"".join(struct.pack("<q", numel) + blob for numel, blob in storages)
    keys = keys if isinstance(keys, bytes) else pickle.dumps(list(keys), protocol=2)
    path.write_bytes(head + pkl + keys + body + after)


FLOATS = np.arange(6, dtype=np.float32).tobytes()


GOOD = ("FloatStorage", "0", 6, 0, (2, 3), (3, 1))


MALFORMED = {
    "past its storage": ({"weight_ih_l0": ("FloatStorage", "0", 6, 1, (2, 3), (3, 1))}, {"data/0": FLOATS},
                         r"'weight_ih_l0': a tensor of size \[2, 3\], stride \[3, 1\] from offset 1 reaches past "
                         r"its storage of 6 elements"),
    "expanded": ({"weight_ih_l0": ("FloatStorage", "0", 6, 0, (10**9, 6), (0, 1))}, {"data/0": FLOATS},
                 "reaches past its storage"),
    "negative stride": ({"weight_ih_l0": ("FloatStorage", "0", 6, 5, (6,), (-1,))}, {"data/0": FLOATS},
                        r"a tensor of size \(6,\), stride \(-1,\), offset 5"),
    "short storage": ({"weight_ih_l0": ("FloatStorage", "0", 7, 0, (2, 3), (3, 1))}, {"data/0": FLOATS},
                      "archive/data/0 holds 24 bytes, not the 28 its storage claims"),
    "missing storage": ({"weight_ih_l0": GOOD}, {}, "the archive lacks archive/data/0"),
    "no such dtype": ({"weight_ih_l0": ("QInt8Storage", "0", 6, 0, (2, 3), (3, 1))}, {"data/0": FLOATS},
                      "'weight_ih_l0': a QInt8Storage"),
    "not a tensor": ({"weight_ih_l0": b"K\x05"}, {}, "'weight_ih_l0' is not a tensor but a int"),
    "bad persistent id": ({"weight_ih_l0": b"X\x01\x00\x00\x00xQ"}, {},
                          "a persistent id that is not a torch.save storage: a str"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_archive_is_refused_naming_why(case, tmp_path):
    entries, members, message = MALFORMED[case]
    _archive(tmp_path / "m.pt", _pickle(entries), members)
    with pytest.raises(ValueError, match=message):
        torch_archive.load_state_dict(tmp_path / "m.pt")


def _legacy_parts(data: bytes) -> list[bytes]:
    """A legacy file's five pickles (magic number, protocol, sizes, object, keys), then its storages' bytes."""
    stream, parts = io.BytesIO(data), []
    for _ in range(5):
        start = stream.tell()
        for _op in pickletools.genops(stream):
            pass
        parts.append(data[start:stream.tell()])
    return parts + [data[stream.tell():]]


LEGACY_MALFORMED = {  # name: (pickle entries, _legacy_file's keyword arguments, message)
    "not torch's": ({"weight_ih_l0": GOOD}, {"magic": 7}, r"a pickle that is not a torch.save file \(it does not "
                                                          r"start with torch's magic number\)"),
    "another protocol": ({"weight_ih_l0": GOOD}, {"version": 1000}, "legacy torch.save protocol 1000, not 1001"),
    "unlisted storage": ({"weight_ih_l0": GOOD}, {"keys": ()},
                         "1 storages the pickle names are not in the file and 0 in it are not named"),
    "unnamed storage": ({"weight_ih_l0": GOOD}, {"keys": ("0", "1"), "storages": [(6, FLOATS), (1, FLOATS[:4])]},
                        "0 storages the pickle names are not in the file and 1 in it are not named"),
    "keys not strings": ({"weight_ih_l0": GOOD}, {"keys": (0,)}, "not a list of distinct strings"),
    "persistent keys": ({"weight_ih_l0": GOOD}, {"keys": b"\x80\x02K\x00Q."},
                        "a persistent id where the legacy format has none"),
    "another count": ({"weight_ih_l0": GOOD}, {"storages": [(5, FLOATS)]},
                      "storage '0' holds 5 elements, not the 6 its pickle claims"),
    "negative count": ({"weight_ih_l0": ("FloatStorage", "0", -1, 0, (0,), (1,))}, {"storages": [(-1, b"")]},
                       "storage '0' of -1 elements"),
    "cut inside": ({"weight_ih_l0": GOOD}, {"storages": [(6, FLOATS[:-1])]}, "the file ends inside storage '0'"),
    "cut before": ({"weight_ih_l0": GOOD}, {"storages": []}, "the file ends before storage '0'"),
    "bytes after": ({"weight_ih_l0": GOOD}, {"after": b"abc"}, "3 bytes after the last storage"),
    "two kinds": ({"weight_ih_l0": GOOD, "weight_hh_l0": ("DoubleStorage", "0", 3, 0, (3,), (1,))}, {},
                  "storage '0' named as 3 DoubleStorage elements and as 6 FloatStorage elements"),
    "unknown size": ({"weight_ih_l0": ("Float8Storage", "0", 6, 0, (2, 3), (3, 1))}, {},
                     "a Float8Storage, whose element size is not known here"),
    "a view": ({"weight_ih_l0": b"(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00"
                                b"\x00\x00cpuK\x06(X\x01\x00\x00\x001K\x00K\x03ttQ"}, {},
               r"a storage view \(PyTorch before 1.0's format\)"),
    "zip's storage id": ({"weight_ih_l0": b"(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000"
                                          b"X\x03\x00\x00\x00cpuK\x06tQ"}, {},
                         "a persistent id that is not a legacy torch.save storage or module class"),
}


@pytest.mark.parametrize("case", sorted(LEGACY_MALFORMED))
def test_a_malformed_legacy_file_is_refused_naming_why(case, tmp_path):
    entries, options, message = LEGACY_MALFORMED[case]
    _legacy_file(tmp_path / "m.pt", _pickle(entries, legacy=True), **{"storages": [(6, FLOATS)], **options})
    with pytest.raises(ValueError, match=message):
        torch_archive.load_state_dict(tmp_path / "m.pt")


def test_a_file_neither_zip_nor_pickle_is_refused_naming_both(tmp_path):
    (tmp_path / "m.pt").write_bytes(b"ustar\x00" + bytes(100))  # PyTorch's first (tar) format, say
    with pytest.raises(ValueError, match=r"not a torch.save file: neither a zip \(its format since PyTorch 1.6\) "
                                         r"nor a pickle \(the legacy format\)"):
        torch_archive.load_state_dict(tmp_path / "m.pt")


def test_the_opcode_writer_of_these_tests_writes_what_torch_save_writes(tmp_path):
    """The malformed cases above differ from this well-formed archive only where they say: it describes the
    same tensor as torch.save's file of it (parsed, not unpickled), in the same members."""
    _archive(tmp_path / "m.pt", _pickle({"weight_ih_l0": GOOD}), {"data/0": FLOATS})
    want = np.arange(6, dtype=np.float32).reshape(2, 3)
    torch.save({"weight_ih_l0": torch.from_numpy(want)}, tmp_path / "torch.pt")
    with torch_archive.Archive(tmp_path / "m.pt") as ours, torch_archive.Archive(tmp_path / "torch.pt") as theirs:
        assert ours.obj == theirs.obj
    members = [{n.split("/", 1)[1] for n in zipfile.ZipFile(tmp_path / name).namelist()} for name in ("m.pt", "torch.pt")]
    assert members[0] <= members[1], members
    assert np.array_equal(torch_archive.load_state_dict(tmp_path / "m.pt")[0]["weight_ih_l0"], want)

    torch.save({"weight_ih_l0": torch.from_numpy(want)}, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    with torch_archive.open_file(tmp_path / "legacy.pt") as theirs:
        key = theirs.obj["weight_ih_l0"].storage.key  # torch names a legacy storage by its address
        _legacy_file(tmp_path / "ours.pt", _pickle({"weight_ih_l0": (*GOOD[:1], key, *GOOD[2:])}, legacy=True),
                     [(6, FLOATS)], keys=(key,))
        with torch_archive.open_file(tmp_path / "ours.pt") as ours:
            assert ours.obj == theirs.obj
    ours, theirs = (_legacy_parts((tmp_path / name).read_bytes()) for name in ("ours.pt", "legacy.pt"))
    assert ours[:3] == theirs[:3] and ours[5] == theirs[5]  # the leading pickles, the storages (not their memos)
    assert np.array_equal(torch_archive.load_state_dict(tmp_path / "ours.pt")[0]["weight_ih_l0"], want)


def test_archives_of_other_kinds_are_refused_naming_why(tmp_path):
    pkl, members = _pickle({"weight_ih_l0": GOOD}), {"data/0": FLOATS}
    _archive(tmp_path / "compressed.pt", pkl, members, compress=True)
    for name, message in [("compressed", "is compressed; torch.save stores its members uncompressed")]:
        with pytest.raises(ValueError, match=message):
            torch_archive.load_state_dict(tmp_path / f"{name}.pt")
    with zipfile.ZipFile(tmp_path / "two.pt", "w") as z:
        z.writestr("a/data.pkl", pkl)
        z.writestr("b/data.pkl", pkl)
    with pytest.raises(ValueError, match=r"a zip with 2 ROOT/data.pkl members, not a torch.save archive"):
        torch_archive.load_state_dict(tmp_path / "two.pt")


@pytest.mark.parametrize(("pkl", "message"), [
    (b"\x80\x02}(]K\x01s.", "a dict key of type list"),
    (b"\x80\x02}" + b"K\x01" + b"\x85" * 200_000 + b"K\x01s.", "a dict key of type tuple, not a string"),
    (b"\x80\x02h\x07.", "memo entry 7 read before it is written"),
    (b"\x80\x02K\x01K\x02.", "the pickle ends with a malformed stack"),
    (b"\x80\x02K\x01", "STOP"),
    (b"\x80\x02\x81.", "malformed pickle"),
    (b"\x80\x02ccopyreg\n_reconstructor\n(i__main__\nX\n.", "opcode INST"),
])
def test_a_malformed_pickle_is_a_value_error(pkl, message):
    with pytest.raises(ValueError, match=message):
        torch_archive.parse_pickle(pkl)


def test_a_damaged_string_opcode_is_refused_without_a_warning():
    """``pickletools`` decodes a ``STRING`` opcode's escapes as Python would, which warns of an invalid one
    (damage in a legacy file, which has no checksums, can make one): refused, and nothing printed besides."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match="opcode STRING"):
            torch_archive.parse_pickle(b"\x80\x02S'a\\,'\n.")
    assert not caught, [str(w.message) for w in caught]


@pytest.fixture(scope="module", params=["zip", "legacy"])
def saved_lstm(request, tmp_path_factory):
    """A training checkpoint of a whole model, in each format (the legacy one has no checksums)."""
    path = tmp_path_factory.mktemp("intact") / "lstm.pt"
    torch.manual_seed(0)
    torch.save({"model": Net(torch.nn.LSTM(3, 4, proj_size=2, bidirectional=True)).state_dict(), "epoch": 1}, path,
               _use_new_zipfile_serialization=request.param == "zip")
    return path.read_bytes()


@given(data=st.data())
def test_a_damaged_archive_loads_or_is_refused_naming_it(saved_lstm, data, tmp_path_factory):
    from compat_tests.interop import convert

    path = tmp_path_factory.mktemp("damaged") / "lstm.pt"
    path.write_bytes(damaged(data, saved_lstm))
    try:
        model, weights, biases, *_ = convert.read("torch", path)
    except (ValueError, TypeError) as exc:
        assert str(path) in str(exc), exc
        return
    x = np.zeros((2, 1, model.input_size), model.dtype)
    with np.errstate(all="ignore"):
        model(x, None, None, model.canonical_to_params(weights, biases))


class Scripted(torch.nn.Module):
    """A model around the recurrent module, scripted and saved with ``torch.jit.save`` as speech front ends
    ship theirs."""

    def __init__(self, rnn: torch.nn.Module):
        super().__init__()
        self.embed = torch.nn.Linear(2, rnn.input_size, dtype=rnn.weight_ih_l0.dtype)
        self.rnn = rnn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.rnn(self.embed(x))
        return y


@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")  # torch 2.13 deprecates TorchScript
@settings(max_examples=examples(20))  # each example scripts a module (about a second)
@given(rnn=torch_rnns(dtypes=("float32", "float64")), wrapped=st.booleans(), seed=st.integers(0, 2**16))
def test_a_torchscript_archive_reads_as_torch_holds_it_and_runs_as_it_does(rnn, wrapped, seed, tmp_path_factory):
    """``torch.jit.save`` of a scripted ``nn.RNN``/``LSTM``/``GRU``, bare or inside a model: every tensor bit for
    bit, an ``nn.RNN``'s nonlinearity read from its state, the module found by its path; and the reference on
    those weights agrees with the scripted module's own output within torch-cpu's budget."""
    from compat_tests.config import RNNConfig
    from compat_tests.interop import convert

    mode, module = rnn
    path = tmp_path_factory.mktemp("torchscript") / "model.pt"
    torch.jit.save(torch.jit.script(Scripted(module) if wrapped else module), str(path))
    with zipfile.ZipFile(path) as z:
        assert any("/code/" in n for n in z.namelist()) and any(n.endswith("/constants.pkl") for n in z.namelist())
    want = {k: _numpy(v) for k, v in module.state_dict().items()}
    got, nonlinearity = torch_archive.load_state_dict(path)
    assert sorted(got) == sorted(want)
    assert all(got[k].tobytes() == want[k].tobytes() and got[k].dtype == want[k].dtype for k in want)
    assert nonlinearity == (mode if mode in ("relu", "tanh") else None), "an nn.RNN's state says which"
    with torch_archive.open_file(path) as opened:
        assert opened.torchscript and list(torch_archive.rnn_modules(opened.obj)) == ["rnn" if wrapped else ""]
    model, weights, biases, *_ = convert.read("torch", path, {"module": "rnn" if wrapped else None})
    assert model.rnn_mode == mode
    cfg = RNNConfig(mode, model.num_layers, model.num_units, model.input_size, model.direction,
                    num_proj=model.num_proj, seq_len=5, batch=3, dtype=model.dtype.name, seed=seed,
                    bias_mode=model.bias_mode, initial_state=False)
    case = make_case(cfg)._replace(weights=weights, biases=biases)
    with torch.no_grad():  # the module as scripted (a loaded scripted nn.GRU has no plain forward to call)
        y, states = module(torch.from_numpy(case.x))
    h, c = (states, None) if mode != "lstm" else states
    theirs = Outputs(y.numpy(), h.numpy(), None if c is None else c.numpy())
    assert_agree_within_policy(cfg, case, theirs, run_reference(cfg, case), peer="torch-cpu")


@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")
def test_a_torchscript_archives_code_and_constants_are_never_read(tmp_path):
    """A TorchScript archive whose code files would raise and whose ``constants.pkl`` would run a command if
    unpickled still reads its weights: only ``data.pkl`` is parsed, and the command never runs."""
    rnn = torch.nn.GRU(3, 4)
    torch.jit.save(torch.jit.script(rnn), str(tmp_path / "real.pt"))
    marker = tmp_path / "ran"

    class Command:
        def __reduce__(self):
            import os

            return os.system, (f"touch {marker}",)

    with zipfile.ZipFile(tmp_path / "real.pt") as real, zipfile.ZipFile(tmp_path / "hostile.pt", "w") as out:
        for info in real.infolist():
            data = real.read(info)
            if info.filename.endswith("/constants.pkl"):
                data = pickle.dumps(Command())
            elif "/code/" in info.filename and info.filename.endswith(".py"):
                data = b"raise SystemExit('the code of a TorchScript archive was run')\n"
            out.writestr(info, data)
    got, _ = torch_archive.load_state_dict(tmp_path / "hostile.pt")
    assert all(got[k].tobytes() == v.detach().numpy().tobytes() for k, v in rnn.state_dict().items())
    assert not marker.exists()


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_infer_runs_a_torch_save_file_as_torch_does(legacy, tmp_path, capsys):
    """``rnn-compat infer --from torch`` on a pickled ``nn.RNN`` (which says relu itself), in either format:
    the outputs of the reference on the weights torch holds, bit for bit (the converter's outputs against
    torch's own are ``test_round_trips.py``'s)."""
    torch.manual_seed(3)
    rnn = torch.nn.RNN(3, 5, num_layers=2, nonlinearity="relu", bidirectional=True)
    torch.save(rnn, tmp_path / "rnn.pt", _use_new_zipfile_serialization=not legacy)
    x = torch.randn(6, 2, 3)
    np.save(tmp_path / "x.npy", x.numpy())
    assert cli.main(["infer", "--from", "torch", str(tmp_path / "rnn.pt"), str(tmp_path / "x.npy"),
                     "--out", str(tmp_path / "y.npz")]) == 0
    state = {k: v.detach().numpy() for k, v in rnn.state_dict().items()}
    model = reference.CudnnRNNRelu(2, 5, 3, direction="bidirectional")
    want = model(x.numpy(), None, model.canonical_to_params(*torch_format.from_state_dict(model, state)))
    with np.load(tmp_path / "y.npz", allow_pickle=False) as got:
        for name, mine in zip(("output", "output_h"), want, strict=True):
            assert got[name].tobytes() == mine.tobytes(), name
    assert cli.main(["infer", "--from", "torch", "--mode", "tanh", str(tmp_path / "rnn.pt"),
                     str(tmp_path / "x.npy")]) == 2
    assert "rnn_mode is 'relu', not 'tanh'" in capsys.readouterr().err


def _members(path) -> dict[str, tuple[bytes, int]]:
    """Each member's bytes and the offset in the file at which they start (read off its local header)."""
    raw = path.read_bytes()
    out = {}
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26:info.header_offset + 30])
            out[info.filename] = (z.read(info), info.header_offset + 30 + name_len + extra_len)
    return out


TORCH_DTYPES = {"HalfStorage": torch.float16, "FloatStorage": torch.float32, "DoubleStorage": torch.float64}


def _state_dict_saved_by_torch(tensors: dict, path) -> None:
    """``torch.save`` of ``tensors`` as a module's ``state_dict()`` holds them (with its ``_metadata``)."""
    state = collections.OrderedDict((k, torch.from_numpy(v)) for k, v in tensors.items())
    state._metadata = collections.OrderedDict([("", {"version": 1})])
    torch.save(state, path)


def _read_by_torch(path) -> dict:
    """The tensors of a state_dict file as torch.load builds them, without unpickling it (nothing in this suite
    unpickles): torch's own archive reader (``PyTorchFileReader``, which torch.load opens files with) reads every
    record, and each storage, at the offset it finds, on a 64-byte boundary (what ``torch.load(mmap=True)``
    maps); each tensor is that storage viewed as the pickle, parsed here, describes it (``_rebuild_tensor_v2``'s
    work in torch.load)."""
    reader = torch._C.PyTorchFileReader(str(path))
    sizes = {name: len(reader.get_record(name)) for name in reader.get_all_records()}
    out = {}
    with torch_archive.Archive(path) as archive:
        for name, record in archive.obj.items():
            key = f"data/{record.storage.key}"
            assert sizes[key] and reader.get_record_offset(key) % torch_save.ALIGNMENT == 0, key
            storage = torch.frombuffer(bytearray(reader.get_record(key)), dtype=TORCH_DTYPES[record.storage.kind])
            out[name] = storage.as_strided(record.size, record.stride, record.offset)
    return out


@given(rnn=torch_rnns(dtypes=("float16", "float32", "float64")))
def test_a_pt_file_written_here_is_what_torch_save_writes(rnn, tmp_path_factory):
    """A module's state_dict written with NumPy alone: its pickle and every storage byte for byte as torch.save
    writes them, the same members (but for the serialization id, which torch.save draws at random), each
    starting on a 64-byte boundary, as torch's writer aligns them for ``torch.load(mmap=True)``."""
    _, module = rnn
    ours, theirs = (tmp_path_factory.mktemp(side) / "sd.pt" for side in ("ours", "theirs"))
    torch_save.write_state_dict(ours, {k: v.numpy() for k, v in module.state_dict().items()})
    torch.save(module.state_dict(), theirs)
    mine, want = _members(ours), _members(theirs)
    assert sorted(mine) == sorted(want)
    for name, (blob, _) in want.items():
        assert name == "sd/.data/serialization_id" or mine[name][0] == blob, name
    assert all(start % torch_save.ALIGNMENT == 0 for _, start in mine.values()), mine


@given(cfg=rnn_configs(PEERS["torch-cpu"].capabilities, dtypes_=("float32", "float64"), max_layers=2, max_units=5,
                       max_input=4, max_time=5, max_batch=3),
       suffix=st.sampled_from(torch_save.SUFFIXES))
def test_torch_reads_and_runs_a_pt_file_converted_here(cfg, suffix, tmp_path_factory):
    """``convert --to torch m.pt``: its pickle is torch.save's own for the same tensors, torch's archive reader
    gives the state_dict tensors bit for bit (``_read_by_torch``), an ``nn.RNN``/``LSTM``/``GRU`` loads them
    strictly and runs to the reference's outputs within the torch-cpu peer's budget, and the file reads back
    as the same model (relu or tanh included: it carries its config) and weights."""
    from compat_tests.interop import convert
    from compat_tests.peers.torch_peers import _numpy as from_torch
    from compat_tests.peers.torch_peers import _Run

    case, model = make_case(cfg), cfg.model()
    path = tmp_path_factory.mktemp("pt") / f"m{suffix}"
    convert.write("torch", path, model, case.weights, case.biases)
    want = torch_format.to_state_dict(model, case.weights, case.biases)
    _state_dict_saved_by_torch(want, path.with_name(f"torch{suffix}"))
    with zipfile.ZipFile(path) as ours, zipfile.ZipFile(path.with_name(f"torch{suffix}")) as theirs:
        assert ours.read("m/data.pkl") == theirs.read("torch/data.pkl")
    loaded = _read_by_torch(path)
    assert list(loaded) == list(want)
    assert all(loaded[k].numpy().tobytes() == v.tobytes() and loaded[k].dtype == DTYPES[cfg.dtype]
               for k, v in want.items())
    with torch.no_grad():
        run = _Run(cfg, case, requires_grad=False, device="cpu", state_dict=loaded)
    got = Outputs(*(None if t is None else from_torch(cfg, t, is_state) for t, is_state in
                    ((run.y, False), (run.h, True), (run.c, True))))
    assert_agree_within_policy(cfg, case, got, run_reference(cfg, case), peer="torch-cpu")
    back = convert.read("torch", path)
    assert repr(back.model) == repr(model)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(back.weights + back.biases, case.weights + case.biases,
                                                          strict=True))


def test_a_large_state_dict_is_pickled_as_torch_save_pickles_it(tmp_path):
    """2,500 entries (items in batches of 1,000, memo indices past 255) and sizes past one and two bytes: the
    pickle byte for byte as torch.save's of the same tensors under a module's ``_metadata``."""
    tensors = {f"t{k}": np.full((k % 3 + 1,), k, np.float32) for k in range(2500)}
    tensors |= {"wide": np.ones((3, 100), np.float64), "wider": np.zeros((70_000,), np.float16)}
    torch_save.write_state_dict(tmp_path / "many.pt", tensors)
    (tmp_path / "torch").mkdir()
    _state_dict_saved_by_torch(tensors, tmp_path / "torch" / "many.pt")
    mine, want = _members(tmp_path / "many.pt"), _members(tmp_path / "torch" / "many.pt")
    assert mine["many/data.pkl"][0] == want["many/data.pkl"][0]
    assert mine["many/data/2501"][0] == want["many/data/2501"][0]


def test_a_member_past_zip64s_limit_starts_aligned_too(tmp_path, monkeypatch):
    """zipfile adds a zip64 field to a large member's local header, which the padding allows for (the limit
    lowered here, so that a small tensor counts as large); torch's archive reader and the reader here read
    the file."""
    monkeypatch.setattr(zipfile, "ZIP64_LIMIT", 4096)
    tensors = {"weight_ih_l0": np.arange(8192, dtype=np.float32).reshape(512, 16),
               "weight_hh_l0": np.ones((512, 128), np.float32)}
    torch_save.write_state_dict(tmp_path / "big.pt", tensors)
    monkeypatch.undo()
    members = _members(tmp_path / "big.pt")
    assert all(start % torch_save.ALIGNMENT == 0 for _, start in members.values()), members
    with zipfile.ZipFile(tmp_path / "big.pt") as z:
        assert len(z.getinfo("big/data/0").extra) > 20  # it has its zip64 field (besides the padding)
    loaded = _read_by_torch(tmp_path / "big.pt")
    got, _ = torch_archive.load_state_dict(tmp_path / "big.pt")
    for name, array in tensors.items():
        assert np.array_equal(loaded[name].numpy(), array) and np.array_equal(got[name], array), name


def test_only_float_tensors_are_written(tmp_path):
    with pytest.raises(TypeError, match=r"tensor 'weight_ih_l0': dtype int32, expected float16, float32 or float64"):
        torch_save.write_state_dict(tmp_path / "w.pt", {"weight_ih_l0": np.zeros((2, 2), np.int32)})
    assert not list(tmp_path.iterdir())
