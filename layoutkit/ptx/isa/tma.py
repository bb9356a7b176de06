"""TMA and bulk copies: cp.async.bulk.tensor load/store/prefetch, cp.reduce.async.bulk.tensor,
plain cp.async.bulk, bulk async-groups, prefetch.tensormap and createpolicy.fractional.

Rules (PTX ISA "cp.async.bulk.tensor", hopper-ptx.md §4; PTX 8.0, sm_90): `.1d`..`.5d` take
exactly that many .s32 coordinates, in elements, innermost dimension first; the tensor map is
the 64-bit GENERIC address of the CUtensorMap (`cvta_param`), shared operands are shared::cta
offsets. Loads complete on an mbarrier (`complete_tx::bytes`); `.multicast::cluster` adds a
16-bit CTA mask (.b16 register or immediate, bit i = cluster rank i) and lands data and
complete_tx at the same offsets in every destination CTA; a `.shared::cta` destination needs
PTX 8.6 and cannot multicast. Stores and reductions read shared::cta and complete through bulk
async-groups (`commit_group`, `wait_group(.read) N`). `.L2::cache_hint` takes a b64 policy
from `create_policy`. Plain bulk copies move a multiple of 16 bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..builder import (TYPES, Imm, KernelBuilder, Param, PTXBuildError, PTXRangeError, PTXTypeError,
                       Reg, Requirement, ptx_type)
from .checks import choose, dest, imm_int, source
from .hopper_operands import (B64, RELAXED, SM90_PTX80, global_address, group_count,
                              shared_address, u32_operand)

S32, B16, F32 = TYPES["s32"], TYPES["b16"], TYPES["f32"]
MAX_DIMS = 5                        # .1d .. .5d: coordinates (and tensor-map dimensions)
COMPLETE_TX = "mbarrier::complete_tx::bytes"
BULK_ALIGN = 16
SHARED_ALIGN = 128                  # bytes: the shared address of a tensor copy
MULTICAST_MASK_BITS = 16            # the .b16 ctaMask: bit i = cluster rank i
MAX_PENDING_BULK_GROUPS = (1 << 31) - 1     # cp.async.bulk.wait_group N
# Reduction -> element types of the tensor map it accepts (PTX ISA, cp.reduce.async.bulk.tensor).
REDUCE_TYPES = {
    "add": ("u32", "s32", "u64", "f32", "f16", "bf16"),
    "min": ("u32", "s32", "u64", "s64", "f16", "bf16"),
    "max": ("u32", "s32", "u64", "s64", "f16", "bf16"),
    "inc": ("u32",), "dec": ("u32",),
    "and": ("b32", "u32", "s32", "b64", "u64", "s64"),
    "or": ("b32", "u32", "s32", "b64", "u64", "s64"),
    "xor": ("b32", "u32", "s32", "b64", "u64", "s64"),
}
EVICTION = ("evict_last", "evict_normal", "evict_first", "evict_unchanged")
SECONDARY_EVICTION = ("evict_first", "evict_unchanged")
BULK_KINDS = ("global_to_shared", "shared_to_cluster", "shared_to_global")


@dataclass(frozen=True)
class TensorOperand:
    """`[tensormap, {c0, c1, ...}]`: a tensor map address with its coordinates."""

    tensormap: Reg
    coords: tuple

    def __str__(self) -> str:
        return f"[{self.tensormap}, {{{', '.join(map(str, self.coords))}}}]"


def _tensor(k: KernelBuilder, instr: str, tensormap, coords) -> TensorOperand:
    if isinstance(tensormap, Param):
        raise PTXTypeError("pass the tensor map's generic address (cvta_param(k, param)), not the "
                           "Param itself (hopper-ptx.md §1)", instruction=instr,
                           operand="tensormap", value=tensormap.name)
    tmap = global_address(k, instr, "tensormap", tensormap)
    if tmap.offset:
        raise PTXBuildError("a tensor map operand takes no offset", instruction=instr,
                            operand="tensormap", value=tmap)
    coords = tuple(coords) if isinstance(coords, (tuple, list)) else (coords,)
    return TensorOperand(tmap.base, tuple(source(k, instr, f"coords[{i}]", c, S32)
                                          for i, c in enumerate(coords)))


def _dims(instr: str, coords) -> int:
    n = len(coords) if isinstance(coords, (tuple, list)) else 1
    if not 1 <= n <= MAX_DIMS:
        raise PTXRangeError(f"a tensor copy has 1..{MAX_DIMS} coordinates (one per dimension, "
                            "innermost first)", instruction=instr, operand="coords", value=coords)
    return n


def _policy(k: KernelBuilder, instr: str, cache_policy) -> list:
    return [] if cache_policy is None else\
        [source(k, instr, "cache_policy", cache_policy, B64, imm=False)]


def _mask(k: KernelBuilder, instr: str, multicast):
    if isinstance(multicast, int) and not isinstance(multicast, bool):
        imm_int(instr, "multicast", multicast, 1, (1 << MULTICAST_MASK_BITS) - 1)
        return Imm(multicast, B16)
    return source(k, instr, "multicast", multicast, B16, imm=False)


def _join(*parts) -> str:
    return ".".join(p for p in parts if p)


def load(k: KernelBuilder, dst, tensormap, coords, bar, *, multicast=None, cache_policy=None,
         dst_space: str = "cluster", pred=None) -> None:
    """TMA load of the box at `coords` into shared [dst], completing on mbarrier [bar].

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); s, b, t = k.reg("u32"), k.reg("u32"), k.reg("b64")
    >>> load(k, s, t, (k.reg("s32"), 128), b); print(k.body_lines()[-1])
        cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%u0], [%rd0, {%s0, 128}], [%u1];
    """
    n = _dims("cp.async.bulk.tensor", coords)
    choose("cp.async.bulk.tensor", "dst_space", dst_space, ("cluster", "cta"))
    if dst_space == "cta" and multicast is not None:
        raise PTXBuildError("multicast needs the .shared::cluster destination",
                            instruction="cp.async.bulk.tensor", operand="multicast",
                            value=multicast)
    instr = _join(f"cp.async.bulk.tensor.{n}d", f"shared::{dst_space}", "global", "tile",
                  COMPLETE_TX, multicast is not None and "multicast::cluster",
                  cache_policy is not None and "L2::cache_hint")
    operands = [shared_address(k, instr, "dst", dst), _tensor(k, instr, tensormap, coords),
                shared_address(k, instr, "bar", bar)]
    if multicast is not None:
        operands.append(_mask(k, instr, multicast))
    operands += _policy(k, instr, cache_policy)
    k.emit(instr, operands, pred=pred, requires=RELAXED if dst_space == "cta" else SM90_PTX80)


def store(k: KernelBuilder, tensormap, coords, src, *, cache_policy=None, pred=None) -> None:
    """TMA store of shared::cta [src] to the box at `coords` (a bulk async-group operation;
    writers need `fence_proxy_async('shared::cta')` + a barrier first)."""
    n = _dims("cp.async.bulk.tensor", coords)
    instr = _join(f"cp.async.bulk.tensor.{n}d", "global", "shared::cta", "tile", "bulk_group",
                  cache_policy is not None and "L2::cache_hint")
    operands = [_tensor(k, instr, tensormap, coords), shared_address(k, instr, "src", src),
                *_policy(k, instr, cache_policy)]
    k.emit(instr, operands, pred=pred, requires=SM90_PTX80)


def reduce(k: KernelBuilder, op: str, tensormap, coords, src, *, dtype, cache_policy=None,
           pred=None) -> None:
    """Element-wise `op` of shared::cta [src] into the box at `coords`. `dtype` is the tensor
    map's element type (not written in PTX; checked against the legal op/type pairs).

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); t, s = k.reg("b64"), k.reg("u32")
    >>> reduce(k, "add", t, (0, 0), s, dtype="bf16"); print(k.body_lines()[-1])
        cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%rd0, {0, 0}], [%u0];
    """
    n = _dims("cp.reduce.async.bulk.tensor", coords)
    choose("cp.reduce.async.bulk.tensor", "op", op, REDUCE_TYPES)
    t = ptx_type(dtype)
    instr = _join(f"cp.reduce.async.bulk.tensor.{n}d", "global", "shared::cta", op, "tile",
                  "bulk_group", cache_policy is not None and "L2::cache_hint")
    if t.name not in REDUCE_TYPES[op]:
        raise PTXTypeError(f".{op} reduces tensors of .{', .'.join(REDUCE_TYPES[op])} only",
                           instruction=instr, operand="dtype", value=t.name)
    operands = [_tensor(k, instr, tensormap, coords), shared_address(k, instr, "src", src),
                *_policy(k, instr, cache_policy)]
    k.emit(instr, operands, pred=pred, requires=SM90_PTX80)


def prefetch(k: KernelBuilder, tensormap, coords, *, cache_policy=None, pred=None) -> None:
    """Prefetch the box at `coords` into L2 (no shared memory, no barrier)."""
    n = _dims("cp.async.bulk.prefetch.tensor", coords)
    instr = _join(f"cp.async.bulk.prefetch.tensor.{n}d", "L2", "global", "tile",
                  cache_policy is not None and "L2::cache_hint")
    k.emit(instr, [_tensor(k, instr, tensormap, coords), *_policy(k, instr, cache_policy)],
           pred=pred, requires=SM90_PTX80)


def prefetch_tensormap(k: KernelBuilder, tensormap, *, pred=None) -> None:
    """`prefetch.tensormap [tmap]`: fetch the CUtensorMap itself (generic address) early."""
    instr = "prefetch.tensormap"
    k.emit(instr, (global_address(k, instr, "tensormap", tensormap),), pred=pred,
           requires=SM90_PTX80)


def bulk_copy(k: KernelBuilder, dst, src, size, *, kind: str = "global_to_shared", bar=None,
              multicast=None, cache_policy=None, pred=None) -> None:
    """Contiguous bulk copy of `size` bytes (a multiple of 16; 16-byte aligned addresses).
    kind 'global_to_shared' (completes on [bar]; multicast and L2 hint allowed),
    'shared_to_cluster' (shared::cta -> a mapa'd peer address, completes on the peer's [bar]),
    'shared_to_global' (bulk async-group; L2 hint allowed)."""
    choose("cp.async.bulk", "kind", kind, BULK_KINDS)
    needs_bar = kind != "shared_to_global"
    if needs_bar != (bar is not None):
        raise PTXBuildError("global_to_shared and shared_to_cluster complete on an mbarrier "
                            "(bar=); shared_to_global completes through bulk groups (no bar)",
                            instruction="cp.async.bulk", operand="bar", value=bar)
    if multicast is not None and kind != "global_to_shared":
        raise PTXBuildError("multicast exists only for global_to_shared",
                            instruction="cp.async.bulk", operand="multicast", value=multicast)
    if cache_policy is not None and kind == "shared_to_cluster":
        raise PTXBuildError("an L2 hint applies to copies that touch global memory",
                            instruction="cp.async.bulk", operand="cache_policy", value=cache_policy)
    spaces = {"global_to_shared": ("shared::cluster", "global"),
              "shared_to_cluster": ("shared::cluster", "shared::cta"),
              "shared_to_global": ("global", "shared::cta")}[kind]
    instr = _join("cp.async.bulk", *spaces, COMPLETE_TX if needs_bar else "bulk_group",
                  multicast is not None and "multicast::cluster",
                  cache_policy is not None and "L2::cache_hint")
    to_global = kind == "shared_to_global"
    operands = [(global_address if to_global else shared_address)(k, instr, "dst", dst),
                (global_address if kind == "global_to_shared" else shared_address)(
                    k, instr, "src", src),
                u32_operand(k, instr, "size", size, BULK_ALIGN, (1 << 32) - BULK_ALIGN,
                            multiple=BULK_ALIGN, rule="bulk copies move 16-byte multiples")]
    if needs_bar:
        operands.append(shared_address(k, instr, "bar", bar))
    if multicast is not None:
        operands.append(_mask(k, instr, multicast))
    operands += _policy(k, instr, cache_policy)
    k.emit(instr, operands, pred=pred, requires=SM90_PTX80)


def commit_group(k: KernelBuilder, *, pred=None) -> None:
    """`cp.async.bulk.commit_group`: close a bulk async-group of this thread's stores/reduces."""
    k.emit("cp.async.bulk.commit_group", pred=pred, requires=SM90_PTX80)


def wait_group(k: KernelBuilder, n: int = 0, *, read: bool = False, pred=None) -> None:
    """Wait until at most `n` most recent bulk groups are pending; with `read`, only until their
    SOURCES have been read (shared memory reusable, CTA may exit)."""
    instr = "cp.async.bulk.wait_group.read" if read else "cp.async.bulk.wait_group"
    k.emit(instr, (group_count(instr, n, MAX_PENDING_BULK_GROUPS),), pred=pred,
           requires=SM90_PTX80)


def create_policy(k: KernelBuilder, primary: str = "evict_last", fraction=1.0, *, secondary=None,
                  out=None, pred=None) -> Reg:
    """A b64 L2 cache policy: `fraction` (0 < f <= 1, or an f32 register) of the accesses get
    `primary` priority, the rest `secondary` (default evict_unchanged).

    >>> from layoutkit.ptx.builder import Module
    >>> k = Module().kernel("k"); _ = create_policy(k); k.body_lines()[-1]
    '    createpolicy.fractional.L2::evict_last.b64 %rd0, 0f3F800000;'
    """
    choose("createpolicy", "primary", primary, EVICTION)
    instr = _join("createpolicy.fractional", f"L2::{primary}",
                  secondary is not None and
                  "L2::" + choose("createpolicy", "secondary", secondary, SECONDARY_EVICTION),
                  "b64")
    if isinstance(fraction, (int, float)) and not isinstance(fraction, bool):
        if not 0.0 < fraction <= 1.0:
            raise PTXRangeError("must be in (0, 1]", instruction=instr, operand="fraction",
                                value=fraction)
        frac = Imm(float(fraction), F32)
    else:
        frac = source(k, instr, "fraction", fraction, F32, imm=False)
    d = dest(k, instr, out, B64)
    k.emit(instr, (d, frac), defs=(d,), pred=pred, requires=Requirement((7, 4), 80))
    return d


__all__ = ["BULK_KINDS", "MAX_DIMS", "MAX_PENDING_BULK_GROUPS", "MULTICAST_MASK_BITS",
           "REDUCE_TYPES", "SHARED_ALIGN", "TensorOperand", "bulk_copy", "commit_group",
           "create_policy", "load", "prefetch", "prefetch_tensormap", "reduce", "store",
           "wait_group"]
