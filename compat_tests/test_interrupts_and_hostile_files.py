"""Issue 43: interrupts, hostile files and concurrent runs. Any command stops on SIGTERM as on Ctrl-C (a
report's interrupts, wherever they land: test_interrupts.py); every JSON reader refuses deep nesting with a ValueError naming what it
read; no archive member is inflated beyond what the model needs; a run folder takes one run at a time; and no
output replaces an input, or an existing file without --force."""

from __future__ import annotations

import json
import os
import re
import signal
import time
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

from compat_tests import cli
from compat_tests.config import RNNConfig, make_case
from compat_tests.report.lock import run_lock
from compat_tests.report.sweep import RESULTS, read_records
from reference import checkpoint
from reference.formats import safetensors, tf
from reference.formats.files import MAX_JSON_DEPTH, load_json

ROOT = Path(__file__).resolve().parent.parent
DEEP = "[" * 5000 + "]" * 5000  # a RecursionError in json.loads, unchecked


def test_a_second_report_into_a_folder_being_written_is_refused_naming_the_first(tmp_path, capsys):
    """Two reports into one --out, started 0.3 s apart, both ran and both appended: every unit twice. The run
    holds the folder's lock (here held by this process), and the other is refused, resumed or not, naming it."""
    out = tmp_path / "run"
    argv = ["report", "--grid", str(ROOT / "compat_tests/data/tiny_grid.json"), "--backends", "reference",
            "--out", str(out), "--jobs", "1", "--no-progress"]
    with run_lock(out):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert re.search(f"--out {re.escape(str(out))} is being written by another run \\(pid {os.getpid()} on .*, "
                         f"started .*\\): wait for it to end", err), err
        (out / RESULTS).write_text("")
        assert cli.main([*argv, "--resume"]) == 2
        assert "is being written by another run" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == [".run.lock", RESULTS], "nothing written by the refused runs"


@pytest.mark.parametrize("value", ["inf", "nan", "-1"])
def test_a_time_limit_that_is_not_a_finite_positive_number_is_refused_before_any_work(tmp_path, capsys, value):
    """``--max-seconds inf`` was an OverflowError traceback, with run.json left behind."""
    out = tmp_path / "run"
    assert cli.main(["report", "--grid", "quick", "--backends", "reference", "--out", str(out), "--max-seconds",
                     value, "--no-progress"]) == 2
    assert "--max-seconds must be a finite number of seconds > 0" in capsys.readouterr().err
    assert not out.exists()


def test_a_time_limit_beyond_what_a_wait_takes_runs_the_whole_grid(tmp_path):
    """1e300 seconds is finite and > 0, but no lock can wait that long: the wait is capped."""
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"study": "compat", "config": {"mode": "tanh", "seq_len": 2, "dtype": "float32"}}]))
    assert cli.main(["report", "--grid", str(grid), "--backends", "reference", "--out", str(tmp_path / "run"),
                     "--jobs", "2", "--max-seconds", "1e300", "--no-progress", "--no-figures"]) == 0


# ---- report folders: what exists is continued, replaced with --force, or refused ---------------------------


def _one_unit_grid(tmp_path: Path) -> list[str]:
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"study": "compat", "config": {"mode": "gru", "seq_len": 2, "dtype": "float32"}}]))
    return ["report", "--grid", str(grid), "--backends", "reference", "--jobs", "1", "--no-progress", "--no-figures"]


def test_a_report_into_a_folder_that_holds_a_run_or_a_report_needs_resume_or_force(tmp_path, capsys):
    argv = _one_unit_grid(tmp_path)
    out = tmp_path / "run"
    out.mkdir()
    (out / "index.html").write_text("my page")
    assert cli.main([*argv, "--out", str(out)]) == 2
    assert f"--out {out} holds index.html, which this run would overwrite: pass --force" in capsys.readouterr().err
    assert (out / "index.html").read_text() == "my page"
    assert cli.main([*argv, "--out", str(out), "--force"]) == 0
    first = read_records(out / RESULTS)
    (out / "run.json").unlink()  # a run whose plan is lost still holds a run: its records
    assert cli.main([*argv, "--out", str(out)]) == 2
    assert "exists: pass --resume to continue that run, --force to start it over" in capsys.readouterr().err
    assert cli.main([*argv, "--out", str(out), "--resume", "--force"]) == 2
    assert cli.main([*argv, "--out", str(out), "--force"]) == 0
    again = read_records(out / RESULTS)
    assert len(again) == len(first) == 1, "started over: the unit once, not appended to the old run's"


# ---- JSON nesting: a ValueError naming what was read, from every reader --------------------------------------


def test_the_json_reader_refuses_deep_nesting_and_keys_named_twice():
    assert load_json("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, "x") == eval("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH)
    for text in ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), DEEP, '{"a":' * 3000 + "1" + "}" * 3000):
        with pytest.raises(ValueError, match=f"^the text nests deeper than {MAX_JSON_DEPTH} levels; refused$"):
            load_json(text, "the text")
    with pytest.raises(ValueError, match="the text: a JSON object names 'a' more than once"):
        load_json('{"a": 1, "a": 2}', "the text")


def _model_files(tmp_path: Path):
    cfg = RNNConfig("gru", num_units=3, input_size=2, seq_len=3, dtype="float32")
    case = make_case(cfg)
    return cfg, case, cfg.model()


def test_every_file_reader_refuses_deep_json_naming_the_file(tmp_path):
    """A safetensors header, an .npz's config member, a .keras config.json and an ONNX model's config were a
    RecursionError (from checkpoint.load and convert.read too)."""
    from compat_tests.interop import convert

    cfg, case, model = _model_files(tmp_path)
    st = tmp_path / "deep.safetensors"
    header = ('{"__metadata__": {"note": "x"}, "deep": ' + DEEP + "}").encode()
    st.write_bytes(len(header).to_bytes(8, "little") + header)
    npz = tmp_path / "deep.npz"
    np.savez(npz, **tf.to_tf(model, case.weights, case.biases),
             **{checkpoint.NPZ_CONFIG: np.frombuffer(DEEP.encode(), np.uint8)})
    keras = tmp_path / "deep.keras"
    with zipfile.ZipFile(keras, "w") as z:
        z.writestr("config.json", '{"config": ' + DEEP + "}")
        z.writestr("model.weights.h5", b"not read")
    for path, fmt in ((st, "checkpoint"), (npz, "checkpoint"), (keras, "keras")):
        with pytest.raises(ValueError, match=f"{re.escape(str(path))}.* nests deeper than {MAX_JSON_DEPTH} levels"):
            convert.read(fmt, path)
    for path in (st, npz):
        with pytest.raises(ValueError, match=f"{re.escape(str(path))}.* nests deeper than"):
            checkpoint.load(path)
    with pytest.raises(ValueError, match=f"{re.escape(str(st))}: not a safetensors file \\(its header nests deeper"):
        safetensors.load(st)


def test_an_onnx_model_whose_config_nests_deeply_is_refused(tmp_path):
    pytest.importorskip("onnx")
    from compat_tests.interop import onnx_model

    cfg, case, model = _model_files(tmp_path)
    proto = onnx_model.export_model(model, case.weights, case.biases)
    for prop in proto.metadata_props:
        if prop.key == onnx_model.META_KEY:
            prop.value = DEEP
    path = tmp_path / "deep.onnx"
    path.write_bytes(proto.SerializeToString())
    with pytest.raises(ValueError, match=f"{re.escape(str(path))}: its cudnn_rnn_compat metadata .* nests deeper"):
        onnx_model.import_model(path)


def test_every_command_line_reader_refuses_deep_json_naming_the_argument_or_file(tmp_path, capsys):
    """check --config, report --grid FILE, and render's run.json and results.jsonl: exit 2 and a message
    naming what was read, no traceback."""
    assert cli.main(["check", "--peer", "reference", "--config", DEEP]) == 2
    assert "--config nests deeper than" in capsys.readouterr().err
    grid = tmp_path / "grid.json"
    grid.write_text(DEEP)
    assert cli.main(["report", "--grid", str(grid), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    assert f"grid file {grid} nests deeper than" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    run = tmp_path / "run"
    assert cli.main([*_one_unit_grid(tmp_path), "--out", str(run)]) == 0
    capsys.readouterr()
    results = (run / RESULTS).read_text()
    (run / RESULTS).write_text(DEEP + "\n" + results)
    assert cli.main(["render", str(run)]) == 2
    assert f"{run / RESULTS}: line 1 is not a record" in capsys.readouterr().err
    (run / RESULTS).write_text(results)
    (run / "run.json").write_text(DEEP)
    assert cli.main(["render", str(run)]) == 2
    assert f"{run / 'run.json'} nests deeper than" in capsys.readouterr().err


# ---- archives: nothing inflated beyond what the model needs -------------------------------------------------

BOMB_VALUES = 25_000_000  # 100 MB of float32 zeros, deflated to about 100 KB


def _write_npz(path: Path, arrays: dict[str, np.ndarray], bomb: str | None = None) -> None:
    """An .npz of ``arrays`` (deflated), and a member ``bomb`` that declares and holds BOMB_VALUES float32 zeros,
    written a chunk at a time (the test never holds it)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, array in arrays.items():
            with z.open(f"{name}.npy", "w") as f:
                np.lib.format.write_array(f, np.asarray(array), allow_pickle=False)
        if bomb is not None:
            info = zipfile.ZipInfo(f"{bomb}.npy")
            info.compress_type = zipfile.ZIP_DEFLATED
            info._compresslevel = 1  # (the fastest: zeros shrink anyway)
            with z.open(info, "w", force_zip64=True) as f:
                np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False,
                                                         "shape": (BOMB_VALUES,)})
                chunk = bytes(2**22)
                for _ in range(BOMB_VALUES * 4 // len(chunk)):
                    f.write(chunk)
                f.write(bytes(BOMB_VALUES * 4 % len(chunk)))
    info = zipfile.ZipFile(path).getinfo(f"{bomb}.npy") if bomb else None
    assert info is None or info.file_size > 100 * info.compress_size


def _peak_bytes(call) -> int:
    """The most memory ``call`` held at once (NumPy's arrays and zlib's buffers included)."""
    tracemalloc.start()
    try:
        call()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


@pytest.fixture(scope="module")
def bombs(tmp_path_factory):
    """One deflated .npz per reader of named tensors, each with a member of 100 MB where the model needs a
    few values: ours (with its config), TF-named without a config, a torch state_dict, a Keras tensor file."""
    from reference.formats import keras, torch

    folder = tmp_path_factory.mktemp("bombs")
    cfg = RNNConfig("gru", num_units=3, input_size=2, seq_len=3, dtype="float32")
    case, model = make_case(cfg), cfg.model()
    named = tf.to_tf(model, case.weights, case.biases)
    config = np.frombuffer(json.dumps(checkpoint.model_config(model) | {"scope": None}).encode(), np.uint8)
    state = torch.to_state_dict(model, case.weights, case.biases)
    layers = {f"layer{k}/{n}": a for k, layer in enumerate(keras.to_keras(model, case.weights, case.biases))
              for n, a in zip(("kernel", "recurrent_kernel", "bias"), layer)}
    first, last = list(named)[0], list(named)[-1]  # (a kernel; a bias, which does not tell the config)
    files = {}
    for name, arrays, bomb, fmt in [
            ("ours.npz", {k: v for k, v in named.items() if k != first} | {checkpoint.NPZ_CONFIG: config}, first,
             "checkpoint"),
            ("tf_named.npz", {k: v for k, v in named.items() if k != last}, last, "checkpoint"),
            ("torch.npz", {k: v for k, v in state.items() if k != "bias_hh_l0"}, "bias_hh_l0", "torch"),
            ("keras.npz", {**{k: v for k, v in layers.items() if k != "layer0/bias"},
                           checkpoint.NPZ_CONFIG: np.frombuffer(json.dumps(checkpoint.model_config(model)).encode(),
                                                                np.uint8)}, "layer0/bias", "keras")]:
        _write_npz(folder / name, arrays, bomb)
        files[name] = (folder / name, fmt, bomb)
    return files, cfg, case, model


@pytest.mark.parametrize("name", ["ours.npz", "tf_named.npz", "torch.npz", "keras.npz"])
def test_a_decompression_bomb_is_refused_before_it_is_inflated(bombs, name):
    """A 100 KB .npz whose deflated member declares and holds 100 MB took all of it in memory before its shape
    was refused: now the member's header is held against what the model needs first, and nothing of its size
    is inflated or allocated."""
    from compat_tests.interop import convert

    files, *_ = bombs
    path, fmt, bomb = files[name]
    assert path.stat().st_size < 2**20

    def read():
        with pytest.raises(ValueError, match=f"{re.escape(str(path))}: .*tensor '{re.escape(bomb)}'.* declares "
                                             f"\\[{BOMB_VALUES}\\] .* refused before it is read"):
            convert.read(fmt, path)

    assert _peak_bytes(read) < 16 * 2**20


def test_a_state_file_bomb_is_refused_before_it_is_inflated(bombs, tmp_path, capsys):
    files, cfg, case, model = bombs
    checkpoint.save(tmp_path / "m.npz", model, case.weights, case.biases)
    np.save(tmp_path / "x.npy", case.x)
    _write_npz(tmp_path / "state.npz", {}, "input_h")
    argv = ["infer", str(tmp_path / "m.npz"), str(tmp_path / "x.npy"), "--state", str(tmp_path / "state.npz"),
            "--out", str(tmp_path / "y.npz")]
    assert _peak_bytes(lambda: cli.main(argv)) < 16 * 2**20
    assert f"--state {tmp_path / 'state.npz'}: input_h declares [{BOMB_VALUES}] float32" in capsys.readouterr().err
    assert not (tmp_path / "y.npz").exists()


def test_honest_deflated_archives_still_load(tmp_path):
    """np.savez_compressed's members, inflated a chunk at a time: the same arrays, C and Fortran order."""
    cfg, case, model = _model_files(tmp_path)
    path = tmp_path / "m.npz"
    arrays = {**tf.to_tf(model, case.weights, case.biases),
              checkpoint.NPZ_CONFIG: np.frombuffer(json.dumps(checkpoint.model_config(model) | {"scope": None})
                                                   .encode(), np.uint8)}
    with open(path, "wb") as f:
        np.savez_compressed(f, **arrays)
    loaded = checkpoint.load(path)
    assert all(np.array_equal(a, b) for a, b in zip(loaded.weights, case.weights))
    big = np.asfortranarray(np.arange(3 * 2**19, dtype=np.float64).reshape(3, 2**19))  # several chunks
    with open(tmp_path / "f.npz", "wb") as f:
        np.savez_compressed(f, big=big)
    got = checkpoint.load_arrays(tmp_path / "f.npz")["big"]
    assert got.flags.f_contiguous and np.array_equal(got, big)


def test_a_member_longer_than_its_header_declares_is_refused(tmp_path):
    """NumPy read the declared array and ignored what followed: a member must be its header and its array."""
    path = tmp_path / "x.npz"
    blob = (tmp_path / "x.npy")
    np.save(blob, np.zeros(10, np.float32))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("input_h.npy", blob.read_bytes() + bytes(40))
    with pytest.raises(ValueError, match=f"{re.escape(str(path))}: input_h.npy: 80 bytes follow its header, which "
                                         f"declares \\[10\\] float32 \\(40 bytes\\)"):
        checkpoint.load_arrays(path)


# ---- outputs: never an input, never an existing file without --force ----------------------------------------


@pytest.fixture
def gru_files(tmp_path, monkeypatch):
    cfg, case, model = _model_files(tmp_path)
    checkpoint.save(tmp_path / "m.npz", model, case.weights, case.biases)
    np.save(tmp_path / "x.npy", case.x)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(("argv", "message"), [
    (["infer", "m.npz", "x.npy", "--out", "x.npy"], "--out x.npy is INPUT x.npy: writing it would replace an input"),
    (["infer", "m.npz", "x.npy", "--out", "./sub/../m.npz"], "--out sub/../m.npz is CHECKPOINT m.npz"),
    (["infer", "m.npz", "x.npy", "--out", "link.npy", "--force"], "--out link.npy is INPUT x.npy"),
    (["convert", "--to", "checkpoint", "m.npz", "m.npz"], "OUTPUT m.npz is INPUT m.npz"),
    (["convert", "--to", "checkpoint", "m.npz", "x.npy.npz", "--force"], None),
])
def test_an_output_that_is_an_input_is_refused_before_any_work(gru_files, argv, message, capsys):
    """``infer W a.npy --out a.npy`` silently replaced its input with its output."""
    (gru_files / "sub").mkdir()
    (gru_files / "link.npy").symlink_to(gru_files / "x.npy")
    before = {p.name: p.read_bytes() for p in gru_files.iterdir() if p.is_file()}
    if message is None:  # the control: another name is written
        assert cli.main(argv) == 0
        return
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in gru_files.iterdir() if p.is_file()} == before


@pytest.mark.parametrize("command", [["infer", "m.npz", "x.npy", "--out", "y.npz"],
                                     ["convert", "--to", "torch", "m.npz", "y.npz"],
                                     ["convert", "--to", "tf", "m.npz", "y"]])
def test_an_existing_output_is_replaced_only_with_force(gru_files, command, capsys):
    """Every existing output was overwritten without a word; as for a report's --out, it takes --force."""
    assert cli.main(command) == 0
    written = sorted(p for p in gru_files.iterdir() if p.name.startswith("y"))
    before = {p: p.read_bytes() for p in written}
    os.utime(written[0], (0, 0))
    assert cli.main(command) == 2
    assert "exists: pass --force to replace it" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in written} == before and written[0].stat().st_mtime == 0
    assert cli.main([*command, "--force"]) == 0
    assert written[0].stat().st_mtime > 0


def test_keras_weights_that_would_inflate_beyond_what_weights_do_are_refused(tmp_path):
    """A .keras archive is inflated to a temporary HDF5 file and read there: a deflated weights member that
    claims more than 16x its size is refused before it is inflated, and an HDF5 dataset that declares more
    than its whole file stores (compressed) is refused before it is read."""
    pytest.importorskip("h5py")
    import h5py

    from compat_tests.interop import keras_file

    cfg, case, model = _model_files(tmp_path)
    honest = tmp_path / "m.keras"
    keras_file.write(honest, model, case.weights, case.biases)
    with zipfile.ZipFile(honest) as z:
        members = {name: z.read(name) for name in z.namelist()}
    bomb = tmp_path / "bomb.keras"
    with zipfile.ZipFile(bomb, "w") as z:
        z.writestr("config.json", members["config.json"])
        z.writestr("model.weights.h5", members["model.weights.h5"] + bytes(40 * 2**20), zipfile.ZIP_DEFLATED)
    with pytest.raises(ValueError, match=f"{re.escape(str(bomb))}: model.weights.h5 claims \\d+ bytes from \\d+ "
                                         f"compressed, more than weights inflate to"):
        keras_file.read(bomb)
    squeezed = tmp_path / "squeezed.weights.h5"
    with h5py.File(squeezed, "w") as h5:
        h5.create_dataset("layers/gru/cell/vars/0", data=np.zeros((1024, 1024), np.float32), compression="gzip")
    assert squeezed.stat().st_size < 4 * 2**20
    with pytest.raises(ValueError, match="dataset layers/gru/cell/vars/0 declares \\[1024, 1024\\] float32 "
                                         "\\(4194304 bytes\\), which with the 0 bytes of the datasets before it is "
                                         "more than the whole file's"):
        keras_file.read(squeezed)
    many = tmp_path / "many.weights.h5"  # each dataset within the file's size, all together far beyond it
    with h5py.File(many, "w") as h5:  # one stored megabyte, then 64 fill-value datasets that store nothing
        h5.create_dataset("layers/gru/cell/vars/0", data=np.random.default_rng(0).random((512, 512), np.float32))
        for k in range(1, 65):
            h5.create_dataset(f"layers/gru/cell/vars/{k}", shape=(256, 256), dtype=np.float32, fillvalue=1.0)
    assert 256 * 256 * 4 < many.stat().st_size < 64 * 256 * 256 * 4
    with pytest.raises(ValueError, match="which with the [1-9]\\d* bytes of the datasets before it is more than the "
                                         "whole file's"):
        keras_file.read(many)
    assert keras_file.read(honest)[0].num_units == cfg.num_units  # the control


def test_sigterm_stops_any_command_as_ctrl_c_does(gru_files, monkeypatch, capsys):
    """SIGTERM ended a command without a word (a file half-written, a child process orphaned); now it stops
    the command as Ctrl-C does, exit status 143, and the caller's handler is back afterwards."""
    from compat_tests.interop import convert

    def terminated(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)

    monkeypatch.setattr(convert, "read", terminated)
    before = signal.getsignal(signal.SIGTERM)
    started = time.monotonic()
    assert cli.main(["infer", "m.npz", "x.npy", "--out", "y.npz"]) == 143
    assert time.monotonic() - started < 5 and signal.getsignal(signal.SIGTERM) == before
    assert "rnn-compat infer: interrupted" in capsys.readouterr().err
    assert not (gru_files / "y.npz").exists()
