"""PTX scalar and packed types, with the register file each one lives in.

One table (`TYPES`) holds every fact: bit width, kind, the `.reg` declaration type and the
register-name prefix. bf16/bf16x2 have no `.reg` type of their own in PTX (ptxas rejects
`.reg .bf16`), so they live in `.b16`/`.b32` registers while keeping their logical type here.
"""
from __future__ import annotations

from dataclasses import dataclass

_INT_KINDS = ("unsigned", "signed")


@dataclass(frozen=True)
class PTXType:
    """A PTX type: `name` as written after the dot, `bits` of storage, `kind` in
    {"bits", "unsigned", "signed", "float", "pred"}, `lanes` = 2 for packed x2 types."""

    name: str
    bits: int
    kind: str
    reg_decl: str
    prefix: str
    lanes: int = 1

    def __str__(self) -> str:
        return self.name

    @property
    def is_int(self) -> bool:
        """Unsigned or signed integer (not .bN)."""
        return self.kind in _INT_KINDS

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_pred(self) -> bool:
        return self.kind == "pred"

    @property
    def nbytes(self) -> int:
        return max(self.bits // 8, 1)


def _t(name, bits, kind, prefix, reg_decl=None, lanes=1) -> PTXType:
    return PTXType(name, bits, kind, reg_decl or name, prefix, lanes)


# Register-name prefixes are distinct per type, so names never collide across register files.
TYPES: dict[str, PTXType] = {t.name: t for t in (
    _t("pred", 1, "pred", "%p"),
    _t("b8", 8, "bits", "%bc"), _t("u8", 8, "unsigned", "%uc"), _t("s8", 8, "signed", "%sc"),
    _t("b16", 16, "bits", "%rs"), _t("u16", 16, "unsigned", "%us"), _t("s16", 16, "signed", "%ss"),
    _t("b32", 32, "bits", "%r"), _t("u32", 32, "unsigned", "%u"), _t("s32", 32, "signed", "%s"),
    _t("b64", 64, "bits", "%rd"), _t("u64", 64, "unsigned", "%ud"), _t("s64", 64, "signed", "%sd"),
    _t("f16", 16, "float", "%h"), _t("f16x2", 32, "float", "%hh", lanes=2),
    _t("bf16", 16, "float", "%bf", reg_decl="b16"),
    _t("bf16x2", 32, "float", "%bff", reg_decl="b32", lanes=2),
    _t("f32", 32, "float", "%f"), _t("f64", 64, "float", "%fd"),
)}


def ptx_type(value: "PTXType | str") -> PTXType:
    """Coerce a type name ('f32' or '.f32') or a PTXType to a PTXType.

    >>> ptx_type(".bf16x2").bits
    32
    """
    if isinstance(value, PTXType):
        return value
    if isinstance(value, str) and value.lstrip(".") in TYPES:
        return TYPES[value.lstrip(".")]
    from .errors import PTXTypeError
    raise PTXTypeError(f"unknown PTX type; known types: {', '.join(TYPES)}", value=value)


def reg_compatible(instr: PTXType, reg: PTXType) -> bool:
    """PTX operand type-checking: may a register of type `reg` be used where `instr` is expected?

    Same size always required. .bN instructions take any type of that size; .uN/.sN take
    .bN/.uN/.sN; float instructions take the same float type or .bN (PTX ISA, "Operand type
    information"). bf16 registers count as float here although they are declared .b16/.b32,
    so a bf16 value cannot slip into an integer or f32 instruction by accident.

    >>> reg_compatible(TYPES["u32"], TYPES["s32"]), reg_compatible(TYPES["u32"], TYPES["f32"])
    (True, False)
    """
    instr_kind, reg_kind = instr.kind, reg.kind      # (the lowering asks this per operand)
    if instr_kind == "pred" or reg_kind == "pred":
        return instr_kind == reg_kind
    if instr.bits != reg.bits:
        return False
    if instr_kind == "bits":
        return True
    if instr_kind in _INT_KINDS:
        return reg_kind in _INT_KINDS or reg_kind == "bits"
    return instr is reg or instr == reg or reg_kind == "bits"
