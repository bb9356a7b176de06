"""Kernel signatures: the typed parameter list of a PTX ``.entry``, parsed from PTX text.

A :class:`ParamSpec` says what one kernel parameter is (PTX type, byte size and alignment in the
parameter buffer, and the *kind* of Python value it accepts); an :class:`EntrySignature` is the
ordered list of them plus the launch-relevant directives (``.reqntid``, ``.maxntid``,
``.reqnctapercluster``, ``.explicitcluster``).

>>> sig = parse_entry('''
... .visible .entry add(.param .u64 .ptr.global.align 16 x, .param .u32 n,
...                     .param .align 64 .b8 tmap[128], .param .f32 alpha)
... .reqntid 128, 1, 1
... { ret; }''')
>>> [(p.name, p.kind.value, p.size, p.align) for p in sig.params]
[('x', 'pointer', 8, 8), ('n', 'int', 4, 4), ('tmap', 'tensormap', 128, 64), ('alpha', 'float', 4, 4)]
>>> sig.params[0].pointer_align, sig.reqntid
(16, (128, 1, 1))
"""
from __future__ import annotations

import dataclasses
import enum
import re
from dataclasses import dataclass

__all__ = ["EntrySignature", "ParamKind", "ParamSpec", "SignatureError", "parse_entries", "parse_entry"]


class SignatureError(ValueError):
    """PTX text whose ``.entry`` parameter list cannot be read, or a parameter spec that contradicts it."""


class ParamKind(enum.Enum):
    """Which Python values a parameter accepts."""

    POINTER = "pointer"            # a device pointer: tensor, DeviceBuffer, array-interface object
    INT_OR_POINTER = "int_or_pointer"  # a plain 64-bit PTX integer: an int or a device pointer
    INT = "int"                    # an int in the PTX type's range
    FLOAT = "float"                # a float (or int) representable in the PTX float type
    TENSORMAP = "tensormap"        # a TensorMap, its 128 bytes passed by value
    BYTES = "bytes"                # any other by-value byte array: a bytes-like object of that size


# PTX scalar type -> (size in bytes, kind for a parameter of that type)
_SCALAR_TYPES = {
    "u8": (1, ParamKind.INT), "s8": (1, ParamKind.INT), "b8": (1, ParamKind.INT),
    "u16": (2, ParamKind.INT), "s16": (2, ParamKind.INT), "b16": (2, ParamKind.INT),
    "u32": (4, ParamKind.INT), "s32": (4, ParamKind.INT), "b32": (4, ParamKind.INT),
    "u64": (8, ParamKind.INT_OR_POINTER), "s64": (8, ParamKind.INT_OR_POINTER),
    "b64": (8, ParamKind.INT_OR_POINTER),
    "f16": (2, ParamKind.FLOAT), "f32": (4, ParamKind.FLOAT), "f64": (8, ParamKind.FLOAT),
}

TENSORMAP_BYTES = 128
# cuTensorMapEncodeTiled's CUtensorMap must sit 64-byte aligned, also in the kernel's param space.
TENSORMAP_MIN_PARAM_ALIGN = 64


@dataclass(frozen=True)
class ParamSpec:
    """One kernel parameter.

    ``size``/``align``: bytes the parameter occupies in the kernel's parameter buffer and the
    alignment of its offset there. ``pointer_align``: the byte alignment a pointer value must have
    (from ``.ptr.align N`` or a richer spec), 1 when nothing is required. ``dtype``: the element
    type a pointer points at, when a higher layer knows it (informational; used in messages).
    """

    name: str
    ptx_type: str
    kind: ParamKind
    size: int
    align: int
    pointer_align: int = 1
    dtype: str | None = None

    def __post_init__(self):
        if self.ptx_type not in _SCALAR_TYPES:
            raise SignatureError(f"parameter {self.name!r}: PTX type .{self.ptx_type} is not a "
                                 f"kernel parameter type layoutkit supports ({', '.join(_SCALAR_TYPES)})")
        if self.align <= 0 or self.align & (self.align - 1):
            raise SignatureError(f"parameter {self.name!r}: alignment {self.align} is not a power of two")
        if self.pointer_align <= 0 or self.pointer_align & (self.pointer_align - 1):
            raise SignatureError(f"parameter {self.name!r}: pointer alignment {self.pointer_align} "
                                 "is not a power of two")
        if self.kind in (ParamKind.POINTER, ParamKind.INT_OR_POINTER) and self.size != 8:
            raise SignatureError(f"parameter {self.name!r}: a pointer parameter must be 64-bit, "
                                 f"not .{self.ptx_type} ({self.size} bytes)")
        if self.kind is ParamKind.TENSORMAP and (self.size != TENSORMAP_BYTES
                                                 or self.align < TENSORMAP_MIN_PARAM_ALIGN):
            raise SignatureError(
                f"parameter {self.name!r}: a tensor map parameter is .b8[{TENSORMAP_BYTES}] with "
                f".align >= {TENSORMAP_MIN_PARAM_ALIGN}; got {self.size} bytes, .align {self.align}")

    @property
    def is_array(self) -> bool:
        return self.kind in (ParamKind.TENSORMAP, ParamKind.BYTES)

    def describe(self) -> str:
        """The parameter as PTX would declare it, e.g. ``.param .u64 .ptr.align 16 x``."""
        if self.is_array:
            return f".param .align {self.align} .b8 {self.name}[{self.size}]"
        ptr = f" .ptr.align {self.pointer_align}" if self.kind is ParamKind.POINTER else ""
        return f".param .{self.ptx_type}{ptr} {self.name}"

    def refined(self, richer: ParamSpec) -> ParamSpec:
        """This parsed spec with a higher layer's richer spec applied, checked for agreement.

        The richer spec may narrow the kind (a 64-bit integer becomes a pointer or only an integer), raise the pointer
        alignment and name a dtype; it may not change the name, byte size or slot alignment.
        """
        if richer.name != self.name:
            raise SignatureError(f"parameter spec {richer.name!r} given for PTX parameter {self.name!r}: "
                                 "specs must follow the .entry parameter order")
        if (richer.size, richer.align) != (self.size, self.align):
            raise SignatureError(
                f"parameter {self.name!r}: the richer spec says {richer.size} bytes aligned to "
                f"{richer.align} but the PTX declares {self.describe()}")
        allowed = ({self.kind, ParamKind.POINTER, ParamKind.INT} if self.kind is ParamKind.INT_OR_POINTER
                   else {self.kind})
        if self.kind is ParamKind.BYTES and self.size == TENSORMAP_BYTES:
            allowed.add(ParamKind.TENSORMAP)
        if richer.kind not in allowed:
            raise SignatureError(f"parameter {self.name!r}: kind {richer.kind.value} does not fit "
                                 f"the PTX declaration {self.describe()}")
        return dataclasses.replace(richer, ptx_type=self.ptx_type)

    @classmethod
    def scalar(cls, name: str, ptx_type: str) -> ParamSpec:
        """A number passed by value as PTX type ``ptx_type`` (``"u32"``, ``"s64"``, ``"f32"``, ...): an
        int in the type's range or a float; a 64-bit integer takes ints only, never a pointer.

        >>> ParamSpec.scalar("n", "s64").describe(), ParamSpec.scalar("n", "s64").kind.value
        ('.param .s64 n', 'int')
        """
        if ptx_type not in _SCALAR_TYPES:
            raise SignatureError(f"parameter {name!r}: .{ptx_type} is not a scalar PTX type "
                                 f"({', '.join(_SCALAR_TYPES)})")
        size, kind = _SCALAR_TYPES[ptx_type]
        return cls(name, ptx_type, ParamKind.INT if kind is ParamKind.INT_OR_POINTER else kind, size, size)

    @classmethod
    def pointer(cls, name: str, *, align: int = 1, dtype: str | None = None) -> ParamSpec:
        """A 64-bit device-pointer parameter whose value must be ``align``-byte aligned."""
        return cls(name, "u64", ParamKind.POINTER, 8, 8, pointer_align=align, dtype=dtype)

    @classmethod
    def tensormap(cls, name: str, *, align: int = TENSORMAP_MIN_PARAM_ALIGN) -> ParamSpec:
        """A CUtensorMap by value (``.param .align 64 .b8 name[128]``); takes a TensorMap.

        >>> ParamSpec.tensormap("tmap_a").describe()
        '.param .align 64 .b8 tmap_a[128]'
        """
        return cls(name, "b8", ParamKind.TENSORMAP, TENSORMAP_BYTES, align)


@dataclass(frozen=True)
class EntrySignature:
    """A kernel entry: its name, parameters in order and launch directives (None when absent)."""

    name: str
    params: tuple[ParamSpec, ...]
    reqntid: tuple[int, int, int] | None = None
    maxntid: tuple[int, int, int] | None = None
    reqnctapercluster: tuple[int, int, int] | None = None
    explicitcluster: bool = False

    def with_params(self, richer: list[ParamSpec] | tuple[ParamSpec, ...]) -> EntrySignature:
        """The signature with each parameter refined by a higher layer's spec (same count and order)."""
        if len(richer) != len(self.params):
            raise SignatureError(f"kernel {self.name!r} has {len(self.params)} parameters "
                                 f"but {len(richer)} parameter specs were given")
        return dataclasses.replace(self, params=tuple(p.refined(r) for p, r in zip(self.params, richer)))


_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$%][\w$]*)\s*(\()?")
_DIRECTIVE = re.compile(r"\.(reqntid|maxntid|reqnctapercluster)\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?"
                        r"|\.(explicitcluster)\b")
_PARAM = re.compile(
    r"^\.param\s+(?:\.align\s+(?P<align1>\d+)\s+)?\.(?P<type>[a-z]\d+)"
    r"(?P<ptr>\s+\.ptr(?:\s*\.(?:global|const|local|shared))?(?:\s*\.align\s+(?P<palign>\d+))?)?"
    r"(?:\s+\.align\s+(?P<align2>\d+))?\s+(?P<name>[A-Za-z_$%][\w$]*)\s*(?:\[\s*(?P<count>\d+)\s*\])?$")


def _param_spec(text: str, entry: str) -> ParamSpec:
    m = _PARAM.match(" ".join(text.split()))
    if not m:
        raise SignatureError(f"kernel {entry!r}: cannot read the parameter declaration {text.strip()!r}")
    name, ptx_type = m["name"], m["type"]
    if ptx_type not in _SCALAR_TYPES:
        raise SignatureError(f"kernel {entry!r}, parameter {name!r}: unsupported PTX type .{ptx_type}")
    size, kind = _SCALAR_TYPES[ptx_type]
    declared_align = m["align1"] or m["align2"]
    if m["count"] is not None:
        count = int(m["count"])
        total = size * count
        align = int(declared_align) if declared_align else size
        is_tmap = ptx_type == "b8" and total == TENSORMAP_BYTES and align >= TENSORMAP_MIN_PARAM_ALIGN
        return ParamSpec(name, ptx_type, ParamKind.TENSORMAP if is_tmap else ParamKind.BYTES, total, align)
    if m["ptr"]:
        return ParamSpec(name, ptx_type, ParamKind.POINTER, size, size,
                         pointer_align=int(m["palign"]) if m["palign"] else 1)
    return ParamSpec(name, ptx_type, kind, size, int(declared_align) if declared_align else size)


def _split_params(body: str) -> list[str]:
    return [p for p in (s.strip() for s in body.split(",")) if p]


def _dims(groups) -> tuple[int, int, int]:
    vals = [int(g) for g in groups if g is not None]
    return tuple(vals + [1] * (3 - len(vals)))  # type: ignore[return-value]


def parse_entries(ptx: str) -> dict[str, EntrySignature]:
    """Every ``.entry`` in the PTX module text, by name, in order of appearance."""
    text = _COMMENTS.sub(" ", ptx)
    entries: dict[str, EntrySignature] = {}
    for m in _ENTRY.finditer(text):
        name = m[1]
        pos = m.end()
        params: list[ParamSpec] = []
        if m[2]:
            close = text.find(")", pos)
            if close < 0:
                raise SignatureError(f"kernel {name!r}: the parameter list is not closed with ')'")
            params = [_param_spec(p, name) for p in _split_params(text[pos:close])]
            pos = close + 1
        body = text.find("{", pos)
        if body < 0:
            raise SignatureError(f"kernel {name!r}: no body '{{' follows the parameter list")
        found = {"explicitcluster": False}
        for d in _DIRECTIVE.finditer(text[pos:body]):
            if d[5]:
                found["explicitcluster"] = True
            else:
                found[d[1]] = _dims(d.groups()[1:4])
        names = [p.name for p in params]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise SignatureError(f"kernel {name!r}: parameter name(s) {sorted(dup)} declared twice")
        if name in entries:
            raise SignatureError(f"the PTX module declares .entry {name!r} twice")
        entries[name] = EntrySignature(name, tuple(params), **found)
    return entries


def parse_entry(ptx: str, name: str | None = None) -> EntrySignature:
    """The signature of entry ``name``; with ``name=None`` the module must hold exactly one entry."""
    entries = parse_entries(ptx)
    if name is not None:
        if name not in entries:
            raise SignatureError(f"the PTX module has no .entry {name!r}; it has {sorted(entries) or 'none'}")
        return entries[name]
    if len(entries) != 1:
        raise SignatureError(f"the PTX module has {len(entries)} entries ({sorted(entries)}); "
                             "name the one to launch")
    return next(iter(entries.values()))
