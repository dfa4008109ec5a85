"""Read the cuDNN C headers that ship with the library, to check the ctypes binding against them on a CPU.

A ctypes declaration that disagrees with the C prototype (a ``size_t`` declared ``int``, an argument
missing, an ``int*`` where cuDNN writes a ``size_t``) does not fail cleanly: it corrupts the stack or
memory on the first call, on a GPU. So ``cudnn_backend._lib``'s ``SIGNATURES`` and enum values are checked
against ``cudnn_*.h`` wherever the headers are installed (the ``nvidia-cudnn-cu13`` wheel ships them in
``nvidia/cudnn/include``, next to ``lib/``).

Only what the binding needs is understood: ``typedef enum {...} name;`` blocks, ``#define NAME value``,
opaque handle typedefs, and prototypes written ``<return type> CUDNNWINAPI name(args);``. Types are reduced
to a *kind* that decides ABI compatibility: ``("int", size, signed)``, ``("float", size)``,
``("ptr", pointee kind or None for void/opaque)``.
"""

from __future__ import annotations

import ast
import ctypes
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

Kind = tuple

# C scalar types the cuDNN prototypes use, by their spelling after const/qualifiers are removed.
_SCALARS: dict[str, Kind] = {
    "int": ("int", ctypes.sizeof(ctypes.c_int), True),
    "unsigned": ("int", ctypes.sizeof(ctypes.c_uint), False),
    "unsigned int": ("int", ctypes.sizeof(ctypes.c_uint), False),
    "int32_t": ("int", 4, True),
    "uint32_t": ("int", 4, False),
    "int64_t": ("int", 8, True),
    "uint64_t": ("int", 8, False),
    "long": ("int", ctypes.sizeof(ctypes.c_long), True),
    "long long": ("int", ctypes.sizeof(ctypes.c_longlong), True),
    "unsigned long long": ("int", ctypes.sizeof(ctypes.c_ulonglong), False),
    "size_t": ("int", ctypes.sizeof(ctypes.c_size_t), False),
    "float": ("float", 4),
    "double": ("float", 8),
    "char": ("int", 1, True),
}
# Opaque pointer types that come from the CUDA headers rather than cuDNN's.
_FOREIGN_HANDLES = {"cudaStream_t", "cudaEvent_t"}
_QUALIFIERS = {"const", "volatile", "struct", "enum", "CUDNN_DEPRECATED", "CUDNN_DEPRECATED_ENUM"}


@dataclass(frozen=True)
class Prototype:
    name: str
    restype: str
    argtypes: tuple[str, ...]  # C spellings, e.g. "const int32_t *", "cudnnHandle_t"
    argnames: tuple[str, ...] = ()  # the parameters' names, "" where the header gives none


@dataclass
class Headers:
    """What the headers of one include directory declare."""

    include_dir: Path
    version: tuple[int, int, int]
    prototypes: dict[str, Prototype] = field(default_factory=dict)
    constants: dict[str, Optional[int]] = field(default_factory=dict)  # enumerators and #defines
    enum_types: set[str] = field(default_factory=set)
    handle_types: set[str] = field(default_factory=set)

    def kind(self, ctype: str) -> Kind:
        """The ABI kind of a C type spelling; ``ValueError`` for one this reader does not know."""
        spelled = ctype.replace("[]", "*").strip()
        if spelled.endswith("*"):
            pointee = spelled[:-1].strip()
            if _strip(pointee) == "void":
                return ("ptr", None)
            return ("ptr", self.kind(pointee))
        name = _strip(spelled)
        if name in _SCALARS:
            return _SCALARS[name]
        if name in self.enum_types:
            return ("int", ctypes.sizeof(ctypes.c_int), True)
        if name in self.handle_types or name in _FOREIGN_HANDLES:
            return ("ptr", None)
        raise ValueError(f"unknown C type {ctype!r}")


def ctypes_kind(t) -> Kind:
    """The ABI kind of a ctypes type (``None`` = ``void`` is not asked for here)."""
    if t is ctypes.c_void_p:
        return ("ptr", None)
    if t is ctypes.c_char_p:
        return ("ptr", _SCALARS["char"])
    if isinstance(t, type) and issubclass(t, ctypes._Pointer):
        return ("ptr", ctypes_kind(t._type_))
    code = getattr(t, "_type_", None)
    if isinstance(code, str) and code in "bBhHiIlLqQ":
        return ("int", ctypes.sizeof(t), code.islower())
    if isinstance(code, str) and code in "fd":
        return ("float", ctypes.sizeof(t))
    raise ValueError(f"unhandled ctypes type {t!r}")


def compatible(declared: Kind, c_kind: Kind) -> bool:
    """Whether an argument declared as ``declared`` is passed as C expects ``c_kind``.

    ``c_void_p`` passes any pointer (pointers share one size); a typed ctypes pointer must point at what
    C points at, since cuDNN writes through it.
    """
    if declared == ("ptr", None):
        return c_kind[0] == "ptr"
    if declared[0] == "ptr" and c_kind[0] == "ptr":
        return c_kind[1] is not None and compatible(declared[1], c_kind[1])
    return declared == c_kind


def _strip(ctype: str) -> str:
    return " ".join(w for w in ctype.split() if w not in _QUALIFIERS)


def _uncomment(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def _split_declaration(arg: str) -> tuple[str, str]:
    """``const int32_t devSeqLengths[]`` -> ``("const int32_t *", "devSeqLengths")``: the type and the
    parameter's name ("" for an unnamed one)."""
    arg = " ".join(arg.split())
    array = arg.endswith("]")
    arg = re.sub(r"\[[^\]]*\]$", "", arg).strip()
    m = re.match(r"^(.*?[\s\*])(\w+)$", arg)
    name = ""
    if m and _strip(m.group(1).replace("*", " ")).strip():  # a named parameter: split the name off
        arg, name = m.group(1), m.group(2)
    arg = re.sub(r"\s*\*\s*", " *", arg.strip()).strip()
    return arg + (" *" if array else ""), name


_INT_LITERAL = re.compile(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\b")


def _evaluate(expr: str, known: dict[str, Optional[int]]) -> Optional[int]:
    """An integer constant expression of literals, known names, ``| & << >> + - ~`` and parentheses."""
    expr = _INT_LITERAL.sub(lambda m: m.group(1), expr.strip())
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        return None

    def value(node) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name) and known.get(node.id) is not None:
            return known[node.id]  # type: ignore[return-value]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Invert, ast.UAdd)):
            v = value(node.operand)
            return -v if isinstance(node.op, ast.USub) else ~v if isinstance(node.op, ast.Invert) else v
        ops = {ast.BitOr: int.__or__, ast.BitAnd: int.__and__, ast.LShift: int.__lshift__,
               ast.RShift: int.__rshift__, ast.Add: int.__add__, ast.Sub: int.__sub__}
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            return ops[type(node.op)](value(node.left), value(node.right))
        raise ValueError(ast.dump(node))

    try:
        return value(tree.body)
    except ValueError:
        return None


def parse(text: str, headers: Headers) -> None:
    """Add what one header's text declares to ``headers``."""
    for m in re.finditer(r"^\s*#\s*define\s+(\w+)[ \t]+([^\n]+)$", text, flags=re.M):
        headers.constants.setdefault(m.group(1), _evaluate(_uncomment(m.group(2)), headers.constants))
    text = _uncomment(text)
    for m in re.finditer(r"typedef\s+enum\s*\w*\s*\{(.*?)\}\s*(\w+)\s*;", text, flags=re.S):
        headers.enum_types.add(m.group(2))
        following = 0
        for item in m.group(1).split(","):
            item = " ".join(w for w in item.split() if w not in _QUALIFIERS)
            if not item:
                continue
            name, _, expr = item.partition("=")
            name = name.strip()
            value = _evaluate(expr, headers.constants) if expr else following
            headers.constants[name] = value
            following = value + 1 if value is not None else None
    for m in re.finditer(r"typedef\s+(?:struct\s+)?\w+\s*\*\s*(\w+)\s*;", text):
        headers.handle_types.add(m.group(1))
    for m in re.finditer(r"([\w\s\*]+?)\s*\bCUDNNWINAPI\s+(\w+)\s*\(([^;{]*?)\)\s*;", text, flags=re.S):
        restype, _ = _split_declaration(m.group(1).split("\n")[-1] if "\n" in m.group(1) else m.group(1))
        restype = _strip(restype.replace("*", " *")).replace(" *", "*").strip() or "void"
        args = [a.strip() for a in m.group(3).split(",")]
        declared = [] if args in ([""], ["void"]) else [_split_declaration(a) for a in args]
        headers.prototypes[m.group(2)] = Prototype(m.group(2), restype, tuple(t for t, _ in declared),
                                                   tuple(n for _, n in declared))


def read(include_dir: Path) -> Headers:
    """Parse every ``cudnn*.h`` in ``include_dir`` (the versioned ``*_v9.h`` copies are skipped)."""
    include_dir = Path(include_dir)
    version_text = (include_dir / "cudnn_version.h").read_text(errors="replace")
    version = tuple(int(re.search(rf"#define CUDNN_{part}\s+(\d+)", version_text).group(1))  # type: ignore[union-attr]
                    for part in ("MAJOR", "MINOR", "PATCHLEVEL"))
    headers = Headers(include_dir, version)  # type: ignore[arg-type]
    names = sorted(p for p in include_dir.glob("cudnn*.h") if not re.search(r"_v\d+\.h$", p.name))
    for name in sorted(names, key=lambda p: p.name != "cudnn_graph.h"):  # base enums first
        parse(name.read_text(errors="replace"), headers)
    return headers


def find_include_dirs(library_paths) -> list[Path]:
    """``include/`` directories beside the ``lib/`` of each candidate library path, that hold cuDNN headers."""
    found = []
    for path in library_paths:
        include = Path(path).parent.parent / "include"
        if (include / "cudnn_version.h").is_file() and include not in found:
            found.append(include)
    system = Path("/usr/include/cudnn_version.h")
    if system.is_file() and system.parent not in found:
        found.append(system.parent)
    return found


def mismatches(signatures: dict, headers: Headers) -> list[str]:
    """Every way ``signatures`` (``name -> (argtypes, restype)``, as in ``cudnn_backend._lib``) disagrees
    with the headers; empty when they agree. ``restype`` ``None`` stands for ``cudnnStatus_t``."""
    problems = []
    for name, (argtypes, restype) in signatures.items():
        proto = headers.prototypes.get(name)
        if proto is None:
            problems.append(f"{name}: not declared in {headers.include_dir}")
            continue
        if len(argtypes) != len(proto.argtypes):
            problems.append(f"{name}: {len(argtypes)} arguments declared, the header has {len(proto.argtypes)}: "
                            f"{', '.join(proto.argtypes)}")
            continue
        for position, (declared, ctype) in enumerate(zip(argtypes, proto.argtypes)):
            if not compatible(ctypes_kind(declared), headers.kind(ctype)):
                problems.append(f"{name}: argument {position} declared {declared.__name__}, the header has {ctype}")
        if restype is None:
            if proto.restype != "cudnnStatus_t":
                problems.append(f"{name}: declared to return cudnnStatus_t, the header has {proto.restype}")
        elif restype == "void":
            if proto.restype != "void":
                problems.append(f"{name}: declared void, the header returns {proto.restype}")
        elif proto.restype == "void" or not compatible(ctypes_kind(restype), headers.kind(proto.restype)):
            problems.append(f"{name}: declared to return {restype.__name__}, the header has {proto.restype}")
    return problems
