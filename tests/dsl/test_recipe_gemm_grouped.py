"""recipes/gemm_grouped.py on the CPU: both default specializations assemble for sm_90a with no
spills or local memory, their SASS main loop is 2 x 4 HGMMA 64x256x16 per k-step, and their PTX
has both stores (TMA for chunks inside a group, masked st.global for one crossing its end); the
CPU interpreter matches numpy in float64 on ragged groups (empty, 1 row, crossing a tile, rows
of no group) for both B layouts; malformed offsets never reach outside the tensors; every host
argument error is the exact TypeError / ValueError naming it (meta and CPU tensors reach every
check); the launch grid and the B operand's layout are the documented ones."""
import re
import warnings

import numpy as np
import pytest

from layoutkit.dsl.interpreter import interpret
from layoutkit.ptx import assemble, disassemble

from .test_recipes_compile import load_recipe

grouped = load_recipe("gemm_grouped")
Config = grouped.Config


@pytest.fixture(scope="module")
def compiled():
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # spills, ignored setmaxnreg, protocol notes
        return {name: (ptx, assemble(ptx)) for name, ptx in grouped.compile_default().items()}


def test_default_specializations_assemble_without_spills(compiled):
    assert sorted(compiled) == ["gemm_grouped_Kmajor_128x256x64_s4",
                                "gemm_grouped_Nmajor_128x256x64_s4"]
    for name, (_, cubin) in compiled.items():
        usage = cubin.resources["gemm_grouped_body"]
        assert usage.spill_store_bytes == usage.spill_load_bytes == 0, name
        assert usage.stack_frame_bytes == 0 and not usage.setmaxnreg_ignored, name
        sass = disassemble(cubin)
        # 2 consumer warpgroups x 4 k16 instructions per 64-element k-step
        assert len(re.findall(r"HGMMA\.64x256x16\.F32\.BF16", sass)) == 8, name
        assert not re.search(r"\b(LDL|STL)\b", sass), name


def test_chunks_leave_by_tma_inside_a_group_and_by_masked_stores_across_its_end(compiled):
    for name, (ptx, _) in compiled.items():
        assert "cp.async.bulk.tensor.2d.global.shared::cta" in ptx, name     # TMA store
        assert re.search(r"st\.global(\.v\d)?\.b(16|32)", ptx), name           # masked path
        assert "multicast" not in ptx, name                                  # CLUSTER = 1
        assert ptx.count("setmaxnreg.dec.sync.aligned.u32 40") == 1, name


def test_interpreter_matches_numpy():
    assert grouped.check_cpu(0) < 2 ** -7


def test_interpreter_one_group_and_many_small_ones():
    cases = (((200,), (0, 0), 64, 64, "K", 2, Config(BN=64, STAGES=2, GROUP_M=8, CLUSTER=1)),
             ((1, 0, 2, 0, 0, 3, 1, 1), (2, 1), 64, 64, "N", 3,
              Config(BN=64, STAGES=2, GROUP_M=2, CLUSTER=1)))
    assert grouped.check_cpu(1, cases=cases) < 2 ** -7


def test_malformed_offsets_stay_inside_the_tensors():
    """Offsets that go negative, pass T or decrease compute wrong rows but never reach outside
    an argument (the interpreter faults on any such access); groups clamped to nothing write
    nothing."""
    t, k, n, g = 70, 64, 64, 4
    a, c = np.zeros((t, k), np.uint16), np.full((t, n), 7, np.uint16)
    b2 = np.zeros((g * k, n), np.uint16)
    bad = np.array([-5, 90, 10, 10, 1000], np.int32)   # negative, past T, decreasing, past T
    cfg = Config(BN=64, STAGES=2, GROUP_M=2, CLUSTER=1)
    launch, args, constexprs = grouped.kernel_arguments(a, b2, c, bad, "N", cfg, 2)
    interpret(grouped.gemm_grouped_kernel, launch, *args, **constexprs)
    assert (c == 0).all()        # group 0 (clamped to rows 0..69) and group 3 (10..69): a = 0


def test_grid_covers_the_most_tiles_the_groups_can_have():
    cfg = grouped.DEFAULT
    assert grouped.grid_for(16384, 8, 14336, cfg, 132) == 132
    assert grouped.grid_for(100, 3, 256, cfg, 132) == 4        # 0 + 3 tile rows, 1 column
    assert grouped.grid_for(0, 1, 64, cfg, 132) == 1
    assert grouped.grid_for(1000, 8, 512, cfg, 132) == 32      # (7 + 8) x 2 tiles at most
    grids = {grouped.grid_for(t, 8, 512, cfg, 132) for t in range(0, 20000, 7)}
    assert grids == {16, 32, 64, 128, 132}                     # few specializations


torch = pytest.importorskip("torch")
WHAT = "gemm_grouped"


def meta(*shape, dtype=torch.bfloat16):
    return torch.empty(shape, dtype=dtype, device="meta")


def cpu(*shape, dtype=torch.bfloat16):
    return torch.zeros(shape, dtype=dtype)


def offs(n, device="meta"):
    return torch.zeros(n, dtype=torch.int32, device=device)


def call(a=None, b=None, offsets=None, **kw):
    return grouped.gemm_grouped(meta(10, 8) if a is None else a,
                                meta(3, 8, 4) if b is None else b,
                                offs(4) if offsets is None else offsets, **kw)


BAD_CLUSTER = Config(BN=256, STAGES=4, CLUSTER=2)
CASES = [
    ("numpy a", lambda: call(a=np.zeros((10, 8))), TypeError,
     f"{WHAT}: a is a torch tensor on a CUDA device, got numpy.ndarray (torch.from_numpy(x)"
     ".cuda() makes one of a numpy array)"),
    ("rank a", lambda: call(a=meta(2, 10, 8)), ValueError,
     f"{WHAT}: a is a 2-D tensor (total_tokens x K), got one of shape (2, 10, 8)"),
    ("list b", lambda: call(b=[[1.0]]), TypeError,
     f"{WHAT}: b is a torch tensor on a CUDA device, got builtins.list"),
    ("rank b", lambda: call(b=meta(8, 4)), ValueError,
     f"{WHAT}: b is a 3-D tensor (groups x K x N), got one of shape (8, 4)"),
    ("numpy offsets", lambda: call(offsets=np.zeros(4, np.int32)), TypeError,
     f"{WHAT}: offsets is a torch tensor on a CUDA device, got numpy.ndarray (torch.from_numpy"
     "(x).cuda() makes one of a numpy array)"),
    ("rank offsets", lambda: call(offsets=offs((2, 2))), ValueError,
     f"{WHAT}: offsets is a 1-D tensor of groups + 1 row offsets, got one of shape (2, 2)"),
    ("empty offsets", lambda: call(offsets=offs(0)), ValueError,
     f"{WHAT}: offsets is a 1-D tensor of groups + 1 row offsets, got one of shape (0,)"),
    ("dtype a", lambda: call(a=meta(10, 8, dtype=torch.float16)), TypeError,
     f"{WHAT}: a has dtype torch.float16; the kernel takes torch.bfloat16 (no implicit "
     "conversion)"),
    ("dtype b", lambda: call(b=meta(3, 8, 4, dtype=torch.float32)), TypeError,
     f"{WHAT}: b has dtype torch.float32; the kernel takes torch.bfloat16 (no implicit "
     "conversion)"),
    ("dtype offsets", lambda: call(offsets=torch.zeros(4, dtype=torch.int64, device="meta")),
     TypeError, f"{WHAT}: offsets has dtype torch.int64; the kernel takes torch.int32 (no "
     "implicit conversion)"),
    ("K", lambda: call(b=meta(3, 9, 4)), ValueError,
     f"{WHAT}: a is total_tokens x K and b is groups x K x N, got a of shape (10, 8) and b of "
     "shape (3, 9, 4) (K = 8 and 9)"),
    ("groups", lambda: call(offsets=offs(3)), ValueError,
     f"{WHAT}: offsets holds groups + 1 = 4 row offsets for b's 3 groups, got 3"),
    ("config type", lambda: call(config="fast"), TypeError,
     f"{WHAT}: config is a Config (recipes._gemm_kernel.Config, or None for the shipped "
     "choice), got str 'fast'"),
    ("config cluster", lambda: call(config=BAD_CLUSTER), ValueError,
     f"{WHAT}: config {BAD_CLUSTER} does not fit the kernel: CLUSTER = 2 (1: the grouped "
     "kernel runs one CTA per unit)"),
    ("out shape", lambda: call(out=meta(10, 5)), ValueError,
     f"{WHAT}: out has shape (10, 5); the result is (10, 4)"),
    ("out dtype", lambda: call(out=meta(10, 4, dtype=torch.float32)), TypeError,
     f"{WHAT}: out has dtype torch.float32; the kernel takes torch.bfloat16 (no implicit "
     "conversion)"),
    ("devices", lambda: call(offsets=offs(4, device="cpu")), ValueError,
     f"{WHAT}: offsets is on cpu and a on meta; every tensor of one call is on one device"),
    ("not CUDA", lambda: call(a=cpu(10, 8), b=cpu(3, 8, 4), offsets=offs(4, "cpu")), ValueError,
     f"{WHAT}: a is on cpu; the kernel runs on a CUDA device (move the tensors with .cuda())"),
    ("no offsets", lambda: grouped.gemm_grouped(meta(10, 8), meta(3, 8, 4)), TypeError,
     f"{WHAT}: a packed a (total_tokens x K) takes offsets (groups + 1 int32 row offsets on "
     "the GPU); for separate matrices pass lists"),
    # the list form
    ("list with offsets", lambda: grouped.gemm_grouped([meta(2, 8)], [meta(8, 4)], offs(2)),
     ValueError, f"{WHAT}: the list form takes no offsets and no out (the groups are the "
     "lists' entries)"),
    ("list a, tensor b", lambda: grouped.gemm_grouped([meta(2, 8)], meta(1, 8, 4)), TypeError,
     f"{WHAT}: a list of a_g takes a list of b_g (one per group), got b of type Tensor"),
    ("empty lists", lambda: grouped.gemm_grouped([], []), ValueError,
     f"{WHAT}: a is an empty list; give one matrix per group"),
    ("list entry type", lambda: grouped.gemm_grouped([meta(2, 8), "x"], [meta(8, 4)] * 2),
     TypeError, f"{WHAT}: a[1] is a torch tensor on a CUDA device, got builtins.str"),
    ("list entry rank", lambda: grouped.gemm_grouped([meta(2, 8)], [meta(1, 8, 4)]),
     ValueError, f"{WHAT}: b[0] is a 2-D tensor (K x N), got one of shape (1, 8, 4)"),
    ("list entry dtype", lambda: grouped.gemm_grouped([meta(2, 8, dtype=torch.float32)],
                                                      [meta(8, 4)]),
     TypeError, f"{WHAT}: a[0] has dtype torch.float32; the kernel takes torch.bfloat16 (no "
     "implicit conversion)"),
    ("list lengths", lambda: grouped.gemm_grouped([meta(2, 8)] * 2, [meta(8, 4)]), ValueError,
     f"{WHAT}: 2 matrices in a and 1 in b; one pair per group"),
    ("list N differs", lambda: grouped.gemm_grouped([meta(2, 8)] * 2, [meta(8, 4), meta(8, 5)]),
     ValueError, f"{WHAT}: every group has b_g of shape (K, N) = (8, 4) and a_g of K = 8 "
     "columns (one K and N for all groups), got a[1] of shape (2, 8) and b[1] of shape (8, 5)"),
    ("list K differs", lambda: grouped.gemm_grouped([meta(2, 8), meta(3, 9)], [meta(8, 4)] * 2),
     ValueError, f"{WHAT}: every group has b_g of shape (K, N) = (8, 4) and a_g of K = 8 "
     "columns (one K and N for all groups), got a[1] of shape (3, 9) and b[1] of shape (8, 4)"),
    ("list config", lambda: grouped.gemm_grouped([meta(2, 8)], [meta(8, 4)], config=BAD_CLUSTER),
     ValueError, f"{WHAT}: config {BAD_CLUSTER} does not fit the kernel: CLUSTER = 2 (1: the "
     "grouped kernel runs one CTA per unit)"),
    ("list devices", lambda: grouped.gemm_grouped([meta(2, 8)], [cpu(8, 4)]), ValueError,
     f"{WHAT}: b[0] is on cpu and a[0] on meta; every tensor of one call is on one device"),
]


@pytest.mark.parametrize("name, run, error, message", CASES, ids=[c[0] for c in CASES])
def test_gemm_grouped_refuses(name, run, error, message):
    with pytest.raises(error) as info:
        run()
    assert str(info.value) == message


def test_out_overlapping_an_input_is_refused():
    buf = cpu(10, 8)
    with pytest.raises(ValueError, match=rf"{WHAT}: out \(bytes 0x[0-9a-f]+\.\.0x[0-9a-f]+\) "
                                         r"overlaps a \(bytes .*\); the kernel reads a while "
                                         r"it writes out: give out its own memory"):
        grouped.gemm_grouped(buf, cpu(3, 8, 4), offs(4, "cpu"), out=buf[:, :4])


@pytest.mark.parametrize("offsets, message", [
    ([0, 5, 3, 10], "offsets[1] = 5 > offsets[2] = 3"),
    ([-1, 5, 10], "offsets[0] = -1, offsets[-1] = 10"),
    ([0, 5, 11], "offsets[0] = 0, offsets[-1] = 11"),
])
def test_check_offsets_names_the_first_bad_offset(offsets, message):
    with pytest.raises(ValueError) as info:
        grouped.check_offsets(torch.tensor(offsets, dtype=torch.int32), 10)
    assert str(info.value) == (f"{WHAT}: offsets are non-decreasing in 0..10 (the rows of a), "
                               f"got {message}")
    grouped.check_offsets(torch.tensor([0, 0, 4, 10], dtype=torch.int32), 10)    # valid


def test_b_operand_layouts():
    b = cpu(3, 64, 40)                                   # N-major, K a multiple of BK
    major, b2 = grouped.stacked_b(b)
    assert major == "N" and tuple(b2.shape) == (192, 40) and b2.data_ptr() == b.data_ptr()
    w = cpu(3, 40, 64)                                   # (G, N, K) weights
    major, b2 = grouped.stacked_b(w.transpose(1, 2))     # K-major b: (G*N, K), a view
    assert major == "K" and tuple(b2.shape) == (120, 64) and b2.data_ptr() == w.data_ptr()
    ragged = torch.arange(3 * 72 * 16, dtype=torch.float32).reshape(3, 72, 16).bfloat16()
    major, b2 = grouped.stacked_b(ragged)                # N-major, K = 72: read K-major
    assert major == "K" and tuple(b2.shape) == (48, 72)
    assert torch.equal(b2.reshape(3, 16, 72).transpose(1, 2), ragged)


def test_random_groups_are_skewed_with_an_empty_and_a_one_row_group():
    gen = torch.Generator().manual_seed(0)
    sizes = grouped.random_groups(gen, 8, 16384)
    assert sum(sizes) == 16384 and sizes[1] == 0 and sizes[2] == 1 and len(sizes) == 8
    assert grouped.random_groups(gen, 1, 100) == [100]


@pytest.fixture
def on_the_interpreter(monkeypatch):
    """gemm_grouped's host path on CPU tensors: the launch runs the kernel in the interpreter
    (on the tensors' memory), two resident CTAs, and the CUDA-device rule relaxed."""
    from layoutkit.torch.interpreted import run
    monkeypatch.setattr(grouped, "launch", lambda grid, args, cx: run(
        grouped.gemm_grouped_kernel, grid, *args, **cx))
    monkeypatch.setattr(grouped, "_sm_count", lambda device: 2)
    monkeypatch.setattr(grouped.host, "require_one_cuda_device", lambda what, tensors: None)


def _groups(sizes, k, n, seed):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(sum(sizes), k, generator=gen).bfloat16()
    b = torch.randn(len(sizes), k, n, generator=gen).bfloat16()
    bounds = [0]
    for m in sizes:
        bounds.append(bounds[-1] + m)
    return a, b, torch.tensor(bounds, dtype=torch.int32)


def _error(got, want):
    return ((got.double() - want).abs().max() / want.abs().max()).item()


@pytest.mark.parametrize("k, n, b_layout", [(64, 40, "N"), (72, 24, "N"), (64, 36, "K")],
                         ids=["N-major", "N-major ragged K (read K-major)", "K-major"])
def test_host_path_on_the_interpreter(on_the_interpreter, k, n, b_layout):
    """The packed form end to end (operand layouts, TMA padding of rows, out with a column
    stride (a copy back), rows of no group kept) on CPU tensors; one tile a group (groups
    crossing a tile, both B layouts: check_cpu's CPU_CASES)."""
    a, b, offsets = _groups([3, 0, 70, 1], k, n, k + n)
    if b_layout == "K":
        b = b.transpose(1, 2).contiguous().transpose(1, 2)
    inner = offsets[1:].contiguous()                     # rows 0..2 belong to no group
    big = torch.full((n, a.shape[0]), 9.0).bfloat16()
    out = big.t()                                        # column stride != 1
    got = grouped.gemm_grouped(a, b[1:], inner, out=out)
    assert got.data_ptr() == out.data_ptr()
    want = torch.tensor(grouped.reference(a.float(), b[1:].float(), inner.tolist()))
    assert _error(got[3:], want[3:]) < 2 ** -7
    assert (got[:3] == 9).all()


def test_list_form_on_the_interpreter(on_the_interpreter):
    a, b, offsets = _groups([5, 0, 70], 64, 32, 1)
    bounds = offsets.tolist()
    a_list = [a[bounds[g]:bounds[g + 1]] for g in range(3)]
    got = grouped.gemm_grouped(a_list, list(b))
    assert [tuple(c.shape) for c in got] == [(5, 32), (0, 32), (70, 32)]
    for c, x, w in zip(got, a_list, b):
        if x.shape[0]:
            assert _error(c, x.double() @ w.double()) < 2 ** -7
