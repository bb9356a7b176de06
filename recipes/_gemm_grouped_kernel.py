"""The kernel of recipes/gemm_grouped.py: G GEMMs C_g = A_g @ B_g in one persistent launch, the
groups' rows concatenated (the MoE token layout) and their bounds read on the device.

    a (T, K): group g is rows offsets[g] .. offsets[g+1]-1 (offsets: G + 1 int32, on the GPU)
    b: the groups' K x N matrices stacked, as the 2-D tensor (G*K, N) (B_MAJOR "N": row g*K + k
       is B_g[k, :]) or (G*N, K) (B_MAJOR "K": row g*N + n is B_g[:, n])
    c (T, N): rows of group g written with A_g @ B_g; rows of no group are not written

The pipeline is recipes/_gemm_kernel.py's (its shared layouts, roles, register budgets and
per-tile pieces load_k_steps, mma_k_steps and store_chunk; one CTA per scheduling unit): a
producer warp TMA-loads BM x BK tiles of A and BN x BK (or BK x BN) tiles of B into a
STAGES-deep ring, two consumer warpgroups run wgmma on 64 rows each and store their BN columns
in EPI-wide chunks. What is grouped is the schedule and the store:

- Tiles: group g has ceil(m_g / BM) * TILES_N output tiles, numbered in group order after the
  tiles of groups 0..g-1 (`group_tiles`: every role walks the groups once, two loaded offsets
  per group, carrying the tiles before g and how many of them were this unit's). Unit u (of
  GRID) takes the tiles t = u, u + GRID, ..., so the count of tiles is computed in the kernel
  and the host never reads the offsets. Within a group the tiles go GROUP_M tile rows at a time
  (`raster`; the last band may be shorter), so concurrent CTAs share A and B tiles in L2. The
  ring counter is the unit's dense tile count times K_TILES, the same in every role.
- Loads: A_g and B_g are windows of a and b (GlobalTensor.window); a TMA box that runs past the
  group's last row reads the next group's rows, whose accumulator rows are never stored, and
  zeros past K (A's columns) add nothing. (An N-major B's k-tail would read the next group's
  rows of b: the host gives this kernel N-major B only when K is a multiple of BK.)
- Stores: a consumer's 64-row chunk that lies inside its group goes out by TMA from shared
  memory as in gemm_hopper; a chunk that crosses the group's end (one per group and column
  tile at most) is stored from registers with masked stores (lk.store on the window: rows at
  or past the group's end and columns past N are skipped). A TMA store box is not clipped at a
  window's end, so it would overwrite the next group's first rows.
- Offsets are clamped to 0 <= start <= end <= T: a malformed offsets tensor (decreasing, past
  T, negative) gives wrong or overlapping rows of c, never an access outside a, b or c.

Verification: the static protocol check (layoutkit.dsl.check) chooses one value per loaded
integer by a coordinate search, and no single change makes a tile live here (that takes a
non-empty group and a tile count past the unit's first tile together), so it walks the group
loop with no tile (a walk that reaches tiles, tried by rotating which unit owns tile 0, finds
the two store branches' conditions undecidable: they depend on the loaded offsets); the CPU
interpreter (gemm_grouped.check_cpu, race checking on) runs the ring, the roles and both stores
on live tiles instead.
"""
from __future__ import annotations

from dataclasses import dataclass

import layoutkit as lk
from layoutkit.algebra import Layout
from recipes._gemm_kernel import (CONSUMER_REGISTERS, CONSUMERS, PRODUCER_REGISTERS, WARPS,
                                  WG_ROWS, accumulator_chunk, c_tile, epilogue_columns,
                                  k_major, load_k_steps, mma_k_steps, n_major, row_elements,
                                  store_chunk)

BM = CONSUMERS * WG_ROWS
EVERYONE = lk.TVLayout((1,), Layout((32 * WARPS, 1), (0, 0)))     # every thread, one element


def group_rows(offsets, g, total, name: str):
    """(start, end) rows of group g: offsets[g] and offsets[g + 1] (broadcast loads made
    kernel integers) clamped to 0 <= start <= end <= total."""
    first, last = (lk.index_value(lk.load(offsets.tile((1,), (g + i,)).partition(EVERYONE)),
                                  name=f"{name}{i}") for i in (0, 1))
    start = lk.minimum(lk.maximum(first, 0), total)
    return start, lk.minimum(lk.maximum(last, start), total)


def raster(t, tiles_m, tiles_n, group_m: int, name: str):
    """(tile row, tile column) of tile t of a group of tiles_m x tiles_n tiles, GROUP_M tile
    rows at a time: band b = t // (GROUP_M * tiles_n) holds rows b*GROUP_M .. of which the last
    band may have fewer (`rows`), walked row-fastest."""
    if group_m == 1:
        return t // tiles_n, t % tiles_n
    per_band = group_m * tiles_n
    band, within = t // per_band, t % per_band
    # the band's rows, 1..GROUP_M for every tile of the group: a kernel integer of its own,
    # so the division below is by a value the bounds know to be positive
    rows = lk.index_value(lk.cast(lk.minimum(tiles_m - band * group_m, group_m), lk.i32),
                          name=name, lo=1, hi=group_m)
    return band * group_m + within % rows, within // rows


@dataclass
class GroupTile:
    """One output tile of one group: group g, its rows start..end-1 of a and c, the tile
    (tm, tn) within the group, and `iteration`, the unit's count of tiles before it."""

    g: object
    start: object
    end: object
    tm: object
    tn: object
    iteration: object


def group_tiles(offsets, total, tiles_n, unit, units, group_m: int, role: str):
    """This unit's tiles, in order (module docstring): a generator to run in one role; the
    kernel integers it makes are named after `role`."""
    zero = lk.cast(0, lk.i32)
    groups = lk.range(0, offsets.shape[0] - 1, carry=(zero, zero))
    for g, (before_v, done_v) in groups:
        before = lk.index_value(before_v, name=f"{role}_tiles_before", lo=0)
        done = lk.index_value(done_v, name=f"{role}_done", lo=0)
        start, end = group_rows(offsets, g, total, f"{role}_offset")
        tiles_m = (end - start + BM - 1) // BM
        count = tiles_m * tiles_n
        first = (unit + units - before % units) % units     # group tile of this unit's first
        mine = lk.maximum((count - first + units - 1) // units, 0)
        for j in lk.range(0, mine):
            t = first + j * units
            tm, tn = raster(t, tiles_m, tiles_n, group_m, f"{role}_band_rows")
            yield GroupTile(g, start, end, tm, tn, done + j)
        groups.next(lk.cast(before + count, lk.i32), lk.cast(done + mine, lk.i32))


def gemm_grouped_body(a: lk.Tensor[lk.bf16, 2], b: lk.Tensor[lk.bf16, 2],
                      c: lk.Tensor[lk.bf16, 2], offsets: lk.Tensor[lk.i32, 1],
                      GRID: lk.constexpr, B_MAJOR: lk.constexpr, BN: lk.constexpr,
                      STAGES: lk.constexpr, GROUP_M: lk.constexpr):
    """The kernel (module docstring): for each group g of offsets, c[start:end] = a[start:end]
    @ B_g, B_g rows g*K .. of b (B_MAJOR "N", K x N) or rows g*N .. of b (B_MAJOR "K", N x K).
    Grid (GRID,), one CTA per scheduling unit."""
    BK, K, N, T = row_elements(a.dtype), a.shape[1], c.shape[1], c.shape[0]
    TILES_N, K_TILES = -(-N // BN), -(-K // BK)
    sB = lk.shared_tensor(k_major(BN, STAGES, b.dtype) if B_MAJOR == "K" else
                          n_major(BN, STAGES, b.dtype), b.dtype, name="sB")
    sA = lk.shared_tensor(k_major(BM, STAGES, a.dtype), a.dtype, name="sA")
    EPI = epilogue_columns(BN, c.dtype)
    sC = lk.shared_tensor(c_tile(BM, EPI, c.dtype), c.dtype, name="sC")
    full = lk.sm90.mbarrier_array(STAGES, 1, name="full")     # producer's arrive + TMA bytes
    empty = lk.sm90.mbarrier_array(STAGES, CONSUMERS * 4, name="empty")
    with lk.if_(lk.eq(lk.thread_id(), 0)):
        lk.sm90.mbarrier_init(full, empty)
        lk.sm90.fence_mbarrier_init()
    lk.barrier()
    unit = lk.block_id(0)

    def operands(tile):
        """The group's A rows and B matrix as windows of a and b."""
        rows_b = K if B_MAJOR == "N" else N
        return (a.window(0, tile.start, tile.end),
                b.window(0, tile.g * rows_b, tile.g * rows_b + rows_b))

    with lk.sm90.warp_role("producer", warpgroups=(0,), registers=PRODUCER_REGISTERS):
        with lk.if_(lk.eq(lk.warp_id(), 0)):
            for tile in group_tiles(offsets, T, TILES_N, unit, GRID, GROUP_M, "producer"):
                A, B = operands(tile)
                load_k_steps(sA, sB, full, empty, lambda k: A.tile((BM, BK), (tile.tm, k)),
                             lambda k: B.tile((BN, BK), (tile.tn, k)) if B_MAJOR == "K" else
                             B.tile((BK, BN), (k, tile.tn)), first=tile.iteration * K_TILES,
                             steps=K_TILES, STAGES=STAGES)

    def release(stage):
        """This warp's wgmmas are done reading `stage`: one arrive on its empty barrier."""
        with lk.sm90.elect_one():
            lk.sm90.mbarrier_arrive(empty[stage])

    for wg in range(CONSUMERS):     # one role per consumer warpgroup: wg is a trace-time int
        with lk.sm90.warp_role(f"consumer{wg}", warpgroups=(1 + wg,),
                               registers=CONSUMER_REGISTERS):
            mine = sC.tile((WG_ROWS, EPI), (wg, 0))
            chunk_layout = lk.sm90.wgmma_accumulator_layout(EPI)
            for tile in group_tiles(offsets, T, TILES_N, unit, GRID, GROUP_M, f"consumer{wg}"):
                acc = mma_k_steps(sA, sB, full, release, wg=wg, first=tile.iteration * K_TILES,
                                  steps=K_TILES, STAGES=STAGES, BN=BN, BK=BK, B_MAJOR=B_MAJOR)
                store_tile(c.window(0, tile.start, tile.end), acc, mine, chunk_layout,
                           2 * tile.tm + wg, tile.tn, tile.end - tile.start, BN, EPI, wg)
            with lk.if_(lk.eq(lk.sm90.thread_id_in_warpgroup(), 0)):
                lk.sm90.tma_store_wait(0)


def store_tile(C, acc, mine, chunk_layout, row, tn, rows, BN: int, EPI: int, wg: int):
    """One consumer's 64 x BN accumulator to rows row*64 .. of C (the group's window of c,
    `rows` long), EPI columns at a time: by TMA through `mine` (this warpgroup's half of the
    C buffer) where the 64 rows lie inside the group, else by masked stores from registers
    (module docstring)."""
    for j in range(BN // EPI):
        chunk = accumulator_chunk(acc, chunk_layout, j)
        at = (row, (BN // EPI) * tn + j)
        with lk.if_((row + 1) * WG_ROWS <= rows):
            store_chunk(C, at, chunk, mine, chunk_layout, wg)
        with lk.if_((row + 1) * WG_ROWS > rows):
            lk.store(C.tile((WG_ROWS, EPI), at).partition(chunk_layout),
                     lk.cast(chunk, C.dtype))


gemm_grouped_kernel = lk.kernel(gemm_grouped_body, num_warps=WARPS)
