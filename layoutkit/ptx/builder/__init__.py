"""The typed PTX builder: modules, kernels, SSA registers, operands, errors and source lines.

Contract for instruction families (layoutkit.ptx.isa) and the DSL lowering:
- `Module(version=None, target="sm_90a", line_info=True)`; `module.kernel(name, **directives)`.
- `kernel.reg(type)` (SSA), `kernel.var(type)` (mutable), `kernel.label(hint)` / `place(label)`,
  `kernel.param/pointer_param/tensormap_param`, `kernel.shared`, `module.shared/extern_shared`.
- `kernel.emit(opcode, operands, defs=..., pred=..., requires=Requirement(...))` appends a
  validated instruction; `kernel.raw(text)` appends an unchecked one.
- `module.text()` is the PTX; byte-stable for the same construction.
"""
from .directives import Directives
from .errors import (PTXBuildError, PTXDirectiveError, PTXLabelError, PTXRangeError, PTXSSAError,
                     PTXTargetError, PTXTypeError)
from .instruction import Instruction, RawInstruction
from .kernel import KernelBuilder, Param
from .module import Module
from .operands import SINK, Address, Imm, Label, NotPred, Reg, SpecialReg, Symbol, Vector
from .source_location import SourceLocation, user_location
from .target import Requirement, Target
from .types import TYPES, PTXType, ptx_type, reg_compatible

__all__ = [
    "Address", "Directives", "Imm", "Instruction", "KernelBuilder", "Label", "Module", "NotPred",
    "PTXBuildError", "PTXDirectiveError", "PTXLabelError", "PTXRangeError", "PTXSSAError",
    "PTXTargetError", "PTXType", "PTXTypeError", "Param", "RawInstruction", "Reg", "Requirement",
    "SINK", "SourceLocation", "SpecialReg", "Symbol", "TYPES", "Target", "Vector", "ptx_type",
    "reg_compatible", "user_location",
]
