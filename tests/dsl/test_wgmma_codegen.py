"""Code generation of lk.sm90.wgmma (CPU only: ptxas + nvdisasm): accumulators stay in their
registers across a K loop, ptxas neither serializes the wgmmas nor injects waits (its C75xx infos),
no local-memory traffic, HGMMA in the SASS; the RS path packs the converted accumulator with F2FP; a
warp-specialized 64x256 accumulator per consumer fits 168 registers without spills."""
import re
import warnings

import pytest

import layoutkit.dsl as lk

from .wgmma_kernels import attention_tile, consumer_mainloop, ss_gemm

P = lk.Pointer
GEMM_ARGS = (P[lk.bf16], P[lk.bf16], P[lk.f32], 256)
MMA_LINE = re.compile(r"wgmma\.mma_async\S* \{([^}]*)\}")


def clean_build(kernel, *args, **kwargs):
    """The specialization, assembled with every ptxas warning turned into an error."""
    spec = kernel.specialize(*args, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        spec.cubin
    return spec


def assert_no_wgmma_infos(spec):
    log = spec.cubin.ptxas_log
    assert "Compiling entry function" in log
    for marker in ("Potential Performance Loss", "serialized", "injected", "C75"):
        assert marker not in log, log


@pytest.mark.parametrize("m, n, major", [(64, 64, "K"), (64, 128, "N"), (64, 256, "K"),
                                          (64, 256, "N"), (128, 128, "K")])
def test_k_loop_keeps_the_accumulator_in_place(m, n, major):
    spec = clean_build(ss_gemm, *GEMM_ARGS, M=m, N=n, B_MAJOR=major)
    ptx = spec.ptx
    operands = MMA_LINE.findall(ptx)
    assert len(operands) == 4 * (m // 64)                       # K tile 64 = 4 k16 steps
    blocks = sorted(set(operands))
    assert len(blocks) == m // 64                               # one register set per block
    body = ptx[ptx.index("$loop_"):ptx.index("$loop_end")]
    regs = {r.strip() for block in blocks for r in block.split(",")}
    assert len(regs) == m * n // 128
    written = re.findall(r"^\s+(?:mov|cvt|add|fma|mul)\S* (%f\d+),", body, re.M)
    assert not regs & set(written)                              # only wgmma writes them
    resources = spec.cubin.resources["ss_gemm"]
    assert not resources.spills and resources.stack_frame_bytes == 0
    assert_no_wgmma_infos(spec)
    sass = ss_gemm.sass(*GEMM_ARGS, M=m, N=n, B_MAJOR=major)
    assert sass.count("HGMMA.64x%dx16.F32.BF16" % n) == 4 * (m // 64)
    assert "STL" not in sass and "LDL" not in sass


def test_first_k_step_zero_initialises_by_predicate_and_the_rest_accumulate():
    ptx = ss_gemm.ptx(*GEMM_ARGS, M=64, N=64, B_MAJOR="K")
    scales = re.findall(r"wgmma\.mma_async[^;]*\}, %ud\d+, %ud\d+, (\S+), 1, 1, 0, 0;", ptx)
    assert scales[0].startswith("%p") and scales[1:] == ["1", "1", "1"]
    assert "0f00000000" not in ptx                      # the accumulator is never zero-filled


def test_register_a_operand_is_the_converted_accumulator():
    spec = clean_build(attention_tile, P[lk.bf16], P[lk.bf16], P[lk.bf16], P[lk.f32],
                       P[lk.f32], N=128)
    ptx = spec.ptx
    rs = [line for line in ptx.splitlines() if "wgmma.mma_async" in line and "{%r" in line]
    assert len(rs) == 8                                          # K = 128: 8 k16 steps
    assert rs[0].rstrip().endswith(", 0, 1, 1, 1;")              # scale-d 0, trans-b 1 (V)
    assert ptx.count("mov.b32") >= 32                            # 4 b32 pairs per step
    sass = attention_tile.sass(P[lk.bf16], P[lk.bf16], P[lk.bf16], P[lk.f32], P[lk.f32], N=128)
    assert "F2FP.BF16.F32.PACK_AB" in sass and sass.count("HGMMA") == 4 + 8
    assert "STL" not in sass
    assert_no_wgmma_infos(spec)


def test_two_consumer_warpgroups_with_64x256_accumulators_fit_168_registers():
    with lk.protocol_check_skipped():      # its producer fills nothing: code, not data
        spec = clean_build(consumer_mainloop, *GEMM_ARGS)
        sass = consumer_mainloop.sass(*GEMM_ARGS)
    usage = spec.cubin.resources["consumer_mainloop"]
    assert usage.registers == 168 and not usage.spills and not usage.setmaxnreg_ignored
    assert "setmaxnreg.inc.sync.aligned.u32 240" in spec.ptx
    assert_no_wgmma_infos(spec)
    assert sass.count("HGMMA.64x256x16.F32.BF16") == 4 and "STL" not in sass


def test_ir_attrs_let_an_interpreter_find_the_operands():
    fn = ss_gemm.ir(*GEMM_ARGS, M=64, N=128, B_MAJOR="N")
    loop = next(op for op in fn.body.ops if op.name == "for")
    mma = next(op for op in loop.blocks[0].ops if op.name == "wgmma")
    a, b = mma.attrs["a"], mma.attrs["b"]
    assert (mma.attrs["m"], mma.attrs["n"], mma.attrs["k"], mma.attrs["dtype"]) == \
        (64, 128, 64, "bf16")
    assert a["kind"] == b["kind"] == "shared" and a["buffer"] != b["buffer"]
    assert [s.name for s in fn.shared if s.name in (a["buffer"], b["buffer"])]
    assert (a["major"], b["major"], b["swizzle"]) == ("K", "MN", (3, 3, 3))
    assert str(b["layout"]) == "((64,2),64):((1,4096),64)"
    assert mma.attrs["accumulate"] is None and mma.operands[-1].type == lk.bool_
    assert len(mma.results) == mma.attrs["acc_count"] == 64
    text = str(fn)
    assert "wgmma_fence" in text and "wgmma_wait" in text and "pending=0" in text
