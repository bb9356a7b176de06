"""Operand checks shared by the Hopper families: state-space addresses, u32 counts with ranges,
and the requirements (PTX ISA version, sm) of the sm_90 features (hopper-ptx.md §0.1).

Addresses: `.shared::cta`/`.shared::cluster` operands are 32-bit (what `mov.u32 %r, smem` and
`mapa.shared::cluster.u32` give) or 64-bit registers, or a shared Symbol; global and generic
ones (tensor maps, bulk-copy sources) are 64-bit registers.
"""
from __future__ import annotations

from ..builder import TYPES, Address, Imm, KernelBuilder, PTXRangeError, PTXTypeError, Requirement, Symbol
from .checks import address, imm_int, source

U32, B64, PRED = TYPES["u32"], TYPES["b64"], TYPES["pred"]

# Lowest PTX ISA version and sm per feature (hopper-ptx.md §0.1, probed with ptxas 13.0).
SHARED_CTA = Requirement((7, 8), 80)        # the `.shared::cta` spelling on sm_80 forms
SM90 = Requirement((7, 8), 90)              # try_wait, mapa, getctarank, barrier.cluster
SM90_PTX80 = Requirement((8, 0), 90)        # expect_tx, sem/scope, shared::cluster, TMA, elect
SM90A = Requirement((8, 0), 90, arch_specific=True)   # wgmma, setmaxnreg
ASYNC_STORE = Requirement((8, 1), 90)       # st.async, red.async
TENSORMAP_FENCE = Requirement((8, 3), 90)   # fence.proxy.tensormap::generic
RELAXED = Requirement((8, 6), 90)           # .relaxed on mbarrier, .shared::cta TMA dst


def shared_address(k: KernelBuilder, instr: str, operand: str, value) -> Address:
    """A shared-memory operand `[r]`, `[r+off]` or `[sym]`: 32/64-bit register or shared Symbol."""
    base = value.base if isinstance(value, Address) else value
    if isinstance(base, Symbol) and base.space != "shared":
        raise PTXTypeError(f"a .{base.space} symbol is not a shared-memory address",
                           instruction=instr, operand=operand, value=value)
    return address(k, instr, operand, value)


def global_address(k: KernelBuilder, instr: str, operand: str, value) -> Address:
    """A global or generic operand (tensor map, bulk source/destination): a 64-bit register."""
    if isinstance(value, Symbol) or (isinstance(value, Address) and isinstance(value.base, Symbol)):
        raise PTXTypeError("a global/generic address is a 64-bit register here (a CUtensorMap "
                           "parameter needs cvta_param first)", instruction=instr,
                           operand=operand, value=value)
    return address(k, instr, operand, value, widths=(64,))


def u32_operand(k: KernelBuilder, instr: str, operand: str, value, lo: int, hi: int, *,
                multiple: int = 1, rule: str = ""):
    """A .u32 register, or an immediate in lo..hi that is a multiple of `multiple`
    (`rule` explains the range in the message)."""
    if isinstance(value, Imm):
        value = value.value
    if isinstance(value, int) and not isinstance(value, bool):
        suffix = f" ({rule})" if rule else ""
        if not lo <= value <= hi:
            raise PTXRangeError(f"must be in {lo}..{hi}{suffix}", instruction=instr,
                                operand=operand, value=value)
        if value % multiple:
            raise PTXRangeError(f"must be a multiple of {multiple}{suffix}", instruction=instr,
                                operand=operand, value=value)
        return Imm(value, U32)
    return source(k, instr, operand, value, U32, imm=False)


def immediate(instr: str, operand: str, value, allowed: tuple[int, ...]) -> Imm:
    """An integer constant that must be one of `allowed` (e.g. wgmma's ±1 scales)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise PTXTypeError("must be an integer constant", instruction=instr, operand=operand,
                           value=value)
    if value not in allowed:
        raise PTXRangeError(f"must be one of {', '.join(map(str, allowed))}", instruction=instr,
                            operand=operand, value=value)
    return Imm(value, TYPES["s32"])


def group_count(instr: str, value, hi: int) -> int:
    """The N of a wait_group: an integer constant in 0..hi."""
    return imm_int(instr, "n", value, 0, hi)
