"""A reader takes bytes only from the file the user named. HDF5 lets a file point elsewhere (external storage, an
external or soft link, a virtual dataset, a filter from a plugin library); a Keras file with any such member is
refused naming the member and what it points at, and nothing it points at is opened, even to check it; so is an
ONNX model with a tensor in another file, wherever it lies, and a run folder with a file that is a link elsewhere.
Every pointer aims at a tripwire: a file whose opening, by any process, is seen here."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from compat_tests import cli
from compat_tests.config import RNNConfig, make_case
from compat_tests.interop import convert, keras_file
from compat_tests.strategies import HDF5_POINTERS, examples, hdf5_pointers
from compat_tests.tests.helpers import TINY_GRID

h5py = pytest.importorskip("h5py")


CONTAINERS = ("m.weights.h5", "m.h5", "m.keras")  # Keras 3 weights, a legacy model, a Keras 3 archive


PLUGIN_FILTER = 40000  # a filter id HDF5 does not define and no plugin here provides


class Tripwire:
    """A file at ``path`` (a stand-in for one of the user's, such as an SSH key) watched by inotify: every
    opening of it, by any process, is recorded by the kernel as it happens, so :meth:`opened` sees an open that
    came and went before it looked (Linux)."""

    IN_OPEN = 0x20

    def __init__(self, path: Path) -> None:
        self.path, self._opened = path, False
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"the user's secret " * 256)
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._fd = self._libc.inotify_init1(os.O_NONBLOCK)
        if self._fd < 0 or self._libc.inotify_add_watch(self._fd, bytes(path), self.IN_OPEN) < 0:
            pytest.skip(f"inotify: {os.strerror(ctypes.get_errno())}")

    def opened(self) -> bool:
        """Whether anything has opened the file since it was made."""
        try:
            self._opened |= bool(os.read(self._fd, 4096))
        except BlockingIOError:  # no event
            pass
        return self._opened

    def close(self) -> bool:
        """Stops watching; whether anything opened the file."""
        opened = self.opened()
        os.close(self._fd)
        return opened


@pytest.fixture
def tripwire(tmp_path):
    wire = Tripwire(tmp_path / "outside" / "secret.bin")
    yield wire
    assert not wire.close(), f"{wire.path} was opened"


def _model():
    cfg = RNNConfig("gru", num_layers=2, num_units=3, input_size=2, seq_len=3, dtype="float32", time_major=False)
    case = make_case(cfg)
    return cfg, case, cfg.model()


def _datasets(h5) -> list[str]:
    found: list[str] = []
    h5.visititems(lambda name, obj: found.append(name) if isinstance(obj, h5py.Dataset) else None)
    return found


def plant(path: Path, kind: str, at: int, beside: bool, target: str) -> tuple[str, str]:
    """Puts a member of ``kind`` (:data:`HDF5_POINTERS`) that points at the file ``target`` into the HDF5 file
    ``path``: in place of its dataset number ``at``, or beside it (a new member of its group). Returns the
    member's path and what the refusal should name it pointing at."""
    with h5py.File(path, "r+") as h5:
        names = _datasets(h5)
        old = h5[names[at]]
        shape, dtype, values = old.shape, old.dtype, old[()]
        name = f"{names[at].rpartition('/')[0]}/elsewhere".lstrip("/") if beside else names[at]
        if not beside:
            del h5[name]
        if kind == "external_storage":
            h5.create_dataset(name, shape=shape, dtype=dtype, external=[(target, 0, values.nbytes)])
        elif kind == "external_link":
            h5[name] = h5py.ExternalLink(target, "/kernel")
        elif kind == "soft_link":  # to a dataset of the file: read through a name not its own
            other = next(n for n in _datasets(h5) if n != name)
            h5[name] = h5py.SoftLink(f"/{other}")
            return name, f"/{other}"
        elif kind == "virtual_dataset":
            layout = h5py.VirtualLayout(shape=shape, dtype=dtype)
            layout[...] = h5py.VirtualSource(target, "kernel", shape=shape)
            h5.create_virtual_dataset(name, layout)
        else:  # the weights themselves, through a filter a plugin would provide (optional: HDF5 writes them raw)
            plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            plist.set_chunk(shape or (1,))
            plist.set_filter(PLUGIN_FILTER, h5py.h5z.FLAG_OPTIONAL)
            space = h5py.h5s.create_simple(shape or (1,))
            made = h5py.h5d.create(h5.id, name.encode(), h5py.h5t.py_create(dtype), space, dcpl=plist)
            h5py.Dataset(made)[...] = values
            return name, f"filter {PLUGIN_FILTER}"
    return name, target


def hostile_file(folder: Path, container: str, kind: str, at: int, beside: bool, target: str) -> tuple[Path, str, str]:
    """An honest Keras file of ``container``'s kind (:data:`CONTAINERS`) with a member of ``kind`` planted
    (:func:`plant`): its path, the member's path and what it points at."""
    cfg, case, model = _model()
    path = folder / container
    keras_file.write(path, model, case.weights, case.biases)
    if container != "m.keras":
        return path, *plant(path, kind, at % len(_h5_datasets(path)), beside, target)
    inner = folder / "model.weights.h5"
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    inner.write_bytes(members["model.weights.h5"])
    member, points_at = plant(inner, kind, at % len(_h5_datasets(inner)), beside, target)
    with zipfile.ZipFile(path, "w") as z:
        for n, data in members.items():
            z.writestr(n, inner.read_bytes() if n == "model.weights.h5" else data)
    inner.unlink()
    return path, member, points_at


def _h5_datasets(path: Path) -> list[str]:
    with h5py.File(path, "r") as h5:
        return _datasets(h5)


DESCRIBED = {"external_storage": "keeps its bytes in another file (HDF5 external storage): {target}",
             "external_link": "is an external link to /kernel in the file {target}",
             "soft_link": "is a soft link to {target}",
             "virtual_dataset": "is a virtual dataset mapping kernel in the file {target}",
             "plugin_filter": "passes its bytes through the {target} (unnamed), which HDF5 does not define itself"}


def _expected(path: Path, member: str, kind: str, points_at: str) -> str:
    return (f"{re.escape(str(path))}: .*{re.escape(member)} {re.escape(DESCRIBED[kind].format(target=points_at))}"
            f".*refused: a model file is read from its own bytes alone")


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pointer=hdf5_pointers(datasets=8))
@pytest.mark.parametrize("container", CONTAINERS)
def test_a_keras_file_with_a_member_that_points_elsewhere_is_refused_naming_it(container, pointer, tmp_path,
                                                                               tripwire, monkeypatch):
    """Every kind of pointer, in place of any weight or beside it, absolute or relative to where the reader
    runs, in each Keras container: a ValueError naming the file, the member and its target; the tripwire the
    pointers aim at never opened. (HDF5 read external storage and virtual datasets' sources as the weights.)"""
    kind, at, beside, relative = pointer
    folder = Path(tmp_path, "model", container.replace(".", "_"), f"{kind}{at}{beside}{relative}")
    folder.mkdir(parents=True)
    monkeypatch.chdir(folder)  # where HDF5 resolves a relative external path
    target = os.path.relpath(tripwire.path, folder) if relative else str(tripwire.path)
    path, member, points_at = hostile_file(folder, container, kind, at, beside, target)
    with pytest.raises(ValueError, match=_expected(path, member, kind, points_at)):
        convert.read("keras", path)
    assert not tripwire.opened()


@pytest.mark.parametrize("kind", HDF5_POINTERS)
def test_convert_and_infer_refuse_such_a_file_with_exit_status_2(kind, tmp_path, tripwire, capsys, monkeypatch):
    """On the command line: exit status 2, the file, member and target named, no traceback, nothing written,
    and the honest file of the same model converts (the control)."""
    monkeypatch.chdir(tmp_path)
    cfg, case, _ = _model()
    np.save(tmp_path / "x.npy", case.x.transpose(1, 0, 2))
    path, member, points_at = hostile_file(tmp_path, "m.weights.h5", kind, 0, False, str(tripwire.path))
    for argv in (["convert", "--to", "checkpoint", str(path), "ck.npz"],
                 ["infer", str(path), "x.npy", "--batch-major", "--out", "y.npz"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert re.search(_expected(path, member, kind, points_at), err), err
        assert "Traceback" not in err
    assert not (tmp_path / "ck.npz").exists() and not (tmp_path / "y.npz").exists()
    honest = tmp_path / "honest"
    honest.mkdir()
    keras_file.write(honest / "m.weights.h5", cfg.model(), case.weights, case.biases)
    assert cli.main(["convert", "--to", "checkpoint", str(honest / "m.weights.h5"), "ck.npz"]) == 0


def test_the_tripwire_sees_a_reader_open_it(tmp_path):
    """The harness: h5py reading a dataset's external storage opens the file and takes its bytes as the weights
    (what the reader did before it checked), and the tripwire sees it; one left alone is not tripped."""
    wire = Tripwire(tmp_path / "outside" / "secret.bin")
    path, _, _ = hostile_file(tmp_path, "m.weights.h5", "external_storage", 0, False, str(wire.path))
    with h5py.File(path, "r") as h5:
        stolen = h5[_h5_datasets(path)[0]][()].tobytes()
    assert stolen == wire.path.read_bytes()[:len(stolen)] and wire.close()
    quiet = Tripwire(tmp_path / "quiet" / "secret.bin")
    assert not quiet.close()


def _outside(t, location: str):
    """``t`` (a TensorProto) with its data moved to the file ``location``, as onnx.save's external data."""
    from onnx import TensorProto

    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value=location)
    t.ClearField("raw_data")
    return t


def _tensor(location: str, name: str = "c"):
    from onnx import numpy_helper

    return _outside(numpy_helper.from_array(np.zeros(3, np.float32), name), location)


def _sparse(location: str):
    from onnx import helper, numpy_helper

    return helper.make_sparse_tensor(_tensor(location, "sparse"), numpy_helper.from_array(np.array([0, 2], np.int64),
                                                                                         "idx"), [4])


def _graph(location: str):
    from onnx import TensorProto, helper

    return helper.make_graph([helper.make_node("Identity", ["inner"], ["out"])], "branch", [],
                             [helper.make_tensor_value_info("out", TensorProto.FLOAT, [3])],
                             initializer=[_tensor(location, "inner")])


def _plant_onnx(proto, where: str, location: str) -> str:
    """Puts a tensor that keeps its data in the file ``location`` at ``where`` (:data:`ONNX_PLACES`) of the
    exported model ``proto``; returns how the refusal names it."""
    from onnx import helper

    graph = proto.graph
    if where == "initializer":
        _outside(graph.initializer[0], location)
        return f"initializer {graph.initializer[0].name!r}"
    if where == "sparse initializer":
        graph.sparse_initializer.append(_sparse(location))
        return "sparse initializer 'sparse'"
    if where == "function":
        proto.functions.append(helper.make_function("local", "f", [], ["c"], [
            helper.make_node("Constant", [], ["c"], name="inside", value=_tensor(location))], proto.opset_import))
        return "attribute 'value' of Constant node inside in the function 'f'"
    if where == "training graph":
        proto.training_info.add().initialization.CopyFrom(_graph(location))
        return "initializer 'inner' in a training graph"
    node = {"Constant value": lambda: helper.make_node("Constant", [], ["c"], name="planted", value=_tensor(location)),
            "ConstantOfShape value": lambda: helper.make_node("ConstantOfShape", ["shape"], ["c"], name="planted",
                                                              value=_tensor(location)),
            "tensor attribute": lambda: helper.make_node("Identity", ["X"], ["c"], name="planted",
                                                         extra=_tensor(location)),
            "tensors attribute": lambda: helper.make_node("Identity", ["X"], ["c"], name="planted",
                                                          extra=[_tensor(location)]),
            "sparse tensor attribute": lambda: helper.make_node("Identity", ["X"], ["c"], name="planted",
                                                                extra=_sparse(location)),
            "If branch": lambda: helper.make_node("If", ["cond"], ["c"], name="planted", then_branch=_graph(location),
                                                  else_branch=_graph(location))}[where]()
    graph.node.append(node)
    attribute = node.attribute[0].name
    if where == "If branch":
        return f"initializer 'inner' in a subgraph of attribute {attribute!r} of If node planted"
    return f"attribute {attribute!r} of {node.op_type} node planted"


ONNX_PLACES = ("initializer", "sparse initializer", "Constant value", "ConstantOfShape value", "tensor attribute",
               "tensors attribute", "sparse tensor attribute", "If branch", "function", "training graph")


@pytest.mark.parametrize("where", ONNX_PLACES)
@pytest.mark.parametrize("options", [{}, {"node": "layer0"}, {"dequantize": True}], ids=["", "node", "dequantize"])
def test_an_onnx_model_with_a_tensor_in_another_file_anywhere_is_refused_naming_it(where, options, tmp_path,
                                                                                   monkeypatch):
    """A tensor's data in another file, in any of the places a model holds tensors: the reader refused it in
    initializers and Constant nodes only, and read it from a ConstantOfShape (the file's bytes deciding the
    outcome), from any attribute of a node it folded, and from --dequantize's inputs. The external file, a
    tripwire in the folder the reader runs in (where onnx looks for it), is never opened."""
    pytest.importorskip("onnx")
    from compat_tests.interop import onnx_model

    monkeypatch.chdir(tmp_path)
    wire = Tripwire(tmp_path / "secret.bin")
    cfg, case, model = _model()
    proto = onnx_model.export_model(model, case.weights, case.biases)
    named = _plant_onnx(proto, where, "secret.bin")
    path = tmp_path / "m.onnx"
    path.write_bytes(proto.SerializeToString())
    try:
        with pytest.raises(ValueError, match=f"{re.escape(str(path))}: {re.escape(named)} keeps its data in another "
                                             f"file \\(secret.bin\\); a model is read from its own bytes alone"):
            convert.read("onnx", path, options)
    finally:
        assert not wire.close(), "the external file was opened"


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    """A report run of the reference on the tiny grid."""
    out = tmp_path_factory.mktemp("run") / "run"
    assert cli.main(["report", "--grid", str(TINY_GRID), "--backends", "reference", "--out", str(out), "--jobs", "1", "--no-progress", "--no-figures"]) == 0
    return out


@pytest.mark.parametrize("name, command", [
    ("index.html", ["render", "{run}"]),
    ("run.json", ["render", "{run}"]),
    ("results.jsonl", ["report", "--grid", "{grid}", "--backends", "reference", "--out", "{run}", "--resume",
                       "--no-progress", "--no-figures"]),
    ("report.json", ["diff", "{run}", "{run}", "--out", "{diff}"]),
    ("diff.md", ["diff", "{original}", "{original}", "--out", "{run}", "--force"]),
])
def test_a_run_folder_file_that_is_a_link_elsewhere_is_refused_and_its_target_left_alone(name, command, run_folder,
                                                                                       tmp_path, capsys):
    """A run folder from elsewhere may hold a link named as one of its files (``index.html -> ~/.bashrc``):
    render wrote the report through it (replacing the file it points at), --resume appended records to it,
    diff read another file as the run's report. Each command now refuses the folder naming the link, and the
    file it points at is as it was."""
    run = tmp_path / "copy"
    shutil.copytree(run_folder, run)
    victim = tmp_path / "elsewhere" / "victim.txt"
    victim.parent.mkdir()
    victim.write_text("the user's own file\n")
    (run / name).unlink(missing_ok=True)
    (run / name).symlink_to(victim)
    words = [w.format(run=run, grid=TINY_GRID, diff=tmp_path / "d", original=run_folder) for w in command]
    assert cli.main(words) == 2
    err = capsys.readouterr().err
    assert f"{run / name} is a symbolic link (to {victim}): a run folder's files are read and written there alone" \
        in err, err
    assert victim.read_text() == "the user's own file\n"
