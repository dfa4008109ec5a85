"""The command line: one-line reproduction of a comparison, bad arguments refused with exit status 2 naming
them, the peers listed, grid-file report names, help and --version."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from compat_tests import cli
from compat_tests.config import RNNConfig
from compat_tests.tests.helpers import TINY_GRID as TINY


@pytest.mark.parametrize("backward", [False, True])
def test_check_reruns_one_comparison(capsys, backward):
    cfg = RNNConfig("lstm", num_layers=2, direction="bidirectional", lengths=(4, 2), dtype="float32")
    argv = ["check", "--peer", "torch-cpu", "--config", cfg.to_json()] + (["--backward"] if backward else [])
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    expected = ("(gradients)", "d_params") if backward else ("(forward)", "output_c")
    assert all(word in text for word in expected), text


GRID_FILE = "compat_tests/data/tiny_grid.json"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["report", "--backends", "nonesuch", "--grid", "quick"], "nonesuch"),
        (["report", "--backends", "reference,reference", "--grid", "quick"], "--backends names reference more"),
        (["report", "--grid", "huge"], "--grid must be one of"),
        (["report", "--bogus"], None),
        (["report", "--grid", "quick", "--jobs", "0"], "--jobs must be >= 1, got 0"),
        (["report", "--grid", "quick", "--seed", "-1"], "--seed must be >= 0, got -1"),
        (["report", "--grid", GRID_FILE, "--seed", "3"], "--seed applies to the built-in grids"),
        (["check", "--peer", "reference", "--config", "{not json"], "--config must be an RNNConfig as JSON"),
        (["check", "--peer", "reference", "--config", json.dumps({"mode": "gru", "colour": 1})], "colour"),
        (["check", "--peer", "onnxruntime", "--config", RNNConfig("gru", dtype="float64").to_json()], "float64"),
        (["check", "--peer", "onnxruntime", "--backward", "--config", RNNConfig("gru", dtype="float32").to_json()],
         "no backward pass"),
        (["frobnicate"], None),
    ],
)
def test_bad_arguments_exit_2_naming_the_argument(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(cli.SUITE.parent)
    try:
        status = cli.main(argv if argv[0] != "report" else [*argv, "--out", str(tmp_path / "run")])
    except SystemExit as exc:  # argparse's own errors
        status = exc.code
    assert status == 2
    assert message is None or message in capsys.readouterr().err
    assert not (tmp_path / "run").exists(), "refused before any work"


@pytest.mark.parametrize("argv", [
    ["--grid", "nonesuch"],
    ["--grid", str(TINY), "--backends", "nonesuch"],
    ["--grid", str(TINY), "--max-seconds", "0"],
    ["--grid", str(TINY), "--max-seconds", "-1"],
])
def test_bad_report_arguments_exit_2(tmp_path, argv):
    assert cli.main(["report", "--out", str(tmp_path), "--no-progress", *argv]) == 2


def test_check_reports_a_peer_that_raises_as_a_failure_not_a_bad_argument(monkeypatch, capsys):
    from compat_tests.peers import PEERS
    from compat_tests.tests.helpers import BackwardFails

    monkeypatch.setitem(PEERS, "backward-fails", BackwardFails())
    cfg = RNNConfig("gru", dtype="float32")
    assert cli.main(["check", "--peer", "backward-fails", "--backward", "--config", cfg.to_json()]) == 1
    assert (f"backward-fails failed on {cfg.short()} (gradients): RuntimeError: backward refused"
            in capsys.readouterr().err)


@pytest.mark.parametrize("name, label", [("my_grid", "my_grid"), ("default.json", "default.json"),
                                         ("quick", "grids/quick")])
def test_a_report_of_a_grid_file_is_named_after_it(tmp_path, monkeypatch, name, label):
    """Its default folder is under reports/_scratch, named by the file's stem, whatever its suffix; the report
    calls the grid by the file's name, or where that is a built-in grid's, by its path, so that no report of
    a file reads as one of a built-in grid."""
    grid = tmp_path / "grids" / name
    grid.parent.mkdir()
    grid.write_text(json.dumps([{"study": "compat", "config": {"mode": "tanh", "dtype": "float32", "seq_len": 2}}]))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["report", "--grid", f"grids/{name}", "--backends", "reference", "--jobs", "1",
                     "--no-progress", "--no-figures"]) == 0
    [run] = (tmp_path / "reports" / "_scratch").iterdir()
    assert run.name.startswith(f"{Path(name).stem}-")
    assert json.loads((run / "report.json").read_text())["grid"] == label
    assert label in (run / "report.md").read_text()
    assert list(grid.parent.iterdir()) == [grid]


def test_rnn_compat_test_runs_the_whole_suite_unless_its_arguments_name_some_of_its_tests(tmp_path, monkeypatch):
    report = tmp_path / "junit.xml"
    report.write_text("")  # an option's existing file: not a test path
    assert not cli.names_suite_tests(["--junitxml", str(report), "-k", "forward", "--basetemp", str(tmp_path)])
    assert not cli.names_suite_tests(["--ignore", str(cli.SUITE / "tests" / "gpu" / "test_gpu.py")])  # an option's value
    assert not cli.names_suite_tests([])
    assert cli.names_suite_tests([str(cli.SUITE / "tests" / "peers" / "test_forward.py") + "::test_peer_matches_float64_reference", "-x"])
    monkeypatch.chdir(cli.SUITE.parent)
    here = "compat_tests/tests/harness/test_cli.py"
    assert cli.names_suite_tests([here]) and cli.names_suite_tests(["compat_tests"])
    assert not cli.names_suite_tests([here, str(tmp_path)])  # a path outside: the suite too


def test_peers_lists_every_peer_with_its_availability_and_what_it_lacks(capsys):
    from compat_tests.peers import PEERS

    assert cli.main(["peers", "--json"]) == 0
    listed = {p["name"]: p for p in json.loads(capsys.readouterr().out)}
    assert list(listed) == list(PEERS)
    for name, peer in PEERS.items():
        assert (listed[name]["available"], listed[name]["detail"]) == peer.available()
    assert listed["torch-cpu"]["lacks"]["classic_gru"] == dict(PEERS["torch-cpu"].capabilities.notes)["mode"]
    assert "gradients" in listed["onnxruntime"]["lacks"] and "gradients" not in listed["torch-cpu"]["lacks"]
    assert cli.main(["peers"]) == 0
    text = capsys.readouterr().out
    assert all(f"{name}: {'available' if p.available()[0] else 'UNAVAILABLE'}" in text for name, p in PEERS.items())


@pytest.fixture
def gru_files(tmp_path, monkeypatch):
    """A two-layer GRU's checkpoint ``m.npz`` and an input ``x.npy`` (T=3, B=2: B is L*D) in ``tmp_path``, the
    working folder."""
    import numpy as np

    from compat_tests.config import make_case
    from reference import checkpoint

    cfg = RNNConfig("gru", num_layers=2, num_units=4, input_size=3, seq_len=3, batch=2, dtype="float32")
    case = make_case(cfg)
    checkpoint.save(tmp_path / "m.npz", cfg.model(), case.weights, case.biases)
    np.save(tmp_path / "x.npy", case.x)
    np.save(tmp_path / "x2d.npy", case.x[0])
    np.save(tmp_path / "x_bm.npy", case.x.transpose(1, 0, 2))
    (tmp_path / "folder.npz").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(("argv", "message"), [
    (["infer", "m.npz", "x.npy", "--out", ""], "--out must name a file, got ''"),
    (["infer", "m.npz", "x.npy", "--out", "folder.npz"], "cannot write folder.npz: it is a folder"),
    (["infer", "m.npz", "x.npy", "--lengths", "none.npy"], "--lengths none.npy: No such file or directory"),
    (["infer", "m.npz", "x.npy", "--state", "none.npz"], "--state none.npz: No such file or directory"),
    (["infer", "none.npz", "x.npy"], "CHECKPOINT none.npz: No such file or directory"),
    (["infer", "m.npz", "none.npy"], "INPUT none.npy: No such file or directory"),
    (["infer", "m.npz", "x2d.npy"], "INPUT x2d.npy: input_data must be 3-D"),
    (["infer", "m.npz", "x.npy", "--from", "torch"], r"m.npz: .*\(the file looks like format checkpoint: --from "
                                                     r"checkpoint\)"),
    (["convert", "--to", "tf", "m.npz", "w.onnx"], "give its PREFIX .*, not a name of another format's file, 'w.onnx'"),
    (["convert", "--to", "tf", "m.npz", "folder.npz"], "give its PREFIX .*, not the folder 'folder.npz'"),
    (["convert", "--to", "tf", "m.npz", "tf/"], r"give its PREFIX .*, not the folder 'tf/'"),
    (["convert", "--to", "checkpoint", "--out-scope", "/", "m.npz", "w.npz"], "scope '/' is not a name TensorFlow"),
    (["convert", "--to", "tf", "--out-scope", "a b", "m.npz", "w"], "scope 'a b' is not a name TensorFlow takes"),
    (["check", "--peer", "reference", "--config", '{"mode": "gru", "mode": "lstm"}'],
     "a JSON object names 'mode' more than once"),
    (["report", "--grid", "quick", "--resume"], "--resume needs --out"),
    (["report", "--grid", "quick", "--resume", "--out", "run"], "--resume: there is no run in run to resume"),
    (["check", "--peer", "torch-cpu", "--config", '{"mode": "gru", "num_units": 1000000000000}'],
     "does not fit in this machine's memory"),
])
def test_infer_convert_and_report_refuse_bad_arguments_naming_them(gru_files, argv, message, capsys):
    """Found by fuzzing the command line: each of these ran, misread its input, or named a hidden temporary
    file or an internal argument instead."""
    before = sorted(p.name for p in gru_files.iterdir())
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert sorted(p.name for p in gru_files.iterdir()) == before, "refused before anything was written"


def test_a_state_file_in_the_other_layout_is_refused(gru_files, capsys):
    """At B = L*D a time-major run's final states ``[L*D, B, H]`` have the shape a batch-major run takes
    (``[B, L*D, H]``): ``infer --out`` says the layout, and ``--state`` holds a run to it."""
    import numpy as np

    assert cli.main(["infer", "m.npz", "x.npy", "--out", "y.npz"]) == 0
    with np.load("y.npz", allow_pickle=False) as y:
        assert str(y["layout"]) == "time_major" and y["output_h"].shape == (2, 2, 4)
    assert cli.main(["infer", "m.npz", "x_bm.npy", "--batch-major", "--state", "y.npz", "--out", "z.npz"]) == 2
    assert ("--state y.npz holds states in the layout 'time_major', this run's is 'batch_major': run without "
            "--batch-major") in capsys.readouterr().err
    assert cli.main(["infer", "m.npz", "x.npy", "--state", "y.npz", "--out", "z.npz"]) == 0  # the control
    assert cli.main(["infer", "m.npz", "x_bm.npy", "--batch-major", "--out", "y_bm.npz"]) == 0
    assert cli.main(["infer", "m.npz", "x_bm.npy", "--batch-major", "--state", "y_bm.npz", "--out", "z_bm.npz"]) == 0
    with np.load("z.npz", allow_pickle=False) as z, np.load("z_bm.npz", allow_pickle=False) as z_bm:
        np.testing.assert_array_equal(z_bm["output"], z["output"].transpose(1, 0, 2))
        assert str(z_bm["layout"]) == "batch_major"


def test_the_command_line_explains_itself(capsys):
    """The top-level help says what the tool is and lists every command with what it does; every command's help
    opens with a description and every option says what it is for; --version answers."""
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0 and re.fullmatch(r"rnn-compat (\d+\.\d+\.\d+|\(uninstalled working tree\))\n",
                                                 capsys.readouterr().out)
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    top = capsys.readouterr().out
    assert "cuDNN-style recurrent networks" in top and "exit status:" in top
    commands = cli.build_parser().commands
    assert set(commands) == {"report", "render", "diff", "check", "convert", "infer", "peers", "test"}
    for command, parser in commands.items():
        assert re.search(rf"^    {command}\s+\w", top, re.M), command
        assert parser.description and len(parser.description) > 20, command
        unexplained = [a.option_strings or a.dest for a in parser._actions if not a.help]
        assert not unexplained, (command, unexplained)
    with pytest.raises(SystemExit):
        cli.main(["check", "--help"])
    assert "reference, torch-cpu, onnxruntime" in " ".join(capsys.readouterr().out.split())  # --peer names the peers


def test_a_subcommands_error_names_the_subcommand(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["check", "--peer", "reference", "--config", "{}", "--bogus"])
    assert done.value.code == 2 and "rnn-compat check: error: unrecognized arguments: --bogus" in capsys.readouterr().err


def test_check_runs_a_config_without_a_dtype_in_float32_and_prefixes_its_refusals(capsys):
    assert cli.main(["check", "--peer", "reference", "--config", '{"mode": "gru"}']) == 0
    assert "gru L1 H4 I3 uni T4 B2 float32" in capsys.readouterr().out
    assert cli.main(["check", "--peer", "reference", "--config", '{"mode": "gru", "dtype": "float64"}']) == 2
    assert capsys.readouterr().err.startswith("rnn-compat check: --peer reference cannot run --config ")


def test_convert_to_keras_names_every_file_kind_it_writes(gru_files, capsys):
    assert cli.main(["convert", "--to", "keras", "m.npz", "out.bin"]) == 2
    err = capsys.readouterr().err
    for kind in (".keras", ".weights.h5", ".h5", ".safetensors", ".npz"):
        assert kind in err, err
