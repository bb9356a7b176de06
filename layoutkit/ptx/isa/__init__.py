"""PTX instruction families: each function validates its operands and emits through a Kernel.

Use the arch namespace that matches the target: `isa.sm80` (Ampere-era forms) and `isa.sm90`
(re-exports sm80 and adds Hopper forms). Conventions shared by every function:

- the kernel comes first: `add(k, a, b)`;
- the instruction type is `dtype=` or the first register operand's type;
- the result is a fresh SSA register (a tuple for vectors/fragments) unless `out=` names
  one (`KernelBuilder.var` registers may be written again: loop-carried values);
- `pred=` guards the instruction (`pred=~p` for `@!p`); Python ints/floats become
  range-checked immediates;
- a request ptxas would reject (or silently change) raises a PTXBuildError subclass naming
  the instruction, operand, value and rule, with the user's source line.

Family modules: arith, bits, compare, convert, transcendental, warp, memory, atomic,
async_copy, matrix, special, control; Hopper (sm_90/sm_90a): mbarrier, mbarrier_wait, tma,
proxy_fence, wgmma, wgmma_descriptor, setmaxnreg, named_barrier, cluster, dsmem (their shared
operand checks and feature versions in hopper_operands; the shared-memory swizzle that TMA and
wgmma share in smem_swizzle); `checks` holds the shared operand validation.

>>> from layoutkit.ptx.builder import Module
>>> from layoutkit.ptx.isa import sm90 as I
>>> m = Module(line_info=False); k = m.kernel("scale", maxntid=128)
>>> out = k.pointer_param("out")
>>> g = I.cvta(k, "global", I.ld_param(k, out))
>>> tid = I.sreg(k, "tid.x")
>>> addr = I.add(k, g, I.mul_wide(k, tid, 4))
>>> I.st(k, "global", addr, I.cvt(k, tid, "f32", rounding="rn")); I.ret(k)
>>> print("\\n".join(k.body_lines()))
    ld.param.u64 %ud0, [out];
    cvta.to.global.u64 %ud1, %ud0;
    mov.u32 %u0, %tid.x;
    mul.wide.u32 %ud2, %u0, 4;
    add.u64 %ud3, %ud1, %ud2;
    cvt.rn.f32.u32 %f0, %u0;
    st.global.f32 [%ud3], %f0;
    ret;
"""
from . import sm80, sm90  # noqa: F401
