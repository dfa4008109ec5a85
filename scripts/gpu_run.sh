#!/usr/bin/env bash
# The one command for a session whose task has a GPU (the device tool runs it from the working tree):
# versions, a ground-truth capture, the host-side binding tests, the GPU suite and the GPU divergence
# report, in that order (the most lasting first).
#
# The device tool returns at most 8 files from $OUT and ends a command at 600 s, so everything goes into
# one archive, $OUT/gpu_run.tar.gz, packed again after every step (a run cut short still returns what it
# did), beside $OUT/summary.txt (a line per step) and $OUT/versions.json; and every step runs under the
# time left of GPU_RUN_SECONDS (default 540), the report with --max-seconds so that it writes the report
# of the units that ran. On the CPU side, scripts/gpu_unpack.py puts the archive under
# reports/gpu/<device>-cudnn<version>/ and renders the report again there.
#
# Runs every step whatever the one before did; when the cuDNN backend is unavailable (its reason is in
# versions.json) it skips the capture, and the other steps keep what needs no backend of ours (the binding's
# host tests, torch-cuda in the tests and the report). The exit status is 1 if any step failed or was skipped.
# cuBLAS gets a fixed workspace (CUBLAS_WORKSPACE_CONFIG), as deterministic runs need: some GPU tests expect
# two identical runs to agree bit for bit. A step out of time gets SIGINT first, so pytest still prints the
# failures it has seen.
#   usage: scripts/gpu_run.sh [GRID]   (GRID: quick | default (the default) | full)
#   env:   OUT (default reports/_scratch/gpu), GPU_RUN_SECONDS (540), PYTHON (python3), JOBS (8),
#          BACKENDS (reference,cudnn,cudnn-tf32,torch-cuda: the report's; one of them unavailable fails it)
set -uo pipefail
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=${CUBLAS_WORKSPACE_CONFIG:-:4096:8}
grid=${1:-default}
out=${OUT:-reports/_scratch/gpu}
budget=${GPU_RUN_SECONDS:-540}
python=${PYTHON:-python3}
work=$(mktemp -d)
start=$SECONDS
failed=0
mkdir -p "$out"
: > "$work/summary.txt"

left() { echo $((budget - (SECONDS - start))); }
say() { echo "gpu_run.sh: $*" | tee -a "$work/summary.txt"; }
pack() {
    tar -czf "$out/gpu_run.tar.gz.part" -C "$work" . && mv "$out/gpu_run.tar.gz.part" "$out/gpu_run.tar.gz"
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

say "grid $grid, $budget s, started $(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi > "$work/nvidia-smi.txt" 2>&1 || say "nvidia-smi: not available (see nvidia-smi.txt)"
step versions 120 versions.log "$python" - "$work/versions.json" <<'PY'
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
# cuDNN's ground truth as data first (layout regions, outputs, gradients of 66 small configs): checked on
# every CPU test run once committed, whatever happens to the longer steps below.
if "$python" -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1]))["available"] else 1)' \
        "$work/versions.json" 2>/dev/null; then
    step capture $(($(left) - 120)) capture.txt "$python" -m compat_tests.gpu_capture --out "$work/capture" --check
else
    say "capture: SKIPPED, cuDNN backend unavailable (versions.json or versions.log has the reason)"
    failed=1
    pack
fi
step host-tests $(($(left) - 100)) pytest-host.txt "$python" -m pytest compat_tests/test_cudnn_headers.py \
    compat_tests/test_cudnn_backend.py -p no:cacheprovider --hypothesis-profile=ci -q -rfEsx
step gpu-tests $(($(left) - 60)) pytest.txt "$python" -m pytest compat_tests -m gpu -p no:cacheprovider \
    --hypothesis-profile=ci -q -rfEsx
units_until=$(($(left) - 45))  # then the units in flight finish, the report is written and packed
step report $((units_until > 0 ? units_until + 30 : 0)) report.txt "$python" -m compat_tests.cli report \
    --grid "$grid" --backends "${BACKENDS:-reference,cudnn,cudnn-tf32,torch-cuda}" --jobs "${JOBS:-8}" --no-progress \
    --max-seconds "$units_until" --out "$work/report"
say "$( ((failed == 0)) && echo 'every step passed' || echo 'a step failed (see above)'), $((SECONDS - start)) s"
pack
rm -rf "$work"
exit $failed
