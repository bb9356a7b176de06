"""PTX text of the PTX-backend GPU checks (hand-written: the builder has no memory, mbarrier, TMA or
wgmma families yet). Every kernel bounds its barrier waits and traps instead of hanging; CPU tests
assemble them all with ptxas (tests/ptx/test_launch_gpu_kernels_assemble.py).
"""
from __future__ import annotations

HEADER = ".version 8.0\n.target sm_90a\n.address_size 64\n"

# A bounded mbarrier wait: spin on try_wait.parity, trap after SPIN_LIMIT tries (a protocol bug
# then fails the check instead of hanging the GPU). {bar}: 32-bit shared address, {par}: parity reg.
SPIN_LIMIT = 20_000_000


def bounded_wait(label: str, bar: str, par: str) -> str:
    return f"""
    mov.u32     %spin, 0;
{label}:
    mbarrier.try_wait.parity.shared::cta.b64 %pw, [{bar}], {par};
    @%pw bra    {label}_DONE;
    add.u32     %spin, %spin, 1;
    setp.lt.u32 %pspin, %spin, {SPIN_LIMIT};
    @%pspin bra {label};
    trap;
{label}_DONE:"""


WAIT_REGS = "    .reg .b32 %spin; .reg .pred %pw, %pspin;\n"

VECTOR_ADD = HEADER + """
.visible .entry vector_add(.param .u64 .ptr.global.align 16 a, .param .u64 b, .param .u64 c,
                           .param .u32 n)
.maxntid 256, 1, 1
{
    .reg .b32 %r<8>; .reg .b64 %rd<12>; .reg .f32 %f<4>; .reg .pred %p0;
    mov.u32         %r0, %ctaid.x;
    mov.u32         %r1, %ntid.x;
    mov.u32         %r2, %tid.x;
    mad.lo.u32      %r3, %r0, %r1, %r2;
    ld.param.u32    %r4, [n];
    setp.ge.u32     %p0, %r3, %r4;
    @%p0 bra        DONE;
    ld.param.u64    %rd0, [a];
    ld.param.u64    %rd1, [b];
    ld.param.u64    %rd2, [c];
    cvta.to.global.u64 %rd3, %rd0;
    cvta.to.global.u64 %rd4, %rd1;
    cvta.to.global.u64 %rd5, %rd2;
    mul.wide.u32    %rd6, %r3, 4;
    add.s64         %rd7, %rd3, %rd6;
    add.s64         %rd8, %rd4, %rd6;
    add.s64         %rd9, %rd5, %rd6;
    ld.global.f32   %f0, [%rd7];
    ld.global.f32   %f1, [%rd8];
    add.rn.f32      %f2, %f0, %f1;
    st.global.f32   [%rd9], %f2;
DONE:
    ret;
}
"""

# Every thread writes its id into each 4-byte word of the dynamic shared memory it owns (word w
# belongs to thread w % ntid), then reads a neighbour's words back and stores their sum: it proves
# that all %dynamic_smem_size bytes exist. out[tid] = sum of the words of thread (tid+1) % ntid.
SMEM_FILL = HEADER + """
.extern .shared .align 16 .b8 dsmem[];
.visible .entry smem_fill(.param .u64 out)
.reqntid 128, 1, 1
{
    .reg .b32 %r<16>; .reg .b64 %rd<4>; .reg .pred %p0;
    mov.u32         %r0, %tid.x;
    mov.u32         %r1, %dynamic_smem_size;
    shr.u32         %r1, %r1, 2;               // words
    mov.u32         %r2, dsmem;
    mov.u32         %r3, %r0;                  // word index
FILL:
    setp.ge.u32     %p0, %r3, %r1;
    @%p0 bra        FILLED;
    shl.b32         %r4, %r3, 2;
    add.u32         %r5, %r2, %r4;
    st.shared.u32   [%r5], %r0;
    add.u32         %r3, %r3, 128;
    bra.uni         FILL;
FILLED:
    bar.sync        0;
    add.u32         %r6, %r0, 1;
    and.b32         %r6, %r6, 127;             // the neighbour
    mov.u32         %r3, %r6;
    mov.u32         %r7, 0;
SUM:
    setp.ge.u32     %p0, %r3, %r1;
    @%p0 bra        SUMMED;
    shl.b32         %r4, %r3, 2;
    add.u32         %r5, %r2, %r4;
    ld.shared.u32   %r8, [%r5];
    add.u32         %r7, %r7, %r8;
    add.u32         %r3, %r3, 128;
    bra.uni         SUM;
SUMMED:
    ld.param.u64    %rd0, [out];
    cvta.to.global.u64 %rd1, %rd0;
    mul.wide.u32    %rd2, %r0, 4;
    add.s64         %rd3, %rd1, %rd2;
    st.global.u32   [%rd3], %r7;
    ret;
}
"""


def tma_round_trip(tile_bytes: int) -> str:
    """TMA-load one 2-D box at (x, y) into 1024-aligned smem, dump smem raw to ``dump`` with plain
    16-byte stores, then TMA-store the box back to the same coordinates of ``tmap_out``."""
    chunks = tile_bytes // 16
    return HEADER + f"""
.extern .shared .align 1024 .b8 smem[];
.shared .align 8 .b64 bar;
.visible .entry tma_round_trip(.param .align 64 .b8 tmap_in[128], .param .align 64 .b8 tmap_out[128],
                               .param .u64 dump, .param .u32 x, .param .u32 y)
.reqntid 128, 1, 1
{{
    .reg .b32 %r<24>; .reg .b64 %rd<12>; .reg .pred %p<4>;
{WAIT_REGS}
    mov.u32         %r0, %tid.x;
    mov.u32         %r1, smem;
    mov.u32         %r2, bar;
    ld.param.u32    %r10, [x];
    ld.param.u32    %r11, [y];
    setp.eq.u32     %p0, %r0, 0;
    @%p0 mbarrier.init.shared::cta.b64 [%r2], 1;
    @%p0 fence.mbarrier_init.release.cluster;
    bar.sync        0;
    cvta.param.u64  %rd0, tmap_in;
    cvta.param.u64  %rd1, tmap_out;
    @!%p0 bra       ISSUED;
    mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r2], {tile_bytes};
    cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
        [%r1], [%rd0, {{%r10, %r11}}], [%r2];
ISSUED:
    mov.u32         %r3, 0;
{bounded_wait("WAIT_LOAD", "%r2", "%r3")}
    ld.param.u64    %rd2, [dump];
    cvta.to.global.u64 %rd3, %rd2;
    mov.u32         %r4, %r0;                  // 16-byte chunk index
COPY:
    setp.ge.u32     %p1, %r4, {chunks};
    @%p1 bra        COPIED;
    shl.b32         %r5, %r4, 4;
    add.u32         %r6, %r1, %r5;
    ld.shared.v4.b32 {{%r12, %r13, %r14, %r15}}, [%r6];
    cvt.u64.u32     %rd4, %r5;
    add.s64         %rd5, %rd3, %rd4;
    st.global.v4.b32 [%rd5], {{%r12, %r13, %r14, %r15}};
    add.u32         %r4, %r4, 128;
    bra.uni         COPY;
COPIED:
    bar.sync        0;
    @!%p0 bra       DONE;
    cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%rd1, {{%r10, %r11}}], [%r1];
    cp.async.bulk.commit_group;
    cp.async.bulk.wait_group 0;
DONE:
    ret;
}}
"""


# One producer warp (warp 0) fills 2 shared slots of 32 words; one consumer warp (warp 1) reads
# them. full[s]: 32 producer arrivals; empty[s]: 32 consumer arrivals. Iteration k uses slot
# s = k % 2 and phase parity (k / 2) & 1; the producer waits on empty with the flipped parity
# (a fresh barrier's "previous phase" counts as complete). Value of lane l at k: 32k + l + 1.
# out[l] = (u64 sum of the values lane l consumed, u64 count of values that were wrong).
PING_PONG = HEADER + """
.shared .align 16 .b32 slots[64];
.shared .align 8 .b64 full[2];
.shared .align 8 .b64 empty[2];
.visible .entry ping_pong(.param .u64 out, .param .u32 iterations)
.reqntid 64, 1, 1
{
    .reg .b32 %r<24>; .reg .b64 %rd<12>; .reg .pred %p<4>;
""" + WAIT_REGS + """
    mov.u32         %r0, %tid.x;
    and.b32         %r1, %r0, 31;              // lane
    shr.u32         %r2, %r0, 5;               // warp
    ld.param.u32    %r3, [iterations];
    mov.u32         %r4, full;
    mov.u32         %r5, empty;
    mov.u32         %r6, slots;
    setp.eq.u32     %p0, %r0, 0;
    @%p0 mbarrier.init.shared::cta.b64 [%r4], 32;
    @%p0 mbarrier.init.shared::cta.b64 [%r4+8], 32;
    @%p0 mbarrier.init.shared::cta.b64 [%r5], 32;
    @%p0 mbarrier.init.shared::cta.b64 [%r5+8], 32;
    @%p0 fence.mbarrier_init.release.cluster;
    bar.sync        0;
    mov.u32         %r7, 0;                    // k
    mov.u64         %rd0, 0;                   // consumer: sum
    mov.u64         %rd1, 0;                   // consumer: wrong values
    setp.ne.u32     %p1, %r2, 0;
    @%p1 bra        CONSUMER;
PRODUCER:
    setp.ge.u32     %p2, %r7, %r3;
    @%p2 bra        DONE;
    and.b32         %r8, %r7, 1;               // s
    shr.u32         %r9, %r7, 1;
    and.b32         %r9, %r9, 1;               // parity
    xor.b32         %r10, %r9, 1;
    shl.b32         %r11, %r8, 3;
    add.u32         %r12, %r5, %r11;           // &empty[s]
    add.u32         %r13, %r4, %r11;           // &full[s]
""" + bounded_wait("P_WAIT", "%r12", "%r10") + """
    shl.b32         %r14, %r7, 5;
    add.u32         %r14, %r14, %r1;
    add.u32         %r14, %r14, 1;             // 32k + lane + 1
    shl.b32         %r15, %r8, 7;              // slot byte offset
    shl.b32         %r16, %r1, 2;
    add.u32         %r17, %r6, %r15;
    add.u32         %r17, %r17, %r16;
    st.shared.u32   [%r17], %r14;
    mbarrier.arrive.shared::cta.b64 _, [%r13];
    add.u32         %r7, %r7, 1;
    bra.uni         PRODUCER;
CONSUMER:
    setp.ge.u32     %p2, %r7, %r3;
    @%p2 bra        STORE;
    and.b32         %r8, %r7, 1;
    shr.u32         %r9, %r7, 1;
    and.b32         %r9, %r9, 1;
    shl.b32         %r11, %r8, 3;
    add.u32         %r12, %r5, %r11;           // &empty[s]
    add.u32         %r13, %r4, %r11;           // &full[s]
""" + bounded_wait("C_WAIT", "%r13", "%r9") + """
    shl.b32         %r15, %r8, 7;
    shl.b32         %r16, %r1, 2;
    add.u32         %r17, %r6, %r15;
    add.u32         %r17, %r17, %r16;
    ld.shared.u32   %r18, [%r17];
    mbarrier.arrive.shared::cta.b64 _, [%r12];
    shl.b32         %r14, %r7, 5;
    add.u32         %r14, %r14, %r1;
    add.u32         %r14, %r14, 1;
    setp.ne.u32     %p3, %r18, %r14;
    selp.u64        %rd2, 1, 0, %p3;
    add.u64         %rd1, %rd1, %rd2;
    cvt.u64.u32     %rd3, %r18;
    add.u64         %rd0, %rd0, %rd3;
    add.u32         %r7, %r7, 1;
    bra.uni         CONSUMER;
STORE:
    ld.param.u64    %rd4, [out];
    cvta.to.global.u64 %rd5, %rd4;
    mul.wide.u32    %rd6, %r1, 16;
    add.s64         %rd7, %rd5, %rd6;
    st.global.v2.u64 [%rd7], {%rd0, %rd1};
DONE:
    ret;
}
"""


def _wgmma_store_lines(n: int) -> str:
    lines = []
    for j in range(n // 8):
        lines.append(f"    st.global.v2.f32 [%rd20+{32 * j}], {{%f{4 * j}, %f{4 * j + 1}}};")
        lines.append(f"    st.global.v2.f32 [%rd20+{32 * j + 8 * n * 4}], {{%f{4 * j + 2}, %f{4 * j + 3}}};")
    return "\n".join(lines)


def wgmma_m64nNk16(n: int = 128, k: int = 64) -> str:
    """D[64, n] = A[64, k] @ B[n, k]^T with bf16 operands TMA-loaded K-major with 128B swizzle
    (k = 64: one 128-byte row per M/N index) and k/16 wgmma.m64n{n}k16 from smem descriptors."""
    regs = ", ".join(f"%f{i}" for i in range(n // 2))
    a_bytes, b_bytes = 64 * k * 2, n * k * 2
    steps = []
    for step in range(k // 16):
        steps.append(f"""    add.s64         %rd3, %rd1, {2 * step};
    add.s64         %rd4, %rd2, {2 * step};
    wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{regs}}}, %rd3, %rd4, {0 if step == 0 else 1}, 1, 1, 0, 0;""")
    mma = "\n".join(steps)
    return HEADER + f"""
.extern .shared .align 1024 .b8 smem[];
.shared .align 8 .b64 bar;
.visible .entry wgmma_tile(.param .align 64 .b8 tmap_a[128], .param .align 64 .b8 tmap_b[128],
                           .param .u64 out)
.reqntid 128, 1, 1
{{
    .reg .f32 %f<{n // 2}>; .reg .b32 %r<32>; .reg .b64 %rd<24>; .reg .pred %p<4>;
{WAIT_REGS}
    mov.u32         %r0, %tid.x;
    mov.u32         %r1, smem;
    mov.u32         %r2, bar;
    setp.eq.u32     %p0, %r0, 0;
    @%p0 mbarrier.init.shared::cta.b64 [%r2], 1;
    @%p0 fence.mbarrier_init.release.cluster;
    bar.sync        0;
    @!%p0 bra       ISSUED;
    cvta.param.u64  %rd5, tmap_a;
    cvta.param.u64  %rd6, tmap_b;
    mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r2], {a_bytes + b_bytes};
    mov.u32         %r5, 0;
    cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
        [%r1], [%rd5, {{%r5, %r5}}], [%r2];
    add.u32         %r6, %r1, {a_bytes};
    cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
        [%r6], [%rd6, {{%r5, %r5}}], [%r2];
ISSUED:
    mov.u32         %r3, 0;
{bounded_wait("WAIT_TILES", "%r2", "%r3")}
    // K-major 128B-swizzle descriptors: start >> 4 in bits 0-13, LBO 1, SBO 1024 >> 4, swizzle 1 (128B)
    shr.u32         %r7, %r1, 4;
    and.b32         %r7, %r7, 0x3FFF;
    add.u32         %r8, %r1, {a_bytes};
    shr.u32         %r8, %r8, 4;
    and.b32         %r8, %r8, 0x3FFF;
    cvt.u64.u32     %rd1, %r7;
    cvt.u64.u32     %rd2, %r8;
    or.b64          %rd1, %rd1, 0x4000004000010000;
    or.b64          %rd2, %rd2, 0x4000004000010000;
    wgmma.fence.sync.aligned;
{mma}
    wgmma.commit_group.sync.aligned;
    wgmma.wait_group.sync.aligned 0;
    // accumulator d[i]: row 16w + g + 8((i>>1)&1), column 8(i>>2) + 2t + (i&1)
    ld.param.u64    %rd8, [out];
    cvta.to.global.u64 %rd9, %rd8;
    shr.u32         %r21, %r0, 5;              // w
    and.b32         %r22, %r0, 31;
    shr.u32         %r23, %r22, 2;             // g
    and.b32         %r24, %r22, 3;             // t
    shl.b32         %r25, %r21, 4;
    add.u32         %r25, %r25, %r23;          // row
    shl.b32         %r26, %r24, 1;             // column
    mad.lo.u32      %r27, %r25, {n}, %r26;
    mul.wide.u32    %rd10, %r27, 4;
    add.s64         %rd20, %rd9, %rd10;
{_wgmma_store_lines(n)}
    ret;
}}
"""


# Each CTA of a (2, 1, 1)-cluster launch records who it is: out[ctaid.x] = (%cluster_ctarank,
# %cluster_nctarank, %clusterid.x, the peer's rank read from the peer's shared memory).
CLUSTER_RANKS = HEADER + """
.shared .align 4 .b32 my_rank;
.visible .entry cluster_ranks(.param .u64 out)
.maxntid 32, 1, 1
{
    .reg .b32 %r<12>; .reg .b64 %rd<6>; .reg .pred %p0;
    mov.u32         %r0, %cluster_ctarank;
    mov.u32         %r1, %cluster_nctarank;
    mov.u32         %r2, %clusterid.x;
    mov.u32         %r3, %ctaid.x;
    mov.u32         %r4, %tid.x;
    mov.u32         %r5, my_rank;
    setp.eq.u32     %p0, %r4, 0;
    @%p0 st.shared.u32 [%r5], %r0;
    barrier.cluster.arrive.release.aligned;
    barrier.cluster.wait.acquire.aligned;
    xor.b32         %r6, %r0, 1;
    mapa.shared::cluster.u32 %r7, %r5, %r6;
    ld.shared::cluster.u32 %r8, [%r7];
    barrier.cluster.arrive.release.aligned;    // no CTA leaves while its peer may still read it
    barrier.cluster.wait.acquire.aligned;
    ld.param.u64    %rd0, [out];
    cvta.to.global.u64 %rd1, %rd0;
    mul.wide.u32    %rd2, %r3, 16;
    add.s64         %rd3, %rd1, %rd2;
    @%p0 st.global.v4.u32 [%rd3], {%r0, %r1, %r2, %r8};
    ret;
}
"""

# name -> PTX text, for the assembly test
ALL = {
    "vector_add": VECTOR_ADD,
    "smem_fill": SMEM_FILL,
    **{f"tma_round_trip_{b}": tma_round_trip(b) for b in (2048, 4096, 8192)},
    "ping_pong": PING_PONG,
    "wgmma_m64n128k16": wgmma_m64nNk16(128),
    "cluster_ranks": CLUSTER_RANKS,
}
