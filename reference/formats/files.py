"""Writing files whole: every writer of a weight, state, output or report file goes through :func:`replacing`;
reading damaged ones without Python's escape warnings (:func:`quiet_escapes`); and every JSON document read
from a file or an argument parsed by :func:`load_json` (bounded nesting, no key named twice)."""

from __future__ import annotations

import json
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


# How deep a JSON document read from a file or an argument may nest: far beyond any config, header or record
# this project reads (a Keras model's config nests about a dozen levels), far below the interpreter's recursion
# limit, so that nothing that walks the parsed document later (json.dumps, a config check) can overflow it.
MAX_JSON_DEPTH = 100


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    found = dict(pairs)
    if len(found) != len(pairs):
        keys = [k for k, _ in pairs]
        twice = sorted({k for k in keys if keys.count(k) > 1})
        raise ValueError(f"a JSON object names {', '.join(map(repr, twice))} more than once")
    return found


def load_json(text: str | bytes, what: str, *, unique_keys: bool = True, max_depth: int = MAX_JSON_DEPTH) -> object:
    """The JSON document ``text`` (from a file, a header or an argument that ``what`` names): every reader of
    JSON goes through here. Refused with a ``ValueError`` naming ``what``: text that is not JSON (or not UTF-8),
    an object that names a key twice (``json`` would keep the last silently, so ``{"mode": "gru", "mode":
    "lstm"}`` would run an LSTM; ``unique_keys=False`` keeps JSON's own rule), and nesting deeper than
    ``max_depth`` levels (which would otherwise be a ``RecursionError`` here or in whatever walks the result)."""
    try:
        if isinstance(text, (bytes, bytearray, memoryview)):
            text = bytes(text).decode("utf-8")
        document = json.loads(text, object_pairs_hook=_unique_keys if unique_keys else None)
    except RecursionError:
        raise ValueError(f"{what} nests deeper than {max_depth} levels; refused") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{what} is not JSON (not UTF-8 text: {exc})") from None
    except ValueError as exc:  # JSONDecodeError, or a key named twice
        raise ValueError(f"{what} is not JSON ({exc})" if isinstance(exc, json.JSONDecodeError)
                         else f"{what}: {exc}") from None
    stack = [(document, 1)]  # (a container, its depth), walked without recursion
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            raise ValueError(f"{what} nests deeper than {max_depth} levels; refused")
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return document
