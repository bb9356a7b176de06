"""TMA reduce-stores (lk.sm90.tma_store(dst, src, reduce=op)): the PTX line of each element
type's reduction (assembled by ptxas for sm_90a), everything else the plain store's; every
misuse a TraceError naming the op, the element type and the legal ones at the user's line; the
verifier's check of the attr (the protocol check of the shared source, as for a store:
tests/misuse/test_async_protocol.py)."""
import copy

import pytest

import layoutkit.dsl as lk
from layoutkit.algebra import ComposedLayout, Layout
from layoutkit.dsl.core.verifier import verify
from layoutkit.dsl.sm90.tma.derive import HARDWARE_REDUCTIONS
from layoutkit.ptx.isa.tma import REDUCE_TYPES

from . import source_lines
from .tma_reduce_kernels import launch_shape, leading_dimension, reduce_tiles
from .test_tma_kernels import ops_named

STORE = "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group"


def line_of(text: str) -> int:
    return source_lines.line_of(__file__, text)


def reduce_spec(dtype_name: str, op, mode: str = "128B", m: int = 70, n: int = 104):
    dtype = getattr(lk, dtype_name)
    _, pm, pn = launch_shape(dtype, mode, m, n, 3)
    pointer = lk.Pointer[dtype]
    return reduce_tiles(dtype_name, op, mode).specialize(
        pointer, pointer, m, n, leading_dimension(dtype, n), pm, pn, 3)


@pytest.mark.parametrize("dtype, op, mode", [("f32", "add", "128B"), ("bf16", "add", "128B"),
                                             ("f16", "max", "64B"), ("u32", "inc", "none"),
                                             ("i32", "and", "32B")])
def test_a_reduction_is_the_store_with_its_ptx_instruction(dtype, op, mode):
    spec, plain = reduce_spec(dtype, op, mode), reduce_spec(dtype, None, mode)
    assert spec.cubin.resources["reduce_tiles"].registers > 0        # ptxas -arch=sm_90a ran
    reduce_line = f"cp.reduce.async.bulk.tensor.2d.global.shared::cta.{op}.tile.bulk_group"
    lines = [line.strip() for line in spec.ptx.splitlines() if "cp.reduce" in line]
    assert len(lines) == 2 and all(line.startswith(reduce_line + " [%rd") for line in lines)
    assert STORE not in spec.ptx and plain.ptx.count(STORE) == 2
    assert spec.ptx == plain.ptx.replace(STORE, reduce_line)      # same boxes, map, offsets
    (tmap,) = [h for h in spec.ir.hidden if h.attrs["name"] == "tmap_out"]
    assert tmap.attrs["what"] == [h for h in plain.ir.hidden
                                  if h.attrs["name"] == "tmap_out"][0].attrs["what"]
    stores, plain_stores = ops_named(spec.ir, "tma_store"), ops_named(plain.ir, "tma_store")
    assert [s.attrs["reduce"] for s in stores] == [op, op]
    assert [s.attrs["reduce"] for s in plain_stores] == [None, None]
    for a, b in zip(stores, plain_stores):
        assert {**a.attrs, "reduce": None} == b.attrs


def dq_accumulate(head_dim: int):
    """One thread reduce-adds a 64 x head_dim f32 tile (128B-swizzled, in 32-float column
    blocks) into row block m of an f32 (rows, head_dim) accumulator."""
    blocks = head_dim // 32
    layout = ComposedLayout(lk.sm90.tma_swizzle("128B", 4), 0,
                            Layout((64, (32, blocks)), (32, (1, 64 * 32))))

    @lk.kernel(num_warps=4)
    def k(dq: lk.Pointer[lk.f32], rows: lk.i32):
        dQ = lk.global_tensor(dq, Layout((rows, head_dim), (head_dim, 1)))
        sdQ = lk.shared_tensor(layout, lk.f32, name="sdQ", align=1024)
        with lk.if_(lk.thread_id() < 1):
            lk.sm90.tma_store(dQ.tile((64, head_dim), (lk.block_id(0), 0)), sdQ, reduce="add")
            lk.sm90.tma_store_commit()
            lk.sm90.tma_store_wait(0)
    return k


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_the_dq_accumulator_tile_reduces_in_32_float_boxes(head_dim):
    with lk.protocol_check_skipped():               # sdQ is never written: lowering only
        spec = dq_accumulate(head_dim).specialize(lk.Pointer[lk.f32], 1000)
        assert spec.cubin.resources["k"].registers > 0
    stores = ops_named(spec.ir, "tma_store")
    blocks = head_dim // 32
    assert [s.attrs["box"] for s in stores] == [(32, 64)] * blocks   # TMA order: 32 floats wide
    assert [s.attrs["swizzle"] for s in stores] == ["128B"] * blocks
    assert [s.attrs["offset"] for s in stores] == [b * 64 * 32 for b in range(blocks)]
    assert {s.attrs["bytes"] for s in stores} == {32 * 64 * 4}
    assert spec.ptx.count("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile."
                          "bulk_group") == blocks


def bad_reduce(dtype, reduce):
    pointer = lk.Pointer[dtype]

    @lk.kernel(num_warps=1)
    def k(c: pointer, M: lk.i32):
        C = lk.global_tensor(c, Layout((M, 16), (16, 1)))
        s_c = lk.shared_tensor(Layout((32, 16), (16, 1)), dtype, align=128)
        lk.sm90.tma_store(C.tile((32, 16), (0, 0)), s_c, reduce=reduce)   # BAD REDUCE
    return k, pointer


OPS = "'add', 'min', 'max', 'inc', 'dec', 'and', 'or', 'xor'"


@pytest.mark.parametrize("dtype, reduce, message", [
    (lk.f32, "sum", f"reduce= is None (a plain store) or one of {OPS}, got 'sum'"),
    (lk.f32, "ADD", f"reduce= is None (a plain store) or one of {OPS}, got 'ADD'"),
    (lk.f32, 1, f"reduce= is None (a plain store) or one of {OPS}, got 1"),
    (lk.f32, ["add"], f"reduce= is None (a plain store) or one of {OPS}, got ['add']"),
    (lk.f32, "min", "reduce='min' does not reduce f32 tensors: 'min' reduces i32, i64, u32, f16, "
                    "bf16 tensors, and f32 tensors reduce with 'add' (PTX ISA, "
                    "cp.reduce.async.bulk.tensor)"),
    (lk.bf16, "inc", "reduce='inc' does not reduce bf16 tensors: 'inc' reduces u32 tensors, and "
                     "bf16 tensors reduce with 'add', 'min', 'max' (PTX ISA, "
                     "cp.reduce.async.bulk.tensor)"),
    (lk.i64, "add", "reduce='add' does not reduce i64 tensors: 'add' reduces i32, u32, f16, "
                    "bf16, f32 tensors, and i64 tensors reduce with 'min', 'max' (PTX ISA, "
                    "cp.reduce.async.bulk.tensor)"),
    (lk.f64, "add", "reduce='add' does not reduce f64 tensors: 'add' reduces i32, u32, f16, "
                    "bf16, f32 tensors, and no TMA reduction takes f64 tensors (PTX ISA, "
                    "cp.reduce.async.bulk.tensor)"),
    # in PTX's table, but not enabled: refused, saying why
    (lk.i64, "xor", "reduce='xor' does not reduce i64 tensors: 'xor' reduces i32 tensors, and "
                    "i64 tensors reduce with 'min', 'max' (PTX lists 'xor' of i64, but the DSL "
                    "enables only the pairs a GPU ran correctly; i64 xor raised an illegal "
                    "instruction on the H200)"),
    (lk.u32, "xor", "reduce='xor' does not reduce u32 tensors: 'xor' reduces i32 tensors, and "
                    "u32 tensors reduce with 'add', 'min', 'max', 'inc', 'dec', 'and', 'or' (PTX "
                    "lists 'xor' of u32, but the DSL enables only the pairs a GPU ran "
                    "correctly)"),
])
def test_a_reduction_the_hardware_lacks_is_a_trace_error_at_the_users_line(dtype, reduce,
                                                                            message):
    kernel, pointer = bad_reduce(dtype, reduce)
    with pytest.raises(lk.TraceError) as info:
        kernel.ir(pointer, 1000)
    assert info.value.message == f"lk.sm90.tma_store: {message}"
    assert info.value.location.line == line_of("# BAD REDUCE")
    assert f"test_tma_reduce.py:{line_of('# BAD REDUCE')}" in str(info.value)


def test_the_enabled_pairs_are_accepted_and_the_rest_of_the_ptx_table_refused():
    names = {"s32": "i32", "s64": "i64", "u32": "u32", "f16": "f16", "bf16": "bf16",
             "f32": "f32"}          # the DSL's element types with a TMA reduction in PTX
    assert set(HARDWARE_REDUCTIONS) == set(REDUCE_TYPES)
    for op, types in REDUCE_TYPES.items():
        assert set(HARDWARE_REDUCTIONS[op]) <= {names[t] for t in types if t in names}
        for ptx in types:
            if ptx not in names:
                continue
            kernel, pointer = bad_reduce(getattr(lk, names[ptx]), op)
            with lk.protocol_check_skipped():        # s_c is never written: attrs only
                if names[ptx] in HARDWARE_REDUCTIONS[op]:
                    (store,) = ops_named(kernel.ir(pointer, 1000), "tma_store")
                    assert store.attrs["reduce"] == op
                else:
                    with pytest.raises(lk.TraceError, match="but the DSL enables only"):
                        kernel.ir(pointer, 1000)


def test_the_verifier_checks_the_reduce_attr():
    fn = copy.deepcopy(reduce_spec("f32", "add").ir)
    verify(fn)
    for bad, dtype, rule in [("min", "f32", "attr reduce='min' does not reduce f32 tensors"),
                             ("sum", "f32", "attr reduce= is None (a plain store) or one of"),
                             ("add", "f128", "attr dtype is an element type")]:
        for op in ops_named(fn, "tma_store"):
            op.attrs.update(reduce=bad, dtype=dtype)
        with pytest.raises(lk.VerifierError) as info:
            verify(fn)
        assert info.value.message.startswith(f"IR op 'tma_store' (results []): {rule}")


# ---- TMA writes the innermost dimension in whole 16-byte chunks -------------------------------
def pitched_store(extent, pitch, reduce=None):
    """One thread TMA-stores (or reduces) a (32, 64) bf16 tile into a (M, extent) tensor with
    row pitch `pitch` (ints, or None: the kernel's parameters N, LD)."""
    @lk.kernel(num_warps=1)
    def k(c: lk.Pointer[lk.bf16], M: lk.i32, N: lk.i32, LD: lk.i32):
        C = lk.global_tensor(c, Layout((M, extent or N), (pitch or LD, 1)))
        s_c = lk.shared_tensor(Layout((32, 64), (64, 1)), lk.bf16, align=128)
        lk.sm90.tma_store(C.tile((32, 64), (0, 0)), s_c, reduce=reduce)   # PITCHED STORE
    return k


@pytest.mark.parametrize("reduce", [None, "add"])
def test_a_constant_inner_extent_inside_a_16_byte_chunk_is_refused(reduce):
    with pytest.raises(lk.sm90.TmaError) as info:
        pitched_store(100, 112, reduce).ir(lk.Pointer[lk.bf16], 64, 100, 112)
    assert info.value.message.startswith(
        "lk.sm90.tma_store: the tensor c: its contiguous mode has extent 100, which is not "
        "provably a multiple of 8 elements (16 bytes); TMA writes that dimension in 16-byte "
        "chunks, so it would also write the elements past the extent")
    assert info.value.location.line == line_of("# PITCHED STORE")
    with lk.protocol_check_skipped():                   # s_c is never written: tracing only
        pitched_store(104, 112, reduce).ir(lk.Pointer[lk.bf16], 64, 104, 112)


def test_a_runtime_inner_extent_is_checked_at_every_launch():
    from layoutkit.ptx import Device, DeviceBuffer
    with lk.protocol_check_skipped():
        spec = pitched_store(None, None, "add").specialize(lk.Pointer[lk.bf16], 64, 100, 112)
    (assumed,) = ops_named(spec.ir, "assume")
    assert assumed.location.line == line_of("# PITCHED STORE")
    buf = DeviceBuffer(0x7F0000001000, (64 * 112,), "uint16", Device(0, None, None),
                       owner=False)
    spec.plan.check_assumptions((buf, 64, 104, 112))          # a whole number of chunks
    with pytest.raises(lk.KernelArgumentError) as info:
        spec.plan.check_assumptions((buf, 64, 100, 112))
    message = str(info.value)
    assert "TMA writes the innermost dimension of c in 16-byte chunks" in message
    assert "N = 100" in message and f"test_tma_reduce.py:{line_of('# PITCHED STORE')}" in message


def test_rows_of_exactly_the_inner_extent_need_no_launch_check():
    # the row stride is the extent: the tensor map's 16-byte stride rule already implies it
    with lk.protocol_check_skipped():
        ir = pitched_store(None, None).ir(lk.Pointer[lk.bf16], 64, 100, 100)
    from .test_tma_kernels import BF16, tma_round_trip
    assert not ops_named(tma_round_trip.ir(BF16, BF16, BF16, BF16, 200, 136, 256, 256, "64B"),
                         "assume")
    assert len(ops_named(ir, "assume")) == 1      # LD is another parameter: checked at launch
