"""The GPU run (``scripts/gpu_run.sh``) and its stand-ins on a CPU: the ladder of GPU tests, one feature a rung
(``ladder``, its log ``ladder_log``), the capture of cuDNN's outputs and gradients that the CPU suite checks
afterwards (``capture``), cuDNN's C headers held against the ctypes binding (``cudnn_headers``), and CuPy and
libcudnn faked with the reference (``fake_cuda``, installed in every process by ``fake_site/``) for dry runs."""
