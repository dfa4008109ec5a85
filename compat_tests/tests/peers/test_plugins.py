"""Peers of your own (``compat_tests.peers.plugins``): loading, refusal of bad plugins, and the suite, the
command line and the report run against one. ``examples/my_gru_peer.py`` is the plugin under test: a
correct port (``my-gru``) and the textbook-GRU port (``my-textbook-gru``) that the suite must catch."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from compat_tests import cli
from compat_tests.config import Case, Outputs, RNNConfig
from compat_tests.judge import known_divergences, tolerances
from compat_tests.judge.compare import compare_peer
from compat_tests.judge.known_divergences import Divergence
from compat_tests.judge.metrics import error_stats
from compat_tests.judge.tolerances import Budget, Override
from compat_tests.peers import PEERS, Capabilities, Peer, get_peer, load_plugin, plugins
from compat_tests.report.aggregate import policy_summary
from compat_tests.run import run_reference
from compat_tests.strategies import rnn_configs

HERE = "compat_tests.tests.peers.test_plugins"  # this module, as a plugin spec names it

ROOT = Path(__file__).resolve().parents[3]


EXAMPLE = ROOT / "examples" / "my_gru_peer.py"


BOTH = f"{EXAMPLE}:BOTH"


class _Echo(Peer):
    """A peer that returns its input's first features: only its loading is under test here."""

    capabilities = Capabilities(modes=("tanh",), dtypes=("float64",))

    def __init__(self, name: str = "echo"):
        self.name = name

    def available(self) -> tuple[bool, str]:
        return True, "test double"

    def forward(self, cfg: RNNConfig, case: Case) -> Outputs:
        raise NotImplementedError


# Attributes the refusal tests point their specs at.
_GOOD = _Echo("installed-echo")


_TAKES_A_BUILTIN_NAME = _Echo("reference")


_BAD_NAME = _Echo("two words")


_NOT_A_PEER = RNNConfig("gru")


_MIXED = [_Echo("mixed"), 3]


_NO_PEERS: list = []


_CAPABILITIES_NOT_DECLARED = _Echo("no-caps")


_CAPABILITIES_NOT_DECLARED.capabilities = {"modes": ("gru",)}


_ANOTHER_MY_GRU = _Echo("my-gru")


_SECOND_TAKES_A_BUILTIN_NAME = [_Echo("fresh"), _Echo("torch-cpu")]  # refused whole: "fresh" is not kept


_TWINS = [_Echo("twin"), _Echo("twin")]


# A peer's own exceptions to the policy (Peer.overrides, Peer.known_divergences).
_WIDE = Budget(64.0, "test double: sums its products in another order")


_DECLARES = _Echo("declares")


_DECLARES.overrides = (Override("declares", "float32", "output", _WIDE),)


_DECLARES.known_divergences = (Divergence("declares", "nan_propagation", ("tanh",), "test double: eats NaN"),)


def _echo_declaring(overrides=(), divergences=()) -> _Echo:
    peer = _Echo("odd-policy")
    peer.overrides, peer.known_divergences = overrides, divergences
    return peer


_OVERRIDES_ANOTHER_PEER = _echo_declaring((Override("reference", "float32", "output", _WIDE),))


_OVERRIDE_NOT_A_RECORD = _echo_declaring(({"dtype": "float32", "quantity": "output", "bound": 64},))


_OVERRIDES_NOT_A_TUPLE = _echo_declaring(Override("odd-policy", "float32", "output", _WIDE))


_OVERRIDE_UNKNOWN_QUANTITY = _echo_declaring((Override("odd-policy", "float32", "hidden", _WIDE),))


_OVERRIDE_UNKNOWN_DTYPE = _echo_declaring((Override("odd-policy", "bfloat16", "output", _WIDE),))


_OVERRIDE_INFINITE = _echo_declaring((Override("odd-policy", "float32", "output", Budget(float("inf"), "x")),))


_OVERRIDE_ZERO = _echo_declaring((Override("odd-policy", "float32", "output", Budget(0, "x")),))


_OVERRIDE_WITHOUT_REASON = _echo_declaring((Override("odd-policy", "float32", "output", Budget(64.0, " ")),))


_OVERRIDE_TWICE = _echo_declaring((Override("odd-policy", "float32", "output", _WIDE),) * 2)


def _diverging(area: str, modes: tuple[str, ...], reason: str = "x", peer: str = "odd-policy") -> _Echo:
    return _echo_declaring(divergences=(Divergence(peer, area, modes, reason),))


_DIVERGENCE_OF_ANOTHER_PEER = _diverging("nan_propagation", ("tanh",), peer="onnxruntime")


_DIVERGENCE_UNKNOWN_AREA = _diverging("float64_precision", ("tanh",))


_DIVERGENCE_MODE_NOT_RUN = _diverging("nan_propagation", ("lstm",))


_DIVERGENCE_WITHOUT_REASON = _diverging("nan_propagation", ("tanh",), reason="")


_DIVERGENCE_OF_SOME_MODES = _diverging("padded_nan_gradients", ("tanh",))


_DIVERGENCE_OF_SOME_MODES.capabilities = Capabilities(modes=("tanh", "gru"), dtypes=("float64",))


class _NeedsArguments(_Echo):
    def __init__(self, name: str, rate: float):
        super().__init__(name)


class _Abstract(Peer):  # no forward
    name, capabilities = "abstract", Capabilities()

    def available(self) -> tuple[bool, str]:
        return True, ""


def test_a_file_spec_registers_its_peers_once_and_exports_itself(registry, monkeypatch):
    monkeypatch.chdir(ROOT)
    first = load_plugin("examples/my_gru_peer.py:BOTH")  # relative here, absolute everywhere else
    assert [p.name for p in first] == ["my-gru", "my-textbook-gru"]
    assert get_peer("my-gru") is first[0] and plugins.SPECS["my-gru"] == BOTH
    assert load_plugin(BOTH) == first  # the same spec again: the same peers, no clash
    assert os.environ[plugins.ENV] == BOTH


def test_the_same_name_from_another_spec_is_refused(registry):
    load_plugin(BOTH)
    with pytest.raises(ValueError, match=r"peer name 'my-gru' is already taken by .*my_gru_peer.py:BOTH"):
        load_plugin(f"{HERE}:_ANOTHER_MY_GRU")


@pytest.mark.parametrize(("spec", "error", "match"), [
    ("examples/my_gru_peer.py", ValueError, "must be MODULE:ATTR or PATH.py:ATTR"),
    ("compat_tests.no_such_module:PEER", ValueError, "importing compat_tests.no_such_module failed: "
                                                     "ModuleNotFoundError"),
    (f"{HERE}:_NOPE", ValueError, "has no attribute '_NOPE'"),
    ("no/such/file.py:PEER", ValueError, "no file /.*/no/such/file.py"),
    (f"{HERE}:_NOT_A_PEER", TypeError, "must name a compat_tests.peers.Peer instance.*got RNNConfig"),
    (f"{HERE}:_MIXED", TypeError, "got list"),
    (f"{HERE}:_NO_PEERS", TypeError, "got list"),
    (f"{HERE}:_BAD_NAME", ValueError, "a peer's name must be .*'two words'"),
    (f"{HERE}:_CAPABILITIES_NOT_DECLARED", TypeError, "capabilities of type"),
    (f"{HERE}:_TAKES_A_BUILTIN_NAME", ValueError, "'reference' is already taken by a built-in"),
    (f"{HERE}:_SECOND_TAKES_A_BUILTIN_NAME", ValueError, "'torch-cpu' is already taken"),
    (f"{HERE}:_TWINS", ValueError, "'twin' is already taken by another of its peers"),
    (f"{HERE}:_NeedsArguments", ValueError, "constructing _NeedsArguments\\(\\) failed: TypeError"),
    (f"{HERE}:_Abstract", ValueError, "constructing _Abstract\\(\\) failed: TypeError: Can't "
                                                        "instantiate abstract class"),
    ("a,b/peer.py:PEER", ValueError, "a spec cannot hold a comma"),
    (f"{HERE}:_OVERRIDES_ANOTHER_PEER", ValueError,
     r"peer 'odd-policy': overrides\[0\] names peer 'reference': a peer may override only its own"),
    (f"{HERE}:_OVERRIDE_NOT_A_RECORD", ValueError, r"overrides\[0\] must be a compat_tests"),
    (f"{HERE}:_OVERRIDES_NOT_A_TUPLE", ValueError, "overrides must be a tuple .* got Override"),
    (f"{HERE}:_OVERRIDE_UNKNOWN_QUANTITY", ValueError, "quantity 'hidden', expecting one of output"),
    (f"{HERE}:_OVERRIDE_UNKNOWN_DTYPE", ValueError, "dtype 'bfloat16', expecting one of float16"),
    (f"{HERE}:_OVERRIDE_INFINITE", ValueError, "bound inf: a budget is a positive finite"),
    (f"{HERE}:_OVERRIDE_ZERO", ValueError, "bound 0: a budget is a positive finite"),
    (f"{HERE}:_OVERRIDE_WITHOUT_REASON", ValueError, r"overrides\[0\] has no reason"),
    (f"{HERE}:_OVERRIDE_TWICE", ValueError, r"overrides\[1\] overrides float32 output a second"),
    (f"{HERE}:_DIVERGENCE_OF_ANOTHER_PEER", ValueError,
     r"known_divergences\[0\] names peer 'onnxruntime': a peer may declare only its own"),
    (f"{HERE}:_DIVERGENCE_UNKNOWN_AREA", ValueError,
     "area 'float64_precision', expecting one of nan_propagation, padded_nan_gradients"),
    (f"{HERE}:_DIVERGENCE_MODE_NOT_RUN", ValueError, r"modes \('lstm',\), expecting .*\('tanh',\)"),
    (f"{HERE}:_DIVERGENCE_WITHOUT_REASON", ValueError, r"known_divergences\[0\] has no reason"),
    (f"{HERE}:_DIVERGENCE_OF_SOME_MODES", ValueError,
     r"area 'padded_nan_gradients' must name every mode the peer runs \('tanh', 'gru'\)"),
])
def test_bad_plugins_are_refused_naming_the_spec(registry, spec, error, match):
    before = dict(PEERS)
    with pytest.raises(error, match=match) as caught:
        load_plugin(spec)
    assert repr(spec if "," in spec else plugins.normalize(spec)) in str(caught.value)
    assert PEERS == before and os.environ[plugins.ENV] == ""


def test_a_plugin_s_own_exceptions_are_the_policy_for_it_alone(registry, capsys):
    """A declared override is the budget the plugin peer is judged by (and no other peer), a declared
    divergence is in the ledger the tests consult, and both are in the policy a report records and in what
    ``rnn-compat peers`` says; loading the built-in peers alone declares nothing."""
    truth = np.linspace(-1.0, 1.0, 1000)
    actual = truth.astype(np.float32)
    actual[7] += 40 * np.finfo(np.float32).eps  # 40 conditioned eps: over the default 16, within 64
    stats = error_stats(actual, truth)
    before = policy_summary()
    assert not tolerances.judge("declares", "float32", "output", stats, kappa=1.0).passed
    assert known_divergences.known("declares", "nan_propagation", "tanh") is None
    # The exceptions travel with the peer: handed the peer itself, a lookup needs no registration.
    assert tolerances.judge(_DECLARES, "float32", "output", stats, kappa=1.0).passed
    assert known_divergences.known(_DECLARES, "nan_propagation", "tanh") == _DECLARES.known_divergences[0]

    load_plugin(f"{HERE}:_DECLARES")
    assert tolerances.budget("declares", "float32", "output") == _WIDE
    assert tolerances.judge("declares", "float32", "output", stats, kappa=1.0).passed
    for peer, dtype, quantity in (("reference", "float32", "output"), ("declares", "float32", "output_h"),
                                  ("declares", "float64", "output")):
        assert tolerances.budget(peer, dtype, quantity) == tolerances.DEFAULTS[(dtype, "forward")]
    assert not tolerances.judge("reference", "float32", "output", stats, kappa=1.0).passed
    assert known_divergences.known("declares", "nan_propagation", "tanh") == _DECLARES.known_divergences[0]
    assert known_divergences.known("declares", "nan_propagation", "gru") is None

    policy = policy_summary()
    assert policy["overrides"] == before["overrides"] + [
        {"peer": "declares", "dtype": "float32", "quantity": "output", "bound": 64.0, "reason": _WIDE.reason}]
    assert policy["known_divergences"] == before["known_divergences"] + [
        {"peer": "declares", "area": "nan_propagation", "modes": ["tanh"], "reason": "test double: eats NaN"}]
    assert cli.main(["peers"]) == 0
    text = capsys.readouterr().out.split("declares: ")[1]
    assert f"budget float32 output: 64 conditioned eps ({_WIDE.reason})" in text
    assert "known divergence nan_propagation (tanh): test double: eats NaN" in text


_DECLARING_THEN_TAKEN = [_Echo("declares-too"), _Echo("torch-cpu")]


_DECLARING_THEN_TAKEN[0].overrides = (Override("declares-too", "float32", "output", _WIDE),)


def test_a_refused_plugin_declares_nothing(registry):
    before = policy_summary()
    with pytest.raises(ValueError, match="'torch-cpu' is already taken"):
        load_plugin(f"{HERE}:_DECLARING_THEN_TAKEN")
    assert policy_summary() == before and tolerances.budget("declares-too", "float32", "output") != _WIDE


class _NanEater(Peer):
    """The float64 reference reading NaN inputs as 0, as onnxruntime's Sigmoid maps NaN to a number."""

    capabilities = Capabilities(modes=("gru",), dtypes=("float64",), backward=False)

    def __init__(self, name: str, declares: bool):
        self.name = name
        if declares:
            self.known_divergences = (Divergence(name, "nan_propagation", ("gru",), "test double: NaN read as 0"),)

    def available(self) -> tuple[bool, str]:
        return True, "test double"

    def forward(self, cfg: RNNConfig, case: Case) -> Outputs:
        return run_reference(cfg, case._replace(x=np.nan_to_num(case.x, nan=0.0)))


_NAN_EATERS = [_NanEater("nan-eater", declares=False), _NanEater("nan-eater-declared", declares=True)]


# A plugin file of its own: a report's workers load their plugins as they start, before they could import this
# module by name for a spec pointing into it (a worker runs no conftest).
_LOOSE_REFERENCE = """
from compat_tests.run import run_reference
from compat_tests.peers import Capabilities, Peer
from compat_tests.judge.tolerances import Budget, Override


class LooseReference(Peer):
    # The float32 reference under a budget of its own for its outputs.
    name = "loose-reference"
    capabilities = Capabilities(modes=("gru",), dtypes=("float32",), backward=False)
    overrides = (Override("loose-reference", "float32", "output", Budget(20.0, "test double: a budget of its own")),)

    def available(self):
        return True, "test double"

    def forward(self, cfg, case):
        return run_reference(cfg, case)
"""


def test_a_report_judges_a_plugin_peer_by_its_declared_budget_in_its_workers(registry, tmp_path):
    (tmp_path / "loose_reference.py").write_text(_LOOSE_REFERENCE)
    spec = f"{tmp_path / 'loose_reference.py'}:LooseReference"
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"study": "compat", "config": {"mode": "gru", "dtype": "float32", "seq_len": 5,
                                                               "batch": 2, "seed": k}} for k in range(2)]))
    out = tmp_path / "run"
    assert cli.main(["report", "--plugin", spec, "--backends", "loose-reference", "--grid", str(grid),
                     "--out", str(out), "--jobs", "2", "--no-progress", "--no-figures"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert [(r["forward"]["output"]["budget"], r["forward"]["output_h"]["budget"]) for r in report["records"]] \
        == [(20.0, 16.0)] * 2
    assert {"peer": "loose-reference", "dtype": "float32", "quantity": "output", "bound": 20.0,
            "reason": "test double: a budget of its own"} in report["policy"]["overrides"]
    assert ("budget override: loose-reference (declared by its plugin) float32 output: 20 conditioned eps. "
            "test double: a budget of its own") in (out / "report.md").read_text()


def test_a_declared_divergence_is_a_strict_xfail_of_the_plugin_s_test():
    """The NaN test fails a plugin that eats NaN; declaring the divergence turns it into an expected
    failure, with the declared reason."""
    test = "compat_tests/tests/peers/test_forward.py::test_nan_input_propagates_to_its_own_sequence_only"
    options = ["-q", "-rfx", "-p", "no:cacheprovider", "-p", "no:xdist", "--peers", "nan-eater,nan-eater-declared"]
    run = subprocess.run([sys.executable, "-m", "pytest", test, *options], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, plugins.ENV: f"{HERE}:_NAN_EATERS"}, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 failed, 8 skipped, 1 xfailed" in run.stdout, run.stdout
    assert ("FAILED compat_tests/tests/peers/test_forward.py::"
            "test_nan_input_propagates_to_its_own_sequence_only[nan-eater-gru]") in run.stdout, run.stdout
    assert "XFAIL compat_tests/tests/peers/test_forward.py::test_nan_input_propagates_to_its_own_sequence_only" \
           "[nan-eater-declared-gru] - test double: NaN read as 0" in run.stdout, run.stdout


def test_a_plugin_declaring_a_mode_the_suite_does_not_know_is_refused_naming_the_spec(registry, tmp_path):
    odd = tmp_path / "odd_peer.py"
    odd.write_text("from compat_tests.peers import Capabilities\nCAPS = Capabilities(modes=('lstm', 'mgu'))\n")
    with pytest.raises(ValueError, match=f"plugin '{odd}:CAPS': importing {odd} failed: ValueError: "
                                         "Capabilities.modes must be a non-empty subset"):
        load_plugin(f"{odd}:CAPS")


def test_a_plugin_module_that_fails_on_import_is_named(registry, tmp_path):
    broken = tmp_path / "broken_peer.py"
    broken.write_text("raise RuntimeError('needs a licence server')\n")
    with pytest.raises(ValueError, match="broken_peer.py failed: RuntimeError: needs a licence server"):
        load_plugin(f"{broken}:PEER")


def test_entry_points_and_the_environment_are_loaded_and_a_broken_entry_point_is_unavailable(registry, monkeypatch):
    group = plugins.GROUP
    installed = [importlib.metadata.EntryPoint("echo", f"{HERE}:_GOOD", group),
                 importlib.metadata.EntryPoint("broken", "compat_tests.no_such_module:PEER", group),
                 importlib.metadata.EntryPoint("declares", f"{HERE}:_DECLARES", group),
                 importlib.metadata.EntryPoint("odd-policy", f"{HERE}:_OVERRIDE_ZERO", group)]
    asked = []
    monkeypatch.setattr(plugins.importlib.metadata, "entry_points",
                        lambda group: asked.append(group) or installed)
    monkeypatch.setenv(plugins.ENV, f"{BOTH}, ")
    fresh: dict[str, Peer] = {}
    plugins.load_all(fresh)
    assert asked == [plugins.GROUP]
    assert list(fresh) == ["installed-echo", "broken", "declares", "odd-policy", "my-gru", "my-textbook-gru"]
    assert fresh["installed-echo"] is _GOOD and "installed-echo" not in plugins.SPECS  # installed: no spec needed
    ok, why = fresh["broken"].available()
    assert not ok and "entry point broken = compat_tests.no_such_module:PEER failed to load: ModuleNotFoundError" in why
    assert tolerances.budget(fresh["declares"], "float32", "output") == _WIDE  # an installed peer's exceptions count
    ok, why = fresh["odd-policy"].available()  # ... once checked: a malformed one makes the peer unavailable
    assert not ok and "failed to load: ValueError: " in why and "bound 0: a budget is a positive finite" in why
    assert fresh["odd-policy"].overrides == () and tolerances.budget(fresh["odd-policy"], "float32", "output") \
        == tolerances.DEFAULTS[("float32", "forward")]
    with pytest.raises(RuntimeError, match="failed to load"):
        fresh["broken"].forward(RNNConfig("gru"), None)


_LOADS_ON_REQUEST = """
import importlib.metadata, sys

asked, installed = [], importlib.metadata.entry_points


def entry_points(**kw):  # counts the reads of the peers' group (other packages read theirs as they import)
    if kw.get("group") == "cudnn_rnn_compat.peers":
        asked.append(kw["group"])
        return []
    return installed(**kw)


importlib.metadata.entry_points = entry_points
import compat_tests.judge.calibration, compat_tests.cli, compat_tests.tests.conftest, compat_tests.report.sweep
from compat_tests import peers
from compat_tests.judge import tolerances

assert list(peers.PEERS) == list(peers.BUILT_IN) and not peers.plugins.SPECS and asked == [], (peers.PEERS, asked)
assert tolerances.all_overrides() == tolerances.OVERRIDES
print([p.name for p in peers.load_plugins()], [p.name for p in peers.load_plugins()], asked)
"""


def test_importing_loads_no_plugin_and_load_plugins_does_once():
    """No module loads a plugin as it is imported; ``load_plugins`` reads the installed entry points once and
    the environment's specs (already loaded: nothing more) at every call."""
    run = subprocess.run([sys.executable, "-c", _LOADS_ON_REQUEST], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, plugins.ENV: BOTH}, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip() == f"['my-gru', 'my-textbook-gru'] [] ['{plugins.GROUP}']"


def test_a_command_that_looks_peers_up_loads_the_environment_s_plugins(registry, monkeypatch, capsys):
    monkeypatch.setenv(plugins.ENV, BOTH)
    assert cli.main(["peers", "--json"]) == 0
    listed = {p["name"]: p["plugin"] for p in json.loads(capsys.readouterr().out)}
    assert listed["my-gru"] == BOTH and list(PEERS)[-2:] == ["my-gru", "my-textbook-gru"]


def test_an_installed_peer_whose_name_is_taken_is_left_out_with_a_warning(registry, monkeypatch):
    """Raising while the plugins load would stop every command, rnn-compat peers included."""
    group = plugins.GROUP
    installed = [importlib.metadata.EntryPoint("reference", f"{HERE}:_TAKES_A_BUILTIN_NAME", group),
                 importlib.metadata.EntryPoint("bad name", "compat_tests.no_such_module:PEER", group),
                 importlib.metadata.EntryPoint("echo", f"{HERE}:_GOOD", group)]
    monkeypatch.setattr(plugins.importlib.metadata, "entry_points", lambda group: installed)
    fresh = {"reference": PEERS["reference"]}
    with pytest.warns(UserWarning) as warned:
        plugins.load_all(fresh)
    assert list(fresh) == ["reference", "installed-echo"] and fresh["reference"] is PEERS["reference"]
    assert [str(w.message) for w in warned] == [
        f"entry point peer 'reference' (group {group}) left out: its name is taken",
        f"entry point peer 'bad name' (group {group}) left out: its name is not a peer name"]


@pytest.mark.parametrize(("fields", "error", "match"), [
    ({"max_layers": 0}, ValueError, "Capabilities.max_layers must be None \\(any depth\\) or an int >= 1, got 0"),
    ({"max_layers": True}, ValueError, "Capabilities.max_layers"),
    ({"lengths": 1}, TypeError, "Capabilities.lengths must be a bool, got 1"),
    ({"modes": ("lstm", "mgu")}, ValueError, "Capabilities.modes must be a non-empty subset"),
    ({"dtypes": ()}, ValueError, "Capabilities.dtypes must be a non-empty subset"),
])
def test_capabilities_refuse_what_the_strategies_would_misread(fields, error, match):
    """max_layers=0 would read as "any depth" in the strategies; a truthy 1 as a feature."""
    with pytest.raises(error, match=match):
        Capabilities(**fields)


def _example(name: str) -> Peer:
    return next(p for p in plugins.resolve(BOTH) if p.name == name)


@given(cfg=rnn_configs(Capabilities(modes=("gru",), dtypes=("float32", "float64"), skip_input=False,
                                    projection=False, lengths=False, batch_major=False, bidirectional=False,
                                    max_layers=1)), backward=st.booleans())
def test_the_example_port_passes_the_suite(cfg, backward):
    comparison = compare_peer(_example("my-gru"), cfg, backward=backward)
    assert comparison.passed, comparison.explain()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("cfg", [RNNConfig("gru", seq_len=1, initial_state=False),
                                 RNNConfig("gru", num_units=16, input_size=8, seq_len=30, batch=3)],
                         ids=["one-step-from-zero", "thirty-steps"])
def test_the_textbook_port_fails_the_suite(cfg, dtype):
    """The textbook candidate on cuDNN's weights is another function (even from a zero state, where it adds
    the whole recurrent bias instead of r times it): the verdict is a failure, not a rounding."""
    comparison = compare_peer(_example("my-textbook-gru"), cfg.with_(dtype=dtype))
    assert not comparison.passed
    assert comparison.verdicts["output"].conditioned_error > 1e3 * comparison.verdicts["output"].bound
    gradients = compare_peer(_example("my-textbook-gru"), cfg.with_(dtype=dtype), backward=True)
    assert not gradients.passed  # its backward is right for its own forward (see the test below), not cuDNN's
    assert gradients.verdicts["d_params"].conditioned_error > 1e3 * gradients.verdicts["d_params"].bound


@pytest.mark.parametrize("reset_after", [True, False], ids=["cudnn", "textbook"])
def test_the_example_backward_is_the_gradient_of_its_forward(reset_after):
    """Central finite differences (float64) of the example's loss ``sum(y * dy) + sum(h_T * dh)`` against
    its hand-written backward, for both candidates, so the textbook port fails for its forward alone."""
    example = sys.modules[type(_example("my-gru")).__module__]
    my_gru, my_gru_backward = example.my_gru, example.my_gru_backward
    rng = np.random.default_rng(7)
    T, B, I, H = 3, 2, 3, 4
    args = [rng.normal(size=s) for s in [(T, B, I), (B, H), (3 * H, I), (3 * H, H), (3 * H,), (3 * H,)]]
    dy, dh = rng.normal(size=(T, B, H)), rng.normal(size=(B, H))

    def loss():
        y, h = my_gru(*args, reset_after=reset_after)
        return float((y * dy).sum() + (h * dh).sum())

    trace: list = []
    my_gru(*args, reset_after=reset_after, trace=trace)
    analytic = my_gru_backward(args[0], trace, args[2], args[3], dy, dh, reset_after=reset_after)
    for a, g in zip(args, analytic):
        fd = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            old = a[i]
            a[i] = old + 1e-6
            up = loss()
            a[i] = old - 1e-6
            fd[i] = (up - loss()) / 2e-6
            a[i] = old
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def test_check_reproduces_a_plugin_failure_from_the_printed_command(registry, capsys):
    config = json.dumps({"mode": "gru", "dtype": "float32", "seq_len": 5})
    assert cli.main(["check", "--plugin", BOTH, "--peer", "my-gru", "--config", config]) == 0
    assert cli.main(["check", "--plugin", BOTH, "--peer", "my-textbook-gru", "--config", config]) == 1
    command = next(line for line in capsys.readouterr().out.splitlines()
                   if "reproduce:" in line and "my-textbook-gru" in line).split("reproduce: ")[1]
    argv = shlex.split(command)
    assert argv[:3] == ["rnn-compat", "check", "--plugin"] and argv[3] == BOTH
    for name in ("my-gru", "my-textbook-gru"):  # as in a fresh shell: only the command's --plugin brings them back
        PEERS.pop(name)
        plugins.SPECS.pop(name)
    assert cli.main(argv[1:]) == 1


def test_check_names_an_unknown_peer_and_the_plugin_option(registry, capsys):
    assert cli.main(["check", "--peer", "my-gru", "--config", '{"mode": "gru"}']) == 2
    err = capsys.readouterr().err
    assert "unknown peer 'my-gru'" in err and "--plugin MODULE:ATTR" in err


def test_peers_names_a_plugin_s_spec_and_what_it_lacks(registry, capsys):
    assert cli.main(["peers", "--json", "--plugin", BOTH]) == 0
    listed = {p["name"]: p for p in json.loads(capsys.readouterr().out)}
    mine = listed["my-gru"]
    assert (mine["plugin"], mine["modes"], mine["dtypes"]) == (BOTH, ["gru"], ["float32", "float64"])
    assert mine["lacks"] == {"relu, tanh, lstm, classic_gru": "my_gru is a GRU",
                             "float16": "my_gru computes in its inputs' dtype; no float16", "skip_input": "",
                             "projection": "", "sequence lengths": "my_gru runs every step", "batch-major": "",
                             "bidirectional": "", "padding_fill": "", "cell_clip": "", "packed sequences": "",
                             "bias_mode single_inp, single_rec, none": "",
                             "stacks of more than 1 layer(s)": "my_gru is one layer"}
    assert listed["reference"]["plugin"] is None


def test_report_runs_plugin_peers_in_worker_processes(registry, tmp_path):
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"study": "compat", "config": {"mode": m, "seq_len": 6, "batch": 3, "seed": k}}
                                for k, m in enumerate(("gru", "gru", "lstm"))]))
    out = tmp_path / "run"
    status = cli.main(["report", "--plugin", BOTH, "--backends", "my-gru,my-textbook-gru", "--grid", str(grid),
                       "--out", str(out), "--jobs", "2", "--no-progress", "--no-figures"])
    assert status == 1  # the textbook port fails
    report = json.loads((out / "report.json").read_text())
    assert [(b["name"], b["plugin"]) for b in report["backends"]] == [("my-gru", BOTH), ("my-textbook-gru", BOTH)]
    verdicts = {(r["backend"], r["config"]["seed"]): r["passed"] for r in report["records"]}
    assert verdicts == {("my-gru", 0): True, ("my-gru", 1): True,
                        ("my-textbook-gru", 0): False, ("my-textbook-gru", 1): False}  # the LSTM: unsupported
    failing = next(r for r in report["records"] if not r["passed"])
    assert f"--plugin {BOTH}" in failing["reproduce"]["forward"]
    assert f"(plugin `{BOTH}`)" in (out / "report.md").read_text()
    assert f"(plugin {BOTH})" in (out / "index.html").read_text()


@pytest.mark.parametrize(("peer", "passes", "how"), [("my-gru", True, "environment"),
                                                     ("my-textbook-gru", False, "rnn-compat test --plugin")])
def test_the_peer_suites_run_a_plugin(peer, passes, how):
    """Through ``RNN_COMPAT_PLUGINS`` with pytest itself, and through ``rnn-compat test --plugin``."""
    test = "compat_tests/tests/peers/test_forward.py::test_peer_matches_float64_reference"
    options = [test, "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--peers", peer]  # tests first (rnn-compat test)
    if how == "environment":
        command, env = [sys.executable, "-m", "pytest", *options], {plugins.ENV: BOTH, "HYPOTHESIS_PROFILE": "ci"}
    else:
        command, env = [sys.executable, "-m", "compat_tests.cli", "test", "--profile", "ci", "--plugin", BOTH,
                        *options], {plugins.ENV: ""}
    run = subprocess.run(command, cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=300)
    assert run.returncode == (0 if passes else 1), run.stdout + run.stderr
    reproduce = f"reproduce: rnn-compat check --plugin {BOTH} --peer {peer}"
    assert ("1 passed" in run.stdout) if passes else reproduce in run.stdout


def test_an_unknown_peer_in_pytest_names_the_plugin_variable():
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                          "--peers", "my-gru",
                          "compat_tests/tests/peers/test_forward.py::test_peer_matches_float64_reference"],
                         cwd=ROOT, env={**os.environ, plugins.ENV: ""}, capture_output=True, text=True, timeout=300)
    assert run.returncode != 0 and "RNN_COMPAT_PLUGINS=MODULE:ATTR" in run.stdout + run.stderr


@pytest.mark.parametrize("name", ["run_reference", "run_reference_backward", "ground_truth", "ground_truth_backward",
                                  "forward_case", "misaligned"])
def test_the_running_of_a_config_is_compat_tests_run_not_config(name):
    """A plugin runs a config with ``compat_tests.run`` (docs/peers.md); ``compat_tests.config`` holds the config
    and its arrays alone, with no shim that imports ``run`` back (the two imported each other)."""
    import compat_tests.config as config
    from compat_tests import run

    assert callable(getattr(run, name))
    with pytest.raises(AttributeError, match=f"has no attribute '{name}'"):
        getattr(config, name)
