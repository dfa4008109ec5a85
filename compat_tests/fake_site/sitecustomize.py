"""Puts ``compat_tests.fake_cuda`` in place of CuPy and libcudnn in every Python process started with this
folder on ``PYTHONPATH`` (worker processes included), so that ``scripts/gpu_run.sh`` runs end to end on a
CPU (``test_gpu_run.py``). A dry run of the script's own plumbing: its numbers are the reference's."""

from compat_tests import fake_cuda

fake_cuda.install()
