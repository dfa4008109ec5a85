"""TensorFlow's own checkpoint files (the V2 tensor bundle), read without TensorFlow.

The fixtures in ``compat_tests/data/tf_bundle/`` were written by TensorFlow's ``SaveV2`` op
(``scripts/make_tf_bundle_fixtures.py``; ``provenance.json`` names the version) from the arrays kept in
``expected.npz``: the canonical tensors of four models under TF's names, in float32, float64 and float16,
one under a variable scope beside a ``global_step``, an optimizer slot and a string, as a trained TF 1.x
model's checkpoint holds them, and one in two data shards (merged by ``MergeV2Checkpoints``, as a sharded
``tf.train.Saver`` writes them); and ``many_names``, 1200 generated tensors whose index TensorFlow splits into
several blocks. The writer must reproduce TensorFlow's files byte for byte.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compat_tests import cli
from compat_tests.config import Outputs, RNNConfig, make_case
from compat_tests.judge.compare import assert_agree_within_policy
from compat_tests.run import run_reference
from compat_tests.strategies import examples
from reference import checkpoint
from reference.formats import tf as tf_format
from reference.formats import tf_bundle

DATA = Path(__file__).resolve().parents[2] / "data" / "tf_bundle"


PROVENANCE = json.loads((DATA / "provenance.json").read_text())


FIXTURES = sorted(PROVENANCE["fixtures"])


def many_names() -> dict[str, np.ndarray]:
    """The tensors of the ``many_names`` fixture (the script's ``MANY_NAMES``)."""
    return {f"{2 * i:04d}/{'x' * 250}": np.float16(i) for i in range(1200)}


def expected(name: str) -> dict[str, np.ndarray]:
    with np.load(DATA / "expected.npz", allow_pickle=False) as data:
        return {k.split(":", 1)[1]: data[k] for k in data.files if k.startswith(f"{name}:")}


def fixture_config(name: str) -> tuple[RNNConfig, str | None]:
    entry = PROVENANCE["fixtures"][name]
    return RNNConfig.from_dict(entry["config"]), entry["scope"]


@pytest.mark.parametrize("name", FIXTURES)
def test_tensorflows_own_bundles_read_bit_for_bit(name):
    got, want = tf_bundle.read(DATA / name), expected(name)
    assert sorted(got) == sorted(want)  # every numeric tensor; the string is left out
    for key, array in want.items():
        assert got[key].dtype == array.dtype and got[key].shape == array.shape, key
        assert got[key].tobytes() == array.tobytes(), key
    assert tf_bundle.read(f"{DATA / name}.index").keys() == got.keys()  # the .index path names it too
    bundle = tf_bundle.open_bundle(DATA / name)
    assert bundle.shards == PROVENANCE["fixtures"][name]["shards"] and bundle.order == "<"
    assert {e.shard for e in bundle.entries.values()} == set(range(bundle.shards))


@pytest.mark.parametrize("name", ["gru_double", "tanh_half", "many_names"])
def test_the_writer_writes_what_tensorflow_wrote_byte_for_byte(name, tmp_path):
    tensors = many_names() if name == "many_names" else expected(name)
    tf_bundle.write(tmp_path / name, tensors)
    for suffix in (".index", ".data-00000-of-00001"):
        assert (tmp_path / f"{name}{suffix}").read_bytes() == (DATA / f"{name}{suffix}").read_bytes(), suffix


def test_many_names_span_several_index_blocks_and_read_back():
    assert len(tf_bundle.data_block_handles((DATA / "many_names.index").read_bytes())) > 1
    got = tf_bundle.read(DATA / "many_names")
    assert {k: v.item() for k, v in got.items()} == {k: v.item() for k, v in many_names().items()}


def test_every_numeric_dtype_round_trips_and_others_are_refused(tmp_path):
    rng = np.random.default_rng(5)
    tensors = {f"t/{np.dtype(d).name}": (rng.standard_normal((2, 3)) * 50).astype(d) for d in tf_bundle.DTYPES.values()}
    tensors |= {"scalar": np.float64(2.5), "empty": np.zeros((0, 4), np.float32),
                "big_endian": np.arange(6, dtype=">i4").reshape(3, 2)}
    tf_bundle.write(tmp_path / "all", tensors)
    got = tf_bundle.read(tmp_path / "all")
    assert sorted(got) == sorted(tensors)
    for name, array in tensors.items():
        assert got[name].shape == np.shape(array) and np.array_equal(got[name], array), name
        assert got[name].dtype == np.asarray(array).dtype.newbyteorder("="), name
    with pytest.raises(ValueError, match=r"tensor 'note' is \|S4"):
        tf_bundle.write(tmp_path / "bad", {"note": np.array(b"text")})


def test_a_big_endian_bundle_reads_as_its_header_says(tmp_path):
    """A bundle from a big-endian host (``BundleHeaderProto.endianness = BIG``) holds big-endian data."""
    tensors = {"a": np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5, "b": np.array([1, -2], np.int64)}
    tf_bundle.write(tmp_path / "big", tensors, byte_order=">")
    tf_bundle.write(tmp_path / "little", tensors)
    big, little = tf_bundle.open_bundle(tmp_path / "big"), tf_bundle.open_bundle(tmp_path / "little")
    assert (big.order, little.order) == (">", "<")
    blob = Path(f"{tmp_path / 'big'}.data-00000-of-00001").read_bytes()
    assert blob == b"".join(tensors[n].astype(tensors[n].dtype.newbyteorder(">")).tobytes() for n in sorted(tensors))
    for bundle in (big, little):
        got = bundle.read()
        assert all(np.array_equal(got[n], tensors[n]) and got[n].dtype == tensors[n].dtype for n in tensors)
    with pytest.raises(ValueError, match="Invalid byte_order: '='"):
        tf_bundle.write(tmp_path / "native", tensors, byte_order="=")


def test_an_entry_whose_shape_does_not_match_its_bytes_is_refused(tmp_path):
    tf_bundle.write(tmp_path / "b", {"a": np.zeros((2, 3), np.float32)})
    bundle = tf_bundle.open_bundle(tmp_path / "b")
    bundle.entries["a"] = dataclasses.replace(bundle.entries["a"], shape=(2, 2))  # as a corrupt index would say
    with pytest.raises(ValueError, match=r"tensor 'a': 24 bytes at offset 0 do not hold \[2, 2\] float32"):
        bundle.read()


def test_what_numpy_cannot_hold_or_the_file_lacks_is_refused_by_name():
    with pytest.raises(ValueError, match="'main/note' is string, which NumPy cannot hold"):
        tf_bundle.read(DATA / "lstm_bi_scoped", ["main/note"])
    with pytest.raises(ValueError, match="no tensor 'rnn/nope'"):
        tf_bundle.read(DATA / "lstm_bi_scoped", ["rnn/nope"])
    with pytest.raises(ValueError, match="no such TensorFlow checkpoint index"):
        tf_bundle.read(DATA / "absent")


def _copy(name: str, tmp_path: Path) -> Path:
    for f in DATA.glob(f"{name}.*"):
        shutil.copy(f, tmp_path / f.name)
    return tmp_path / name


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_corrupt_files_are_caught_by_their_checksums(tmp_path):
    prefix = _copy("gru_double", tmp_path)
    entries = tf_bundle.open_bundle(prefix).entries
    name, entry = next(iter(entries.items()))
    _flip(Path(f"{prefix}.data-00000-of-00001"), entry.offset + 3)
    with pytest.raises(ValueError, match=f"tensor '{name}': checksum mismatch"):
        tf_bundle.read(prefix, [name])
    changed = tf_bundle.read(prefix, [name], verify=False)[name]  # unverified, the flipped bit comes through
    assert changed.tobytes() != expected("gru_double")[name].tobytes()

    index = Path(f"{prefix}.index")
    _flip(index, 10)  # inside the first data block
    with pytest.raises(ValueError, match="checksum mismatch \\(corrupt index file\\)"):
        tf_bundle.open_bundle(prefix)
    index.write_bytes(index.read_bytes()[:-1])
    with pytest.raises(ValueError, match="no table magic number"):
        tf_bundle.open_bundle(prefix)

    prefix = _copy("tanh_half", tmp_path)
    data = Path(f"{prefix}.data-00000-of-00001")
    last = max(tf_bundle.open_bundle(prefix).entries.values(), key=lambda e: e.offset)
    data.write_bytes(data.read_bytes()[:-2])
    with pytest.raises(ValueError, match=f"tensor '{last.name}': {last.size} bytes at offset {last.offset} do not "
                                         "hold .* \\(truncated or corrupt data file\\)"):
        tf_bundle.read(prefix)
    data.unlink()
    with pytest.raises(ValueError, match="tanh_half.data-00000-of-00001, which is missing"):
        tf_bundle.read(prefix)


@pytest.mark.parametrize("name", ["gru_double", "lstm_bi_scoped"])
@given(data=st.data())
def test_the_parser_behind_the_checksums_refuses_what_it_cannot_read(name, data, tmp_path_factory, monkeypatch):
    """With every checksum taken as matching (as a forged or unlucky file would have them), damaged index
    and data files still read as tensors or fail with a ValueError: no struct.error from a fixed-width field
    or an entry that runs past its block."""
    _damaged_reads_or_is_refused(name, data, tmp_path_factory, monkeypatch)


@settings(max_examples=examples(40))  # (each example reads 1200 tensors: a tenth of a second)
@given(data=st.data())
def test_the_parser_refuses_what_it_cannot_read_in_an_index_of_several_blocks(data, tmp_path_factory, monkeypatch):
    """The same for ``many_names``, whose index TensorFlow split into blocks: damage in the block index, in a
    block's restart points, in an entry that spans the end of its block."""
    _damaged_reads_or_is_refused("many_names", data, tmp_path_factory, monkeypatch)


def _damaged_reads_or_is_refused(name, data, tmp_path_factory, monkeypatch) -> None:
    monkeypatch.setattr(tf_bundle, "crc32c", lambda blob: 0)
    monkeypatch.setattr(tf_bundle, "_unmask", lambda stored: 0)
    prefix = _copy(name, tmp_path_factory.mktemp("bundle"))
    files = sorted(prefix.parent.glob(f"{prefix.name}.*"))
    victim = data.draw(st.sampled_from(files), label="file")
    blob = bytearray(victim.read_bytes())
    edits = st.tuples(st.integers(0, len(blob) - 1), st.sampled_from([0, 1, 0x7F, 0x80, 0xFF]))
    for at, value in data.draw(st.lists(edits, min_size=1, max_size=8), label="overwrite (offset, byte)"):
        blob[at] = value
    victim.write_bytes(bytes(blob))
    try:
        tf_bundle.read(prefix)
    except ValueError:
        pass


def test_an_entry_claiming_more_bytes_than_its_data_file_holds_is_refused_before_reading(tmp_path):
    prefix = tmp_path / "huge"
    tf_bundle.write(prefix, {"w": np.zeros(3, np.float32)})
    header = tf_bundle.open_bundle(prefix).entries
    items = [(b"", tf_bundle._field(1, 1) + tf_bundle._field(3, tf_bundle._field(1, tf_bundle.BUNDLE_VERSION))),
             (b"w", tf_bundle._encode_entry(1, (10**12,), 0, 4 * 10**12, 0))]  # DT_FLOAT
    Path(f"{prefix}.index").write_bytes(tf_bundle._table_bytes(items))
    assert header["w"].size == 12
    with pytest.raises(ValueError, match="tensor 'w': 4000000000000 bytes at offset 0 do not hold \\[1000000000000\\] "
                                         "float32"):
        tf_bundle.read(prefix)


@pytest.mark.parametrize(("entry", "match"), [
    (lambda f: f(1, 1) + f(2, 5), "index entry 'w': field 2 is not a message"),  # the shape as a number
    (lambda f: f(1, 1) + f(2, f(2, 7)), "tensor shape: a dimension is not a message"),
    (lambda f: f(1, 1) + f(4, b"\x01"), "index entry 'w': field 4 is not a number"),  # the offset as bytes
])
def test_an_index_entry_whose_fields_have_the_wrong_wire_types_is_refused(entry, match, tmp_path):
    """A damaged message can carry any field number with any wire type (found by the checksum-blind test)."""
    prefix = tmp_path / "typed"
    tf_bundle.write(prefix, {"w": np.zeros(3, np.float32)})
    header = tf_bundle._field(1, 1) + tf_bundle._field(3, tf_bundle._field(1, tf_bundle.BUNDLE_VERSION))
    Path(f"{prefix}.index").write_bytes(tf_bundle._table_bytes([(b"", header), (b"w", entry(tf_bundle._field))]))
    with pytest.raises(ValueError, match=match):
        tf_bundle.read(prefix)


def test_crc32c_is_castagnoli():
    assert tf_bundle.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert tf_bundle.crc32c(b"") == 0


def test_convert_writes_a_tensorflow_checkpoint_that_reads_back(tmp_path):
    cfg, _ = fixture_config("lstm_bi_scoped")
    case = make_case(cfg)
    checkpoint.save(tmp_path / "m.npz", cfg.model(), case.weights, case.biases)
    assert cli.main(["convert", "--from", "checkpoint", "--to", "tf", str(tmp_path / "m.npz"), str(tmp_path / "m.ckpt")]) == 0
    assert tf_bundle.read(tmp_path / "m.ckpt").keys() == tf_format.expected_shapes(cfg.model()).keys()
    options = ["--mode", "lstm", "--num-layers", "2", "--num-units", "4", "--input-size", "3", "--direction",
               "bidirectional"]
    assert cli.main(["convert", "--from", "tf", "--to", "checkpoint", str(tmp_path / "m.ckpt.index"),
                     str(tmp_path / "back.npz"), *options]) == 0
    before, after = checkpoint.load(tmp_path / "m.npz"), checkpoint.load(tmp_path / "back.npz")
    for a, b in zip(before.weights + before.biases, after.weights + after.biases):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("name", FIXTURES)
def test_a_tensorflow_checkpoint_converts_and_runs(name, tmp_path):
    """``rnn-compat convert --from tf`` with no model option but ``--mode`` for relu/tanh (names and shapes
    tell the rest, the variable scope included), then the model runs on the reference as the weights TF was
    given; ``rnn-compat infer`` (with the same ``--mode``) runs the TensorFlow checkpoint directly."""
    cfg, scope = fixture_config(name)
    options = ["--mode", cfg.mode] if cfg.mode in ("relu", "tanh") else []
    out = tmp_path / "converted.npz"
    assert cli.main(["convert", "--from", "tf", "--to", "checkpoint", str(DATA / name), str(out), *options]) == 0
    ck = checkpoint.load(out)
    assert repr(ck.model) == repr(cfg.model())
    rnn_tensors = {k: v for k, v in expected(name).items() if k in tf_format.expected_shapes(ck.model, scope)}
    want_w, want_b = tf_format.from_tf(ck.model, rnn_tensors, scope)
    for got, want in zip(ck.weights + ck.biases, want_w + want_b):
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    case = make_case(cfg)
    result = ck.model.forward(case.x, case.h0, ck.params(), input_c=case.c0, is_training=False)
    assert_agree_within_policy(cfg, case, Outputs(result.output, result.output_h, result.output_c),
                               run_reference(cfg, case))
    np.save(tmp_path / "x.npy", case.x)
    assert cli.main(["infer", str(DATA / name), str(tmp_path / "x.npy"), "--out", str(tmp_path / "y.npy"), *options]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"),
                                  ck.model.forward(case.x, None, ck.params(), is_training=False).output)


def test_a_tensorflow_checkpoint_with_the_wrong_options_is_refused(tmp_path, capsys):
    source = str(DATA / "lstm_bi_scoped")
    base = ["convert", "--from", "tf", "--to", "checkpoint", source, str(tmp_path / "c.npz")]
    refusals = [
        (["--direction", "unidirectional"], "tell its config, which disagrees with the options given: direction is "
                                            "'bidirectional', not 'unidirectional'"),
        (["--scope", "other"], r"no RNN cell under scope 'other'; scopes found: \['main'\]"),
        (["--num-units", "5"], "disagrees with the options given: num_units is 4, not 5"),
        (["--mode", "gru"], "holds cudnn_compatible_lstm_cell cells, which cannot be a 'gru' RNN"),
    ]
    for options, match in refusals:
        assert cli.main(base + options) == 2, options
        assert re.search(match, capsys.readouterr().err), match
    assert cli.main(base[:-2] + [str(DATA / "tanh_half"), str(tmp_path / "c.npz")]) == 2
    assert "relu and tanh RNNs have the same weights (basic_rnn_cell): say which" in capsys.readouterr().err
    assert cli.main(["convert", "--from", "torch", "--to", "checkpoint", source, "x.npz", "--scope", "main"]) == 2
    assert "--scope applies to TF-named files" in capsys.readouterr().err
    assert cli.main(["convert", "--from", "torch", "--to", "checkpoint", source, "x.npz"]) == 2
    assert "a TensorFlow checkpoint (tensor bundle)" in capsys.readouterr().err
    assert not (tmp_path / "c.npz").exists()
