"""The PTX-backend GPU checks, one per process: ``python tests/gpu/ptx_backend_checks.py NAME``.

Exit status 0 and a last line ``PASS NAME`` when the check holds; an AssertionError (status 1)
otherwise; status 3 with ``SKIP reason`` when something it needs (PyTorch) is missing. Run in a
separate process so that a faulting or hung kernel costs only its own check.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from layoutkit.ptx import (CompiledKernel, DeviceBuffer, LaunchConfigError, TensorMap,  # noqa: E402
                           device)
from tests.gpu import ptx_backend_kernels as K  # noqa: E402

SKIP = 3
RNG = np.random.default_rng()


def torch_or_skip():
    try:
        import torch
    except ImportError:
        print("SKIP PyTorch is not installed")
        sys.exit(SKIP)
    return torch


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bit patterns (round to nearest even)."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16_bits(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


def check_vector_add_torch():
    torch = torch_or_skip()
    kernel = CompiledKernel.from_ptx(K.VECTOR_ADD)
    n = 1_000_003
    a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    c = torch.full((n + 64,), float("nan"), device="cuda")
    kernel.launch(a, b, c, n, grid=(n + 255) // 256, block=256)
    torch.cuda.synchronize()
    assert torch.equal(c[:n], a + b), "vector_add result differs from a + b"
    assert torch.isnan(c[n:]).all(), "vector_add wrote past n"
    # on a side stream, as torch's current stream and as an explicit stream=
    side = torch.cuda.Stream()
    c.fill_(float("nan"))
    torch.cuda.synchronize()  # the side stream does not wait for the default stream's fill
    with torch.cuda.stream(side):
        from layoutkit.ptx.launch import _torch_current_stream
        assert _torch_current_stream(a.device.index) == side.cuda_stream
        kernel.launch(a, b, c, n, grid=(n + 255) // 256, block=256)
    side.synchronize()
    assert torch.equal(c[:n], a + b), "vector_add on torch's current (side) stream"
    c.fill_(float("nan"))
    torch.cuda.synchronize()
    kernel.launch(a, b, c, n, grid=(n + 255) // 256, block=256, stream=side)
    side.synchronize()
    assert torch.equal(c[:n], a + b), "vector_add with stream=side"
    # alignment rule of `.ptr.align 16`: a tensor view 4 bytes in is refused before launching
    try:
        kernel.launch(a[1:], b, c, n - 1, grid=1, block=256)
    except ValueError as exc:
        assert "must be 16-byte aligned" in str(exc), exc
    else:
        raise AssertionError("a misaligned pointer was launched")


def check_configured_launch_torch():
    torch = torch_or_skip()
    kernel = CompiledKernel.from_ptx(K.VECTOR_ADD)
    n = 1_000_003
    a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    c = torch.full((n + 64,), float("nan"), device="cuda")
    launcher = kernel.configure((n + 255) // 256, 256)
    launcher(a, b, c, n)
    torch.cuda.synchronize()
    assert torch.equal(c[:n], a + b), "configured vector_add result differs from a + b"
    assert torch.isnan(c[n:]).all(), "configured vector_add wrote past n"
    side = torch.cuda.Stream()
    c.fill_(float("nan"))
    torch.cuda.synchronize()
    with torch.cuda.stream(side):  # the launcher follows torch's current stream at each call
        launcher(a, b, c, n)
    side.synchronize()
    assert torch.equal(c[:n], a + b), "configured vector_add on torch's current (side) stream"
    try:
        launcher(a[1:], b, c, n - 1)
    except ValueError as exc:
        assert "must be 16-byte aligned" in str(exc), exc
    else:
        raise AssertionError("a misaligned pointer was launched by the configured launcher")
    # the launcher keeps its last packed values: a repeat, a new output, a new count, an unaligned c
    for out, count, what in [(c, n, "the same arguments again, after a refused misaligned call"),
                             (torch.full_like(c, float("nan")), n, "a new output tensor"),
                             (c, n // 2, "a smaller n"),
                             (c[1:], n, "an output 4 bytes in (c has no alignment rule)")]:
        c.fill_(float("nan"))
        out.fill_(float("nan"))
        torch.cuda.synchronize()
        launcher(a, b, out, count)
        torch.cuda.synchronize()
        assert torch.equal(out[:count], a[:count] + b[:count]), f"configured vector_add with {what}"
        assert torch.isnan(out[count:]).all(), f"configured vector_add wrote past n with {what}"
    try:
        kernel.configure(1, 2048)
    except LaunchConfigError as exc:
        assert "block.x = 2048" in str(exc), exc
    else:
        raise AssertionError("configure accepted a 2048-thread block")


def check_vector_add_device_buffer():
    kernel = CompiledKernel.from_ptx(K.VECTOR_ADD)
    n = 4099
    a, b = RNG.standard_normal(n).astype(np.float32), RNG.standard_normal(n).astype(np.float32)
    da, db = DeviceBuffer.from_numpy(a), DeviceBuffer.from_numpy(b)
    dc = DeviceBuffer.empty(n, np.float32)
    dc.fill_bytes(0xFF)  # NaN everywhere
    kernel.launch(da, db, dc, n, grid=(n + 255) // 256, block=256)
    device(0).synchronize()
    assert np.array_equal(dc.to_numpy(), a + b), "vector_add with DeviceBuffers"
    for buf in (da, db, dc):
        buf.free()


def check_dynamic_smem_optin():
    kernel = CompiledKernel.from_ptx(K.SMEM_FILL)
    fn = kernel.function(0)
    limit = fn.device.max_dynamic_smem_optin - fn.static_smem_bytes
    out = DeviceBuffer.empty(128, np.uint32)
    for nbytes in (1024, 100 * 1024, limit):
        out.fill_bytes(0xAB)
        kernel.launch(out, grid=1, block=128, smem_bytes=nbytes)
        device(0).synchronize()
        words = nbytes // 4
        got = out.to_numpy()
        for tid in (0, 1, 77, 127):
            owner = (tid + 1) % 128
            expected = owner * len(range(owner, words, 128)) % 2 ** 32
            assert got[tid] == expected, (nbytes, tid, got[tid], expected)
    try:
        kernel.launch(out, grid=1, block=128, smem_bytes=limit + 16)
    except LaunchConfigError as exc:
        assert f"at most {limit} fit" in str(exc) and str(fn.device.max_dynamic_smem_optin) in str(exc), exc
    else:
        raise AssertionError("a launch over the opt-in shared-memory limit was not refused")


# swizzle name -> (inner box bytes, mask of the 16-byte-chunk bits XORed with address bits [9:7])
SWIZZLE_CASES = {"none": (128, 0), "32B": (32, 0b1), "64B": (64, 0b11), "128B": (128, 0b111)}


def swizzled_offset(offset: np.ndarray, mask: int) -> np.ndarray:
    """Shared-memory byte offset of a tile's logical byte ``offset`` (tile 1024-byte aligned):
    bits [6:4] ^= bits [9:7] (128B), [5:4] ^= [8:7] (64B), bit 4 ^= bit 7 (32B), hopper-ptx.md §4."""
    return offset ^ (((offset >> 7) & mask) << 4)


def check_tma_round_trip(swizzle: str):
    inner_bytes, mask = SWIZZLE_CASES[swizzle]
    box_rows, box_cols = 64, inner_bytes // 2  # uint16 elements
    rows, cols = 3 * box_rows, 3 * box_cols
    tile_bytes = box_rows * inner_bytes
    src = RNG.integers(0, 2 ** 16, (rows, cols), dtype=np.uint16)
    din, dout = DeviceBuffer.from_numpy(src), DeviceBuffer.from_numpy(np.zeros_like(src))
    dump = DeviceBuffer.empty(tile_bytes // 2, np.uint16)
    dump.fill_bytes(0xEE)
    tin = TensorMap.tiled(din, box=(box_rows, box_cols), swizzle=swizzle)
    tout = TensorMap.tiled(dout, box=(box_rows, box_cols), swizzle=swizzle)
    kernel = CompiledKernel.from_ptx(K.tma_round_trip(tile_bytes))
    x, y = box_cols, 2 * box_rows  # TMA coordinates, innermost first: column, row
    kernel.launch(tin, tout, dump, x, y, grid=1, block=128, smem_bytes=tile_bytes + 1024)
    device(0).synchronize()
    logical = np.ascontiguousarray(src[y:y + box_rows, x:x + box_cols]).view(np.uint8).reshape(-1)
    chunk_offsets = np.arange(0, tile_bytes, 16)
    expected = np.empty_like(logical)
    for offset in chunk_offsets:  # logical 16-byte chunk -> its swizzled place in shared memory
        place = int(swizzled_offset(np.array(offset), mask))
        expected[place:place + 16] = logical[offset:offset + 16]
    got = dump.to_numpy().view(np.uint8)
    bad = np.flatnonzero((got != expected).reshape(-1, 16).any(axis=1))
    assert bad.size == 0, (f"swizzle {swizzle}: the shared-memory image differs from the formula in "
                           f"{bad.size} of {tile_bytes // 16} 16-byte chunks, first {bad[:4].tolist()}")
    if mask:
        assert not np.array_equal(got, logical), f"swizzle {swizzle}: smem holds the tile unswizzled"
    out = dout.to_numpy()
    region = np.zeros_like(src, dtype=bool)
    region[y:y + box_rows, x:x + box_cols] = True
    assert np.array_equal(out[region], src[region]), f"swizzle {swizzle}: TMA store did not restore the box"
    assert not out[~region].any(), f"swizzle {swizzle}: TMA store wrote outside the box"


def check_tma_rank1_encodes():
    """A rank-1 map (a row of values, e.g. the attention backward's per-query lse) encodes: the
    driver refuses a NULL globalStrides even though rank 1 has none (tensormap._strides_array)."""
    for n, dtype, box in ((64, np.float32, 64), (1000, np.float32, 256), (77, np.uint16, 64)):
        buf = DeviceBuffer.from_numpy(np.zeros(n, dtype))
        tmap = TensorMap.tiled(buf, box=(box,))
        assert tmap.encoding.rank == 1 and len(tmap.packed) == 128


def check_ping_pong():
    kernel = CompiledKernel.from_ptx(K.PING_PONG)
    iterations = 10_001
    out = DeviceBuffer.empty((32, 2), np.uint64)
    out.fill_bytes(0xCD)
    kernel.launch(out, iterations, grid=1, block=64)
    device(0).synchronize()
    got = out.to_numpy()
    k = np.arange(iterations, dtype=np.uint64)
    for lane in range(32):
        expected = int((32 * k + lane + 1).sum())
        assert got[lane, 1] == 0, f"lane {lane} consumed {got[lane, 1]} wrong values"
        assert got[lane, 0] == expected, f"lane {lane}: sum {got[lane, 0]} != {expected}"


def check_wgmma_m64n128k16():
    n, k = 128, 64
    a = from_bf16_bits(to_bf16_bits(RNG.standard_normal((64, k)).astype(np.float32)))
    b = from_bf16_bits(to_bf16_bits(RNG.standard_normal((n, k)).astype(np.float32)))
    da, db = DeviceBuffer.from_numpy(to_bf16_bits(a)), DeviceBuffer.from_numpy(to_bf16_bits(b))
    out = DeviceBuffer.empty((64, n), np.float32)
    out.fill_bytes(0xFF)
    ta = TensorMap.tiled(da, box=(64, k), swizzle="128B")  # the dtype says uint16: bits, as TMA copies
    tb = TensorMap.tiled(db, box=(n, k), swizzle="128B")
    kernel = CompiledKernel.from_ptx(K.wgmma_m64nNk16(n, k))
    kernel.launch(ta, tb, out, grid=1, block=128, smem_bytes=64 * k * 2 + n * k * 2 + 1024)
    device(0).synchronize()
    got = out.to_numpy().astype(np.float64)
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    assert np.isfinite(got).all(), "wgmma left unwritten (NaN) outputs"
    err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    assert err < 1e-5, f"wgmma m64n{n}k16: relative error {err:.3g} against float64"


def check_cluster_launch():
    kernel = CompiledKernel.from_ptx(K.CLUSTER_RANKS)
    grid = 8
    out = DeviceBuffer.empty((grid, 4), np.uint32)
    out.fill_bytes(0xFF)
    kernel.launch(out, grid=grid, block=32, cluster=(2, 1, 1))
    device(0).synchronize()
    got = out.to_numpy()
    for cta in range(grid):
        assert tuple(got[cta]) == (cta % 2, 2, cta // 2, 1 - cta % 2), (cta, got[cta].tolist())
    try:
        kernel.launch(out, grid=3, block=32, cluster=(2, 1, 1))
    except LaunchConfigError as exc:
        assert "grid.x = 3 is not divisible by cluster.x = 2" in str(exc), exc
    else:
        raise AssertionError("a grid that is not a whole number of clusters was launched")


CHECKS = {
    "vector_add_torch": check_vector_add_torch,
    "vector_add_device_buffer": check_vector_add_device_buffer,
    "configured_launch_torch": check_configured_launch_torch,
    "dynamic_smem_optin": check_dynamic_smem_optin,
    **{f"tma_round_trip_{s}": (lambda s=s: check_tma_round_trip(s)) for s in SWIZZLE_CASES},
    "tma_rank1_encodes": check_tma_rank1_encodes,
    "mbarrier_ping_pong": check_ping_pong,
    "wgmma_m64n128k16": check_wgmma_m64n128k16,
    "cluster_launch": check_cluster_launch,
}

if __name__ == "__main__":
    name = sys.argv[1]
    CHECKS[name]()
    print(f"PASS {name}")
