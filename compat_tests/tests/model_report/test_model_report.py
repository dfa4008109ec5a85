"""``rnn-compat report --model`` on trained models (the ``trained`` fixture): correct exports and ports pass, broken
ones fail with the diagnosis of their fault, the tolerance it prints fits the backend's own outputs, and the run
stops, resumes and renders as a grid report's does."""

from __future__ import annotations

import copy
import json
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from compat_tests import cli
from compat_tests.model_report.inputs import FILE as INPUTS
from compat_tests.peers import PEERS
from compat_tests.peers.reference_peer import ReferenceTF32Peer
from compat_tests.run import run_reference

ROOT = Path(__file__).resolve().parents[3]
CORRECT = ("lstm_onnx", "gru_onnx", "relu_onnx", "lstm_keras_port", "gru_keras_port")
BROKEN = ("gru_onnx_textbook", "lstm_onnx_reversed", "lstm_keras_swapped", "lstm_keras_doubled",
          "lstm_keras_hard_sigmoid", "lstm_onnx_nolengths")


def report(tmp_path, capsys, *words: str) -> tuple[int, dict, str]:
    """Run ``rnn-compat report WORDS`` in this process into a fresh folder: exit status, report.json, stdout."""
    out = tmp_path / "run"
    status = cli.main(["report", "--out", str(out), "--no-progress", "--jobs", "1", "--no-figures", *words])
    printed = capsys.readouterr()
    assert "Traceback" not in printed.err, printed.err
    return status, json.loads((out / "report.json").read_text()), printed.out


def mode_option(entry) -> list[str]:
    """The option a relu network's PyTorch file needs (its weights cannot tell relu from tanh)."""
    return ["--mode", entry.mode] if entry.mode in ("relu", "tanh") else []


def file_rows(result: dict) -> list[dict]:
    return [r for r in result["rows"] if r["kind"] == "file"]


@pytest.mark.parametrize("name", CORRECT)
def test_a_correct_export_or_port_passes_with_its_weights_equal_within_rounding(trained, tmp_path, capsys, name):
    entry = trained[name]
    first = trained[entry.companion]
    status, result, printed = report(tmp_path, capsys, "--model", str(first.path), "--model", str(entry.path),
                                     "--backends", "reference", "--steps", "10", *mode_option(entry))
    assert status == 0, printed
    rows = file_rows(result)
    assert rows and all(r["passed"] for r in rows), [r["verdict"] for r in rows]
    assert [w["verdict"] for w in result["weights"]] in (["identical"], ["within rounding"])
    assert "assert_allclose(output, expected_output, rtol=0, atol=" in printed


@pytest.mark.parametrize("name", BROKEN)
def test_a_broken_export_or_port_fails_with_its_diagnosis(trained, tmp_path, capsys, name):
    entry = trained[name]
    first = trained[entry.companion]
    words = ["--model", str(first.path), "--model", str(entry.path), "--backends", "reference"]
    if entry.lengths:  # the user's own input, with the lengths the export loses
        x = np.random.default_rng(5).standard_normal((12, 3, 3)).astype(np.float32)
        np.save(tmp_path / "x.npy", x)
        np.save(tmp_path / "lengths.npy", np.array([12, 7, 3]))
        words += ["--input", str(tmp_path / "x.npy"), "--lengths", str(tmp_path / "lengths.npy")]
    else:
        words += ["--steps", "10"]
    status, result, printed = report(tmp_path, capsys, *words)
    assert status == 1, printed
    failing = [r for r in file_rows(result) if not r["passed"]]
    assert failing, "the broken file's own framework must fail against the first file's truth"
    for row in failing:
        assert row["diagnosis"] and row["diagnosis"][0]["name"] == entry.expect, (row["verdict"], row["diagnosis"])
        assert row["location"]["step"] is not None
    assert all(r["passed"] for r in result["rows"] if r["kind"] == "peer"), "the backends on the weights pass"
    assert f"most likely {failing[0]['diagnosis'][0]['detail']}" in printed
    if name in ("lstm_keras_swapped", "lstm_keras_doubled"):  # its weights differ, and the page says where
        assert result["weights"][0]["verdict"] == "different" and result["weights"][0]["tensors"]
    if name in ("lstm_keras_hard_sigmoid", "lstm_onnx_reversed"):  # the readers refuse what cuDNN cannot compute
        assert result["weights"][0]["verdict"] == "not read"


def test_a_port_whose_gates_are_swapped_is_named_by_the_two_gates(trained, tmp_path, capsys):
    entry = trained["lstm_keras_swapped"]
    _, result, _ = report(tmp_path, capsys, "--model", str(trained["lstm_pt"].path), "--model", str(entry.path),
                          "--backends", "reference", "--steps", "10")
    details = {d["detail"] for r in file_rows(result) for d in r["diagnosis"] or ()}
    assert details == {"gates i and f exchanged, where cuDNN's order is i f c o"}, details
    command = file_rows(result)[0]["reproduce"]  # the one line that runs the unit again and prints its record
    assert command.startswith("python -m compat_tests.model_report.units ")
    again = subprocess.run([sys.executable, *shlex.split(command)[1:]], cwd=ROOT, capture_output=True, text=True,
                           timeout=120)
    record = json.loads(again.stdout)
    assert not record["passed"] and record["model"]["diagnosis"][0]["name"] == "gate_order", again.stderr[-2000:]


@pytest.mark.parametrize("T", [10, 1000])
def test_the_tolerance_printed_fits_the_backend_and_a_tenth_of_it_does_not(trained, trained_torch, tmp_path,
                                                                            capsys, T):
    """The float32 ``atol`` for the output at this T holds torch-cpu's own float32 output (PyTorch, here, on the
    report's input) against PyTorch's float64 run of the same values, and a tenth of it does not."""
    torch = pytest.importorskip("torch")
    status, result, _ = report(tmp_path, capsys, "--model", str(trained["lstm_pt"].path), "--backends", "torch-cpu",
                               "--steps", str(T))
    assert status == 0
    (line,) = [t for t in result["tolerances"] if (t["dtype"], t["quantity"], t["T"]) == ("float32", "output", T)]
    module = copy.deepcopy(trained_torch["lstm_pt"])  # (the fixture's module stays as it is)
    with np.load(tmp_path / "run" / INPUTS) as held:
        inputs = [held[k] for k in sorted(held.files) if k.startswith("x")]
    misses = 0
    for x in inputs:
        x32 = torch.from_numpy(x.astype(np.float32))
        with torch.no_grad():
            got = module.float()(x32)[0].numpy()
            want = module.double()(x32.double())[0].numpy()
        np.testing.assert_allclose(got, want, rtol=0, atol=line["atol"])
        try:
            np.testing.assert_allclose(got, want, rtol=0, atol=line["atol"] / 10)
        except AssertionError:
            misses += 1
    assert misses, f"a tenth of atol={line['atol']:.3g} still holds every input: the tolerance is not this model's"


@pytest.mark.parametrize("name", ["lstm_keras", "gru_keras", "relu_keras"])
def test_a_model_trained_in_keras_passes_in_keras_and_on_every_backend(trained, tmp_path, capsys, name):
    status, result, printed = report(tmp_path, capsys, "--model", str(trained[name].path), "--backends",
                                     "reference,torch-cpu", "--steps", "10", *mode_option(trained[name]))
    assert status == 0, printed
    rows = file_rows(result)
    assert rows and all(r["passed"] and "keras" in r["backend"] for r in rows)
    peers = [r for r in result["rows"] if r["kind"] == "peer"]
    assert {r["backend"] for r in peers} == {"reference", "torch-cpu"} and all(r["passed"] for r in peers)


def test_batch_and_repeat_invariance_are_shown_per_peer(trained, tmp_path, capsys):
    _, result, _ = report(tmp_path, capsys, "--model", str(trained["gru_pt"].path), "--backends", "torch-cpu",
                          "--steps", "10")
    shown = {(r["dtype"], r["invariance"]) for r in result["rows"] if r["kind"] == "peer"}
    said = {"bit for bit", "within rounding", "beyond rounding"}
    for dtype, invariance in shown:
        batch, repeat = invariance.split(" / ")
        assert repeat in said and batch in said | {"batch of one"}, invariance
    page = (tmp_path / "run" / "report.md").read_text()
    assert "batch / repeat invariance" in page and "bit for bit" in page


def test_a_stopped_model_run_reports_what_ran_and_resumes_to_the_whole_report(trained, tmp_path, capsys):
    words = ["--model", str(trained["lstm_pt"].path), "--backends", "reference", "--steps", "10"]
    out = tmp_path / "run"
    assert cli.main(["report", "--out", str(out), "--no-progress", "--jobs", "1", "--no-figures",
                     "--max-seconds", "1e-9", *words]) == 1
    partial = json.loads((out / "report.json").read_text())
    assert not partial["complete"] and partial["verdict"] == "incomplete" and partial["ran_units"] < partial[
        "planned_units"]
    capsys.readouterr()
    assert cli.main(["report", "--out", str(out), "--no-progress", "--jobs", "1", "--resume", *words]) == 0
    whole = json.loads((out / "report.json").read_text())
    assert whole["complete"] and whole["ran_units"] == whole["planned_units"] == partial["planned_units"]
    assert "<figure" in (out / "index.html").read_text()
    (out / "report.json").unlink()
    assert cli.main(["render", str(out)]) == 0 and json.loads((out / "report.json").read_text())["complete"]


def test_a_resume_refuses_a_model_file_that_changed(trained, tmp_path, capsys):
    import shutil

    model = tmp_path / "m.pt"
    shutil.copy(trained["lstm_pt"].path, model)
    words = ["--model", str(model), "--backends", "reference", "--steps", "10"]
    out = tmp_path / "run"
    assert cli.main(["report", "--out", str(out), "--no-progress", "--jobs", "1", "--max-seconds", "1e-9", *words]) == 1
    shutil.copy(trained["lstm2_pt"].path, model)
    capsys.readouterr()
    assert cli.main(["report", "--out", str(out), "--no-progress", "--jobs", "1", "--resume", *words]) == 2
    assert "changed" in capsys.readouterr().err


def test_a_stack_of_uneven_layers_runs_as_a_chain_each_layer_on_its_own_truth(tmp_path, capsys):
    """A Keras stack of an 8-unit and a 5-unit LSTM (no one cuDNN stack): each layer judged per backend on the
    float64 truth of the layers before, and the file in Keras judged whole against the last layer's truth."""
    from .conftest import import_keras

    keras = import_keras()
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((None, 3)), keras.layers.LSTM(8, return_sequences=True),
                              keras.layers.LSTM(5, return_sequences=True), keras.layers.Dense(1)])
    model.save(tmp_path / "uneven.keras")
    status, result, printed = report(tmp_path, capsys, "--model", str(tmp_path / "uneven.keras"), "--backends",
                                     "reference", "--steps", "10")
    assert status == 0, printed
    assert [layer["num_units"] for layer in result["files"][0]["layers"]] == [8, 5]
    peers = {(r["backend"], r["layer"]) for r in result["rows"] if r["kind"] == "peer"}
    assert peers == {("reference, layer 0", 0), ("reference, layer 1", 1)}
    (keras_row, *more) = file_rows(result)
    assert keras_row["passed"] and "keras" in keras_row["backend"] and keras_row["layer"] == 1
    assert {t["layer"] for t in result["tolerances"]} == {0, 1}


def test_ctrl_c_keeps_a_model_runs_units_and_the_printed_resume_completes_it(registry, trained, tmp_path):
    """Ctrl-C to the whole group while a unit runs (the slow peer holds its units of input seed >= 2): exit status
    130 without a traceback, the finished units kept, nothing left running, and the printed command (with
    --resume) completes the run."""
    import re
    import signal

    from compat_tests.report.sweep import RESULTS, read_records
    from compat_tests.tests.helpers import PEER, _held, _kept

    (tmp_path / "slow_peer.py").write_text(PEER)
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "compat_tests.cli", "report", "--model", str(trained["gru_pt"].path), "--plugin",
            f"{tmp_path / 'slow_peer.py'}:SLOW", "--backends", "slow", "--steps", "3,4", "--out", str(out),
            "--no-progress", "--no-figures", "--jobs", "2"]

    def ready() -> bool:  # the units of seeds 0 and 1 (inputs T=3) recorded
        return (out / RESULTS).exists() and len(read_records(out / RESULTS)) >= 4

    ended, _ = _held(argv, tmp_path, "worker-running", [(signal.SIGINT, True)], ready)
    assert ended.returncode == 130, ended.stdout
    assert "Traceback" not in ended.stdout and "KeyboardInterrupt" not in ended.stdout, ended.stdout
    kept = _kept(out)
    assert sorted({r["config"]["seed"] for r in kept}) == [0, 1]
    resume = re.search(r"to run the rest:\n  rnn-compat (.*)\n", ended.stdout).group(1)
    words = shlex.split(resume)
    assert words[-1] == "--resume" and "--plugin" in words
    assert cli.main([*words, "--jobs", "1", "--no-progress", "--no-figures"]) == 0
    after = _kept(out)
    assert after[:len(kept)] == kept and json.loads((out / "report.json").read_text())["complete"]


def test_float32_gets_a_tf32_tolerance_beside_the_standard_one(trained, tmp_path, capsys):
    """The reference's TF32 math (reference-tf32) predicts what a GPU's default float32 math does to this model:
    the float32 rows show both, and TF32's tolerance is far wider (what TF32 costs), held by its own results."""
    status, result, printed = report(tmp_path, capsys, "--model", str(trained["lstm_pt"].path), "--backends",
                                     "reference,reference-tf32", "--steps", "10")
    assert status == 0, printed
    lines = {t["math"]: t for t in result["tolerances"] if (t["dtype"], t["quantity"]) == ("float32", "output")}
    assert set(lines) == {"standard", "TF32 tensor-core math"}
    assert lines["TF32 tensor-core math"]["atol"] > 100 * lines["standard"]["atol"]
    assert lines["TF32 tensor-core math"]["backends"] == ["reference-tf32"]
    assert "# float32, TF32 tensor-core math, T=10" in printed


class _WithoutTF32(ReferenceTF32Peer):
    """reference-tf32 computing exact float32 GEMMs: a GPU run with TF32 switched off, under TF32's name."""

    def forward(self, cfg, case):
        return run_reference(cfg, case)


def test_a_tf32_backend_computing_without_tf32_is_named_so(trained, tmp_path, capsys, monkeypatch):
    """Within the TF32 budget, but its first step follows the FMA truth, not the TF32 one."""
    monkeypatch.setitem(PEERS, "reference-tf32", _WithoutTF32())
    status, result, printed = report(tmp_path, capsys, "--model", str(trained["lstm_pt"].path), "--backends",
                                     "reference-tf32", "--steps", "10")
    assert status == 1, printed
    rows = [r for r in result["rows"] if r["backend"] == "reference-tf32"]
    assert rows and all(not r["passed"] for r in rows)
    assert all(r["verdict"].startswith("not TF32 as any TF32 truth computes it: its first step is 1 of TF32's cost")
               for r in rows), [r["verdict"] for r in rows]


@pytest.mark.filterwarnings("ignore:`torch.jit.*is deprecated:DeprecationWarning")  # (users still hold such files)
@pytest.mark.filterwarnings("ignore:Converting a tensor to a Python boolean")  # (the trace's own notice)
def test_a_torchscript_archive_runs_in_torch_jit_and_passes(trained_torch, tmp_path, capsys):
    """A trained LSTM saved by ``torch.jit.save`` (traced): read by the readers, run whole by ``torch.jit.load``."""
    torch = pytest.importorskip("torch")
    module = copy.deepcopy(trained_torch["lstm_pt"]).float().eval()
    traced = torch.jit.trace(module, torch.zeros(5, 2, 3))
    torch.jit.save(traced, tmp_path / "lstm_script.pt")
    status, result, printed = report(tmp_path, capsys, "--model", str(tmp_path / "lstm_script.pt"), "--backends",
                                     "reference", "--steps", "10")
    assert status == 0, printed
    rows = file_rows(result)
    assert rows and all(r["passed"] and "TorchScript" in r["backend"] for r in rows), [r["backend"] for r in rows]
