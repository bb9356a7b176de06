"""The host entries of recipes/gemm_hopper.py (gemm) and recipes/gemm_fp8.py (gemm_fp8) refuse
every malformed call before anything reaches the GPU: non-tensors (numpy arrays, lists), wrong
ranks, dtypes and shapes, configs of the wrong type or fields, a wrong `out`, `out` overlapping
an input, tensors on different devices or not on a CUDA device. Each error is the exact
TypeError / ValueError naming the argument, its value and the rule. CPU and meta tensors reach
every check (no GPU needed)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from recipes import gemm_fp8, gemm_hopper  # noqa: E402
from recipes._gemm_kernel import Config  # noqa: E402

BF16, E4M3, E5M2 = torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2


def meta(*shape, dtype=BF16):
    return torch.empty(shape, dtype=dtype, device="meta")


def cpu(*shape, dtype=BF16):
    return torch.zeros(shape, dtype=dtype)


GEMM = "gemm_hopper.gemm"
GEMM_CASES = [
    ("numpy a", lambda: gemm_hopper.gemm(np.zeros((4, 8)), meta(8, 4)), TypeError,
     f"{GEMM}: a is a torch tensor on a CUDA device, got numpy.ndarray (torch.from_numpy(x)"
     ".cuda() makes one of a numpy array)"),
    ("list b", lambda: gemm_hopper.gemm(meta(4, 8), [[1.0] * 4] * 8), TypeError,
     f"{GEMM}: b is a torch tensor on a CUDA device, got builtins.list"),
    ("rank", lambda: gemm_hopper.gemm(meta(2, 4, 8), meta(8, 4)), ValueError,
     f"{GEMM}: a is a 2-D tensor (M x K), got one of shape (2, 4, 8)"),
    ("dtype a", lambda: gemm_hopper.gemm(meta(4, 8, dtype=torch.float16), meta(8, 4)), TypeError,
     f"{GEMM}: a has dtype torch.float16; the kernel takes torch.bfloat16 (no implicit "
     "conversion)"),
    ("dtype b", lambda: gemm_hopper.gemm(meta(4, 8), meta(8, 4, dtype=torch.float32)), TypeError,
     f"{GEMM}: b has dtype torch.float32; the kernel takes torch.bfloat16 (no implicit "
     "conversion)"),
    ("inner extents", lambda: gemm_hopper.gemm(meta(4, 8), meta(9, 4)), ValueError,
     f"{GEMM}: a is M x K and b is K x N, got a of shape (4, 8) and b of shape (9, 4) (K = 8 "
     "and 9)"),
    ("config type", lambda: gemm_hopper.gemm(meta(4, 8), meta(8, 4), config={"BN": 128}),
     TypeError, f"{GEMM}: config is a Config (recipes._gemm_kernel.Config, or None for the "
     "shipped choice), got dict {'BN': 128}"),
    ("config fields", lambda: gemm_hopper.gemm(meta(4, 8), meta(8, 4),
                                               config=Config(BN=192, CLUSTER=4, STAGES=1)),
     ValueError, f"{GEMM}: config Config(BN=192, STAGES=1, GROUP_M=8, CLUSTER=4, BM=128, "
     "SPLIT_K=1, SWAP=False) does not fit the kernel: BN = 192 (one of 64, 128, 256: a wgmma "
     "N in whole epilogue chunks); "
     "CLUSTER = 4 (1 or 2); STAGES = 1 (an int of at least 2)"),
    ("swapped config fields", lambda: gemm_hopper.gemm(
        meta(4, 8), meta(8, 4), config=Config(BN=12, CLUSTER=2, SPLIT_K=2, SWAP=True)),
     ValueError, f"{GEMM}: config Config(BN=12, STAGES=3, GROUP_M=8, CLUSTER=2, BM=128, "
     "SPLIT_K=2, SWAP=True) does not fit the kernel: BN = 12 (the swapped kernel's token "
     "columns: a multiple of 8 up to 256); CLUSTER = 2 (the swapped kernel runs without "
     "clusters: 1); SPLIT_K = 2 (the swapped kernel's consumer warpgroups per 64 weight rows: "
     "1, or 2 with BM = 64; at most 2 consumer warpgroups)"),
    ("swapped stages", lambda: gemm_hopper.gemm(
        meta(4, 8), meta(8, 4), config=Config(BM=64, BN=8, CLUSTER=1, SPLIT_K=2, STAGES=9,
                                              SWAP=True)),
     ValueError, f"{GEMM}: config Config(BN=8, STAGES=9, GROUP_M=8, CLUSTER=1, BM=64, "
     "SPLIT_K=2, SWAP=True) does not fit the kernel: STAGES = 9 (each of the swapped kernel's 2 "
     "consumer part(s) holds 3 stages while it waits for the next, and waits on every phase of "
     "its own stages: a multiple of 2, at least 8)"),
    ("SWAP type", lambda: gemm_hopper.gemm(meta(4, 8), meta(8, 4), config=Config(SWAP=1)),
     ValueError, f"{GEMM}: config Config(BN=256, STAGES=3, GROUP_M=8, CLUSTER=2, BM=128, "
     "SPLIT_K=1, SWAP=1) does not fit the kernel: SWAP = 1 (True or False)"),
    ("out type", lambda: gemm_hopper.gemm(meta(4, 8), meta(8, 4), out=np.zeros((4, 4))),
     TypeError, f"{GEMM}: out is a torch tensor on a CUDA device, got numpy.ndarray (torch."
     "from_numpy(x).cuda() makes one of a numpy array)"),
    ("out shape", lambda: gemm_hopper.gemm(meta(4, 8), meta(8, 4), out=meta(4, 5)), ValueError,
     f"{GEMM}: out has shape (4, 5); the result is (4, 4)"),
    ("out dtype", lambda: gemm_hopper.gemm(meta(4, 8), meta(8, 4),
                                           out=meta(4, 4, dtype=torch.float16)),
     TypeError, f"{GEMM}: out has dtype torch.float16; the kernel takes torch.bfloat16 or "
     "torch.float32 (no implicit conversion)"),
    ("devices", lambda: gemm_hopper.gemm(cpu(4, 8), meta(8, 4)), ValueError,
     f"{GEMM}: b is on meta and a on cpu; every tensor of one call is on one device"),
    ("out device", lambda: gemm_hopper.gemm(meta(4, 8), meta(8, 4), out=cpu(4, 4)), ValueError,
     f"{GEMM}: out is on cpu and a on meta; every tensor of one call is on one device"),
    ("not CUDA", lambda: gemm_hopper.gemm(cpu(4, 8), cpu(8, 4)), ValueError,
     f"{GEMM}: a is on cpu; the kernel runs on a CUDA device (move the tensors with .cuda())"),
]


def overlapping_out():
    buf = cpu(8, 8)
    a, out = buf[:4], buf[:4, :4]                  # out lies inside a
    return gemm_hopper.gemm(a, cpu(8, 4), out=out)


def test_out_overlapping_an_input_is_refused():
    with pytest.raises(ValueError, match=r"gemm_hopper.gemm: out \(bytes 0x[0-9a-f]+\.\.0x"
                                         r"[0-9a-f]+\) overlaps a \(bytes .*\); the kernel reads "
                                         r"a while it writes out: give out its own memory"):
        overlapping_out()


def test_disjoint_views_of_one_buffer_are_not_an_overlap():
    buf = cpu(16, 8)
    with pytest.raises(ValueError, match="a is on cpu; the kernel runs on a CUDA device"):
        gemm_hopper.gemm(buf[:4], cpu(8, 4), out=buf[8:12, :4])


@pytest.mark.parametrize("name, call, error, message", GEMM_CASES, ids=[c[0] for c in GEMM_CASES])
def test_gemm_refuses(name, call, error, message):
    with pytest.raises(error) as info:
        call()
    assert str(info.value) == message


FP8 = "gemm_fp8"


def fp8(*shape, dtype=E4M3, device="meta"):
    return torch.empty(shape, dtype=dtype, device=device)


def scale(*shape, dtype=torch.float32, device="meta"):
    return torch.empty(shape, dtype=dtype, device=device)


def call(a=None, b=None, sa=None, sb=None, **kw):
    a = fp8(4, 32) if a is None else a
    b = fp8(16, 32).t() if b is None else b
    return gemm_fp8.gemm_fp8(a, b, scale() if sa is None else sa, scale() if sb is None else sb,
                             **kw)


FP8_CASES = [
    ("numpy a", lambda: call(a=np.zeros((4, 32), np.uint8)), TypeError,
     f"{FP8}: a is a torch tensor on a CUDA device, got numpy.ndarray (torch.from_numpy(x)"
     ".cuda() makes one of a numpy array)"),
    ("rank b", lambda: call(b=fp8(32)), ValueError,
     f"{FP8}: b is a 2-D tensor (K x N, column-major: b.t() is N x K row-major), got one of "
     "shape (32,)"),
    ("dtype a", lambda: call(a=fp8(4, 32, dtype=BF16)), TypeError,
     f"{FP8}: a has dtype torch.bfloat16; the kernel takes torch.float8_e4m3fn or "
     "torch.float8_e5m2 (no implicit conversion)"),
    ("fnuz b", lambda: call(b=fp8(16, 32, dtype=torch.float8_e4m3fnuz).t()), TypeError,
     f"{FP8}: b has dtype torch.float8_e4m3fnuz; the kernel takes torch.float8_e4m3fn or "
     "torch.float8_e5m2 (no implicit conversion)"),
    ("inner extents", lambda: call(b=fp8(16, 48).t()), ValueError,
     f"{FP8}: a is M x K and b is K x N, got a of shape (4, 32) and b of shape (48, 16) (K = 32 "
     "and 48)"),
    ("scale type", lambda: call(sa=1.0), TypeError,
     f"{FP8}: scale_a is a torch tensor on a CUDA device, got builtins.float"),
    ("scale dtype", lambda: call(sb=scale(dtype=torch.bfloat16)), TypeError,
     f"{FP8}: scale_b has dtype torch.bfloat16; the kernel takes torch.float32 (no implicit "
     "conversion)"),
    ("scale_a shape", lambda: call(sa=scale(1, 4)), ValueError,
     f"{FP8}: scale_a has shape (1, 4); it is one f32 (shape (), (1,) or (1, 1): per tensor) "
     "or one per row of a (per token) of shape (4, 1)"),
    ("scale_b shape", lambda: call(sb=scale(16)), ValueError,
     f"{FP8}: scale_b has shape (16,); it is one f32 (shape (), (1,) or (1, 1): per tensor) "
     "or one per column of b (per channel) of shape (1, 16)"),
    ("out_dtype", lambda: call(out_dtype=torch.float16), TypeError,
     f"{FP8}: out_dtype is torch.bfloat16 or torch.float32 (or None: out's dtype, else bf16), "
     "got torch.float16"),
    ("out_dtype vs out", lambda: call(out=scale(4, 16), out_dtype=BF16), ValueError,
     f"{FP8}: out has dtype torch.float32 but out_dtype is torch.bfloat16; give one of them, "
     "or the same"),
    ("config type", lambda: call(config="fast"), TypeError,
     f"{FP8}: config is a Config (recipes._gemm_kernel.Config, or None for the shipped "
     "choice), got str 'fast'"),
    ("out dtype", lambda: call(out=scale(4, 16, dtype=torch.float16)), TypeError,
     f"{FP8}: out has dtype torch.float16; the kernel writes torch.bfloat16 or torch.float32"),
    ("out shape", lambda: call(out=scale(16, 4)), ValueError,
     f"{FP8}: out has shape (16, 4); the result is (4, 16)"),
    ("devices", lambda: call(sb=scale(device="cpu")), ValueError,
     f"{FP8}: scale_b is on cpu and a on meta; every tensor of one call is on one device"),
    ("not CUDA", lambda: call(*(fp8(*s, device="cpu") for s in ((4, 32), (32, 16))),
                              sa=scale(4, 1, device="cpu"), sb=scale(1, 16, device="cpu")),
     ValueError, f"{FP8}: a is on cpu; the kernel runs on a CUDA device (move the tensors with "
     ".cuda())"),
]


@pytest.mark.parametrize("name, call, error, message", FP8_CASES, ids=[c[0] for c in FP8_CASES])
def test_gemm_fp8_refuses(name, call, error, message):
    with pytest.raises(error) as info:
        call()
    assert str(info.value) == message


def test_gemm_fp8_out_overlapping_a_scale_is_refused():
    a, b = fp8(4, 32, device="cpu"), fp8(4, 32, device="cpu").t()
    buf = torch.zeros(64)                                       # out's first row is scale_a
    with pytest.raises(ValueError, match=r"gemm_fp8: out \(bytes .*\) overlaps scale_a \(bytes "
                                         r".*\); the kernel reads scale_a while it writes out"):
        gemm_fp8.gemm_fp8(a, b, buf[:4].view(4, 1), torch.ones(1, 4), out=buf.view(16, 4)[:4])


def test_scales_may_be_left_out():
    with pytest.raises(ValueError, match="a is on meta; the kernel runs on a CUDA device"):
        gemm_fp8.gemm_fp8(fp8(4, 32), fp8(16, 32).t())
    with pytest.raises(ValueError, match="scale_b is on cpu and a on meta"):
        gemm_fp8.gemm_fp8(fp8(4, 32), fp8(16, 32).t(), None, scale(device="cpu"))


def test_valid_meta_calls_pass_every_check_but_the_device():
    with pytest.raises(ValueError, match="a is on meta; the kernel runs on a CUDA device"):
        call(sa=scale(4, 1), sb=scale(1, 16), out=scale(4, 16))
    with pytest.raises(ValueError, match="a is on meta; the kernel runs on a CUDA device"):
        gemm_hopper.gemm(meta(4, 8), meta(8, 4).t().contiguous().t(), out=meta(4, 4),
                         config=Config(BN=128, STAGES=6))


def test_a_recipe_without_the_swapped_kernel_refuses_swap():
    from recipes import gemm_grouped
    with pytest.raises(ValueError, match=r"gemm_grouped: config .* does not fit the kernel: "
                       r"SWAP = True \(False: this recipe has no swapped kernel\)"):
        gemm_grouped.check_config(Config(CLUSTER=1, SWAP=True))
