"""The sm_80 matrix path: `lk.sm80.mma_sync(acc, a, b)` (mma.sync.aligned m16n8k16/m16n8k8, bf16 or
f16 operands, f32 accumulators), fed by `lk.sm80.ldmatrix` (ldmatrix.py) from shared tiles filled by
`lk.sm80.cp_async` (cp_async.py). The fragment layouts are `lk.sm80.mma_sync_layouts`
(mma_layouts.py).

acc (tile (M, N)), a (tile (M, K)) and b (tile (N, K)) are register tensors over the whole
block. Each is read in atoms: groups of consecutive value indices (c0..c3, a0..a7, b0..b3 for
m16n8k16) that, in every warp, hold the instruction's fragment translated to some origin of
the tile. The DSL finds every atom (enumerating the TV layouts), pairs each accumulator atom
at (m0, n0) with the a atoms at (m0, k0) and b atoms at (n0, k0) for k0 over the whole K of
the tiles, and emits one mma.sync per pair. Any group that is not a fragment, or an
accumulator atom without its operands, is a `LayoutMismatchError` naming both layouts.
How the atoms tile the block (warps, repeats) is the author's, written with the algebra:

    atoms = lk.sm80.mma_sync_layouts("m16n8k16", lk.bf16)
    acc = lk.sm80.mma_sync(acc, lk.sm80.ldmatrix(sa.partition(tv_a)),
                           lk.sm80.ldmatrix(sb.partition(tv_b)))

IR ops (the others: ldmatrix.py, cp_async.py):
  mma_sync: a..., b..., c... -> d...   shape, ab, acc (type names), a_layout, b_layout,
            c_layout (the atom's fragment layouts, lane x value -> atom tile index). Per warp:
            D = A * B + C with lane l's values a_i, b_i, c_i at the fragment coordinates.
"""
from __future__ import annotations

from functools import lru_cache

from ..core.errors import LayoutMismatchError, TraceError
from .mma_layouts import MMA_SHAPES, mma_sync_layouts
from ..core.tracer import current
from ..core.types import DType
from ..core.values import RegisterTensor, TVLayout

WARP = 32


def _coordinate(tile: tuple, index: int) -> tuple:
    out = []
    for extent in tile:
        index, r = divmod(index, extent)
        out.append(r)
    return tuple(out)


def _table(tv: TVLayout) -> tuple[list, list]:
    return ([tv.layout[0](t) for t in range(tv.num_threads)],
            [tv.layout[1](v) for v in range(tv.num_values)])


@lru_cache(maxsize=256)
def find_atoms(tv: TVLayout, atom: TVLayout) -> tuple:
    """Per group of atom.num_values consecutive values of `tv`: its origin in tv's tile for
    each warp (a tuple), or (group, warp, lane, value) of the first value that does not fit
    the fragment `atom` at any origin."""
    threads, values = _table(tv)
    frag = [[_coordinate(atom.tile, atom.layout(l, v)) for v in range(atom.num_values)]
            for l in range(WARP)]
    origins = []
    for g in range(tv.num_values // atom.num_values):
        per_warp = []
        for w in range(tv.num_threads // WARP):
            first = _coordinate(tv.tile, threads[WARP * w] + values[g * atom.num_values])
            origin = tuple(c - f for c, f in zip(first, frag[0][0]))
            for lane in range(WARP):
                for v in range(atom.num_values):
                    got = _coordinate(tv.tile, threads[WARP * w + lane] +
                                      values[g * atom.num_values + v])
                    if got != tuple(o + f for o, f in zip(origin, frag[lane][v])):
                        return (g, w, lane, v)
            per_warp.append(origin)
        origins.append(tuple(per_warp))
    return tuple(origins)


def _atoms(what: str, name: str, x: RegisterTensor, atom: TVLayout, shape: str) -> tuple:
    n = atom.num_values
    if x.layout.num_values % n or x.layout.num_threads % WARP or len(x.layout.tile) != 2:
        raise LayoutMismatchError(
            f"{what}: operand {name} is not a tiling of the {shape} fragment: it holds "
            f"{x.layout.num_values} values per thread (a multiple of {n} needed) over "
            f"{x.layout.num_threads} threads and a rank-{len(x.layout.tile)} tile\n"
            f"      {name}:        {x.layout}\n      fragment: {atom}")
    found = find_atoms(x.layout, atom)
    if found and isinstance(found[0], int):
        g, w, lane, v = found
        raise LayoutMismatchError(
            f"{what}: operand {name}'s values {g * n}..{g * n + n - 1} in warp {w} are not the "
            f"{shape} {name.upper()} fragment at any origin (lane {lane}, value {g * n + v} "
            "does not fit)\n"
            f"      {name}:        {x.layout}\n      fragment: {atom}\n"
            f"  build {name}'s TV layout by tiling lk.sm80.mma_sync_layouts(...).{name} over warps "
            f"and repeats, with {n} consecutive values per atom")
    return found


def _pairs(what: str, acc, a, b, atoms) -> list:
    """(acc group, a group, b group) of every mma.sync, K outermost."""
    shape = atoms.shape
    found = {name: _atoms(what, name, x, getattr(atoms, name), shape)
             for name, x in (("c", acc), ("a", a), ("b", b))}
    a_at = {}
    for p, origins in enumerate(found["a"]):
        a_at.setdefault(origins, p)
    b_at = {}
    for r, origins in enumerate(found["b"]):
        b_at.setdefault(origins, r)
    k_extent, k_atom = a.layout.tile[1], MMA_SHAPES[shape][2]
    pairs = []
    for k0 in range(0, k_extent, k_atom):
        for q, origins in enumerate(found["c"]):
            want_a = tuple((m0, k0) for m0, _ in origins)
            want_b = tuple((n0, k0) for _, n0 in origins)
            if want_a not in a_at or want_b not in b_at:
                side, want, x = ("a", want_a, a) if want_a not in a_at else ("b", want_b, b)
                raise LayoutMismatchError(
                    f"{what}: the accumulator atom of values {4 * q}..{4 * q + 3} (origins "
                    f"{list(origins)} per warp) needs operand {side} at origins {list(want)} "
                    f"per warp, which no value group of {side} holds\n"
                    f"      c: {acc.layout}\n      {side}: {x.layout}\n"
                    "  give every warp the a rows and b columns of its accumulator tile")
            pairs.append((q, a_at[want_a], b_at[want_b]))
    return pairs


def _check(what: str, acc, a, b, atoms) -> None:
    for name, x in (("acc", acc), ("a", a), ("b", b)):
        if not isinstance(x, RegisterTensor):
            raise TraceError(f"{what}: {name} is a register tensor, got {x!r}")
    if a.dtype != b.dtype or a.dtype != atoms.ab:
        raise TraceError(f"{what}: a and b are {atoms.ab} for this mma ({atoms.shape} "
                         f"{atoms.ab}), got {a.dtype} and {b.dtype}; cast explicitly")
    if acc.dtype != atoms.acc:
        raise TraceError(f"{what}: the accumulator is {atoms.acc}, got {acc.dtype}")
    m, n = acc.layout.tile[:2] if len(acc.layout.tile) == 2 else (None, None)
    if len(a.layout.tile) != 2 or len(b.layout.tile) != 2 or a.layout.tile[0] != m or \
            b.layout.tile[0] != n or a.layout.tile[1] != b.layout.tile[1]:
        raise LayoutMismatchError(
            f"{what}: the tiles do not chain: acc over (M, N), a over (M, K), b over (N, K)\n"
            f"      acc: {acc.layout}\n      a:   {a.layout}\n      b:   {b.layout}")
    threads = {x.layout.num_threads for x in (acc, a, b)}
    if len(threads) != 1:
        raise LayoutMismatchError(f"{what}: acc, a and b span different thread counts "
                                  f"{sorted(threads)}")


def mma_sync(acc: RegisterTensor, a: RegisterTensor, b: RegisterTensor, *,
             shape: str = "m16n8k16") -> RegisterTensor:
    """acc + a * b^T (a over (M, K), b over (N, K), acc over (M, N)) by mma.sync `shape`
    instructions; returns the new accumulator (acc's TV layout). See the module docstring."""
    what = "lk.sm80.mma_sync"
    trace = current(what)
    if shape not in MMA_SHAPES:
        raise TraceError(f"{what}: shape {shape!r} is not one of {', '.join(MMA_SHAPES)}")
    ab = a.dtype if isinstance(a, RegisterTensor) and isinstance(a.dtype, DType) else None
    atoms = mma_sync_layouts(shape, ab) if ab is not None and ab.nbytes == 2 and \
        ab.is_float else None
    if atoms is None:
        raise TraceError(f"{what}: a is a bf16 or f16 register tensor, got {a!r}")
    _check(what, acc, a, b, atoms)
    trace.require_uniform(what)
    out = list(acc.values)
    na, nb, nc = atoms.a.num_values, atoms.b.num_values, atoms.c.num_values
    attrs = {"shape": shape, "ab": atoms.ab.name, "acc": atoms.acc.name,
             "a_layout": atoms.a.layout, "b_layout": atoms.b.layout,
             "c_layout": atoms.c.layout}
    for q, p, r in _pairs(what, acc, a, b, atoms):
        operands = [*a.values[p * na:(p + 1) * na], *b.values[r * nb:(r + 1) * nb],
                    *out[q * nc:(q + 1) * nc]]
        out[q * nc:(q + 1) * nc] = trace.emit("mma_sync", operands, [atoms.acc] * nc, attrs)
    return RegisterTensor(acc.dtype, acc.layout, out)


__all__ = ["mma_sync", "find_atoms"]
