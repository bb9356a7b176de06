"""The kernel builder: parameters, SSA registers, labels, guards, source lines and the body.

A `KernelBuilder` is made by `Module.kernel`. Instruction families (layoutkit.ptx.isa) validate their
operands and call `KernelBuilder.emit`; the DSL does the same when it lowers its IR. Registers are
strict SSA: `reg(type)` gives a fresh register that may be written once; `var(type)` gives a
mutable one for loop-carried values (a reused temporary once hung a pipeline: hopper-ptx.md §3.7).
An SSA register that is read must be written by some instruction (checked at `text()`).
"""
from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass

from .directives import Directives
from .errors import PTXBuildError, PTXDirectiveError, PTXLabelError, PTXSSAError, PTXTypeError
from .instruction import INDENT, Comment, Instruction, LabelLine, RawInstruction
from .operands import Address, Label, NotPred, Reg, Symbol, Vector
from .raw_text import check_raw, register_names, terminated
from .source_location import SourceLocation, user_location
from .target import BASELINE, Requirement
from .types import TYPES, PTXType, ptx_type

IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_$]*|[_$][A-Za-z0-9_$]+")
TENSORMAP_BYTES = 128


def check_identifier(what: str, name: str) -> str:
    if not isinstance(name, str) or not IDENTIFIER.fullmatch(name):
        raise PTXDirectiveError("a PTX identifier is a letter then letters, digits, '_' or '$'",
                                operand=what, value=name)
    return name


@dataclass(frozen=True)
class Param:
    """A kernel parameter. Scalars/pointers have a `type`; a by-value byte array (the
    CUtensorMap) has `type` None, `nbytes` and `align`. `address` is `[name]` for ld.param;
    `symbol` is the bare name (for `cvta.param.u64 %rd, name`)."""

    name: str
    type: PTXType | None
    nbytes: int = 0
    align: int = 0

    @property
    def symbol(self) -> Symbol:
        return Symbol(self.name, "param")

    @property
    def address(self) -> Address:
        return Address(self.symbol)

    def declaration(self) -> str:
        if self.type is None:
            return f".param .align {self.align} .b8 {self.name}[{self.nbytes}]"
        return f".param .{self.type.name} {self.name}"


class KernelBuilder:
    """One `.visible .entry`. See the module docstring; build it with `Module.kernel`."""

    def __init__(self, module, name: str, directives: Directives):
        self.module = module
        self.name = check_identifier("kernel name", name)
        self.directives = directives
        self.params: list[Param] = []
        self.lines: list = []
        self._counts: dict[str, int] = {}
        self._defined: set[str] = set()
        self._owned: set[str] = set()
        self._labels_made: set[str] = set()
        self._labels_placed: set[str] = set()
        self._labels_used: dict[str, SourceLocation | None] = {}
        self._raw_registers: set[str] = set()
        self._shared_decls: list[str] = []
        self._guard: Reg | NotPred | None = None
        self._location: SourceLocation | None = None

    # ---- parameters -------------------------------------------------------------------------
    def _add_param(self, param: Param) -> Param:
        if any(p.name == param.name for p in self.params) or param.name in self.module.symbols:
            raise PTXDirectiveError("parameter names must be unique in the kernel and must not "
                                    "shadow a module symbol", operand="parameter", value=param.name)
        self.params.append(param)
        return param

    def param(self, name: str, dtype: "PTXType | str") -> Param:
        """A scalar parameter (`.param .u32 n`); read it with isa `ld_param`."""
        ptype = ptx_type(dtype)
        if ptype.is_pred or ptype.reg_decl != ptype.name:
            raise PTXTypeError("a parameter has a plain scalar type (no .pred, .bf16, .bf16x2)",
                               operand=name, value=ptype.name)
        return self._add_param(Param(check_identifier("parameter", name), ptype))

    def pointer_param(self, name: str) -> Param:
        """A device pointer parameter (`.param .u64 name`)."""
        return self.param(name, "u64")

    def tensormap_param(self, name: str, *, align: int = 64) -> Param:
        """A CUtensorMap by value: `.param .align 64 .b8 name[128]`. Its generic address for
        TMA is `cvta.param.u64 %rd, name` (isa `cvta_param`), not `mov` (hopper-ptx.md §1)."""
        if align not in (64, 128):
            raise PTXDirectiveError("a CUtensorMap parameter is 64- or 128-byte aligned",
                                    operand=name, value=align)
        return self._add_param(Param(check_identifier("parameter", name), None,
                                     TENSORMAP_BYTES, align))

    # ---- registers --------------------------------------------------------------------------
    def _new(self, dtype, mutable: bool) -> Reg:
        ptype = ptx_type(dtype)
        index = self._counts.get(ptype.name, 0)
        self._counts[ptype.name] = index + 1
        reg = Reg(f"{ptype.prefix}{index}", ptype, mutable)
        self._owned.add(reg.name)
        return reg

    def reg(self, dtype: "PTXType | str") -> Reg:
        """A fresh single-assignment register (written by exactly one instruction)."""
        return self._new(dtype, False)

    def var(self, dtype: "PTXType | str") -> Reg:
        """A fresh mutable register: may be written many times (loop counters, phases), and read
        before its first write (its value is then undefined, as a wgmma accumulator's may be)."""
        return self._new(dtype, True)

    def regs(self, dtype: "PTXType | str", count: int) -> tuple[Reg, ...]:
        """`count` fresh SSA registers (e.g. an MMA accumulator fragment)."""
        return tuple(self.reg(dtype) for _ in range(count))

    # ---- labels -----------------------------------------------------------------------------
    def label(self, hint: str = "L") -> Label:
        """A new label `$hint_N`, unique in this kernel; place it with `place`."""
        check_identifier("label hint", hint)
        label = Label(f"${hint}_{len(self._labels_made)}", self.name)
        self._labels_made.add(label.name)
        return label

    def place(self, label: Label) -> None:
        """Put `label:` at the current position (once per label)."""
        if not isinstance(label, Label) or label.owner != self.name:
            raise PTXLabelError("was not made by this kernel's label()", operand="label", value=label)
        if label.name in self._labels_placed:
            raise PTXLabelError("is already placed; a label marks exactly one position",
                                operand="label", value=label)
        self._labels_placed.add(label.name)
        self.lines.append(LabelLine(label, self._here()))

    def use_label(self, label: Label, instruction: str) -> Label:
        """Record a branch target (families call this); checked at render time."""
        if not isinstance(label, Label) or label.owner != self.name:
            raise PTXLabelError("a branch target must be a Label made by this kernel's label()",
                                instruction=instruction, operand="target", value=label)
        self._labels_used.setdefault(label.name, self._here())
        return label

    # ---- shared memory ----------------------------------------------------------------------
    def shared(self, name: str, nbytes: int, *, align: int = 16) -> Symbol:
        """A static shared array declared in this kernel: `.shared .align A .b8 name[N];`."""
        decl = self.module._shared_declaration(name, nbytes, align, kernel=self)
        self._shared_decls.append(decl)
        return Symbol(name, "shared")

    # ---- guards and source lines ------------------------------------------------------------
    @contextlib.contextmanager
    def guarded(self, pred: "Reg | NotPred"):
        """Predicate every instruction emitted inside: `with k.guarded(~p): ...` gives `@!%p`."""
        self._check_guard(pred, "guarded")
        if self._guard is not None:
            raise PTXBuildError("guards do not nest: PTX allows one predicate per instruction",
                                instruction="guarded", operand="pred", value=pred)
        self._guard = pred
        try:
            yield
        finally:
            self._guard = None

    @contextlib.contextmanager
    def at(self, location: SourceLocation | None):
        """Stamp instructions emitted inside with `location` (the DSL passes its trace-time line)."""
        saved, self._location = self._location, location
        try:
            yield
        finally:
            self._location = saved

    def _here(self) -> SourceLocation | None:
        return self._location if self._location is not None else user_location(2)

    def _check_guard(self, pred, instruction: str) -> None:
        if not isinstance(pred, (Reg, NotPred)) or not pred.type.is_pred:
            raise PTXTypeError("a guard is a .pred register or its negation ~p",
                               instruction=instruction, operand="pred", value=pred)
        self.check_owned(pred.reg if isinstance(pred, NotPred) else pred, instruction, "pred")

    def check_owned(self, reg: Reg, instruction: str, operand: str) -> None:
        """Refuse a register that was allocated by another kernel."""
        if reg.name not in self._owned:
            raise PTXBuildError(f"belongs to another kernel, not {self.name}",
                                instruction=instruction, operand=operand, value=reg)

    # ---- emission ---------------------------------------------------------------------------
    def emit(self, opcode: str, operands=(), *, defs=(), pred=None,
             requires: Requirement = BASELINE) -> Instruction:
        """Append `opcode operands;` (operands already validated by the caller).

        `defs`: registers written (SSA-checked); `pred`: guard register (or use `guarded`);
        `requires`: the form's PTX version/target needs, checked against the module.
        """
        name = opcode.split(" ")[0]
        self.module.require(requires, name)
        guard = pred if pred is not None else self._guard
        if pred is not None:
            if self._guard is not None:
                raise PTXBuildError("an explicit pred inside `guarded`: PTX allows one predicate "
                                    "per instruction", instruction=name, operand="pred", value=pred)
            self._check_guard(pred, name)
        for reg in defs:
            if not isinstance(reg, Reg):
                continue
            self.check_owned(reg, name, "destination")
            if reg.name in self._defined and not reg.mutable:
                raise PTXSSAError("is already written; SSA registers are written once (use "
                                  "KernelBuilder.var for a value updated in a loop)",
                                  instruction=name, operand="destination", value=reg)
            self._defined.add(reg.name)
        instruction = Instruction(opcode, tuple(operands), tuple(defs), guard, self._here())
        self.lines.append(instruction)
        return instruction

    def raw(self, text: str) -> RawInstruction:
        """Emit `text` verbatim, UNCHECKED for types, SSA and versions; the line is marked
        `// unchecked` in the PTX. Use only for forms layoutkit has no builder for yet.

        The text must stay inside this kernel's body (layoutkit.ptx.builder.raw_text states
        the rule: statements and balanced scoped blocks, no module or entry directive, no
        declaration but .reg), else PTXBuildError. A final ';' is added when missing. The
        registers it names count as written (the builder cannot see which it writes)."""
        code = check_raw(text)
        self._raw_registers |= register_names(code)
        line = RawInstruction(terminated(text, code), self._here())
        self.lines.append(line)
        return line

    def comment(self, text: str) -> None:
        """A `// text` line in the body (one line; newlines are refused)."""
        if "\n" in text:
            raise PTXBuildError("a comment is one line", instruction="comment", value=text)
        self.lines.append(Comment(text, self._here()))

    # ---- rendering --------------------------------------------------------------------------
    def check_labels(self) -> None:
        for name, where in self._labels_used.items():
            if name not in self._labels_placed:
                raise PTXLabelError(f"is branched to but never placed in kernel {self.name}",
                                    operand="label", value=name, location=where)

    def check_registers(self) -> None:
        """Refuse an SSA register (`reg`) that an instruction reads but no instruction writes
        (its value would be whatever the hardware left there); names the first reader and its
        line. A mutable register (`var`) may be read before any write: its value is then
        deliberately undefined (a wgmma accumulator whose first use has scale-d = 0)."""
        written = self._defined | self._raw_registers
        if self._owned <= written:      # every register of this kernel is written somewhere
            return
        for line in self.lines:
            if not isinstance(line, Instruction):
                continue
            for reg in _registers(line.operands, line.guard):
                if reg.name not in written and reg.name in self._owned and not reg.mutable:
                    raise PTXSSAError(f"is read but never written in kernel {self.name} (write it "
                                      "first: every register gets its value from an instruction "
                                      "that lists it in defs)", instruction=line.opcode.split(" ")[0],
                                      operand="source", value=reg, location=line.location)

    def register_declarations(self) -> list[str]:
        """`.reg .f32 %f<N>;` per used type, in the fixed order of TYPES."""
        return [f"{INDENT}.reg .{t.reg_decl} {t.prefix}<{self._counts[t.name]}>;"
                for t in TYPES.values() if self._counts.get(t.name)]

    def body_lines(self, file_index: dict[str, int] | None = None) -> list[str]:
        """The body's instruction lines; with `file_index`, `.loc` lines where the line changes."""
        out, last = [], None
        for line in self.lines:
            where = line.location
            if file_index is not None and where is not None and where != last\
                    and not isinstance(line, LabelLine):
                out.append(f"{INDENT}.loc {file_index[where.file]} {where.line} {where.column}")
                last = where
            out.append(line.text())
        return out

    def text(self, file_index: dict[str, int] | None = None) -> str:
        """The whole `.visible .entry` (params, directives, declarations, body)."""
        self.check_labels()
        self.check_registers()
        params = ",\n".join(f"{INDENT}{p.declaration()}" for p in self.params)
        head = f".visible .entry {self.name}(\n{params}\n)" if params else\
            f".visible .entry {self.name}()"
        lines = [head, *self.directives.lines(), "{"]
        lines += [f"{INDENT}{d}" for d in self._shared_decls]
        lines += self.register_declarations()
        lines += self.body_lines(file_index)
        lines.append("}")
        return "\n".join(lines)


def _registers(operands, guard):
    """The registers among an instruction's operands and guard (inside addresses and vectors)."""
    stack = [*operands, guard]
    while stack:
        o = stack.pop()
        if isinstance(o, Reg):
            yield o
        elif isinstance(o, NotPred):
            yield o.reg
        elif isinstance(o, Address):
            stack.append(o.base)
        elif isinstance(o, Vector):
            stack.extend(o.items)
        elif isinstance(o, (tuple, list)):
            stack.extend(o)
