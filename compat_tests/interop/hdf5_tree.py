"""An HDF5 file's groups, text attributes and float datasets as plain Python and NumPy objects, read by h5py in
a child process. The HDF5 C library is not hardened against damaged files: one changed byte of a Keras
``.h5`` file crashes it when an attribute is read (SIGSEGV, ``compat_tests/data/hdf5_crash.h5``, found by
damaging files under this suite), which in process would kill ``rnn-compat`` or the caller's interpreter
without a word. Here a crash, or a read that does not end, is a ValueError. The child writes what it read
as an ``.npz`` (arrays) with a JSON description of the tree, loaded without pickle. A float dataset that
declares more bytes than the whole file stores (compressed, which Keras never does: a decompression bomb) is
refused before it is read.

Bytes come from the named file alone. HDF5 lets a file point elsewhere: a dataset may keep its bytes in another
file of the reader's machine (external storage), map other files' datasets (a virtual dataset) or pass them
through a filter that a plugin library provides, and a group member may be an external link into another file,
a soft link to a path, or a link of a user-defined class. The child checks every member for these, from the
file's own metadata, before it reads any dataset's bytes, and refuses the file at the first naming the member
and what it points at (:func:`_elsewhere`); h5py follows none of them while it checks, and no plugin can be
loaded in the child (``HDF5_PLUGIN_PRELOAD="::"``, an empty plugin path). Keras writes none of them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import BinaryIO

import numpy as np

TIMEOUT_S = 300


class Group:
    """One HDF5 group as the subset of ``h5py.Group`` that the readers use: ``name in group``,
    ``group[name]`` (a :class:`Group`, or a float dataset's array; ``None`` for another dataset; ``name``
    may be a ``/`` path), iteration over its members' names, ``len`` and ``attrs`` (text attributes:
    a string, or a list of strings)."""

    def __init__(self, tree: dict, arrays: dict[str, np.ndarray], path: str = "") -> None:
        self._tree, self._arrays, self._path = tree, arrays, path
        self.attrs: dict = tree[path]["attrs"]

    def _member(self, name: str) -> str:
        return f"{self._path}/{name}".strip("/")

    def __contains__(self, name: str) -> bool:
        return self._member(name) in self._tree

    def __getitem__(self, name: str):
        path = self._member(name)
        if path not in self._tree:
            raise KeyError(f"{self._path or '/'} has no member {name!r}")
        node = self._tree[path]
        if "dataset" in node:
            return None if node["dataset"] is None else self._arrays[node["dataset"]]
        return Group(self._tree, self._arrays, path)

    def __iter__(self):
        return iter(self._tree[self._path]["members"])

    def __len__(self) -> int:
        return len(self._tree[self._path]["members"])


def read(source: str | Path | BinaryIO) -> Group:
    """The root group of an HDF5 file (a path, or a binary stream such as an archive member, copied to a
    temporary file in chunks); a file that is not HDF5, or that the HDF5 library cannot read or crashes on,
    is a ValueError. Errors reading the stream propagate. Needs h5py (callers check, naming their feature)."""
    from reference.formats.files import load_json  # (here: as a script, the child imports NumPy and h5py alone)

    with tempfile.TemporaryDirectory() as folder:
        if not isinstance(source, (str, Path)):
            with open(Path(folder, "in.h5"), "wb") as copy:
                shutil.copyfileobj(source, copy)
            source = Path(folder, "in.h5")
        out = Path(folder, "tree.npz")
        try:
            run = subprocess.run([sys.executable, __file__, str(source), str(out)], capture_output=True, text=True,
                                 timeout=TIMEOUT_S, env={**os.environ, "HDF5_PLUGIN_PRELOAD": "::"})  # no plugin
            # (as a script: it imports NumPy and h5py alone)
        except subprocess.TimeoutExpired:
            raise ValueError(f"reading it as HDF5 took over {TIMEOUT_S} s (a damaged file?)") from None
        if run.returncode < 0:
            try:
                name = signal.Signals(-run.returncode).name
            except ValueError:
                name = f"signal {-run.returncode}"
            raise ValueError(f"the HDF5 library crashed reading it ({name}): a damaged file")
        if run.returncode != 0:
            lines = run.stderr.strip().splitlines()
            raise ValueError(lines[-1] if lines else f"reading it as HDF5 failed (exit status {run.returncode})")
        with np.load(out, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    tree = load_json(arrays.pop("__tree__").tobytes(), "the HDF5 tree's description")
    return Group(tree, arrays)


def layout(path: str | Path, leave_out: tuple[str, ...] = ()) -> dict:
    """Every group and dataset of a *trusted* HDF5 file (one written here or by Keras, in a test; read in this
    process), by path (the root is ``"/"``): its attributes as stored (bytes stay bytes, arrays become lists),
    and a dataset's dtype, shape and bytes; the root's attributes named in ``leave_out`` are left out."""
    import h5py

    def entry(node) -> tuple:
        attrs = {k: np.asarray(v).tolist() for k, v in node.attrs.items() if node.name != "/" or k not in leave_out}
        data = (node.dtype.str, node.shape, node[()].tobytes()) if isinstance(node, h5py.Dataset) else None
        return attrs, data

    with h5py.File(path, "r") as h5:
        found = {"/": entry(h5)}
        h5.visititems(lambda name, node: found.__setitem__(name, entry(node)))
    return found


def _text_attrs(attrs) -> dict:
    """The attributes that are text (a string, or an array of strings; an empty array reads as an empty list)."""
    found = {}
    for key in attrs:
        if not isinstance(key, str):  # a damaged name
            continue
        try:
            value = attrs[key]
        except (OSError, TypeError, ValueError):  # a type h5py cannot read: not one of the readers' attributes
            continue
        if isinstance(value, (bytes, str)):
            found[key] = _text(value)
        elif isinstance(value, np.ndarray) and (value.size == 0 or value.dtype.kind in "OSU"):
            found[key] = [_text(v) for v in value.ravel()]
    return found


# The filters HDF5 defines itself (H5Zpublic.h); any other is a plugin's, loaded from a shared library.
BUILT_IN_FILTERS = {1: "deflate", 2: "shuffle", 3: "fletcher32", 4: "szip", 5: "nbit", 6: "scaleoffset"}
REFUSED = "refused: a model file is read from its own bytes alone (nothing it points at was opened or loaded)"


def _elsewhere(h5) -> str | None:
    """The first member of the open file ``h5`` that points outside it, said in words (the member's path and
    what it points at), else None. Reads the file's metadata alone: links are read as links, never followed,
    and a dataset's creation properties are read, never its bytes. The members are those hard links reach,
    each object once (``visititems``, which follows hard links alone)."""
    import h5py
    from h5py import h5d, h5l

    def where(group, name: str) -> str:
        return f"{group.name.rstrip('/')}/{name}".lstrip("/") or "/"

    def link(group, name: str) -> str | None:
        key = name.encode()
        kind = group.id.links.get_info(key).type
        if kind == h5l.TYPE_HARD:
            return None
        if kind == h5l.TYPE_SOFT:
            return f"member {where(group, name)} is a soft link to {_text(group.id.links.get_val(key))}"
        if kind == h5l.TYPE_EXTERNAL:
            file, target = group.id.links.get_val(key)
            return f"member {where(group, name)} is an external link to {_text(target)} in the file {_text(file)}"
        return f"member {where(group, name)} is a link of the user-defined class {kind}"

    def dataset(name: str, obj) -> str | None:
        plist = obj.id.get_create_plist()
        if plist.get_external_count():
            files = [plist.get_external(i) for i in range(plist.get_external_count())]
            return (f"dataset {name} keeps its bytes in another file (HDF5 external storage): "
                    + ", ".join(f"{_text(f)} (offset {offset}, {size} bytes)" for f, offset, size in files))
        if plist.get_layout() == h5d.VIRTUAL:
            sources = [(plist.get_virtual_dsetname(i), plist.get_virtual_filename(i))
                       for i in range(plist.get_virtual_count())]
            return (f"dataset {name} is a virtual dataset mapping "
                    + ", ".join(f"{_text(d)} in the file {_text(f)}" for d, f in sources))
        for i in range(plist.get_nfilters()):
            code, _, _, label = plist.get_filter(i)
            if code not in BUILT_IN_FILTERS:
                return (f"dataset {name} passes its bytes through the filter {code} ({_text(label) or 'unnamed'}), "
                        f"which HDF5 does not define itself (a plugin library's)")
        return None

    def check(name: str, obj) -> str | None:
        if isinstance(obj, h5py.Dataset):
            return dataset(name, obj)
        for member in obj:
            found = link(obj, member)
            if found:
                return found
        return None

    return check("/", h5) or h5.visititems(check)


def _text(value) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _no_plugins(h5py) -> None:
    """No filter plugin can be loaded in this process: the plugin search path emptied (with the parent's
    ``HDF5_PLUGIN_PRELOAD="::"``, which turns plugin loading off where the library reads it)."""
    while h5py.h5pl.size():
        h5py.h5pl.remove(0)


def _dump(source: str, out: str) -> int:
    """The child: read ``source`` with h5py, write its tree and float datasets to ``out``; a file with a member
    that points outside it (:func:`_elsewhere`) is refused before any dataset's bytes are read."""
    import h5py

    _no_plugins(h5py)
    try:
        f = h5py.File(source, "r")
    except OSError as exc:
        print(f"not an HDF5 file ({exc})", file=sys.stderr)
        return 1
    tree: dict = {}
    arrays: dict[str, np.ndarray] = {}
    stored = os.path.getsize(source)
    inflated = [0]  # bytes of the datasets read so far: all of them together within the file's size

    def visit(path: str, obj) -> None:
        if isinstance(obj, h5py.Dataset):
            readable = obj.dtype.kind == "f" and obj.shape is not None
            size = obj.size * obj.dtype.itemsize if readable else 0
            if readable and inflated[0] + size > stored:  # (checked before anything is inflated)
                raise ValueError(f"dataset {path} declares {list(obj.shape)} {obj.dtype} ({size} bytes), which with "
                                 f"the {inflated[0]} bytes of the datasets before it is more than the whole file's "
                                 f"{stored}: compressed or fill-value weights (Keras writes neither) that would "
                                 f"inflate beyond what the file stores; refused")
            inflated[0] += size
            if readable:
                arrays[f"a{len(arrays)}"] = np.asarray(obj[()])
            tree[path] = {"dataset": f"a{len(arrays) - 1}" if readable else None, "attrs": {}}
        else:
            tree[path] = {"members": list(obj), "attrs": _text_attrs(obj.attrs)}

    try:  # whatever h5py raises on a damaged file (OSError, KeyError, TypeError, ...) means the same here
        with f:
            outside = _elsewhere(f)
            if outside:
                print(f"{outside}: {REFUSED}", file=sys.stderr)
                return 1
            visit("", f)
            f.visititems(visit)
        description = json.dumps(tree).encode()
    except Exception as exc:  # noqa: BLE001 (this process exists to read one file; the parent says why it failed)
        print(f"not a readable HDF5 file ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 1
    with open(out, "wb") as fh:
        np.savez(fh, __tree__=np.frombuffer(description, np.uint8), **arrays)
    return 0


if __name__ == "__main__":
    sys.exit(_dump(sys.argv[1], sys.argv[2]))
