"""TensorMap: every validation rule of cuTensorMapEncodeTiled, and the driver arguments, on the CPU."""
import numpy as np
import pytest

from layoutkit.ptx import DeviceBuffer, Device, TensorMap, TensorMapError, encode_tiled_arguments
from layoutkit.ptx.tensormap import canonical_dtype

ADDR = 0x7F00_0000_0000


def enc(**overrides):
    args = dict(address=ADDR, dtype="bfloat16", shape=(128, 64), strides=(64, 1), box=(64, 64),
                swizzle="128B")
    args.update(overrides)
    address, dtype = args.pop("address"), args.pop("dtype")
    return encode_tiled_arguments(address, dtype, **args)


def test_row_major_2d_bf16_arguments_are_innermost_first_in_bytes():
    e = enc()
    assert (e.dtype, e.rank, e.global_address) == (9, 2, ADDR)
    assert e.global_dims == (64, 128) and e.global_strides == (128,)
    assert e.box == (64, 64) and e.element_strides == (1, 1)
    assert (e.interleave, e.swizzle, e.l2_promotion, e.oob_fill) == (0, 3, 2, 0)
    assert e.box_bytes == 64 * 64 * 2


def test_rank_5_with_padding_strides_and_options():
    e = encode_tiled_arguments(ADDR, "float32", shape=(2, 3, 4, 5, 8), strides=(1024, 256, 64, 8, 1),
                               box=(1, 2, 4, 5, 8), element_strides=(1, 1, 2, 1, 1), swizzle="32B",
                               l2_promotion="256B", oob_fill="nan")
    assert e.global_dims == (8, 5, 4, 3, 2)
    assert e.global_strides == (32, 256, 1024, 4096)
    assert e.box == (8, 5, 4, 2, 1) and e.element_strides == (1, 1, 2, 1, 1)
    assert (e.swizzle, e.l2_promotion, e.oob_fill, e.dtype) == (1, 3, 1, 7)
    # dim 2 (shape 4, box 4, element stride 2) moves 2 elements; dim 0's element stride is ignored
    assert e.box_bytes == 8 * 5 * 2 * 2 * 1 * 4


@pytest.mark.parametrize("dtype, name", [
    ("bfloat16", "bfloat16"), ("bf16", "bfloat16"), (np.float16, "float16"), (np.dtype("int8"), "uint8"),
    ("float8_e4m3fn", "uint8"), ("int32", "int32"), (np.uint64, "uint64"), ("tfloat32", "tfloat32"),
])
def test_dtypes(dtype, name):
    assert canonical_dtype(dtype) == name


@pytest.mark.parametrize("overrides, message", [
    (dict(dtype="complex64"), r"dtype = 'complex64': not a TMA element type"),
    (dict(dtype=np.bool_), r"not a TMA element type"),
    (dict(shape=(), strides=(), box=()), r"rank = 0 \(shape \(\)\): a TMA tensor has rank 1..5"),
    (dict(shape=(1,) * 6, strides=(1,) * 6, box=(1,) * 6), r"rank = 6 .*rank 1..5"),
    (dict(address=ADDR + 8), r"global address = 0x7f0000000008: must be 16-byte aligned \(it is 8 bytes"),
    (dict(shape=(0, 64)), r"shape\[0\] = 0: each dimension must be in 1..2\^32"),
    (dict(shape=(2 ** 32 + 1, 64)), r"shape\[0\] = 4294967297: each dimension must be in 1..2\^32"),
    (dict(strides=(64, 2)), r"strides\[-1\] = 2 elements: the innermost dimension must be contiguous"),
    (dict(strides=(60, 1)), r"strides\[0\] = 60 elements = 120 bytes \(bfloat16\): must be a multiple of 16"),
    (dict(strides=(0, 1)), r"strides\[0\] = 0 elements: strides must be positive"),
    (dict(strides=(2 ** 39, 1)), r"strides\[0\] = 549755813888 elements = 1099511627776 bytes: must be below 2\^40"),
    (dict(strides=(64,)), r"strides = \(64,\) has 1 entries; the tensor has rank 2"),
    (dict(box=(0, 64)), r"box\[0\] = 0: each box dimension must be in 1..256"),
    (dict(box=(257, 64)), r"box\[0\] = 257: each box dimension must be in 1..256"),
    (dict(box=(64, 4), swizzle="none"), r"box\[-1\] \(innermost\) = 4 elements = 8 bytes \(bfloat16\): "
                                        r"the inner box must span a multiple of 16 bytes"),
    (dict(box=(64, 128), shape=(128, 128), strides=(128, 1)),
     r"box\[-1\] \(innermost\) = 128 elements = 256 bytes: with swizzle 128B the inner box must span at most 128"),
    (dict(box=(64, 64), swizzle="64B"), r"= 128 bytes: with swizzle 64B the inner box must span at most 64"),
    (dict(box=(64, 32), swizzle="32B"), r"= 64 bytes: with swizzle 32B the inner box must span at most 32"),
    (dict(swizzle="256B"), r"swizzle = '256B': must be one of \['none', '32B', '64B', '128B'\]"),
    (dict(element_strides=(0, 1)), r"element_strides\[0\] = 0: each must be in 1..8"),
    (dict(element_strides=(1, 9)), r"element_strides\[1\] = 9: each must be in 1..8"),
    (dict(l2_promotion="512B"), r"l2_promotion = '512B': must be one of"),
    (dict(oob_fill="inf"), r"oob_fill = 'inf': must be one of \['zero', 'nan'\]"),
    (dict(dtype="int32", oob_fill="nan", box=(64, 32)), r"oob_fill = 'nan' with dtype int32: NaN fill needs"),
    (dict(shape=(128, "x")), r"shape\[1\] = 'x': must be an integer, not a str \(no value is truncated"),
])
def test_every_rule_names_field_value_and_rule(overrides, message):
    with pytest.raises((TensorMapError, ValueError), match=message):
        enc(**overrides)


def test_largest_legal_values_pass():
    e = encode_tiled_arguments(ADDR, "uint8", shape=(2 ** 32, 2 ** 32), strides=(2 ** 40 - 16, 1),
                               box=(256, 32), element_strides=(8, 8), swizzle="32B")
    assert e.global_dims == (2 ** 32, 2 ** 32) and e.global_strides == (2 ** 40 - 16,)
    assert e.box == (32, 256)


def _fake_device_buffer(shape, dtype, ptr=ADDR):
    dev = Device(0, None, None)
    return DeviceBuffer(ptr, shape, dtype, dev, owner=False)


def test_tiled_reads_shape_strides_and_device_from_a_device_buffer(monkeypatch):
    captured = {}
    monkeypatch.setattr(TensorMap, "__init__", lambda self, e, device=None: captured.update(e=e, dev=device))
    TensorMap.tiled(_fake_device_buffer((256, 32), np.float16), box=(128, 32), swizzle="64B")
    e = captured["e"]
    assert e.global_dims == (32, 256) and e.global_strides == (64,) and e.box == (32, 128)
    assert e.dtype == 6 and captured["dev"] == 0


def test_tiled_rejects_misaligned_and_non_device_tensors():
    with pytest.raises(TensorMapError, match="global address = 0x7f0000000004: must be 16-byte aligned"):
        TensorMap.tiled(_fake_device_buffer((256, 32), np.float16, ADDR + 4), box=(128, 32))
    with pytest.raises(TensorMapError, match=r"tensor: a ndarray whose __dlpack_device__\(\) is \(1, 0\) is not device"):
        TensorMap.tiled(np.zeros((4, 8), np.float32), box=(4, 8))


@pytest.mark.parametrize("overrides, message", [
    (dict(box=(64.5, 64)), r"box\[0\] = 64.5: must be an integer, not a float \(no value is truncated or parsed\)"),
    (dict(box=(64.0, 64)), r"box\[0\] = 64.0: must be an integer, not a float"),
    (dict(box=(True, 64)), r"box\[0\] = True: must be an integer, not a bool"),
    (dict(box=(np.bool_(True), 64)), r"box\[0\] = .*True_?: must be an integer, not a bool"),
    (dict(shape=(128.0, 64)), r"shape\[0\] = 128.0: must be an integer, not a float"),
    (dict(shape=(np.float64(128), 64)), r"shape\[0\] = .*128.0.*: must be an integer, not a float64"),
    (dict(shape=(None, 64)), r"shape\[0\] = None: must be an integer, not None"),
    (dict(shape="128"), r"shape = '128': must be a sequence of integers, not a str"),
    (dict(shape=None), r"shape = None: must be a sequence of integers, not None"),
    (dict(shape=128), r"shape = 128: must be a sequence of integers, not a int"),
    (dict(strides=(64.0, 1)), r"strides\[0\] = 64.0: must be an integer, not a float"),
    (dict(strides=(64, True)), r"strides\[1\] = True: must be an integer, not a bool"),
    (dict(strides=(-64, 1)), r"strides\[0\] = -64 elements: strides must be positive"),
    (dict(element_strides=(1.0, 1)), r"element_strides\[0\] = 1.0: must be an integer, not a float"),
    (dict(element_strides=()), r"element_strides = \(\) has 0 entries; the tensor has rank 2"),
    (dict(address=0x10000 + 0.5), r"global address = 65536.5: must be an integer, not a float"),
    (dict(address=float(ADDR)), r"global address = 139637976727552.0: must be an integer, not a float"),
    (dict(address="0x10000"), r"global address = '0x10000': must be an integer, not a str"),
    (dict(address=None), r"global address = None: must be an integer, not None"),
    (dict(address=True), r"global address = True: must be an integer, not a bool"),
    (dict(address=-16), r"global address = -16: must be in 0..2\^64-1 \(a device address is an unsigned 64-bit"),
    (dict(address=2 ** 64), r"global address = 0x10000000000000000: must be in 0..2\^64-1"),
    (dict(address=2 ** 64 + 16), r"global address = 0x10000000000000010: must be in 0..2\^64-1"),
    (dict(address=2 ** 64 - 1), r"global address = 0xffffffffffffffff: must be 16-byte aligned \(it is 15 bytes"),
    (dict(dtype=None), r"dtype = None: must be a dtype name \(a str\), a numpy dtype or a torch dtype, not None"),
    (dict(dtype=True), r"dtype = True: must be a dtype name .*not a bool"),
    (dict(dtype=2), r"dtype = 2: must be a dtype name .*not a int"),
    (dict(swizzle=None), r"swizzle = None: must be one of \['none', '32B', '64B', '128B'\] \(a str\), not None"),
    (dict(swizzle=3), r"swizzle = 3: must be one of .* \(a str\), not a int"),
    (dict(l2_promotion=["128B"]), r"l2_promotion = \['128B'\]: must be one of .*not a list"),
    (dict(oob_fill=0), r"oob_fill = 0: must be one of \['zero', 'nan'\] \(a str\), not a int"),
])
def test_nothing_is_coerced(overrides, message):
    with pytest.raises(TensorMapError, match=message):
        enc(**overrides)


def test_numpy_integers_and_sequences_are_exact_integers():
    e = enc(address=np.uint64(ADDR), shape=np.array([128, 64]), strides=[np.int64(64), np.int32(1)],
            box=(np.int16(64), 64))
    assert e == enc() and type(e.global_address) is int and all(type(d) is int for d in e.global_dims)
    assert enc(address=0, swizzle="none").global_address == 0
    assert enc(address=2 ** 64 - 16).global_address == 2 ** 64 - 16


def test_a_rank_1_map_gives_the_driver_a_non_null_strides_array():
    """cuTensorMapEncodeTiled refuses the NULL pointer an empty globalStrides list becomes
    (CUDA_ERROR_INVALID_VALUE on the H200, even at rank 1, which has no stride): the driver
    call gets one entry it does not read, a multiple of 16 bytes; rank >= 2 passes its own."""
    from layoutkit.ptx.tensormap import _strides_array
    row = encode_tiled_arguments(0x1000, "float32", shape=(77,), strides=(1,), box=(64,))
    assert row.global_strides == () and _strides_array(int, row) == [320]
    tile = encode_tiled_arguments(0x1000, "bfloat16", shape=(8, 64), strides=(64, 1), box=(8, 64))
    assert _strides_array(int, tile) == [128]
