"""The third use, CPU inference with NumPy alone (``pip install -e .``, no extra): every module of the
reference, a training pass, ``rnn-compat convert``/``infer`` between the formats that need no other package
and a report of the reference alone run in processes where every other third-party package the project
knows is blocked (a ``sitecustomize`` on ``PYTHONPATH``, so the report's worker processes are blocked too),
and the commands that do need one (ONNX graphs, Keras's own files, the suite) name the package and how to
install it, exit status 2, instead of a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from compat_tests import cli
from compat_tests.optional import MissingDependency, require

ROOT = Path(__file__).resolve().parents[3]


FROZEN = ROOT / "compat_tests" / "data" / "tf_graphs" / "cudnn_lstm_bidirectional_v3.pb"  # a CudnnRNNV3 graph


# Everything the extras install or a machine may have: none of it may be needed for inference.
BLOCKED = ("torch", "onnx", "onnxruntime", "onnxscript", "keras", "tensorflow", "jax", "cupy", "scipy",
           "hypothesis", "pytest", "matplotlib", "safetensors", "google", "nvidia", "h5py", "pandas")


SITECUSTOMIZE = '''
import importlib.abc, os, sys

BLOCKED = set(os.environ["BLOCKED_PACKAGES"].split(","))


class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            with open(os.environ["BLOCKED_LOG"], "a") as log:
                log.write(name.split(".")[0] + "\\n")
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)


sys.meta_path.insert(0, Block())
'''


TRAIN = '''
import importlib, pkgutil, sys
from pathlib import Path
import numpy as np
import reference
from reference.formats import safetensors, torch as torch_format

for info in pkgutil.walk_packages(reference.__path__, "reference."):
    importlib.import_module(info.name)
model = reference.make_model("lstm", 2, 8, 5, direction="bidirectional", dtype=np.float32)
rng = np.random.default_rng(0)
params = (rng.standard_normal(model.params_size()) / 3).astype(np.float32)
x = rng.standard_normal((7, 3, 5)).astype(np.float32)
fwd = model.forward(x, None, params, is_training=True)
assert np.isfinite(model.backward(fwd, np.ones_like(fwd.output)).params).all()
tmp = Path(sys.argv[1])
safetensors.save(tmp / "sd.safetensors", torch_format.to_state_dict(model, *model.params_to_canonical(params)))
np.save(tmp / "x.npy", x)
np.savez(tmp / "expected.npz", output=fwd.output, output_c=fwd.output_c)
'''


def _run(tmp: Path, name: str, *args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """``python ARGS`` with the blocker; the result and the packages it tried to import."""
    log = tmp / f"{name}.blocked"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp / "blocker"), str(ROOT)]),
           "BLOCKED_PACKAGES": ",".join(BLOCKED), "BLOCKED_LOG": str(log)}
    run = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return run, sorted(set(log.read_text().split())) if log.exists() else []


def test_inference_conversion_and_a_reference_report_need_numpy_alone(tmp_path):
    (tmp_path / "blocker").mkdir()
    (tmp_path / "blocker" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    run, tried = _run(tmp_path, "train", "-c", TRAIN, str(tmp_path))
    assert run.returncode == 0 and tried == [], (tried, run.stderr)

    def rnn_compat(name: str, *args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
        return _run(tmp_path, name, "-m", "compat_tests.cli", *args)

    t = str(tmp_path)
    for name, args in [("torch->checkpoint", ["convert", "--from", "torch", "--to", "checkpoint",
                                              f"{t}/sd.safetensors", f"{t}/ck.safetensors"]),
                       ("infer", ["infer", f"{t}/ck.safetensors", f"{t}/x.npy", "--out", f"{t}/y.npz"]),
                       ("checkpoint->tf", ["convert", "--from", "checkpoint", "--to", "tf", f"{t}/ck.safetensors",
                                           f"{t}/model.ckpt"]),
                       ("infer tf", ["infer", f"{t}/model.ckpt", f"{t}/x.npy", "--out", f"{t}/y_tf.npz"]),
                       ("checkpoint->keras", ["convert", "--from", "checkpoint", "--to", "keras",
                                              f"{t}/ck.safetensors", f"{t}/keras.npz"]),
                       ("checkpoint->torch.save", ["convert", "--from", "checkpoint", "--to", "torch",
                                                   f"{t}/ck.safetensors", f"{t}/m.pt"]),
                       ("infer torch.save", ["infer", "--from", "torch", f"{t}/m.pt", f"{t}/x.npy",
                                             "--out", f"{t}/y_pt.npz"]),
                       ("frozen graph->checkpoint", ["convert", "--from", "tf", "--to", "checkpoint",
                                                     str(FROZEN), f"{t}/frozen.npz"])]:
        run, tried = rnn_compat(name, *args)
        assert run.returncode == 0 and tried == [], (name, tried, run.stderr)
    expected = dict(np.load(tmp_path / "expected.npz", allow_pickle=False))
    for name in ("y.npz", "y_tf.npz", "y_pt.npz"):  # infer runs the same reference, bit for bit
        with np.load(tmp_path / name, allow_pickle=False) as y:
            assert all(np.array_equal(y[k], v) for k, v in expected.items()), name

    for name, args, package, message in [
            ("checkpoint->onnx", ["convert", "--from", "checkpoint", "--to", "onnx", f"{t}/ck.safetensors",
                                  f"{t}/m.onnx"], "onnx",
             "rnn-compat convert: writing an ONNX model needs the onnx package, which is not installed "
             "(pip install -e '.[test]' installs it)"),
            ("keras->checkpoint", ["convert", "--from", "keras", "--to", "checkpoint", f"{t}/m.keras",
                                   f"{t}/k.npz"], "h5py",
             "rnn-compat convert: reading a Keras .keras or .h5 file needs the h5py package"),
            ("checkpoint->keras", ["convert", "--from", "checkpoint", "--to", "keras", f"{t}/ck.safetensors",
                                   f"{t}/m.keras"], "h5py",
             "rnn-compat convert: writing a Keras .keras file needs the h5py package"),
            ("test", ["test", "-q"], "hypothesis", "rnn-compat test: the suite needs the hypothesis package")]:
        run, tried = rnn_compat(name, *args)
        assert (run.returncode, tried) == (2, [package]), (name, tried, run.stderr)
        assert message in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert not (tmp_path / "m.onnx").exists() and not (tmp_path / "m.keras").exists()

    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"study": "compat", "config": {"mode": m, "dtype": "float32", "seq_len": 4, "batch": 2,
                                                               "seed": k}}
                                for k, m in enumerate(("gru", "lstm"))]))
    run, _ = rnn_compat("report", "report", "--backends", "reference", "--grid", str(grid), "--out", f"{t}/run",
                        "--jobs", "2", "--no-progress")  # it may look for the other peers and matplotlib
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["passed"] and report["totals"]["units"] == 2 and (tmp_path / "run" / "index.html").exists()


def test_a_torch_save_file_runs_with_numpy_alone(tmp_path):
    """A training checkpoint that ``torch.save`` wrote (a whole model's state_dict inside it) runs where torch
    is blocked, to the reference's outputs on the weights torch held, bit for bit."""
    torch = pytest.importorskip("torch", reason="the file under test is written by torch.save")
    import reference
    from reference.formats import torch as torch_format

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.GRU(5, 4, num_layers=2, bidirectional=True))
    torch.save({"model": net.state_dict(), "epoch": 7}, tmp_path / "ck.pt")
    x = np.random.default_rng(1).standard_normal((6, 2, 5)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    (tmp_path / "blocker").mkdir()
    (tmp_path / "blocker" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    run, tried = _run(tmp_path, "infer", "-m", "compat_tests.cli", "infer", "--from", "torch", str(tmp_path / "ck.pt"),
                      str(tmp_path / "x.npy"), "--out", str(tmp_path / "y.npz"))
    assert run.returncode == 0 and tried == [], (tried, run.stderr)
    model = reference.CudnnGRU(2, 4, 5, direction="bidirectional")
    state = {k[2:]: v.detach().numpy() for k, v in net.state_dict().items() if k.startswith("1.")}
    want = model(x, None, model.canonical_to_params(*torch_format.from_state_dict(model, state)))
    with np.load(tmp_path / "y.npz", allow_pickle=False) as got:
        assert all(got[k].tobytes() == w.tobytes() for k, w in zip(("output", "output_h"), want, strict=True))


def test_a_missing_package_is_named_and_a_broken_one_keeps_its_own_error(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx: ModuleNotFoundError, name "onnx"
    with pytest.raises(MissingDependency, match="reading an ONNX model needs the onnx package"):
        require("onnx", "reading an ONNX model")
    assert cli.main(["infer", "--from", "onnx", str(tmp_path / "m.onnx"), str(tmp_path / "x.npy")]) == 2
    assert "rnn-compat infer: reading an ONNX model needs the onnx package" in capsys.readouterr().err
    broken = tmp_path / "broken_dependency.py"
    broken.write_text("import no_such_module_inside\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="no_such_module_inside") as caught:
        require("broken_dependency", "a feature")
    assert not isinstance(caught.value, MissingDependency)
