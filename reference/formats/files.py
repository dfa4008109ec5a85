"""Writing files whole: every writer of a weight, state, output or report file goes through :func:`replacing`;
and reading damaged ones without Python's escape warnings (:func:`quiet_escapes`)."""

from __future__ import annotations

import os
import secrets
import shutil
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """A fresh temporary path beside ``path`` (same folder, a hidden name of its own per call) to write to;
    it replaces ``path`` only once the block finishes, keeping the mode of the file it replaces (a symlink's
    target is replaced, not the link). A write that raises leaves ``path`` as it was (a file it was to
    overwrite stays whole) and removes the partial file; a hard kill may leave that hidden file beside it.
    Writers that add a suffix to names without one (``np.save``, ``np.savez``) must be given an open file."""
    path = Path(path)
    if path.is_symlink():
        path = Path(os.path.realpath(path))  # (a link loop resolves to a path whose write then fails, no hang)
    if not path.parent.is_dir():  # (else the error would name the hidden partial file)
        raise FileNotFoundError(f"cannot write {path}: there is no folder {path.parent}")
    if path.is_dir():
        raise IsADirectoryError(f"cannot write {path}: it is a folder")
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.partial")
    try:
        yield tmp
        try:
            shutil.copymode(path, tmp)
        except OSError:  # no old file, or its mode cannot be read: the new one keeps the default mode
            pass
        os.replace(tmp, path)
    except OSError as exc:  # writing the partial file or moving it: named by the file asked for
        if str(tmp) not in (exc.filename, exc.filename2):
            raise
        raise type(exc)(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def quiet_escapes() -> Iterator[None]:
    """No "invalid escape sequence" warning while text from a file is decoded as a Python literal would be
    (NumPy parses a ``.npy`` header as one, ``pickletools`` decodes a pickle's ``STRING``): a damaged file's
    ``"\\,"`` is refused or read as it is, without a warning about Python syntax."""
    with warnings.catch_warnings():
        for category in (DeprecationWarning, SyntaxWarning):
            warnings.filterwarnings("ignore", "invalid escape sequence", category)
        yield
