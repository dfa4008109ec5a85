#!/usr/bin/env bash
# The one command for a session whose task has a GPU (the device tool runs it from the working tree):
# versions, a ground-truth capture, the host-side binding tests, the GPU suite, and the GPU divergence
# report, all written to $OUT (or reports/_scratch/gpu).
# Commit what comes back under reports/gpu/<device>-cudnn<version>/.
# Stops at once when the backend is unavailable (its reason is in versions.json), and otherwise runs every
# step whatever the one before did; the exit status is 1 if any step failed.
#   usage: scripts/gpu_run.sh [GRID]   (GRID: quick | default (the default) | full)
set -uo pipefail
export PYTHONPATH=. PYTHONUNBUFFERED=1
out=${OUT:-reports/_scratch/gpu}
grid=${1:-default}
mkdir -p "$out"
failed=0
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
python3 - > "$out/versions.json" <<'PY'
import json, platform, numpy
import cudnn_backend
info = cudnn_backend.versions()
info.update(python=platform.python_version(), numpy=numpy.__version__)
try:
    import torch
    info.update(torch=torch.__version__, torch_cudnn=torch.backends.cudnn.version())
except ImportError:
    pass
print(json.dumps(info, indent=1))
PY
cat "$out/versions.json"
python3 -c 'import json, sys; v = json.load(open(sys.argv[1])); sys.exit(0 if v["available"] else 1)' \
    "$out/versions.json" || { echo "cuDNN backend unavailable (versions.json has the reason): stopping"; exit 1; }
# cuDNN's ground truth as data first (layout regions, outputs, gradients of 66 small configs): checked on
# every CPU test run once committed, whatever happens to the longer steps below.
python3 -m compat_tests.gpu_capture --out "$out/capture" --check 2>&1 | tee "$out/capture.txt" | tail -40 || failed=1
python3 -m pytest compat_tests/test_cudnn_headers.py compat_tests/test_cudnn_backend.py -p no:cacheprovider \
    --hypothesis-profile=ci -q -rfEsx 2>&1 | tee "$out/pytest-host.txt" | tail -20 || failed=1  # declarations first
python3 -m pytest compat_tests -m gpu -p no:cacheprovider --hypothesis-profile=ci -q -rfEsx \
    2>&1 | tee "$out/pytest.txt" | tail -60 || failed=1
python3 -m compat_tests.cli report --grid "$grid" --backends reference,cudnn,cudnn-tf32,torch-cuda \
    --jobs 8 --no-progress --out "$out/report" 2>&1 | tail -30 || failed=1
echo "gpu_run.sh: $([ $failed = 0 ] && echo 'every step passed' || echo 'a step failed (see above)')"
exit $failed
