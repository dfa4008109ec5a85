"""The machine facts that reports and benchmarks carry (``compat_tests.host``)."""

from __future__ import annotations

import platform
import re

import numpy as np
import pytest

from compat_tests import host
from compat_tests.report.aggregate import environment

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC 9R14
flags\t\t: fpu avx2 avx512f

processor\t: 1
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: another CPU
"""


def test_cpu_model_is_the_first_cpus_name_with_its_family_and_model(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO)
    assert host.cpu_model(str(path)) == "AMD EPYC 9R14 (cpu family 25, model 17)"


@pytest.mark.parametrize("text", ["", "processor\t: 0\nvendor_id\t: ARM\n"], ids=["empty", "no model name"])
def test_cpu_model_without_a_model_name_is_what_platform_says(tmp_path, text):
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    assert host.cpu_model(str(path)) == (platform.processor() or "unknown")
    assert host.cpu_model(str(tmp_path / "missing")) == (platform.processor() or "unknown")


def test_numpy_simd_names_the_loop_of_every_step_ufunc_for_float32_and_float64():
    pytest.importorskip("numpy.lib.introspect", reason="NumPy before 2.0 cannot say which loops it picked")
    from numpy._core._multiarray_umath import __cpu_baseline__, __cpu_dispatch__

    targets = {*__cpu_dispatch__, f"baseline({' '.join(__cpu_baseline__)})"}  # as opt_func_info names them
    text = host.numpy_simd()
    parts = dict(part.split(": ", 1) for part in text.split("; "))
    assert list(parts) == ["float32", "float64"]
    for loops in parts.values():
        named = dict(loop.rsplit(" ", 1) for loop in loops.split(", "))
        assert list(named) == list(host.STEP_UFUNCS)
        assert set(named.values()) <= targets, (named, targets)


def test_numpy_blas_is_the_blas_numpy_was_built_with():
    info = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    text = host.numpy_blas()
    assert text.startswith(f"{info['name']} {info['version']}")
    if "openblas" in info["name"]:  # the library NumPy loaded answers: its kernels and threads
        assert re.fullmatch(r".*, \S+ kernels, \d+ threads", text), text


def test_a_reports_environment_carries_the_machine_facts():
    env = environment()
    assert {k: env[k] for k in ("cpu", "numpy_blas", "numpy_simd")} == host.describe()
