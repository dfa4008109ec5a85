"""A command's outputs (infer, convert): never one of its inputs (by name, path or link), checked before any
work, and never an existing file without --force."""

from __future__ import annotations

import os

import pytest

from compat_tests import cli


@pytest.mark.parametrize(("argv", "message"), [
    (["infer", "m.npz", "x.npy", "--out", "x.npy"], "--out x.npy is INPUT x.npy: writing it would replace an input"),
    (["infer", "m.npz", "x.npy", "--out", "./sub/../m.npz"], "--out sub/../m.npz is CHECKPOINT m.npz"),
    (["infer", "m.npz", "x.npy", "--out", "link.npy", "--force"], "--out link.npy is INPUT x.npy"),
    (["convert", "--to", "checkpoint", "m.npz", "m.npz"], "OUTPUT m.npz is INPUT m.npz"),
    (["convert", "--to", "checkpoint", "m.npz", "x.npy.npz", "--force"], None),
])
def test_an_output_that_is_an_input_is_refused_before_any_work(gru_checkpoint, argv, message, capsys):
    """``infer W a.npy --out a.npy`` silently replaced its input with its output."""
    (gru_checkpoint / "sub").mkdir()
    (gru_checkpoint / "link.npy").symlink_to(gru_checkpoint / "x.npy")
    before = {p.name: p.read_bytes() for p in gru_checkpoint.iterdir() if p.is_file()}
    if message is None:  # the control: another name is written
        assert cli.main(argv) == 0
        return
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in gru_checkpoint.iterdir() if p.is_file()} == before


@pytest.mark.parametrize("command", [["infer", "m.npz", "x.npy", "--out", "y.npz"],
                                     ["convert", "--to", "torch", "m.npz", "y.npz"],
                                     ["convert", "--to", "tf", "m.npz", "y"]])
def test_an_existing_output_is_replaced_only_with_force(gru_checkpoint, command, capsys):
    """Every existing output was overwritten without a word; as for a report's --out, it takes --force."""
    assert cli.main(command) == 0
    written = sorted(p for p in gru_checkpoint.iterdir() if p.name.startswith("y"))
    before = {p: p.read_bytes() for p in written}
    os.utime(written[0], (0, 0))
    assert cli.main(command) == 2
    assert "exists: pass --force to replace it" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in written} == before and written[0].stat().st_mtime == 0
    assert cli.main([*command, "--force"]) == 0
    assert written[0].stat().st_mtime > 0
