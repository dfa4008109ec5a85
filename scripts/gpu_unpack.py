"""Put what ``scripts/gpu_run.sh`` returned from a GPU under ``reports/gpu/<device>-cudnn<version>/`` (another
whole run on the same device and cuDNN under ``<device>-cudnn<version>-2/``, ``-3/``, ...; a re-run of failed
rungs, ``--rerun-failed`` or ``--rungs``, under the newest whole run's ``rerun-N/``), and write its report again there (``rnn-compat render``: whole even where the GPU image lacked matplotlib for
the figures or the report step was cut short; the GPU machine's environment is kept).

    python scripts/gpu_unpack.py PATH [--into reports/gpu]

PATH: the ``gpu_run.tar.gz`` the device tool returned, or the folder holding it. The archive is extracted
with tarfile's ``data`` filter (no absolute paths, links out of the folder or device files). Prints the
folder it wrote; commit it as it is.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ARCHIVE = "gpu_run.tar.gz"


def folder_name(versions: dict, n: int = 1) -> str:
    """``<device>-cudnn<version>``, lower case, letters, digits, dots and dashes only; the ``n``-th whole run on
    the same device and cuDNN (n > 1) gets ``-<n>`` after it."""
    name = f"{versions.get('device') or 'unknown-device'}-cudnn{versions.get('cudnn') or 'unknown'}"
    return numbered(re.sub(r"[^a-z0-9.]+", "-", name.lower()).strip("-"), n)


def numbered(name: str, n: int) -> str:
    """The folder of the ``n``-th whole run named ``name``: ``name`` itself, then ``name-2``, ``name-3``, ..."""
    return name if n == 1 else f"{name}-{n}"


def whole_runs(into: Path, name: str) -> list[Path]:
    """The whole runs unpacked under ``into`` for the folder ``name``: ``name``, ``name-2``, ``name-3``, ...
    as far as they go, oldest first (a re-run is filed beside the newest)."""
    runs = []
    while (run := into / numbered(name, len(runs) + 1)).is_dir():
        runs.append(run)
    return runs


def _member_text(tar: tarfile.TarFile, member: str) -> str | None:
    try:
        return tar.extractfile(member).read().decode()
    except (KeyError, AttributeError):
        return None


def unpack(path: Path, into: Path) -> Path:
    """Extract the archive at ``path`` (or ``path/gpu_run.tar.gz``) into a new folder under ``into``, render
    its report if it has one, and return the folder."""
    if not hasattr(tarfile, "data_filter"):
        raise ValueError("extracting safely needs tarfile's data filter (Python >= 3.11.4)")
    archive = path / ARCHIVE if path.is_dir() else path
    if not archive.is_file():
        raise ValueError(f"{archive} does not exist: give gpu_run.sh's {ARCHIVE} or the folder holding it")
    with tarfile.open(archive) as tar:
        try:
            versions = json.load(tar.extractfile("./versions.json"))
        except KeyError:
            raise ValueError(f"{archive} holds no versions.json: the GPU run stopped before it knew its "
                             f"device (its summary.txt says why)") from None
        runs = whole_runs(into, folder_name(versions))
        if "./rerun.txt" in tar.getnames():  # gpu_run.sh --rerun-failed / --rungs: beside the run it re-runs
            target = runs[-1] if runs else into / folder_name(versions)
            target = target / f"rerun-{1 + sum(1 for _ in target.glob('rerun-*'))}"
        else:
            summary = _member_text(tar, "./summary.txt")
            for run in runs:
                if summary is not None and (run / "summary.txt").is_file() and \
                        (run / "summary.txt").read_text() == summary:
                    raise ValueError(f"{run} exists already and holds this run (the same summary.txt)")
            target = into / folder_name(versions, len(runs) + 1)
        if target.exists():
            raise ValueError(f"{target} exists already: move it away first")
        target.mkdir(parents=True)
        tar.extractall(target, filter="data")
    if (target / "report" / "run.json").is_file():
        from compat_tests import cli

        cli.main(["render", str(target / "report")])  # its status is the report's verdict, kept in the report
    return target


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("path", type=Path)
    p.add_argument("--into", type=Path, default=ROOT / "reports" / "gpu")
    args = p.parse_args(argv)
    try:
        target = unpack(args.path, args.into)
    except (ValueError, OSError, tarfile.TarError) as exc:
        print(f"gpu_unpack: {exc}", file=sys.stderr)
        return 2
    print(f"unpacked into {target}; summary:\n{(target / 'summary.txt').read_text()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
