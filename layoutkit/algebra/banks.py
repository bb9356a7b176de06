"""Shared-memory bank conflicts of an access pattern: which threads hit which bank, and how many
wavefronts each warp-wide access needs. The bank rule is stated and applied here, once.

The hardware rule (CUDA C++ Programming Guide, "Shared Memory" under compute capability 5.x,
which the later architectures up to 9.0, Hopper, refer back to; the phase split of vector
accesses is the behaviour NVIDIA's profiler reports as shared-memory wavefronts):

- Shared memory has 32 banks, each 4 bytes wide; successive 4-byte words go to successive
  banks: the word of byte address ``a`` is ``a // 4`` and its bank ``(a // 4) % 32``.
- A warp's request is served in *phases* of at most 128 bytes (32 banks x 4 bytes, one
  wavefront without conflicts): accesses of up to 4 bytes per thread in one phase of 32
  threads, 8-byte accesses in 2 phases of 16 threads (half-warps), 16-byte accesses in 4 phases
  of 8 threads (quarter-warps). Threads of different phases never conflict.
- Within a phase, threads that touch *different* words of one bank are served one wavefront
  after another; any number of threads reading the *same* word are served together (a
  broadcast). So a phase needs as many wavefronts as the largest number of distinct words it
  touches in any one bank: its *degree* (1 = conflict-free, n = an n-way conflict).

A vector access of ``w`` bytes must be ``w``-aligned and touches the ``w // 4`` consecutive words
(banks) from its address (a narrower access touches the one word it lies in).

>>> from layoutkit.algebra import Layout
>>> report = bank_conflicts(Layout((32, 32), (32, 1)), Layout((32, 32), (1, 32)), dtype_bytes=4)
>>> report.degree, report.wavefronts, report.ideal_wavefronts   # f32 32x32 row-major, read by column
(32, 1024, 32)
"""
from __future__ import annotations

from dataclasses import dataclass

from . import int_tuple as it
from .composed import ComposedLayout
from .errors import LayoutError
from .layout import Layout

__all__ = ["BANKS", "BANK_BYTES", "PHASE_BYTES", "WARP_SIZE", "ACCESS_WIDTHS",
           "lanes_per_phase", "banks_touched", "warp_phases", "bank_conflicts",
           "BankPhase", "BankReport"]

BANKS = 32            # banks of shared memory
BANK_BYTES = 4        # each bank serves one 4-byte word per wavefront
PHASE_BYTES = BANKS * BANK_BYTES   # 128: what one conflict-free wavefront moves
WARP_SIZE = 32
ACCESS_WIDTHS = (1, 2, 4, 8, 16)   # bytes one thread can load or store from shared memory at once


def _check_width(access_bytes, what: str) -> int:
    if type(access_bytes) is not int or access_bytes not in ACCESS_WIDTHS:
        raise LayoutError(f"{what}: access_bytes must be one of {ACCESS_WIDTHS} (a thread's "
                          f"shared-memory access width in bytes), got {access_bytes!r}")
    return access_bytes


def lanes_per_phase(access_bytes: int) -> int:
    """Threads served in one phase of a warp's request: 32 for accesses of up to 4 bytes, 16 for
    8 bytes, 8 for 16 bytes (each phase moves at most 128 bytes).

    >>> [lanes_per_phase(w) for w in (1, 2, 4, 8, 16)]
    [32, 32, 32, 16, 8]
    """
    return PHASE_BYTES // max(BANK_BYTES, _check_width(access_bytes, "lanes_per_phase"))


def banks_touched(byte_address: int, access_bytes: int) -> tuple[tuple[int, int], ...]:
    """The (bank, word) pairs one thread's access of ``access_bytes`` at ``byte_address`` touches.

    >>> banks_touched(16, 16), banks_touched(130, 2)
    (((4, 4), (5, 5), (6, 6), (7, 7)), ((0, 32),))
    """
    _check_width(access_bytes, "banks_touched")
    if type(byte_address) is not int or byte_address < 0:
        raise LayoutError(f"banks_touched: byte address must be a non-negative int, got "
                          f"{byte_address!r}")
    if byte_address % access_bytes:
        raise LayoutError(f"banks_touched: a {access_bytes}-byte access at byte address "
                          f"{byte_address} is misaligned (must be a multiple of {access_bytes})")
    first = byte_address // BANK_BYTES
    words = range(first, first + max(1, access_bytes // BANK_BYTES))
    return tuple((w % BANKS, w) for w in words)


@dataclass(frozen=True)
class BankPhase:
    """One phase of one warp-wide access: the threads it serves and what they touch.

    ``threads[i]`` accesses ``addresses[i]`` (bytes); ``banks[b]`` lists the threads touching
    bank b and ``words[b]`` how many distinct words of bank b they touch (0: bank idle).
    """

    access: int                         # which access of each thread (0, 1, ...)
    warp: int
    index: int                          # phase within the warp's request
    threads: tuple[int, ...]
    addresses: tuple[int, ...]
    banks: tuple[tuple[int, ...], ...]
    words: tuple[int, ...]

    @property
    def degree(self) -> int:
        """Wavefronts this phase needs: the most distinct words any one bank serves (>= 1)."""
        return max(1, max(self.words))

    @property
    def conflicts(self) -> tuple[int, ...]:
        """The banks serving more than one word (empty: conflict-free)."""
        return tuple(b for b, n in enumerate(self.words) if n > 1)

    def describe(self) -> str:
        """A line per run of consecutive banks in use alike: their threads and distinct words."""
        head = (f"access {self.access}, warp {self.warp}, phase {self.index} "
                f"(threads {_span(self.threads)}): {self.degree}-way")
        lines = [head]
        for banks, words, ts in _bank_runs(self, range(BANKS)):
            if ts:
                label = f"bank{'s' if len(banks) > 1 else ''} {_span(banks)}:"
                lines.append(f"  {label:13} {words} word{'s' if words > 1 else ''}"
                             f"{' each' * (len(banks) > 1)}, "
                             f"thread{'s' if len(ts) > 1 else ''} {_span(ts)}")
        return "\n".join(lines)


def warp_phases(byte_addresses, access_bytes: int, *, threads=None, access: int = 0,
                warp: int = 0) -> tuple[BankPhase, ...]:
    """The phases of one warp-wide shared access where lane i accesses ``access_bytes`` at
    ``byte_addresses[i]`` (None: lane inactive), under the rule of the module docstring.
    ``threads[i]`` names lane i's thread in the result (default: ``32 * warp + i``).

    >>> [p.degree for p in warp_phases([128 * r for r in range(8)], 16)]   # 8 rows, one column
    [8]
    >>> [p.degree for p in warp_phases([16 * r for r in range(32)], 16)]   # 4 phases, each 128 B
    [1, 1, 1, 1]
    >>> warp_phases([0] * 32, 4)[0].degree                                 # a broadcast
    1
    """
    addresses = list(byte_addresses)
    if len(addresses) > WARP_SIZE:
        raise LayoutError(f"warp_phases: a warp has {WARP_SIZE} lanes, got {len(addresses)} "
                          "addresses")
    if threads is None:
        threads = [WARP_SIZE * warp + i for i in range(len(addresses))]
    elif len(threads) != len(addresses):
        raise LayoutError(f"warp_phases: {len(threads)} thread ids for {len(addresses)} addresses")
    per_phase = lanes_per_phase(access_bytes)
    phases = []
    for index, start in enumerate(range(0, len(addresses), per_phase)):
        lanes = [(t, a) for t, a in zip(threads[start:start + per_phase],
                                        addresses[start:start + per_phase]) if a is not None]
        if not lanes:
            continue
        bank_threads = [set() for _ in range(BANKS)]
        bank_words = [set() for _ in range(BANKS)]
        for t, a in lanes:
            for bank, word in banks_touched(a, access_bytes):
                bank_threads[bank].add(t)
                bank_words[bank].add(word)
        phases.append(BankPhase(access, warp, index, tuple(t for t, _ in lanes),
                                tuple(a for _, a in lanes),
                                tuple(tuple(sorted(s)) for s in bank_threads),
                                tuple(len(s) for s in bank_words)))
    return tuple(phases)


def _span(ts) -> str:
    ts = list(ts)
    if ts and ts == list(range(ts[0], ts[0] + len(ts))):
        return f"{ts[0]}-{ts[-1]}" if len(ts) > 1 else str(ts[0])
    return ",".join(map(str, ts))


def _bank_runs(p: BankPhase, banks):
    """(banks, words, threads) for runs of consecutive banks (of ``banks``) alike in both."""
    groups = []
    for b in banks:
        if groups and groups[-1][0][-1] == b - 1 and groups[-1][1:] == (p.words[b], p.banks[b]):
            groups[-1][0].append(b)
        else:
            groups.append(([b], p.words[b], p.banks[b]))
    return groups


def _count_char(n: int) -> str:
    return "." if n == 0 else "0123456789abcdefghijklmnopqrstuvw"[n]


@dataclass(frozen=True)
class BankReport:
    """The bank behaviour of an access pattern: every phase of every access of every warp.

    ``degree`` is the worst phase's (an n-way conflict); ``wavefronts`` the total the pattern
    needs and ``ideal_wavefronts`` what it would need without conflicts (one per phase).
    ``str(report)`` (or ``report.table()``) is a text table; a notebook draws it as SVG.
    """

    what: str
    dtype_bytes: int
    access_bytes: int
    threads: int
    accesses: int
    phases: tuple[BankPhase, ...]

    @property
    def degree(self) -> int:
        return max((p.degree for p in self.phases), default=1)

    @property
    def wavefronts(self) -> int:
        return sum(p.degree for p in self.phases)

    @property
    def ideal_wavefronts(self) -> int:
        return len(self.phases)

    @property
    def conflict_free(self) -> bool:
        return self.degree == 1

    def summary(self) -> str:
        per = lanes_per_phase(self.access_bytes)
        verdict = "conflict-free" if self.conflict_free else f"{self.degree}-way bank conflict"
        return (f"{self.access_bytes}-byte accesses of {self.dtype_bytes}-byte elements: phases of "
                f"{per} threads; {self.threads} threads x {self.accesses} "
                f"access{'es' if self.accesses != 1 else ''} = {len(self.phases)} phases; worst "
                f"{verdict}; {self.wavefronts} wavefronts "
                f"(ideal {self.ideal_wavefronts})")

    def table(self, max_phases: int = 64, detail: bool = True) -> str:
        """The summary, then a row per phase (up to max_phases): its threads, its degree and the
        distinct words per bank (``.`` idle, 1-9, then a=10 ... w=32); with ``detail``, each
        conflicted bank's threads under its row."""
        lines = [self.what, self.summary(),
                 "access warp phase threads  ways  words per bank 0..31 (. idle, a=10 ... w=32)"]
        for p in self.phases[:max_phases]:
            counts = "".join(_count_char(n) for n in p.words)
            lines.append(f"{p.access:6} {p.warp:4} {p.index:5} {_span(p.threads):8} {p.degree:4}  "
                         f"{counts}")
            if detail:
                for banks, words, ts in _bank_runs(p, p.conflicts):
                    lines.append(f"{'':26}bank{'s' if len(banks) > 1 else ''} {_span(banks)}: "
                                 f"{words} words each, threads {_span(ts)}")
        if len(self.phases) > max_phases:
            lines.append(f"... {len(self.phases) - max_phases} more phases "
                         f"(table(max_phases={len(self.phases)}) lists all)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def svg(self, max_phases: int = 32) -> str:
        from .render_banks import bank_report_svg
        return bank_report_svg(self, max_phases=max_phases)

    def _repr_svg_(self) -> str:
        return self.svg()


def _concrete(x, what: str) -> int:
    if type(x) is not int:
        raise LayoutError(f"{what} is symbolic ({it.fmt(x)}); bank conflicts need concrete "
                          "layouts: substitute values first with .subs({...})")
    return x


def _tv_layout(tv) -> Layout:
    """A TV Layout, or the ``layout`` of a TV-layout object (the DSL's TVLayout)."""
    layout = getattr(tv, "layout", tv) if not isinstance(tv, Layout) else tv
    if not isinstance(layout, Layout) or len(layout) != 2 or type(layout.shape) is not tuple:
        raise LayoutError(f"bank_conflicts: tv must be a rank-2 Layout (thread, value) -> tile "
                          f"index, got {tv!r}")
    return layout


def bank_conflicts(smem, tv, *, dtype_bytes: int, access_bytes: int | None = None,
                   offsets_in_bytes: bool = False) -> BankReport:
    """The bank conflicts of the threads of ``tv`` accessing the shared layout ``smem``.

    - ``smem``: a Layout or ComposedLayout (e.g. swizzled) from a tile coordinate to an element
      offset (a byte offset with ``offsets_in_bytes=True``);
    - ``tv``: a TV layout, (thread, value) -> the tile's index (column-major, as
      make_layout_tv returns it), i.e. an index into smem's domain: thread t's value v is the
      element at ``smem(tv(t, v))``;
    - ``dtype_bytes``: bytes of an element; ``access_bytes``: bytes a thread moves per access
      (default: one element). Each access takes ``access_bytes // dtype_bytes`` consecutive
      values of every thread, which must be consecutive, aligned elements in shared memory.

    Threads 32w..32w+31 form warp w; access k of all threads of a warp is one warp-wide request,
    split into phases (see the module docstring).

    >>> from layoutkit.algebra import ComposedLayout, Swizzle, make_layout_tv
    >>> tiler, tv = make_layout_tv(Layout((8, 8), (1, 8)), Layout((1, 8)))   # ldmatrix-style
    >>> plain = Layout((8, 64), (64, 1))                                      # bf16, 128 B rows
    >>> bank_conflicts(plain, tv, dtype_bytes=2, access_bytes=16).degree
    8
    >>> sw128 = ComposedLayout(Swizzle(3, 3, 3), 0, plain)
    >>> bank_conflicts(sw128, tv, dtype_bytes=2, access_bytes=16).degree
    1
    """
    what = "bank_conflicts"
    if not isinstance(smem, (Layout, ComposedLayout)):
        raise LayoutError(f"{what}: smem must be a Layout or ComposedLayout, got {smem!r}")
    layout_tv = _tv_layout(tv)
    if type(dtype_bytes) is not int or dtype_bytes not in (1, 2, 4, 8, 16):
        raise LayoutError(f"{what}: dtype_bytes must be 1, 2, 4, 8 or 16, got {dtype_bytes!r}")
    access_bytes = dtype_bytes if access_bytes is None else _check_width(access_bytes, what)
    if access_bytes < dtype_bytes:
        raise LayoutError(f"{what}: access_bytes {access_bytes} is less than one "
                          f"{dtype_bytes}-byte element")
    vec = access_bytes // dtype_bytes
    threads = _concrete(it.product(layout_tv.shape[0]), f"{what}: the thread mode of {layout_tv}")
    values = _concrete(it.product(layout_tv.shape[1]), f"{what}: the value mode of {layout_tv}")
    domain = _concrete(smem.size(), f"{what}: the size of {smem}")
    if values % vec:
        raise LayoutError(f"{what}: each thread holds {values} values, not a multiple of the "
                          f"{vec} elements of one {access_bytes}-byte access")
    unit = 1 if offsets_in_bytes else dtype_bytes
    t_part = [layout_tv[0](t) for t in range(threads)]
    v_part = [layout_tv[1](v) for v in range(values)]
    for x in t_part + v_part:
        _concrete(x, f"{what}: the strides of {layout_tv}")

    def address(t: int, v: int) -> int:
        idx = t_part[t] + v_part[v]
        if not 0 <= idx < domain:
            raise LayoutError(f"{what}: tv {layout_tv} maps (thread {t}, value {v}) to index "
                              f"{idx}, outside smem {smem} of {domain} elements")
        return _concrete(smem(idx), f"{what}: {smem} at {idx}") * unit

    accesses = values // vec
    phases = []
    for k in range(accesses):
        for w in range(-(-threads // WARP_SIZE)):
            lanes = range(WARP_SIZE * w, min(threads, WARP_SIZE * (w + 1)))
            addrs = []
            for t in lanes:
                a = address(t, k * vec)
                got = [address(t, k * vec + i) for i in range(vec)]
                if got != [a + i * dtype_bytes for i in range(vec)]:
                    raise LayoutError(
                        f"{what}: thread {t}'s values {k * vec}..{k * vec + vec - 1} lie at byte "
                        f"offsets {got}, not {vec} consecutive {dtype_bytes}-byte elements: a "
                        f"{access_bytes}-byte access cannot read them (use a narrower access_bytes)")
                if a % access_bytes:
                    raise LayoutError(f"{what}: thread {t}'s access {k} at byte offset {a} is not "
                                      f"{access_bytes}-byte aligned")
                addrs.append(a)
            phases += warp_phases(addrs, access_bytes, threads=list(lanes), access=k, warp=w)
    desc = (f"bank conflicts of {smem} ({dtype_bytes}-byte elements"
            f"{', offsets in bytes' if offsets_in_bytes else ''}) under TV layout {layout_tv}")
    return BankReport(desc, dtype_bytes, access_bytes, threads, accesses, tuple(phases))
