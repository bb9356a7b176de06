"""Parsing the `.entry` parameter list of PTX text into typed parameter specs."""
import pytest

from layoutkit.ptx import Module
from layoutkit.ptx.signature import ParamKind, ParamSpec, SignatureError, parse_entries, parse_entry

MIXED = """
.version 8.0
.target sm_90a
.address_size 64
// a comment with .entry fake(.param .u32 nope) inside
/* block comment .entry other() { } */
.visible .entry mixed(
    .param .align 64 .b8 tmap_a[128],   // CUtensorMap by value
    .param .u64 out,
    .param .u64 .ptr.global.align 16 aligned,
    .param .u32 n, .param .s32 delta, .param .b16 bits,
    .param .f32 scale, .param .f64 eps, .param .u8 flag,
    .param .align 8 .b8 blob[24]
)
.maxntid 384, 1, 1
.minnctapersm 1
{
    ret;
}
.entry second()
.reqntid 128
.reqnctapercluster 2, 1, 1
{ ret; }
"""


def test_mixed_entry_kinds_sizes_and_alignment():
    sig = parse_entry(MIXED, "mixed")
    got = [(p.name, p.ptx_type, p.kind, p.size, p.align, p.pointer_align) for p in sig.params]
    assert got == [
        ("tmap_a", "b8", ParamKind.TENSORMAP, 128, 64, 1),
        ("out", "u64", ParamKind.INT_OR_POINTER, 8, 8, 1),
        ("aligned", "u64", ParamKind.POINTER, 8, 8, 16),
        ("n", "u32", ParamKind.INT, 4, 4, 1),
        ("delta", "s32", ParamKind.INT, 4, 4, 1),
        ("bits", "b16", ParamKind.INT, 2, 2, 1),
        ("scale", "f32", ParamKind.FLOAT, 4, 4, 1),
        ("eps", "f64", ParamKind.FLOAT, 8, 8, 1),
        ("flag", "u8", ParamKind.INT, 1, 1, 1),
        ("blob", "b8", ParamKind.BYTES, 24, 8, 1),
    ]
    assert sig.maxntid == (384, 1, 1) and sig.reqntid is None and not sig.explicitcluster


def test_all_entries_and_directives():
    entries = parse_entries(MIXED)
    assert list(entries) == ["mixed", "second"]  # the commented-out entries are ignored
    second = entries["second"]
    assert second.params == () and second.reqntid == (128, 1, 1)
    assert second.reqnctapercluster == (2, 1, 1)


def test_explicitcluster_and_empty_param_list():
    sig = parse_entry(".visible .entry k() .explicitcluster .maxclusterrank 4 { ret; }")
    assert sig.explicitcluster and sig.params == ()


def test_choosing_an_entry():
    with pytest.raises(SignatureError, match=r"has 2 entries \(\['mixed', 'second'\]\); name the one"):
        parse_entry(MIXED)
    with pytest.raises(SignatureError, match="no .entry 'third'; it has \\['mixed', 'second'\\]"):
        parse_entry(MIXED, "third")


@pytest.mark.parametrize("decl, message", [
    (".param .v2 .f32 x", "cannot read the parameter declaration"),
    (".param .pred p", "cannot read the parameter declaration"),
    (".param .u128 x", "unsupported PTX type .u128"),
    (".param .u32 n, .param .u32 n", "declared twice"),
])
def test_unreadable_parameters(decl, message):
    with pytest.raises(SignatureError, match=message):
        parse_entry(f".visible .entry k({decl}) {{ ret; }}")


def test_unclosed_parameter_list():
    with pytest.raises(SignatureError, match="not closed"):
        parse_entry(".visible .entry k(.param .u32 n")


def test_a_128_byte_array_with_low_alignment_is_not_a_tensor_map():
    sig = parse_entry(".visible .entry k(.param .align 8 .b8 s[128]) { ret; }")
    assert sig.params[0].kind is ParamKind.BYTES
    with pytest.raises(SignatureError, match=r"\.b8\[128\] with \.align >= 64"):
        sig.with_params([ParamSpec("s", "b8", ParamKind.TENSORMAP, 128, 8)])


def test_richer_specs_refine_the_ptx():
    sig = parse_entry(".visible .entry k(.param .u64 x, .param .u32 n) { ret; }")
    rich = sig.with_params([ParamSpec.pointer("x", align=16, dtype="bf16"),
                            ParamSpec("n", "u32", ParamKind.INT, 4, 4)])
    assert rich.params[0].kind is ParamKind.POINTER and rich.params[0].pointer_align == 16
    assert rich.params[0].dtype == "bf16"
    with pytest.raises(SignatureError, match="2 parameters but 1 parameter specs"):
        sig.with_params([ParamSpec.pointer("x")])
    with pytest.raises(SignatureError, match="given for PTX parameter 'x'"):
        sig.with_params([ParamSpec.pointer("y"), sig.params[1]])
    with pytest.raises(SignatureError, match="kind float does not fit the PTX declaration .param .u32 n"):
        sig.with_params([sig.params[0], ParamSpec("n", "u32", ParamKind.FLOAT, 4, 4)])
    with pytest.raises(SignatureError, match="says 8 bytes aligned to 8 but the PTX declares .param .u32 n"):
        sig.with_params([sig.params[0], ParamSpec.pointer("n")])


def test_spec_constructor_rules():
    with pytest.raises(SignatureError, match="pointer alignment 12 is not a power of two"):
        ParamSpec.pointer("x", align=12)
    with pytest.raises(SignatureError, match="a pointer parameter must be 64-bit, not .u32"):
        ParamSpec("x", "u32", ParamKind.POINTER, 4, 4)


def test_scalar_specs_match_the_parsed_declaration():
    sig = parse_entry(".entry k(.param .u32 a, .param .s64 b, .param .b64 c, .param .f32 d, .param .u8 e) { ret; }")
    specs = [ParamSpec.scalar(p.name, p.ptx_type) for p in sig.params]
    assert [(p.kind, p.size, p.align) for p in specs] == [
        (ParamKind.INT, 4, 4), (ParamKind.INT, 8, 8), (ParamKind.INT, 8, 8), (ParamKind.FLOAT, 4, 4),
        (ParamKind.INT, 1, 1)]
    rich = sig.with_params(specs)
    assert rich.params[1].kind is ParamKind.INT  # a 64-bit integer narrowed to ints only
    from layoutkit.ptx import DeviceBuffer, Device, LaunchArgumentError
    from layoutkit.ptx.arguments import ArgumentPacker
    packer = ArgumentPacker(rich)
    packer.pack((1, -2, 2 ** 64 - 1, 0.5, 255))
    assert packer.packed_bytes()[8:16] == (-2).to_bytes(8, "little", signed=True)
    buffer = DeviceBuffer(0x7F0000001000, (4,), "float32", Device(0, None, None), owner=False)
    with pytest.raises(LaunchArgumentError, match=r"parameter 'b' \(.param .s64 b\): got a DeviceBuffer; this "
                                                  r"parameter \(.s64\) takes an int"):
        packer.pack((1, buffer, 0, 0.5, 255))
    with pytest.raises(SignatureError, match=r"parameter 'x': .f8 is not a scalar PTX type \(u8, s8"):
        ParamSpec.scalar("x", "f8")
    with pytest.raises(SignatureError, match="kind float does not fit the PTX declaration .param .u32 a"):
        sig.with_params([ParamSpec.scalar("a", "f32")] + specs[1:])


def test_builder_made_kernels_parse():
    module = Module(target="sm_90a")
    k = module.kernel("built", maxntid=(256, 1, 1))
    k.tensormap_param("tm")
    k.pointer_param("out")
    k.param("n", "u32")
    k.param("alpha", "f32")
    k.raw("ret;")
    sig = parse_entry(module.text(), "built")
    assert [(p.name, p.kind) for p in sig.params] == [
        ("tm", ParamKind.TENSORMAP), ("out", ParamKind.INT_OR_POINTER), ("n", ParamKind.INT),
        ("alpha", ParamKind.FLOAT)]
    assert sig.maxntid == (256, 1, 1)
