"""``rnn-compat report --model``'s refusals: bad input is named, before any work (no run folder is made), with exit
status 2 and no traceback."""

from __future__ import annotations

import numpy as np
import pytest

import reference
from compat_tests import cli
from compat_tests.interop.convert import write


def model_file(tmp_path, name: str, mode: str = "lstm", layers: int = 1, units: int = 4, inputs: int = 3,
               fmt: str = "torch"):
    model = reference.make_model(mode, layers, units, inputs, dtype=np.float32)
    rng = np.random.default_rng(0)
    w_shapes, b_shapes = model.canonical_shapes()
    path = tmp_path / name
    write(fmt, path, model, [rng.uniform(-.5, .5, s).astype(np.float32) for s in w_shapes],
          [rng.uniform(-.5, .5, s).astype(np.float32) for s in b_shapes])
    return path


def refused(capsys, tmp_path, *words: str) -> str:
    out = tmp_path / "run"
    status = cli.main(["report", "--out", str(out), "--no-progress", "--jobs", "1", *words])
    err = capsys.readouterr().err
    assert status == 2, err
    assert "Traceback" not in err
    assert not out.exists(), "refused before any work: no run folder"
    return err


def test_an_input_of_another_width_is_refused_naming_the_option(tmp_path, capsys):
    path = model_file(tmp_path, "m.pt")
    np.save(tmp_path / "x.npy", np.zeros((5, 2, 4), np.float32))
    err = refused(capsys, tmp_path, "--model", str(path), "--input", str(tmp_path / "x.npy"))
    assert "--input" in err and "4 wide" in err and "input size is 3" in err


@pytest.mark.parametrize("lengths, said", [([0, 3], "1..5"), ([3, 6], "1..5"), ([3], "2 integers"),
                                           ([1.0, 2.0], "2 integers")])
def test_lengths_out_of_range_or_of_another_shape_are_refused(tmp_path, capsys, lengths, said):
    path = model_file(tmp_path, "m.pt")
    np.save(tmp_path / "x.npy", np.zeros((5, 2, 3), np.float32))
    np.save(tmp_path / "n.npy", np.array(lengths))
    err = refused(capsys, tmp_path, "--model", str(path), "--input", str(tmp_path / "x.npy"), "--lengths",
                  str(tmp_path / "n.npy"))
    assert "--lengths" in err and said in err


def test_a_file_the_readers_refuse_is_refused_with_their_message(tmp_path, capsys):
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"not a protobuf at all")
    err = refused(capsys, tmp_path, "--model", str(bad))
    assert "broken.onnx" in err and "ONNX" in err


def test_two_models_of_other_architectures_are_refused_naming_both(tmp_path, capsys):
    a, b = model_file(tmp_path, "a.pt"), model_file(tmp_path, "b.pt", mode="gru")
    err = refused(capsys, tmp_path, "--model", str(a), "--model", str(b))
    assert "a.pt" in err and "b.pt" in err and "an LSTM (lstm) and a GRU (gru)" in err
    c = model_file(tmp_path, "c.pt", units=5)
    err = refused(capsys, tmp_path, "--model", str(a), "--model", str(c))
    assert "num_units 4 and 5" in err


@pytest.mark.parametrize("words, said", [
    (["--grid", "quick"], "not both"),
    (["--seed", "3"], "--seed"),
    (["--scheduler", "local:1"], "this machine's processes"),
    (["--lengths", "n.npy"], "describe --input"),
    (["--steps", "10,0"], "--steps"),
    (["--input-scale", "-1"], "--input-scale"),
    (["--node", "lstm_1"], "--node applies to none of the files"),
])
def test_options_that_do_not_fit_a_model_report_are_refused(tmp_path, capsys, words, said):
    path = model_file(tmp_path, "m.pt")
    assert said in refused(capsys, tmp_path, "--model", str(path), *words)


@pytest.mark.parametrize("words", [["--input", "x.npy"], ["--node", "lstm"], ["--batch-major"], ["--from", "onnx"]])
def test_a_grid_report_refuses_the_options_of_a_model_report(tmp_path, capsys, words):
    assert "give --model FILE" in refused(capsys, tmp_path, "--grid", "quick", *words)


def finished_run(tmp_path, capsys):
    out = tmp_path / "run"
    path = model_file(tmp_path, "m.pt")
    assert cli.main(["report", "--model", str(path), "--backends", "reference", "--steps", "3", "--out", str(out),
                     "--no-progress", "--jobs", "1", "--no-figures"]) == 0
    capsys.readouterr()
    return out


def test_render_refuses_a_model_run_whose_records_were_edited_naming_the_line(tmp_path, capsys):
    import json

    out = finished_run(tmp_path, capsys)
    lines = (out / "results.jsonl").read_text().splitlines()
    record = json.loads(lines[1])
    del record["layer"]
    lines[1] = json.dumps(record)
    (out / "results.jsonl").write_text("\n".join(lines) + "\n")
    assert cli.main(["render", str(out)]) == 2
    err = capsys.readouterr().err
    assert "line 2 lacks ['layer']" in err and "Traceback" not in err


def test_render_and_resume_refuse_a_model_run_whose_page_is_a_link(tmp_path, capsys):
    out = finished_run(tmp_path, capsys)
    elsewhere = tmp_path / "elsewhere.html"
    elsewhere.write_text("mine")
    (out / "index.html").unlink()
    (out / "index.html").symlink_to(elsewhere)
    assert cli.main(["render", str(out)]) == 2
    assert "symbolic link" in capsys.readouterr().err and elsewhere.read_text() == "mine"
    assert cli.main(["report", "--model", str(tmp_path / "m.pt"), "--backends", "reference", "--steps", "3", "--out",
                     str(out), "--resume", "--no-progress", "--jobs", "1"]) == 2
    assert elsewhere.read_text() == "mine"


def test_a_name_map_goes_to_the_tensor_file_and_not_to_the_onnx_export_beside_it(tmp_path, capsys):
    """``--names`` maps a tensor file's own names (here a state_dict's, renamed) and is not handed to an ONNX
    file of the same report, which would refuse it."""
    import json

    from safetensors.numpy import load_file, save_file

    path = model_file(tmp_path, "m.safetensors")
    renamed = {f"enc_{k}": v for k, v in load_file(path).items()}
    save_file(renamed, tmp_path / "renamed.safetensors")
    (tmp_path / "names.json").write_text(json.dumps({f"enc_{k}": k for k in load_file(path)}))
    onnx_path = model_file(tmp_path, "m.onnx", fmt="onnx")
    out = tmp_path / "run"
    status = cli.main(["report", "--model", str(tmp_path / "renamed.safetensors"), "--model", str(onnx_path),
                       "--names", str(tmp_path / "names.json"), "--backends", "reference", "--steps", "3", "--out",
                       str(out), "--no-progress", "--jobs", "1", "--no-figures"])
    printed = capsys.readouterr()
    assert status == 0, printed.err
    assert json.loads((out / "report.json").read_text())["weights"][0]["verdict"] == "identical"
