"""Probes of what the first GPU run (reports/gpu/nvidia-h200-cudnn9.19.0) left open, each one question put to
cuDNN directly, its answer printed as a table (no verdict: the numbers are the evidence a decision cites).

    PYTHONPATH=. python3 scripts/gpu_probe.py [--backend cudnn|reference]

1. tanh accuracy: a one-unit tanh RNN with W=1 and everything else 0 outputs cuDNN's tanh(x) itself, for
   4096 inputs in [-4, 4]; its error in float32 ulps against float64, per algorithm and forward mode
   (inference / training). Beside it the same config through torch-cuda (train and eval).
2. relu and tanh, FMA math, per algorithm and mode, on the configs that failed (the max error in eps of
   the output against the float64 truth): is an error an activation's or an accumulation's?
3. skip_input: does cuDNN add layer 0's input bias b_W (present in its weight space) to the input?
4. float16: which rounding points make a float32 model match cuDNN's HALF/FLOAT output, for a one-layer
   tanh RNN and GRU: the input projection ``W x + b_W``, the recurrent product ``R h + b_R``, the state h
   fed back (each rounded to float16 or not); mean ulp distance and the share of exact outputs.
5. float16, one step from a given state: where a step rounds (the GEMMs' results, the biases, the sum).
6. float16 LSTM: more rounding points (one buffer for both GEMMs, folded biases, gates, cell), the best 12.
7. float16 gradients where torch-cuda's failed: cuDNN's standard and persistent algorithms beside it.
8. bias modes: cuDNN's weight space under each against ``reference/layout.py``'s guess, and the forward pass.
9. float16: a whole sequence in one call against one step a call from the float16 states (what is carried).

``--backend reference`` runs every probe with the reference in place of cuDNN (a CPU check of the script:
probe 4's unrounded model then matches within float32 rounding).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compat_tests.config import RNNConfig, make_case  # noqa: E402
from compat_tests.judge.metrics import ulp_distance  # noqa: E402
from compat_tests.run import ground_truth  # noqa: E402


def _backend(name: str):
    if name == "reference":
        import reference  # noqa: F401 (the reference importable, as the GPU backend must be below)

        return None, np, np.asarray
    import cupy
    import cudnn_backend

    return cudnn_backend.MODELS, cupy, cupy.asnumpy


def _model(cfg: RNNConfig, models, **options):
    return cfg.model(models=models, **options) if models is not None else cfg.model()


def probe_tanh(models, to_host, options_list) -> None:
    print("## 1. tanh(x) through a one-unit RNN (W=1, R=0, biases 0), x in [-4, 4], float32 ulps")
    cfg = RNNConfig("tanh", num_units=1, input_size=1, seq_len=1, batch=4096, dtype="float32",
                    initial_state=False)
    x = np.linspace(-4, 4, 4096, dtype=np.float32).reshape(1, 4096, 1)
    one, zero = np.ones((1, 1), np.float32), np.zeros((1, 1), np.float32)
    truth = np.tanh(x.astype(np.float64))
    print("| options | forward | max ulp | mean ulp | max abs err / eps |")
    print("|---|---|---|---|---|")
    for options in options_list:
        for training in (False, True):
            try:
                m = _model(cfg, models, **options)
                params = m.canonical_to_params([one, zero], [zero[0], zero[0]])
                y = to_host(m.forward(x, None, params, is_training=training).output)
            except Exception as exc:  # noqa: BLE001 - a refusal is an answer
                print(f"| {options} | {'training' if training else 'inference'} | refused: {exc} | | |")
                continue
            ulps = ulp_distance(y, truth)
            worst = np.max(np.abs(y - truth)) / np.finfo(np.float32).eps
            print(f"| {options} | {'training' if training else 'inference'} | {ulps.max():.0f} | {ulps.mean():.2f} "
                  f"| {worst:.1f} |")
    try:
        import torch

        torch.backends.cudnn.allow_tf32 = False
        for train in (True, False):
            rnn = torch.nn.RNN(1, 1, nonlinearity="tanh").cuda()
            with torch.no_grad():
                rnn.weight_ih_l0.fill_(1), rnn.weight_hh_l0.fill_(0), rnn.bias_ih_l0.fill_(0), rnn.bias_hh_l0.fill_(0)
            rnn.train(train)
            with torch.set_grad_enabled(train):
                y = rnn(torch.from_numpy(x).cuda())[0].detach().cpu().numpy()
            ulps = ulp_distance(y, truth)
            print(f"| torch-cuda {'train' if train else 'eval, no_grad'} | | {ulps.max():.0f} | {ulps.mean():.2f} | "
                  f"{np.max(np.abs(y - truth)) / np.finfo(np.float32).eps:.1f} |")
    except Exception as exc:  # noqa: BLE001
        print(f"torch-cuda: {exc}")
    print()


def probe_errors(models, to_host, options_list) -> None:
    print("## 2. max error in eps of the output against the float64 truth (float32, FMA unless named)")
    configs = [RNNConfig("tanh", num_units=1, input_size=1, seq_len=1, batch=1, dtype="float32", weight_scale=0.5,
                         initial_state=False),
               RNNConfig("relu", num_units=64, input_size=32, seq_len=20, batch=8, dtype="float32"),
               RNNConfig("tanh", num_units=64, input_size=32, seq_len=20, batch=8, dtype="float32"),
               RNNConfig("gru", num_units=64, input_size=32, seq_len=20, batch=8, dtype="float32"),
               RNNConfig("lstm", num_units=64, input_size=32, seq_len=20, batch=8, dtype="float32")]
    print("| config | options | inference | training |")
    print("|---|---|---|---|")
    for cfg in configs:
        case = make_case(cfg)
        truth = ground_truth(cfg, case).output
        for options in options_list:
            cells = []
            for training in (False, True):
                try:
                    m = _model(cfg, models, **options)
                    y = to_host(m.forward(case.x, case.h0, m.canonical_to_params(case.weights, case.biases),
                                          input_c=case.c0, is_training=training).output)
                    cells.append(f"{np.max(np.abs(y - truth)) / np.finfo(np.float32).eps:.1f}")
                except Exception as exc:  # noqa: BLE001
                    cells.append(f"refused: {type(exc).__name__}")
            print(f"| {cfg.short()} | {options} | {cells[0]} | {cells[1]} |")
    print()


def probe_skip_input_bias(models, to_host) -> None:
    print("## 3. skip_input: relu, one layer, H=I=4, x=0, R=0, b_R=0, b_W=0.5: output 0.5 if b_W is added")
    cfg = RNNConfig("relu", num_units=4, input_size=4, input_mode="skip_input", seq_len=2, batch=3,
                    dtype="float32", initial_state=False)
    m = _model(cfg, models)
    shapes = m.canonical_shapes()
    print(f"canonical shapes: weights {shapes[0]}, biases {shapes[1]}")
    weights = [np.zeros(s, np.float32) for s in shapes[0]]
    biases = [np.zeros(s, np.float32) for s in shapes[1]]
    if len(biases) != 2:
        print(f"not 2 biases: {len(biases)}; cannot probe")
        return
    biases[0][:] = 0.5
    x = np.zeros((2, 3, 4), np.float32)
    y = to_host(m.forward(x, None, m.canonical_to_params(weights, biases), is_training=False).output)
    print(f"output (every element): {np.unique(y)}")
    x[:] = 0.25
    biases[0][:] = 0
    y = to_host(m.forward(x, None, m.canonical_to_params(weights, biases), is_training=False).output)
    print(f"x=0.25, every bias 0 (the identity input): {np.unique(y)}")
    print()


def _sigmoid(v):
    return (1 / (1 + np.exp(-v.astype(np.float64)))).astype(np.float32)


def _float32_start(G, weights, biases, x):
    """A one-layer network's per-gate ``W, R, b_W, b_R`` in float32 (``G`` gates), zero states ``h, c [B, H]``
    and the output buffer ``[T, B, H]``."""
    W, R = [w.astype(np.float32) for w in weights[:G]], [w.astype(np.float32) for w in weights[G:]]
    bW, bR = [b.astype(np.float32) for b in biases[:G]], [b.astype(np.float32) for b in biases[G:]]
    (T, B, _), H = x.shape, R[0].shape[0]
    return W, R, bW, bR, np.zeros((B, H), np.float32), np.zeros((B, H), np.float32), np.empty((T, B, H), np.float32)


def _model_run(mode, weights, biases, x, rounds):
    """A float32 one-layer cuDNN-style RNN over float16 data, rounding to float16 where ``rounds`` says:
    ``Wx`` and ``Rh`` the GEMM results (before their biases), ``h`` the state fed back, ``c`` the LSTM cell."""
    f16 = lambda a, key: _f16(a) if key in rounds else a  # noqa: E731
    G = {"tanh": 1, "gru": 3, "lstm": 4}[mode]
    W, R, bW, bR, h, c, out = _float32_start(G, weights, biases, x)
    for t in range(out.shape[0]):
        xt = x[t].astype(np.float32)
        xw = [f16(xt @ W[g].T, "Wx") + bW[g] for g in range(G)]
        rh = [f16(h @ R[g].T, "Rh") + bR[g] for g in range(G)]
        if mode == "tanh":
            h_new = np.tanh(xw[0] + rh[0])
        elif mode == "gru":
            r, z = _sigmoid(xw[0] + rh[0]), _sigmoid(xw[1] + rh[1])
            n = np.tanh(xw[2] + r * rh[2])
            h_new = (1 - z) * n + z * h
        else:
            i, f, g, o = (_sigmoid(xw[0] + rh[0]), _sigmoid(xw[1] + rh[1]), np.tanh(xw[2] + rh[2]),
                          _sigmoid(xw[3] + rh[3]))
            c = f16(f * c + i * g, "c")
            h_new = o * np.tanh(c)
        h = f16(h_new.astype(np.float32), "h")
        out[t] = h_new
    return out.astype(np.float16)


def _half_run(mode: str, models, to_host):
    """A one-layer float16 ``mode`` RNN (H64 I32 T30 B16, no initial state) through the backend: its case and
    output."""
    cfg = RNNConfig(mode, num_units=64, input_size=32, seq_len=30, batch=16, dtype="float16", initial_state=False)
    case = make_case(cfg)
    m = _model(cfg, models)
    return case, to_host(m.forward(case.x, None, m.canonical_to_params(case.weights, case.biases),
                                   is_training=False).output)


def probe_float16(models, to_host) -> None:
    print("## 4. float16 (HALF data, FLOAT math, tensor ops): rounding points of a float32 model against cuDNN")
    print("| config | rounded to float16 | mean ulp | max ulp | exact share |")
    print("|---|---|---|---|---|")
    for mode in ("tanh", "gru", "lstm"):
        case, got = _half_run(mode, models, to_host)
        keys = ("Wx", "Rh", "h") + (("c",) if mode == "lstm" else ())
        for n in range(len(keys) + 1):
            for rounds in itertools.combinations(keys, n):
                mine = _model_run(mode, case.weights, case.biases, case.x, set(rounds))
                d = ulp_distance(got, mine.astype(np.float64))
                print(f"| {mode} H64 I32 T30 B16 | {', '.join(rounds) or 'nothing'} | {d.mean():.3f} | {d.max():.0f} "
                      f"| {(d == 0).mean():.3f} |")
    print()


def _f16(a):
    return np.asarray(a, np.float32).astype(np.float16).astype(np.float32)


# One time step from a given state: (name, z(xw, bW, rh, bR) -> pre-activation in float32, act on rounded z?)
# xw = W x and rh = R h in float32 (exact products, float32 sums), biases float16 values as float32.
STEP_MODELS = (
    ("all float32", lambda xw, bW, rh, bR: xw + bW + rh + bR, False),
    ("GEMMs rounded", lambda xw, bW, rh, bR: _f16(xw) + bW + _f16(rh) + bR, False),
    ("GEMM+own bias rounded", lambda xw, bW, rh, bR: _f16(xw + bW) + _f16(rh + bR), False),
    ("input GEMM+both biases rounded", lambda xw, bW, rh, bR: _f16(xw + bW + bR) + rh, False),
    ("input GEMM+both biases and R h rounded", lambda xw, bW, rh, bR: _f16(xw + bW + bR) + _f16(rh), False),
    ("pre-activation rounded", lambda xw, bW, rh, bR: xw + bW + rh + bR, True),
    ("GEMMs rounded, half adds", lambda xw, bW, rh, bR: _f16(_f16(_f16(_f16(xw) + bW) + _f16(rh)) + bR), True),
    ("input GEMM+both biases rounded, half add",
     lambda xw, bW, rh, bR: _f16(_f16(xw + bW + bR) + _f16(rh)), True),
)


def probe_float16_step(models, to_host) -> None:
    print("## 5. float16, one time step from a given state (T=1, h0 given): where the step rounds")
    print("| mode | model of the step | mean ulp | max ulp | exact share |")
    print("|---|---|---|---|---|")
    acts = {"relu": lambda z: np.maximum(z, 0), "tanh": np.tanh}
    for mode in ("relu", "tanh"):
        cfg = RNNConfig(mode, num_units=64, input_size=32, seq_len=1, batch=64, dtype="float16")
        case = make_case(cfg)
        m = _model(cfg, models)
        got = to_host(m.forward(case.x, case.h0, m.canonical_to_params(case.weights, case.biases),
                                is_training=False).output)[0]
        W, R = (w.astype(np.float32) for w in case.weights)
        bW, bR = (b.astype(np.float32) for b in case.biases)
        xw = case.x[0].astype(np.float32) @ W.T
        rh = case.h0[0].astype(np.float32) @ R.T
        for name, z_of, round_z in STEP_MODELS:
            z = z_of(xw, bW, rh, bR)
            mine = acts[mode](_f16(z) if round_z else z).astype(np.float16)
            d = ulp_distance(got, mine.astype(np.float64))
            print(f"| {mode} | {name} | {d.mean():.3f} | {d.max():.0f} | {(d == 0).mean():.3f} |")
    print()


def _lstm_run(weights, biases, x, rounds):
    """A float32 one-layer LSTM over float16 data, rounding to float16 where ``rounds`` says: ``Wx``/``Rh``
    the GEMM results, ``sum`` both GEMMs accumulated in one float16 buffer (``fp16(fp16(W x) + R h)``), ``bias``
    the biases folded into the input GEMM's buffer, ``gates`` each gate's activation, ``c`` the cell state,
    ``tanh_c`` tanh of the cell, ``h`` the state fed back."""
    f16 = lambda a, key: _f16(a) if key in rounds else a  # noqa: E731
    W, R, bW, bR, h, c, out = _float32_start(4, weights, biases, x)
    for t in range(out.shape[0]):
        xt = x[t].astype(np.float32)
        pre = []
        for g in range(4):
            if "bias" in rounds:
                xw = f16(xt @ W[g].T + bW[g] + bR[g], "Wx")
                z = f16(xw + h @ R[g].T, "sum") if "sum" in rounds else xw + f16(h @ R[g].T, "Rh")
            else:
                xw = f16(xt @ W[g].T, "Wx")
                z = (f16(xw + h @ R[g].T, "sum") if "sum" in rounds else xw + f16(h @ R[g].T, "Rh")) + bW[g] + bR[g]
            pre.append(z)
        i, f, o = (f16(_sigmoid(pre[k]), "gates") for k in (0, 1, 3))
        g_ = f16(np.tanh(pre[2]), "gates")
        c = f16(f * c + i * g_, "c")
        h_new = o * f16(np.tanh(c), "tanh_c")
        h = f16(h_new.astype(np.float32), "h")
        out[t] = h_new
    return out.astype(np.float16)


def probe_float16_lstm(models, to_host) -> None:
    print("## 6. float16 LSTM: rounding points of a float32 model against cuDNN, the 12 best by exact share")
    print("| rounded to float16 | mean ulp | max ulp | exact share |")
    print("|---|---|---|---|")
    case, got = _half_run("lstm", models, to_host)
    keys = ("Wx", "Rh", "sum", "bias", "gates", "c", "tanh_c", "h")
    rows = []
    for n in range(len(keys) + 1):
        for rounds in itertools.combinations(keys, n):
            if "sum" in rounds and "Rh" in rounds:
                continue
            d = ulp_distance(got, _lstm_run(case.weights, case.biases, case.x, set(rounds)).astype(np.float64))
            rows.append(((d == 0).mean(), d.mean(), d.max(), rounds))
    for share, mean, worst, rounds in sorted(rows, key=lambda r: -r[0])[:12]:
        print(f"| {', '.join(rounds) or 'nothing'} | {mean:.3f} | {worst:.0f} | {share:.3f} |")
    print()


def probe_half_gradients(models, to_host) -> None:
    print("## 7. float16 gradients of the report's failing configs (torch-cuda d_input at 125 and 2.9 of its budget):")
    print("conditioned error / budget per quantity, for cuDNN's standard and persistent algorithms and PyTorch")
    print("| config | peer | quantity | conditioned error | budget |")
    print("|---|---|---|---|---|")
    from compat_tests.judge.compare import compare_peer
    from compat_tests.peers import PEERS

    names = ("reference",) if models is None else ("cudnn", "cudnn-persist", "torch-cuda")
    for mode in ("tanh", "relu"):
        for dtype in ("float16", "float32"):
            cfg = RNNConfig(mode, num_layers=3, num_units=64, input_size=32, direction="bidirectional", seq_len=40,
                            batch=8, dtype=dtype, seed=5)
            for name in names:
                try:
                    verdicts = compare_peer(PEERS[name], cfg, backward=True).verdicts
                except Exception as exc:  # noqa: BLE001
                    print(f"| {cfg.short()} | {name} | refused: {type(exc).__name__}: {str(exc)[:80]} | | |")
                    continue
                for q, v in verdicts.items():
                    print(f"| {cfg.short()} | {name} | {q} | {v.conditioned_error:.3g} | {v.bound:g} |")
    print()


def probe_bias_modes(models, to_host) -> None:
    print("## 8. bias modes (cudnnRNNBiasMode_t): cuDNN's weight space against reference/layout.py, and the forward")
    print("pass against the float64 truth (float32, max error in eps), L2 bidirectional H8 I8 T5 B3")
    print("| config | weight space (cuDNN / reference) | layout | forward max err / eps |")
    print("|---|---|---|---|")
    for mode in ("relu", "lstm", "gru"):
        for bias_mode in ("double", "single_inp", "single_rec", "none"):
            for input_mode in ("linear_input", "skip_input"):
                cfg = RNNConfig(mode, num_layers=2, num_units=8, input_size=8, direction="bidirectional", seq_len=5,
                                batch=3, dtype="float32", input_mode=input_mode, bias_mode=bias_mode, seed=3)
                ref = cfg.model()
                try:
                    m = _model(cfg, models)
                except Exception as exc:  # noqa: BLE001
                    print(f"| {cfg.short()} | refused: {type(exc).__name__}: {str(exc)[:100]} | | |")
                    continue
                theirs = [tuple(r) for r in (m.opaque_layout() if models is None else m._layout)]
                ours = [tuple(r) for r in ref.opaque_layout()]
                first = next((f"first difference at {i}: cuDNN {a}, reference {b}"
                              for i, (a, b) in enumerate(zip(theirs, ours)) if a != b),
                             "same" if len(theirs) == len(ours) else f"{len(theirs)} vs {len(ours)} regions")
                case = make_case(cfg)
                try:
                    y = to_host(m.forward(case.x, case.h0, m.canonical_to_params(case.weights, case.biases),
                                          input_c=case.c0, is_training=False).output)
                    err = f"{np.max(np.abs(y - ground_truth(cfg, case).output)) / np.finfo(np.float32).eps:.1f}"
                except Exception as exc:  # noqa: BLE001
                    err = f"{type(exc).__name__}: {str(exc)[:100]}"
                print(f"| {cfg.short()} | {m.params_size()} / {ref.params_size()} | {first} | {err} |")
    print()


def probe_half_stepping(models, to_host) -> None:
    print("## 9. float16: one call over 30 steps against 30 calls of one step, each starting from the float16")
    print("states (hy, cy) the previous call returned; the share of outputs equal, and mean ulp between them")
    print("| mode | equal share | mean ulp | max ulp |")
    print("|---|---|---|---|")
    for mode in ("tanh", "gru", "lstm"):
        cfg = RNNConfig(mode, num_units=64, input_size=32, seq_len=30, batch=16, dtype="float16")
        case = make_case(cfg)
        m = _model(cfg, models)
        params = m.canonical_to_params(case.weights, case.biases)
        whole = to_host(m.forward(case.x, case.h0, params, input_c=case.c0, is_training=False).output)
        h, c, steps = case.h0, case.c0, []
        for t in range(cfg.seq_len):
            out = m.forward(case.x[t:t + 1], h, params, input_c=c, is_training=False)
            steps.append(to_host(out.output))
            h, c = to_host(out.output_h), None if out.output_c is None else to_host(out.output_c)
        stepped = np.concatenate(steps)
        d = ulp_distance(whole, stepped.astype(np.float64))
        print(f"| {mode} | {(d == 0).mean():.3f} | {d.mean():.3f} | {d.max():.0f} |")
    print()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("cudnn", "reference"), default="cudnn")
    parser.add_argument("--only", type=int, nargs="*", help="the probes to run, by number (default: all)")
    args = parser.parse_args(argv)
    models, _, to_host = _backend(args.backend)
    options_list = ([{}] if args.backend == "reference" else
                    [dict(algo="standard"), dict(algo="persist_static"), dict(algo="persist_dynamic"),
                     dict(algo="standard", math_type="default")])
    probes = [lambda: probe_tanh(models, to_host, options_list),
              lambda: probe_errors(models, to_host, options_list),
              lambda: probe_skip_input_bias(models, to_host),
              lambda: probe_float16(models, to_host),
              lambda: probe_float16_step(models, to_host),
              lambda: probe_float16_lstm(models, to_host),
              lambda: probe_half_gradients(models, to_host),
              lambda: probe_bias_modes(models, to_host),
              lambda: probe_half_stepping(models, to_host)]
    if args.only:
        probes = [probes[i - 1] for i in args.only]
    for probe in probes:
        try:
            probe()
        except Exception as exc:  # noqa: BLE001 - one probe's failure does not hide the others
            import traceback

            traceback.print_exc()
            print(f"probe failed: {exc}\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
