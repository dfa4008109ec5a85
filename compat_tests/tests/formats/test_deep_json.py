"""Deeply nested JSON, wherever it is read: the JSON reader, every file reader (safetensors header, .npz config,
.keras config.json, ONNX metadata) and every command-line reader refuse it with a ValueError or exit
status 2 naming what they read, never a RecursionError; keys named twice are refused too."""

from __future__ import annotations

import re
import zipfile

import numpy as np
import pytest

from compat_tests import cli
from compat_tests.report.sweep import RESULTS
from compat_tests.tests.helpers import _model_files, _one_unit_grid
from reference import checkpoint
from reference.formats import safetensors, tf
from reference.formats.files import MAX_JSON_DEPTH, load_json

DEEP = "[" * 5000 + "]" * 5000  # a RecursionError in json.loads, unchecked


def test_the_json_reader_refuses_deep_nesting_and_keys_named_twice():
    assert load_json("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, "x") == eval("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH)
    for text in ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), DEEP, '{"a":' * 3000 + "1" + "}" * 3000):
        with pytest.raises(ValueError, match=f"^the text nests deeper than {MAX_JSON_DEPTH} levels; refused$"):
            load_json(text, "the text")
    with pytest.raises(ValueError, match="the text: a JSON object names 'a' more than once"):
        load_json('{"a": 1, "a": 2}', "the text")


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
