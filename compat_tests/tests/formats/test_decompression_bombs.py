"""Decompression bombs: no archive member (.npz of every reader, a --state file, a .keras weights member or an
HDF5 dataset) is inflated or allocated beyond what the model needs; honest deflated archives still load, and
a member longer than its header declares is refused."""

from __future__ import annotations

import json
import re
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

from compat_tests import cli
from compat_tests.config import RNNConfig, make_case
from compat_tests.tests.helpers import _model_files
from reference import checkpoint
from reference.formats import tf

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
