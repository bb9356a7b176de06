"""layoutkit.ptx: the PTX builder, ptxas and the cubin cache, and the cuda-python launcher.

Imports: stdlib, numpy and (lazily) cuda-python. Knows nothing about layouts.
"""
# --- builder (typed PTX builder; instruction families live in layoutkit.ptx.isa) ---
from .builder import (SINK, Address, Imm, Kernel, Label, Module, NotPred, Param,  # noqa: F401
                      PTXBuildError, PTXDirectiveError, PTXLabelError, PTXRangeError,
                      PTXSSAError, PTXTargetError, PTXType, PTXTypeError, Reg, Requirement,
                      SourceLocation, SpecialReg, Symbol, Vector)
from . import isa  # noqa: F401
# --- end builder ---
