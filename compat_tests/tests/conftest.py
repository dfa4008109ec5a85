"""Suite configuration: Hypothesis profiles and which peers run.

Profiles (``pytest --hypothesis-profile NAME`` or ``rnn-compat test --profile NAME``):
``ci`` (what ``make test`` runs: Hypothesis's default of 100 examples a property, derandomized, so that the
suite stays under 8 minutes on 2 busy cores; the same examples every run; no shrinking: a failure prints the
example it found and its reproduce command, the same every run, and the strict xfails of the ledger, which
fail at once, cost no search for a smaller failure), ``dev`` (the default: 300 examples,
fresh randomness each run, so that each developer's runs search further), ``thorough`` (a long hunt before a
release: 2000 examples, and every row of the sweeps that otherwise run their pairwise rows, the ``sweep``
fixture and ``strategies.swept``), ``gpu`` (derandomized,
fewer examples: each rung of the GPU ladder in a short window), ``gpu-dry`` (the GPU run's dry runs on a CPU).
``RNN_COMPAT_EXPECT_CUDNN=1`` (``scripts/gpu_run.sh`` sets it where ``versions.json`` says the backend is
available) fails every test skipped because the cuDNN backend is unavailable in the test process.
Peers: ``--peers torch-cpu,onnxruntime`` (or ``RNN_COMPAT_PEERS``) limits the peer suites; a selected
peer that is not installed skips with its reason. Peers of your own come in through
``RNN_COMPAT_PLUGINS`` or an installed entry point (``compat_tests.peers.plugins``), loaded in
``pytest_configure``.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, settings

from compat_tests import strategies
from compat_tests.gpu.ladder import LADDERED_PEERS
from compat_tests.peers import BUILT_IN, GPU_PEERS, PEERS, load_plugins, plugins
from compat_tests.peers.base import availability
from compat_tests.strategies import swept
from reference import buffers

# The shared helpers' asserts explain their failures as the tests' own do.
pytest.register_assert_rewrite("compat_tests.tests.helpers")

_common = dict(deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)
settings.register_profile("ci", max_examples=100, derandomize=True, phases=NO_SHRINK, **_common)
settings.register_profile("dev", max_examples=300, **_common)
settings.register_profile("thorough", max_examples=2000, **_common)
# A GPU window (scripts/gpu_run.sh): every rung of the ladder draws from a narrow space of its own.
settings.register_profile("gpu", max_examples=40, derandomize=True, **_common)
# gpu_run.sh's dry runs on a CPU (test_gpu_run.py, GPU_RUN_PROFILE): the script's plumbing, every GPU test once
# more on the fake; the properties themselves run in the CPU suite. No shrinking: a planted fault's first
# failing example names its rung as well as the smallest would, at a fraction of the time.
settings.register_profile("gpu-dry", max_examples=8, derandomize=True, phases=NO_SHRINK, **_common)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def pytest_configure(config: pytest.Config) -> None:
    strategies.WHOLE_SWEEPS = profile(config) == "thorough"  # before any test module is collected (swept)
    if config.getoption("--fake-cuda"):  # before any test module asks cudnn_backend.available()
        from compat_tests.gpu import fake_cuda

        fake_cuda.install()
    try:  # after the fake, which a plugin's import may meet; before any test is generated for the peers
        load_plugins()
    except (ValueError, TypeError) as exc:  # a spec of RNN_COMPAT_PLUGINS, named in the message
        raise pytest.UsageError(f"{exc} (in {plugins.ENV})") from exc
    # Every array the reference's buffer cache could serve goes through it, however small, so the suite's
    # small Hypothesis models check its reuse too (by default only arrays >= 128 KiB do).
    buffers.MIN_CACHED_BYTES = 0
    # Declared here rather than in pyproject.toml so `rnn-compat test` works from any directory.
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU with cuDNN 9; skipped elsewhere with the reason "
                                       "from cudnn_backend.available()")
    config.addinivalue_line("markers", "laddered: a property over every peer that the cuDNN peers run rung by rung "
                                       "in test_gpu_ladder.py instead (one wrong guess must not hide the rest)")
    config.addinivalue_line("filterwarnings", "error::RuntimeWarning")
    config.addinivalue_line("filterwarnings",  # Keras 3.15 on NumPy 2: not ours to fix
                            "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--peers", default=os.environ.get("RNN_COMPAT_PEERS", ""),
                     help="comma-separated peers to test (default: every registered peer)")
    parser.addoption("--fake-cuda", action="store_true",
                     help="replace CuPy and libcudnn by compat_tests.gpu.fake_cuda (the reference computing): a dry "
                          "run of the GPU suite's own code on a CPU, not a test of cuDNN")


def selected_peers(config: pytest.Config) -> list[str]:
    chosen = [p for p in config.getoption("--peers").split(",") if p]
    unknown = set(chosen) - set(PEERS)
    if unknown:
        raise pytest.UsageError(f"unknown peers {sorted(unknown)}; known: {', '.join(PEERS)} (peers of your own: "
                                f"RNN_COMPAT_PLUGINS=MODULE:ATTR, see compat_tests/peers/plugins.py)")
    return chosen or list(PEERS)


def _params(names: list[str]) -> list:
    """GPU peers carry the ``gpu`` marker, so ``-m gpu`` selects them and CPU runs skip them with a reason."""
    return [pytest.param(n, marks=pytest.mark.gpu) if n in GPU_PEERS else n for n in names]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = selected_peers(metafunc.config)
    if metafunc.definition.get_closest_marker("laddered"):
        names = [n for n in names if n not in LADDERED_PEERS]
    if "peer_name" in metafunc.fixturenames:
        metafunc.parametrize("peer_name", _params(names))
    if "grad_peer_name" in metafunc.fixturenames:
        metafunc.parametrize("grad_peer_name", _params([n for n in names if PEERS[n].capabilities.backward]))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    """Under ``RNN_COMPAT_EXPECT_CUDNN``, a skip for the cuDNN backend being unavailable is a failure: the
    backend started in another process (``versions.json``), so something in this one stopped it (a warning
    made an error, an import order) and every cuDNN test would otherwise skip in silence."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("RNN_COMPAT_EXPECT_CUDNN") and item.get_closest_marker("gpu"):
        import cudnn_backend

        ok, why = cudnn_backend.available()
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if not ok and why in reason:
            report.outcome = "failed"
            report.longrepr = (f"skipped ({reason}), but the cuDNN backend is expected (RNN_COMPAT_EXPECT_CUDNN: "
                               f"versions.json says it is available); in this test process it is not: {why}")


def profile(config: pytest.Config) -> str:
    """The Hypothesis profile this run loaded: ``--hypothesis-profile``, else ``HYPOTHESIS_PROFILE``, else dev."""
    return config.getoption("hypothesis_profile", None) or os.environ.get("HYPOTHESIS_PROFILE", "dev")


@pytest.fixture
def sweep(request: pytest.FixtureRequest):
    """``sweep(rows)``: a test's sweep over combinations of factors. Under the thorough profile every row;
    otherwise (ci, dev) the :func:`pairwise` rows, which hold every value of each factor beside every value of
    each other: a sweep whose rows each take seconds (an exporter run) costs minutes whole."""
    return swept


def _available(name: str):
    chosen = PEERS[name]
    ok, why = availability(chosen)
    if not ok:
        pytest.skip(f"{name}: {why}")
    return chosen


@pytest.fixture
def peer(peer_name: str):
    """The selected peer, skipped with its reason when it is not available here."""
    return _available(peer_name)


@pytest.fixture
def available_peer():
    """``available_peer(name)``: that peer, or the test skipped with its reason (for tests of one peer)."""
    return _available


@pytest.fixture
def closing():
    """``closing(model)``: GPU models registered here are closed even when the test fails (no handles leak into later tests)."""
    models = []
    yield models.append
    for model in models:
        model.close()


class Killed(BaseException):
    """The process dies here (no handler of the code under test catches it, as none would see a SIGKILL)."""


@pytest.fixture
def kill_before_replacing(monkeypatch):
    """``kill_before_replacing()``: from then on every whole-file write (``reference.formats.files.replacing``)
    is killed at its last step, after writing its partial file and before moving it over the old one."""
    from reference.formats import files

    def killed(src, dst):
        raise Killed("killed before the file was replaced")

    return lambda: monkeypatch.setattr(files.os, "replace", killed)


@pytest.fixture
def registry(monkeypatch):
    """The built-in peers alone, no plugin specs and an empty ``RNN_COMPAT_PLUGINS`` for the test; all as they
    were after it (the peer suites of the same process must not see the test's plugins). A plugin peer's
    exceptions to the policy go with it."""
    saved = [(table, dict(table)) for table in (PEERS, plugins.SPECS)]
    for name in set(PEERS) - set(BUILT_IN):
        del PEERS[name]
    plugins.SPECS.clear()
    monkeypatch.setenv(plugins.ENV, "")
    yield PEERS
    for table, before in saved:
        table.clear()
        table.update(before)


@pytest.fixture
def grad_peer(grad_peer_name: str):
    """A selected peer with a backward pass, skipped with its reason when it is not available here."""
    return _available(grad_peer_name)


def pytest_report_header(config: pytest.Config) -> str:
    """One line naming the selected peers, none asked whether it is available here: that imports its framework
    (torch, Keras: seconds), which every pytest this suite starts would pay (the ladder's children, the GPU
    run's steps, ``rnn-compat test``). ``rnn-compat peers`` says what each one lacks; a test of a peer that is
    not available skips naming why."""
    return (f"peers: {', '.join(selected_peers(config))} (rnn-compat peers: which are available here; a test of "
            "one that is not skips saying why)")
