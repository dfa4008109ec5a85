"""cuDNN's ground truth kept as data: record on a GPU, check against the reference on any CPU.

A GPU is rare; what cuDNN answered should outlive the session that asked. ``capture`` runs a fixed spread
of small configs (every cuDNN mode; one and two layers; both directions; skip_input; LSTM projection;
sequence lengths; batch-major; float16/32/64) through a backend and writes, per config, the weight-space
size, every region ``cudnnGetRNNWeightParams`` reported, the inputs it was given, its inference outputs and
its gradients (``capture.json`` + ``arrays.npz``, no pickles). A config the backend refuses is recorded
with the error. ``check`` replays a capture against the float64 reference: the opaque layout must be the
reference's region for region (the layout decisions in ``reference/layout.py`` stand or fall here) and
outputs and gradients must be within the recorded peer's budget in ``tolerances.py``.

``compat_tests/tests/gpu/test_gpu_capture.py`` checks every capture committed under ``reports/gpu/*/capture/`` on
every test run. ``scripts/gpu_run.sh`` records one first, before the longer GPU suite.

    python -m compat_tests.gpu.capture --out DIR [--backend BACKEND] [--check]   (BACKEND: one of BACKENDS)
    python -m compat_tests.gpu.capture --check-only DIR
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from reference import checkpoint
from reference.formats.files import load_json, replacing

from ..config import DTYPE_NAMES, Case, GradOutputs, Outputs, RNNConfig, make_case
from ..judge.compare import Recorded, compare_peer
from ..run import forward_case

FORMAT = 1
CASE_FIELDS = ("x", "h0", "c0", "lengths", "dy", "dh", "dc")
OUTPUT_FIELDS = Outputs._fields
GRADIENT_FIELDS = ("d_input", "d_input_h", "d_input_c")
CAPTURES = Path(__file__).resolve().parents[2] / "reports" / "gpu"


def capture_configs() -> list[RNNConfig]:
    """The spread a capture records: 22 structures x 3 dtypes, T=6 B=3 H=8, each with its own seed."""
    shapes = [
        dict(num_layers=1, input_size=5),
        dict(num_layers=2, input_size=5, direction="bidirectional", lengths=(6, 2, 5)),
        dict(num_layers=2, input_size=8, input_mode="skip_input", lengths=(6, 1, 4)),
        dict(num_layers=2, input_size=8, input_mode="skip_input", direction="bidirectional"),
        dict(num_layers=1, input_size=5, time_major=False, lengths=(3, 6, 6)),
    ]
    projections = [
        dict(num_layers=2, input_size=5, num_proj=4, direction="bidirectional", lengths=(6, 2, 5)),
        dict(num_layers=1, input_size=5, num_proj=3),
    ]
    configs = []
    for dtype in DTYPE_NAMES:
        for mode in ("relu", "tanh", "lstm", "gru"):
            for shape in shapes + (projections if mode == "lstm" else []):
                configs.append(RNNConfig(mode, num_units=8, seq_len=6, batch=3, dtype=dtype, seed=len(configs),
                                         **shape))
    return configs


def _host(a) -> np.ndarray | None:
    """A NumPy copy of a NumPy or CuPy array (``None`` stays ``None``)."""
    if a is None:
        return None
    return np.asarray(a.get() if hasattr(a, "get") else a)


def _record(model, cfg: RNNConfig, case: Case, entry: dict) -> dict[str, np.ndarray]:
    """Fill ``entry`` with the layout (first: it is kept even when a run below fails) and return the
    outputs and gradients of ``case``."""
    entry["params_size"] = int(model.params_size())
    entry["layout"] = [[r.kind, r.pseudo_layer, r.lin_layer_id, r.offset, list(r.shape)]
                       for r in model.opaque_layout()]
    params = model.canonical_to_params(case.weights, case.biases)
    arrays = {}
    inference = forward_case(model, cfg, case, is_training=False, params=params)
    for name, value in zip(OUTPUT_FIELDS, inference[:3]):
        if value is not None:
            arrays[name] = _host(value)
    fwd = forward_case(model, cfg, case, is_training=True, params=params)
    grads = model.backward(fwd, case.dy, case.dh, case.dc)
    for name, value in zip(GRADIENT_FIELDS, grads[:3]):
        if value is not None:
            arrays[name] = _host(value)
    d_weights, d_biases = model.params_to_canonical(grads.params)
    arrays.update({f"d_w{i}": _host(w) for i, w in enumerate(d_weights)})
    arrays.update({f"d_b{i}": _host(b) for i, b in enumerate(d_biases)})
    return arrays


# What a capture may record, by the peer its results are judged as: whether it is cuDNN's, its model options
# (cuDNN's math type or algorithm; the reference's math type) and the dtypes it runs. The reference ones are
# stand-ins that exercise this file without a GPU.
BACKENDS = {
    "cudnn": (True, {}, DTYPE_NAMES),
    "cudnn-tf32": (True, {"math_type": "default"}, ("float32",)),  # TF32 tensor cores (Ampere and later)
    "cudnn-persist": (True, {"algo": "persist_static"}, ("float16", "float32")),
    "reference": (False, {}, DTYPE_NAMES),
    "reference-tf32": (False, {"math_type": "tf32"}, ("float32",)),
}


def capture(out_dir: Path, backend: str = "cudnn", configs: Sequence[RNNConfig] | None = None,
            save_seconds: float = 5.0) -> Path:
    """Record ``configs`` (default :func:`capture_configs`, those of the dtypes ``backend`` runs) through
    ``backend`` (one of :data:`BACKENDS`: ``cudnn`` with each dtype's FMA math, ``cudnn-tf32`` with its default
    math, TF32 for float32, ``cudnn-persist`` through the persistent algorithm; ``reference`` and
    ``reference-tf32``, stand-ins without a GPU) into ``out_dir``. What is recorded is saved at the end and, on
    the way, after any config that ends ``save_seconds`` or more after the last save, so that a run cut short
    keeps all but its last few seconds."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    on_gpu, options, dtypes = BACKENDS[backend]
    models, peer, environment = None, backend, {"python": platform.python_version(), "numpy": np.__version__}
    if on_gpu:
        import cudnn_backend

        environment.update(cudnn_backend.versions())  # asks available() once, and says why not
        if not environment["available"]:
            raise cudnn_backend.BackendUnavailable(f"nothing to capture: {environment['reason']}")
        models = cudnn_backend.MODELS
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    configs = [c for c in (configs if configs is not None else capture_configs()) if c.dtype in dtypes]
    head = {"format": FORMAT, "peer": peer, "backend": backend, "planned": len(configs), "environment": environment}
    entries, arrays, saved = [], {}, time.monotonic()
    for i, cfg in enumerate(configs):
        key = f"c{i:03d}"
        case = make_case(cfg)
        stored = {f"w{j}": w for j, w in enumerate(case.weights)} | {f"b{j}": b for j, b in enumerate(case.biases)}
        stored |= {name: getattr(case, name) for name in CASE_FIELDS if getattr(case, name) is not None}
        entry = {"id": key, "config": json.loads(cfg.to_json()), "weights": len(case.weights),
                 "biases": len(case.biases)}
        model = None
        try:
            model = cfg.model(models=models, **options)
            stored |= _record(model, cfg, case, entry)
            entry["status"] = "ok"
        except Exception as exc:  # a refusal is a fact about this cuDNN worth keeping
            entry.update(status="error", error=f"{type(exc).__name__}: {exc}")
        finally:
            if model is not None and hasattr(model, "close"):
                model.close()
        entries.append(entry)
        arrays.update({f"{key}.{name}": np.asarray(value) for name, value in stored.items()})
        if len(entries) == len(configs) or time.monotonic() - saved >= save_seconds:
            _write(out_dir, head, entries, arrays, compress=len(entries) == len(configs))
            saved = time.monotonic()
    return out_dir


def _write(out_dir: Path, head: dict, entries: list[dict], arrays: dict[str, np.ndarray], compress: bool) -> None:
    """The capture so far, each file replaced whole (arrays first: every entry of the document has its own)."""
    with replacing(out_dir / "arrays.npz") as tmp, open(tmp, "wb") as f:
        (np.savez_compressed if compress else np.savez)(f, **arrays)
    text = json.dumps(head, indent=1, default=str)
    lines = ",\n".join(" " + json.dumps(entry, separators=(",", ":")) for entry in entries)  # one config a line
    with replacing(out_dir / "capture.json") as tmp:
        tmp.write_text(f'{text[:-2]},\n "entries": [\n{lines}\n ]\n}}\n')


def load_document(capture_dir: Path) -> dict:
    """A capture's ``capture.json``, its format checked (its arrays unread)."""
    capture_dir = Path(capture_dir)
    document = load_json((capture_dir / "capture.json").read_bytes(), str(capture_dir / "capture.json"))
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        found = document.get("format") if isinstance(document, dict) else type(document).__name__
        raise ValueError(f"{capture_dir}: capture format {found!r}, this code reads {FORMAT}")
    return document


def load(capture_dir: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """``(document, arrays)`` of a capture; arrays are read without pickles."""
    capture_dir = Path(capture_dir)
    document = load_document(capture_dir)
    arrays = checkpoint.load_arrays(capture_dir / "arrays.npz")  # each member inflated to its checked header's size
    if not isinstance(arrays, dict):
        raise ValueError(f"{capture_dir / 'arrays.npz'}: a single array, not the capture's .npz archive")
    return document, arrays


def case_of(entry: dict, arrays: dict[str, np.ndarray]) -> Case:
    key = entry["id"]

    def get(name):
        return arrays.get(f"{key}.{name}")

    return Case([get(f"w{j}") for j in range(entry["weights"])], [get(f"b{j}") for j in range(entry["biases"])],
                *(get(name) for name in CASE_FIELDS))


def entry_config(entry: dict) -> RNNConfig:
    """The config a capture entry recorded."""
    return RNNConfig.from_dict(entry["config"])


def check_entry(entry: dict, arrays: dict[str, np.ndarray], peer: str) -> list[str]:
    """Every way one recorded config disagrees with the reference: layout, outputs, gradients (empty:
    it agrees). Of a config the backend refused, the layout is checked if it was recorded."""
    if "layout" not in entry:
        return []
    cfg = entry_config(entry)
    key, ref = entry["id"], cfg.model()
    problems = []
    if entry["params_size"] != ref.params_size():
        problems.append(f"weight space of {entry['params_size']} elements, the reference's has {ref.params_size()}")
    recorded = [(kind, pl, lin, offset, tuple(shape)) for kind, pl, lin, offset, shape in entry["layout"]]
    expected = [tuple(r) for r in ref.opaque_layout()]
    if recorded != expected:
        first = next((i for i, (a, b) in enumerate(zip(recorded, expected)) if a != b), min(len(recorded),
                                                                                           len(expected)))
        problems.append(f"opaque layout differs from reference/layout.py at region {first}: recorded "
                        f"{recorded[first] if first < len(recorded) else 'nothing'}, reference "
                        f"{expected[first] if first < len(expected) else 'nothing'} ({len(recorded)} vs "
                        f"{len(expected)} regions)")
    if entry["status"] != "ok":
        return problems
    case = case_of(entry, arrays)
    outputs = Outputs(*(arrays.get(f"{key}.{name}") for name in OUTPUT_FIELDS))
    verdict = compare_peer(Recorded(peer, outputs=outputs), cfg, case)
    if not verdict.passed:
        problems.append(verdict.explain())
    d_weights = [arrays.get(f"{key}.d_w{j}") for j in range(entry["weights"])]
    d_biases = [arrays.get(f"{key}.d_b{j}") for j in range(entry["biases"])]
    try:
        d_params = ref.canonical_to_params(d_weights, d_biases)
    except (TypeError, ValueError) as exc:
        return problems + [f"recorded parameter gradients do not fit the reference's canonical shapes: {exc}"]
    gradients = GradOutputs(*(arrays.get(f"{key}.{name}") for name in GRADIENT_FIELDS), d_params)
    verdict = compare_peer(Recorded(peer, gradients=gradients), cfg, case, backward=True)
    if not verdict.passed:
        problems.append(verdict.explain())
    return problems


def check(capture_dir: Path) -> dict[str, list[str]]:
    """``{entry id + config: problems}`` for every recorded config that disagrees with the reference."""
    document, arrays = load(capture_dir)
    failures = {}
    for entry in document["entries"]:
        problems = check_entry(entry, arrays, document["peer"])
        if problems:
            failures[f"{entry['id']} {entry_config(entry).short()}"] = problems
    return failures


def committed_captures() -> list[Path]:
    """Every capture committed under ``reports/gpu/*/``: ``capture/`` (cuDNN's FMA math) and ``capture-PEER/``
    (another backend of :data:`BACKENDS`, such as ``capture-cudnn-tf32/``)."""
    return sorted(p.parent for pattern in ("*/capture/capture.json", "*/capture-*/capture.json")
                  for p in CAPTURES.glob(pattern))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compat_tests.gpu.capture", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write a capture here")
    parser.add_argument("--backend", default="cudnn", choices=tuple(BACKENDS))
    parser.add_argument("--check", action="store_true", help="check the new capture against the reference")
    parser.add_argument("--check-only", type=Path, metavar="DIR", help="check an existing capture")
    args = parser.parse_args(argv)
    if (args.out is None) == (args.check_only is None):
        parser.error("give exactly one of --out DIR and --check-only DIR")
    target = args.check_only
    if args.out is not None:
        try:
            target = capture(args.out, args.backend)
        except RuntimeError as exc:  # BackendUnavailable
            print(exc, file=sys.stderr)
            return 2
        document = load_document(target)
        refused = [e for e in document["entries"] if e["status"] != "ok"]
        print(f"captured {len(document['entries'])} of {document['planned']} configs from {args.backend} into "
              f"{target} ({len(refused)} refused)")
        for entry in refused:
            print(f"  refused {entry['id']} {entry_config(entry).short()}: "
                  f"{entry['error']}")
        if not args.check:
            return 0
    failures = check(target)
    for name, problems in failures.items():
        print(f"DISAGREES {name}")
        for problem in problems:
            print("   ", problem.replace("\n", "\n    "))
    print(f"{target}: {len(failures)} config(s) disagree with the reference")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
