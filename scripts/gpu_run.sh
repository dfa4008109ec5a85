#!/usr/bin/env bash
# The one command for a session whose task has a GPU (the device tool runs it from the working tree), and the
# second one for the same window:
#
#   bash scripts/gpu_run.sh [GRID]             versions, capture, ladder, host tests, GPU tests, report
#   bash scripts/gpu_run.sh --rerun-failed     versions, capture, and the ladder's rungs that did not pass in
#                                              the newest reports/gpu/*/ladder.json (unpacked and committed;
#                                              GPU_RUNS names another folder than reports/gpu)
#   bash scripts/gpu_run.sh --rungs A,B        versions, capture, and those rungs
#
# Steps, the most lasting first, each under a share of GPU_RUN_SECONDS (default 420: a window of 15 minutes
# holds the machine's start, this run and one re-run):
#   versions   cuDNN, CUDA, CuPy, the device, torch (versions.json)
#   capture    cuDNN's layout, outputs and gradients for 66 small configs, as data (checked on every CPU run);
#              capture-tf32 the float32 ones again under cuDNN's default math (TF32), capture-persist the
#              float16 and float32 ones through the persistent algorithm
#   ladder     the GPU suite rung by rung (compat_tests.gpu.ladder): one feature a rung, the risky rungs
#              (dropout, persistent algorithms) in processes of their own, a hung test killed, a failure
#              other than wrong numbers ending its process so that a CUDA error cannot stick to the next;
#              ladder.md is its table
#   host-tests the binding's host side (declarations against the headers, descriptors, statuses)
#   gpu-tests  the rest of `pytest -m gpu`: padding, backward reads, resource hygiene, torch-cuda's peer tests
#   report     the divergence report on the window-sized grid, with --max-seconds so that it always writes;
#              without figures (gpu_unpack.py renders the report again with them, where the run is filed)
# Where versions.json says the backend is available, a test skipped because it is not (in that process)
# fails its step (RNN_COMPAT_EXPECT_CUDNN).
#
# The device tool returns at most 8 files from $OUT and ends a command at 600 s, so everything goes into
# one archive, $OUT/gpu_run.tar.gz, packed again after every step (a run cut short still returns what it
# did), beside $OUT/summary.txt (a line per step, the ladder's table and the report's verdict) and
# $OUT/versions.json. On the CPU side, scripts/gpu_unpack.py puts the archive under
# reports/gpu/<device>-cudnn<version>/ (a re-run under its rerun-N/) and renders the report again there.
#
# The exit status is 1 if any step failed or was skipped. cuBLAS gets a fixed workspace
# (CUBLAS_WORKSPACE_CONFIG), as deterministic runs need. A step out of time gets SIGINT first, so pytest
# still prints the failures it has seen.
#   env: OUT (default reports/_scratch/gpu), GPU_RUN_SECONDS (420), PYTHON (python3), JOBS (8),
#        BACKENDS (reference,cudnn,cudnn-tf32,torch-cuda: the report's; one of them unavailable fails it),
#        LADDER_RISKY_SECONDS (the time limit of each test of the ladder's risky rungs instead of the rung's),
#        GPU_RUN_PROFILE (the Hypothesis profile of the ladder and the GPU tests: gpu; the CPU's dry runs, gpu-dry)
set -uo pipefail
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=${CUBLAS_WORKSPACE_CONFIG:-:4096:8}
grid=window rungs= rerun=0 profile=${GPU_RUN_PROFILE:-gpu}
while (($#)); do
    case $1 in
        --rerun-failed)
            rerun=1
            runs=${GPU_RUNS:-reports/gpu}  # the newest run unpacked there, by the start stamp of its summary
            rungs=$(${PYTHON:-python3} -m compat_tests.gpu.ladder --failed "$runs") || exit 2
            if [ -z "$rungs" ]; then
                echo "gpu_run.sh: --rerun-failed: every rung of the newest run in $runs passed; nothing to re-run" >&2
                exit 2
            fi
            ;;
        --rungs) rerun=1 rungs=${2:?--rungs needs a comma-separated list}; shift ;;
        -*) echo "gpu_run.sh: unknown option $1 (see the head of this script)" >&2; exit 2 ;;
        *) grid=$1 ;;
    esac
    shift
done
out=${OUT:-reports/_scratch/gpu}
budget=${GPU_RUN_SECONDS:-420}
python=${PYTHON:-python3}
work=$(mktemp -d)
start=$SECONDS
failed=0
mkdir -p "$out"
: > "$work/summary.txt"

left() { echo $((budget - (SECONDS - start))); }
min() { echo $(($1 < $2 ? $1 : $2)); }
say() { echo "gpu_run.sh: $*" | tee -a "$work/summary.txt"; }
pack() {
    tar -czf "$out/gpu_run.tar.gz.part" --exclude=.run.lock -C "$work" . && mv "$out/gpu_run.tar.gz.part" "$out/gpu_run.tar.gz"
    cp "$work/summary.txt" "$out/summary.txt"
    if [ -f "$work/versions.json" ]; then cp "$work/versions.json" "$out/versions.json"; fi
}
# step NAME SECONDS LOG COMMAND...: the command under a time limit, its output in LOG (its tail printed),
# one line in summary.txt, and the archive packed again.
step() {
    local name=$1 limit=$2 log=$3 t0=$SECONDS rc
    shift 3
    if ((limit <= 0)); then
        say "$name: SKIPPED, no time left of GPU_RUN_SECONDS=$budget"
        failed=1
        return
    fi
    timeout --signal=INT --kill-after=15 "$limit" "$@" > "$work/$log" 2>&1
    rc=$?
    tail -n 30 "$work/$log"
    if ((rc == 0)); then
        say "$name: ok ($((SECONDS - t0)) s)"
    else
        say "$name: FAILED with exit status $rc$( ((rc == 124)) && echo ' (out of time)') ($((SECONDS - t0)) s), see $log"
        failed=1
    fi
    pack
}

if ((rerun)); then
    say "re-run of the rungs $rungs, $budget s, started $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "$rungs" > "$work/rerun.txt"
else
    say "grid $grid, $budget s, started $(date -u +%Y-%m-%dT%H:%M:%SZ)"
fi
nvidia-smi > "$work/nvidia-smi.txt" 2>&1 || say "nvidia-smi: not available (see nvidia-smi.txt)"
step versions 60 versions.log "$python" - "$work/versions.json" <<'PY'
import json, platform, sys
import numpy
import cudnn_backend
info = cudnn_backend.versions()
info.update(python=platform.python_version(), numpy=numpy.__version__)
try:
    import torch
    info.update(torch=torch.__version__, torch_cudnn=torch.backends.cudnn.version())
except ImportError:
    pass
text = json.dumps(info, indent=1)
print(text)
open(sys.argv[1], "w").write(text + "\n")
PY
expect=
if "$python" -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1]))["available"] else 1)' \
        "$work/versions.json" 2>/dev/null; then
    expect=1
    step capture "$(min $(($(left) - (rerun ? 60 : 150))) 90)" capture.txt "$python" -m compat_tests.gpu.capture --out "$work/capture" --check
    # cuDNN's default math (TF32 for float32) recorded too: what the TF32 rounding decision needs
    step capture-tf32 "$(min $(($(left) - (rerun ? 60 : 150))) 60)" capture-tf32.txt "$python" -m compat_tests.gpu.capture \
        --backend cudnn-tf32 --out "$work/capture-cudnn-tf32" --check
    # and the persistent algorithm's (approximate tanh, probe 1): what its budget's next calibration needs
    step capture-persist "$(min $(($(left) - (rerun ? 60 : 150))) 45)" capture-persist.txt "$python" -m compat_tests.gpu.capture \
        --backend cudnn-persist --out "$work/capture-cudnn-persist" --check
else
    say "capture: SKIPPED, cuDNN backend unavailable (versions.json or versions.log has the reason)"
    failed=1
    pack
fi
export RNN_COMPAT_EXPECT_CUDNN=$expect
# The ladder stops itself 10 s before its step's limit, writing its table; the limit is the backstop.
ladder_seconds=$(min $(($(left) - (rerun ? 5 : 120))) 240)
step ladder $((ladder_seconds > 10 ? ladder_seconds : 0)) ladder.txt "$python" -m compat_tests.gpu.ladder \
    --out "$work" --seconds $((ladder_seconds - 10)) ${rungs:+--rungs "$rungs"} ${expect:+--expect-cudnn} \
    ${LADDER_RISKY_SECONDS:+--risky-seconds "$LADDER_RISKY_SECONDS"} -- --hypothesis-profile="$profile"
if [ -f "$work/ladder.md" ]; then
    { echo; cat "$work/ladder.md"; echo; } >> "$work/summary.txt"
    pack
fi
if ((!rerun)); then
    step host-tests "$(min $(($(left) - 100)) 60)" pytest-host.txt "$python" -m pytest compat_tests/tests/gpu/test_cudnn_headers.py \
        compat_tests/tests/gpu/test_cudnn_backend.py -p no:cacheprovider --hypothesis-profile=ci -q -rfEsx
    # cudnn-persist runs the persistent algorithms, which the ladder's rung 17 (algorithms) runs in processes of
    # their own
    # (a hang or sticky error there stays in its rung); here and in the report it would take the whole step.
    step gpu-tests "$(min $(($(left) - 80)) 90)" pytest.txt "$python" -m pytest compat_tests -m gpu -p no:cacheprovider \
        --ignore compat_tests/tests/gpu/test_gpu_ladder.py -k "not cudnn-persist" --hypothesis-profile="$profile" -q -rfEsx
    units_until=$(($(left) - 30))  # then the units in flight finish, the report is written and packed
    step report $((units_until > 0 ? units_until + 20 : 0)) report.txt "$python" -m compat_tests.cli report \
        --grid "$grid" --backends "${BACKENDS:-reference,cudnn,cudnn-tf32,torch-cuda}" --jobs "${JOBS:-8}" \
        --no-progress --no-figures --max-seconds "$units_until" --out "$work/report"
    if [ -f "$work/report/report.json" ]; then
        say "report verdict: $("$python" - "$work/report/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
t = r["totals"]
verdict = ("PASSED" if r["passed"] else "FAILED") + ("" if r["complete"] else ", INCOMPLETE")
print(f"{verdict}: {t['compat_units']} comparisons ({t['units']} of {t['planned_units']} planned units ran): "
      f"{t['passed']} passed, {t['failed']} failed, {t['indeterminate']} indeterminate, {t['errors']} errors")
PY
)"
    fi
fi
say "$( ((failed == 0)) && echo 'every step passed' || echo 'a step failed (see above)'), $((SECONDS - start)) s"
pack
rm -rf "$work"
exit $failed
