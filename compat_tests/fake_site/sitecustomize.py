"""Puts ``compat_tests.fake_cuda`` in place of CuPy and libcudnn in every Python process started with this
folder on ``PYTHONPATH`` (worker processes included), so that ``scripts/gpu_run.sh`` runs end to end on a
CPU (``test_gpu_run.py``). A dry run of the script's own plumbing: its numbers are the reference's.
``FAKE_CUDA_UNAVAILABLE=REASON`` makes the backend unavailable instead, for that reason."""

import os

from compat_tests import fake_cuda

fake_cuda.install()
if os.environ.get("FAKE_CUDA_UNAVAILABLE"):  # a GPU whose cuDNN backend cannot start, for this reason
    import cudnn_backend

    cudnn_backend.available = lambda: (False, os.environ["FAKE_CUDA_UNAVAILABLE"])
