"""cuDNN ground truth kept as data (``compat_tests/gpu/capture.py``): every capture committed under
``reports/gpu/*/capture/`` is checked against the reference on every run, on a CPU; and the capture and
its check are themselves tested here with the reference standing in for cuDNN."""

from __future__ import annotations

import json

import numpy as np
import pytest

from compat_tests.config import DTYPE_NAMES, RNNConfig
from compat_tests.gpu import capture as gpu_capture
from reference import spec

COMMITTED = gpu_capture.committed_captures()


CUDNN_MODES = ("relu", "tanh", "lstm", "gru")


@pytest.mark.skipif(not COMMITTED, reason="no GPU capture committed under reports/gpu/*/capture/ yet "
                                          "(scripts/gpu_run.sh records one on a GPU)")
@pytest.mark.parametrize("capture_dir", COMMITTED, ids=lambda p: p.parent.name)
def test_committed_capture_agrees_with_the_reference(capture_dir):
    assert_whole_and_agreeing(capture_dir)


def assert_whole_and_agreeing(capture_dir) -> None:
    """The capture ran a config of every cuDNN mode in each dtype its backend runs (a TF32 capture: float32
    alone), and each agrees with the reference by its peer's budget."""
    document, _ = gpu_capture.load(capture_dir)
    ran = {(e["config"]["mode"], e["config"]["dtype"]) for e in document["entries"] if e["status"] == "ok"}
    dtypes = gpu_capture.BACKENDS[document["peer"]][2]
    missing = {(m, d) for m in CUDNN_MODES for d in dtypes} - ran
    assert not missing, f"the capture ran no config of {sorted(missing)}: {capture_dir}/capture.json says why"
    failures = gpu_capture.check(capture_dir)
    assert not failures, "\n".join(f"{name}: {'; '.join(p)}" for name, p in failures.items())


# One config of each structure and mode, dtypes mixed: every feature the capture records.
SUBSET: list[RNNConfig] = (gpu_capture.capture_configs()[::5]
                           + [c for c in gpu_capture.capture_configs() if c.num_proj][:2])


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    """A capture recorded with the reference standing in for cuDNN."""
    return gpu_capture.capture(tmp_path_factory.mktemp("capture"), backend="reference", configs=SUBSET)


def test_the_spread_covers_every_mode_feature_and_dtype():
    configs = gpu_capture.capture_configs()
    assert {(c.mode, c.dtype) for c in configs} == {(m, d) for m in CUDNN_MODES
                                                    for d in DTYPE_NAMES}
    assert {c.num_layers for c in configs} == {1, 2} and {c.direction for c in configs} == {"unidirectional",
                                                                                            "bidirectional"}
    assert any(c.input_mode == "skip_input" for c in configs) and any(c.num_proj for c in configs)
    assert any(c.lengths for c in configs) and any(not c.time_major for c in configs)
    assert len({c.seed for c in configs}) == len(configs)


def test_a_reference_capture_round_trips_and_agrees(stand_in):
    document, arrays = gpu_capture.load(stand_in)
    assert document["peer"] == "reference" and all(e["status"] == "ok" for e in document["entries"])
    assert len(document["entries"]) == len(SUBSET)
    assert all(a.dtype != object for a in arrays.values())
    assert gpu_capture.check(stand_in) == {}


def _write(capture_dir, document, arrays):
    capture_dir.mkdir(exist_ok=True)
    (capture_dir / "capture.json").write_text(json.dumps(document))
    np.savez(capture_dir / "arrays.npz", **arrays)


def _tampered(stand_in, tmp_path, change):
    """``gpu_capture.check`` of the stand-in capture changed by ``change``, cut to the entries it changed and
    one it left alone (every entry of the whole capture passes: ``test_a_reference_capture_round_trips...``):
    a failure of the untouched one shows as a second key."""
    document, arrays = gpu_capture.load(stand_in)
    entries, originals = json.dumps(document["entries"]), dict(arrays)
    change(document, arrays)
    changed = {e["id"] for e, was in zip(document["entries"], json.loads(entries), strict=True) if e != was}
    changed |= {key.split(".")[0] for key in arrays if arrays[key] is not originals.get(key)}
    untouched = next(e["id"] for e in document["entries"] if e["id"] not in changed)
    kept = changed | {untouched}
    document["entries"] = [e for e in document["entries"] if e["id"] in kept]
    _write(tmp_path, document, {key: a for key, a in arrays.items() if key.split(".")[0] in kept})
    return gpu_capture.check(tmp_path)


def _first(document, **where):
    return next(e for e in document["entries"] if all(e["config"][k] == v for k, v in where.items()))


def test_check_catches_a_layout_that_is_not_the_references(stand_in, tmp_path):
    def swap_regions(document, arrays):
        entry = _first(document, num_layers=2)
        entry["layout"][0][3], entry["layout"][1][3] = entry["layout"][1][3], entry["layout"][0][3]

    failures = _tampered(stand_in, tmp_path, swap_regions)
    assert len(failures) == 1 and "opaque layout differs" in next(iter(failures.values()))[0]


def test_check_catches_a_wrong_weight_space_size(stand_in, tmp_path):
    def grow(document, arrays):
        _first(document, mode="gru")["params_size"] += 8

    failures = _tampered(stand_in, tmp_path, grow)
    assert len(failures) == 1 and "weight space of" in next(iter(failures.values()))[0]


@pytest.mark.parametrize("name", ["output", "output_h", "d_input", "d_input_h", "d_w0", "d_b1"])
def test_check_catches_numbers_off_by_a_thousandth(stand_in, tmp_path, name):
    def nudge(document, arrays):
        entry = _first(document, dtype="float64")
        key = f"{entry['id']}.{name}"
        arrays[key] = arrays[key] * (1 + 1e-3)

    failures = _tampered(stand_in, tmp_path, nudge)
    assert len(failures) == 1 and any("budget" in p or "conditioned" in p for p in next(iter(failures.values())))


def test_check_catches_gradients_in_another_canonical_shape(stand_in, tmp_path):
    def transpose(document, arrays):
        entry = _first(document, mode="lstm")
        arrays[f"{entry['id']}.d_w0"] = arrays[f"{entry['id']}.d_w0"].T.copy()

    failures = _tampered(stand_in, tmp_path, transpose)
    assert len(failures) == 1 and "canonical shapes" in next(iter(failures.values()))[-1]


def test_a_refused_config_is_recorded_and_the_rest_still_run(tmp_path, monkeypatch, capsys):
    record = gpu_capture._record

    def refuse_gru(model, cfg, case, entry):
        if cfg.mode == "gru":
            raise RuntimeError("cudnnRNNForward failed: CUDNN_STATUS_NOT_SUPPORTED (3000)")
        return record(model, cfg, case, entry)

    monkeypatch.setattr(gpu_capture, "_record", refuse_gru)
    monkeypatch.setattr(gpu_capture, "capture_configs", lambda: SUBSET)
    assert gpu_capture.main(["--out", str(tmp_path), "--backend", "reference", "--check"]) == 0
    document, _ = gpu_capture.load(tmp_path)
    refused = [e for e in document["entries"] if e["status"] != "ok"]
    assert refused and all(e["config"]["mode"] == "gru" and "NOT_SUPPORTED" in e["error"] for e in refused)
    assert "refused" in capsys.readouterr().out


def test_a_capture_cut_short_keeps_the_configs_it_recorded(tmp_path, monkeypatch):
    """A GPU step out of time gets SIGINT (a KeyboardInterrupt here); a crash kills the process at once.
    Either way the configs saved before it (here: every config) are on disk, whole, and check against the
    reference."""
    record, calls = gpu_capture._record, []

    def interrupted_at_the_third(model, cfg, case, entry):
        calls.append(cfg)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return record(model, cfg, case, entry)

    monkeypatch.setattr(gpu_capture, "_record", interrupted_at_the_third)
    with pytest.raises(KeyboardInterrupt):
        gpu_capture.capture(tmp_path, backend="reference", configs=SUBSET, save_seconds=0)
    document, arrays = gpu_capture.load(tmp_path)
    assert document["planned"] == len(SUBSET) > 3
    assert [e["config"] for e in document["entries"]] == [json.loads(c.to_json()) for c in SUBSET[:2]]
    assert {name.split(".")[0] for name in arrays} == {"c000", "c001"}
    assert gpu_capture.check(tmp_path) == {}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["arrays.npz", "capture.json"]


def test_a_capture_of_another_format_is_refused(stand_in, tmp_path):
    document, arrays = gpu_capture.load(stand_in)
    document["format"] = gpu_capture.FORMAT + 1
    _write(tmp_path, document, arrays)
    with pytest.raises(ValueError, match="capture format"):
        gpu_capture.load(tmp_path)


def test_capturing_cudnn_where_it_is_unavailable_says_why(tmp_path, monkeypatch, capsys):
    import cudnn_backend

    monkeypatch.setattr(cudnn_backend, "available", lambda: (False, "no CUDA GPU"))  # what versions() asks
    assert gpu_capture.main(["--out", str(tmp_path / "c")]) == 2
    assert "nothing to capture: no CUDA GPU" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_the_layout_is_kept_and_checked_when_the_runs_fail(tmp_path, monkeypatch):
    """Where cuDNN's canonical shapes are not the reference's, packing the case's tensors fails; the layout
    that explains why must still be recorded, and checked."""

    def refuse_to_pack(self, weights, biases):
        raise ValueError("biases must hold 8 tensors, got 6")

    lstm = [c for c in SUBSET if c.mode == "lstm"][:2]
    monkeypatch.setattr(type(lstm[0].model()), "canonical_to_params", refuse_to_pack)
    gpu_capture.capture(tmp_path, backend="reference", configs=lstm)
    monkeypatch.undo()
    document, _ = gpu_capture.load(tmp_path)
    assert all(e["status"] == "error" and "8 tensors" in e["error"] and e["layout"] for e in document["entries"])
    assert gpu_capture.check(tmp_path) == {}

    def move_a_bias(document, arrays):
        document["entries"][0]["layout"][-1][3] += 1

    failures = _tampered(tmp_path, tmp_path / "t", move_a_bias)
    assert len(failures) == 1 and "opaque layout differs" in next(iter(failures.values()))[0]


@pytest.mark.skipif(not COMMITTED, reason="no GPU capture committed under reports/gpu/*/capture/ yet")
@pytest.mark.parametrize("capture_dir", COMMITTED, ids=lambda p: p.parent.name)
def test_cudnn_s_float16_outputs_are_the_reference_s_bit_for_bit(capture_dir):
    """cuDNN's float16 forward (HALF data, FLOAT math) follows ``precision.HALF_ROUNDS`` exactly: every output,
    final state and cell state it recorded is the plain spec cells' to the last bit, for every mode and feature
    the capture spreads over (layers, directions, lengths, skip_input, projection, batch-major)."""
    document, arrays = gpu_capture.load(capture_dir)
    entries = [e for e in document["entries"] if e["status"] == "ok" and e["config"]["dtype"] == "float16"]
    assert entries, f"{capture_dir}: no float16 config ran"
    for entry in entries:
        cfg = RNNConfig.from_dict(entry["config"])
        case = gpu_capture.case_of(entry, arrays)
        net = spec.Network.of(cfg.model())
        ours = spec.forward(net, case.weights, case.biases, case.x, case.h0, case.c0, lengths=case.lengths,
                            time_major=cfg.time_major)
        for name, mine in zip(gpu_capture.OUTPUT_FIELDS, ours):
            recorded = arrays.get(f"{entry['id']}.{name}")
            if recorded is None:
                continue
            assert np.array_equal(recorded, mine), (
                f"{entry['id']} {cfg.short()} {name}: {int((recorded != mine).sum())} of {recorded.size} differ")


def test_a_tf32_capture_records_float32_only_and_is_judged_as_its_peer(tmp_path):
    """The capture of a TF32 backend (``reference-tf32`` standing in for ``cudnn-tf32``): float32 configs only,
    recorded under its peer's name, and checked against the reference by that peer's (TF32) budget, which the
    FMA budget would not pass."""
    from compat_tests.judge.compare import Recorded, compare_peer

    target = gpu_capture.capture(tmp_path / "capture-reference-tf32", backend="reference-tf32", configs=SUBSET)
    document, arrays = gpu_capture.load(target)
    assert document["peer"] == "reference-tf32"
    assert {e["config"]["dtype"] for e in document["entries"]} == {"float32"}
    assert_whole_and_agreeing(target)  # as a committed cudnn-tf32 capture will be checked
    fma_failures = 0
    for entry in document["entries"]:
        outputs = gpu_capture.Outputs(*(arrays.get(f"{entry['id']}.{n}") for n in gpu_capture.OUTPUT_FIELDS))
        fma_failures += not compare_peer(Recorded("reference", outputs=outputs), gpu_capture.entry_config(entry),
                                         gpu_capture.case_of(entry, arrays)).passed
    assert fma_failures, "TF32 results judged as FMA results must fail somewhere: the capture would prove nothing"


def test_a_capture_refuses_an_unknown_backend(tmp_path):
    with pytest.raises(ValueError, match="backend must be one of cudnn, cudnn-tf32"):
        gpu_capture.capture(tmp_path, backend="cudnn-fast")
