"""From a verified kernel IR to layoutkit.sync's KernelProtocol: which threads execute which
barrier, copy, wgmma and shared-memory events, in program order, for concrete trip counts.

The walk runs the IR's structure for every thread of one CTA (or one cluster) at once:
`lk.if_` conditions, warp roles and `lk.sm90.elect_one` select threads (conditions are evaluated
exactly from parameters, thread and cluster indices and loop counters; a condition computed from
memory is undecidable: assumed taken, and said so); runtime loops run their trip counts. Each
event records the threads that executed it; threads that executed the same events form one
thread class, and an event's arrivals count its class's threads.

Approximations, stated: the integer parameters and the runtime integers made kernel integers
(`lk.index_value`, within their stated range) that bound runtime loops (directly or through
any kernel arithmetic: min, max, floor division of sequence lengths, ...) are chosen before the
walk, together, by a coordinate search over multiples of their declared divisors that gives
as many loops as it can the trips they want: a loop whose own ops (outside its nested loops)
use an mbarrier ring, the period of those ops' barrier operands (slot offsets, parities,
evaluated trip by trip from the counter's first value) + 1, which shows every stage/phase state
they meet (a trip that takes c stages of an S-stage ring repeats after 2S / gcd(c, 2S) trips),
or 2 * their deepest ring + 1 where none shows within 2 * STAGES trips; a loop around loops that
reach theirs (those whose trips the parameters move) and uses no ring itself, none beyond a
group wait's (the inner loops cover the residues, outer iterations add the state carried
between them); both at least 2 * (a group wait's pending + 1) + 1; any other loop
`2 * STAGES + 1` (STAGES: the largest mbarrier array). Among values that cover as much it takes
those walking the fewest trips (each chosen value refined to the smallest multiple of its
divisor that covers as well); a loop counts for
the threads whose enclosing `lk.if_` conditions hold (a loop under a branch the chosen values
close runs for none); other integer parameters take 16 times their divisor (clamped to a
stated range); block indices are 0 (the CTA's position in its
cluster); a byte range of a shared access is the span of the executing threads' accesses. A
kernel whose loops would need more than MAX_TRIPS iterations of one loop or MAX_WALKS body
walks in all is not checked (`TooLong`; the caller warns).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from layoutkit.sync import MBARRIER_BYTES
from layoutkit.sync import kernel_model as km

from .values import UNKNOWN, Values

MAX_TRIPS = 4096          # iterations of one loop the walk follows at most
MAX_WALKS = 50_000        # loop-body walks in all; past it the kernel is not checked
DEFAULT_PARAM = 16
# multiples of a loop-bounding parameter's divisor the search tries (ascending: small first)
SEARCH_MULTIPLES = tuple(range(1, 17)) + tuple(m for e in range(4, 24) for m in (3 << (e - 1),
                                                                                  1 << (e + 1)))
SEARCH_ROUNDS = 2
RING_ROUNDS = 3           # searches at most, each with the ring periods of the last's choice
                          # (another only where those leave a loop short of its trips)


def _same(a: list, b: list) -> bool:
    """Whether two lists of per-thread values (ints or arrays) are equal element for element."""
    return all(x is y or np.array_equal(x, y) for x, y in zip(a, b))


def walk_ops(block, out=None) -> list:
    """Every op of `block` and of the blocks nested in it, in program order (a list)."""
    out = [] if out is None else out
    for op in block.ops:
        out.append(op)
        for inner in op.blocks:
            walk_ops(inner, out)
    return out


def has_sync(fn) -> bool:
    """Whether the kernel has any op the protocol check reasons about."""
    return any(op.defn.synchronizes for op in walk_ops(fn.body))


class TooLong(Exception):
    """The walk would exceed MAX_TRIPS / MAX_WALKS; the message says which loop."""


def _distinct(column):
    """(the sorted distinct values of an integer array, each element's index among them), as
    np.unique(return_inverse=True) gives them; a narrow range is counted instead of sorted."""
    if column.dtype.kind in "iu":
        lo, hi = int(column.min()), int(column.max())
        if hi - lo <= 4 * column.size + 64:
            present = np.zeros(hi - lo + 1, dtype=bool)
            present[column - lo] = True
            return np.flatnonzero(present) + lo, (np.cumsum(present) - 1)[column - lo]
    u, inverse = np.unique(column, return_inverse=True)
    return u, inverse.reshape(-1)


def _split_key(mask, columns):
    """A key fixing Extractor.split's answer (the mask and each column's values), or None."""
    key = [mask.tobytes()]
    for c in columns:
        if type(c) is np.ndarray and c.ndim:
            key.append((c.dtype, c.shape, c.tobytes()))
        elif np.ndim(c) == 0:
            if not isinstance(c, (int, np.integer)):
                return None
            key.append(int(c))
        else:
            c = np.asarray(c)
            key.append((c.dtype.str, c.shape, c.tobytes()))
    return tuple(key)


# the event kinds whose fields depend on the class executing them (instantiate)
PER_CLASS = (km.Init, km.Arrive, km.ThreadBarrier)


class Proto:
    """An event before classes are known: threads (bool mask), kind, fields, arrivals each."""

    __slots__ = ("mask", "kind", "fields", "per_thread")

    def __init__(self, mask, kind, fields, per_thread=0):
        self.mask, self.kind, self.fields, self.per_thread = mask, kind, fields, per_thread


class Extractor:
    """See the module docstring; `run()` returns the KernelProtocol."""

    def __init__(self, fn):
        self.fn = fn
        self.block_threads = 32 * fn.num_warps
        cluster = getattr(fn, "cluster", None) or (1, 1, 1)
        self.cluster = cluster
        self.ctas = cluster[0] * cluster[1] * cluster[2]
        n = self.block_threads * self.ctas
        g = np.arange(n)
        self.tid, self.cta = g % self.block_threads, g // self.block_threads
        self.all = np.ones(n, dtype=bool)
        self.role = np.full(n, -1)
        self.roles: list[str] = []
        self.log: list[Proto] = []
        self._splits: dict = {}             # split's rows by (mask, columns): iterations repeat
        self._cta_parts: dict = {}          # cta_parts' answers by mask
        self._defined: dict = {}            # defined_in's answers by block
        self._sites: dict = {}              # site's answers by (op, loop context)
        self._effects: dict = {}            # leaf_effects' events by _effect_key (False: not kept)
        self._key_operands: dict = {}       # _effect_key's operands by op
        self._mask_key = (None, b"")        # _effect_key's last mask (held) and its bytes
        self._context = None                # (the loops list site saw last, its context)
        self.undecided: list = []
        self.barriers: dict = {}
        self.by_offset: dict[int, tuple[str, int]] = {}
        self.barrier_stages: dict[str, int] = {}
        defs, self.params, self.divisors, self.ranges = {}, {}, {}, {}
        self.ops = walk_ops(fn.body)        # every op, in program order
        for op in self.ops:
            for r in op.results:
                defs[r.id] = op
            if op.name == "index_value":          # a loaded kernel integer: a parameter here
                self.params[op.results[0].id] = op.attrs["name"]
                self.ranges[op.results[0].id] = (op.attrs["lo"], op.attrs["hi"])
            if op.name == "index":
                for v, s in zip(op.operands, op.attrs["syms"]):
                    self.divisors[v.id] = getattr(s, "divisor", 1)
            if op.name == "mbarrier_init":
                self.barrier_stages[op.attrs["barrier"]] = op.attrs["stages"]
                for stage in range(op.attrs["stages"]):
                    self.by_offset[op.attrs["offset"] + MBARRIER_BYTES * stage] = \
                        (op.attrs["barrier"], stage)
        self.values = Values(defs, self._fixed())
        self.stages = max((op.attrs["stages"] for op in self.ops
                           if op.name == "mbarrier_init"), default=1)
        self.trips = 2 * self.stages + 1
        self.relevant, self.syncs = {}, {}
        self.walks = 0
        self._mark(fn.body)
        self.searched = self.choose_loop_params()

    def _fixed(self) -> dict:
        fixed = {}
        rank = self.cta
        pos = (rank % self.cluster[0], (rank // self.cluster[0]) % self.cluster[1],
               rank // (self.cluster[0] * self.cluster[1]))
        for op in self.fn.params:
            vtype = op.results[0].type
            if op.attrs["index"] is not None and getattr(vtype, "is_int", False):
                vid = op.results[0].id
                self.params[vid] = op.attrs["name"]
        for op in self.ops:
            if op.name == "thread_idx":
                fixed[op.results[0].id] = self.tid if op.attrs["axis"] == 0 else 0
            elif op.name == "block_idx":
                fixed[op.results[0].id] = pos[op.attrs["axis"]]
            elif op.name == "special_reg":
                reg = op.attrs["name"]
                fixed[op.results[0].id] = rank if reg == "cluster_ctarank" else \
                    pos["xyz".index(reg[-1])] if reg.startswith("cluster_ctaid") else \
                    0 if reg.startswith("clusterid") else 1
        for vid in self.params:
            fixed[vid] = self._clamp(vid, DEFAULT_PARAM * self.divisors.get(vid, 1))
        return fixed

    def _clamp(self, vid, value: int) -> int:
        lo, hi = self.ranges.get(vid, (None, None))
        value = value if lo is None else max(value, lo)
        return value if hi is None else min(value, hi)

    def _candidates(self, vid) -> list:
        """The values the search tries for parameter `vid`: multiples of its divisor inside its
        stated range (its low end first when that is not a multiple)."""
        divisor = self.divisors.get(vid, 1)
        lo, hi = self.ranges.get(vid, (None, None))
        values = [m * divisor for m in SEARCH_MULTIPLES
                  if (lo is None or m * divisor >= lo) and (hi is None or m * divisor <= hi)]
        start = self._clamp(vid, divisor)
        return values if start in values else [start] + values

    def _mark(self, block) -> tuple[bool, bool]:
        events = syncs = False
        for op in block.ops:
            for inner in op.blocks:
                e, s = self._mark(inner)
                events, syncs = events or e, syncs or s
            events = events or op.defn.emits_events
            syncs = syncs or op.defn.synchronizes
        self.relevant[id(block)], self.syncs[id(block)] = events, syncs
        return events, syncs

    # ---- helpers ------------------------------------------------------------------------------
    def site(self, op, loops) -> km.Site:
        last = self._context
        if last is not None and last[0] is loops:     # the loops of one iteration: one list
            context = last[1]
        else:
            context = ", ".join(f"iteration {i} of the lk.range at line "
                                f"{loop.location.line if loop.location else '?'}"
                                for loop, i in reversed(loops))
            self._context = (loops, context)
        key = (id(op), context)
        found = self._sites.get(key)
        if found is None:
            found = self._sites[key] = km.Site(op.location, context)
        return found

    def per_thread(self, value, mask):
        """The value at the threads of `mask` (an int64 array), or None when unknown."""
        v = self.values(value)
        if v is UNKNOWN:
            return None
        if type(v) is int:               # one value at every thread (the common case)
            return np.full(np.count_nonzero(mask), v, dtype=np.int64)
        v = np.asarray(v, dtype=np.int64)
        if v.shape == mask.shape:
            return v[mask]
        if v.ndim == 0:                  # one value at every thread (np.broadcast_to costs more)
            return np.full(np.count_nonzero(mask), v, dtype=np.int64)
        return np.broadcast_to(v, mask.shape)[mask]

    def emit(self, mask, kind, fields, per_thread=0) -> None:
        self.log.append(Proto(mask, kind, fields, per_thread))

    def split(self, mask, columns):
        """(sub-mask, key row) per distinct row of the per-thread `columns` under `mask`."""
        key = _split_key(mask, columns)
        found = self._splits.get(key) if key is not None else None
        if found is None:
            found = list(self._split(mask, columns))
            if key is not None:
                self._splits[key] = found
        for sub, row in found:
            yield sub.copy(), row

    def cta_parts(self, mask):
        """(sub-mask, CTA, which of mask's threads are in it or None for all) per CTA with
        threads in `mask`, CTAs ascending (split's rows of the CTA column), remembered per mask."""
        key = mask.tobytes()
        parts = self._cta_parts.get(key)
        if parts is None:
            ctas, idx = self.cta[mask], np.flatnonzero(mask)
            parts = []
            for cta in (np.flatnonzero(np.bincount(ctas)).tolist() if ctas.size else ()):
                chosen = ctas == cta
                sub = np.zeros_like(mask)
                sub[idx[chosen]] = True
                parts.append((sub, cta, None if chosen.all() else chosen))
            self._cta_parts[key] = parts
        for sub, cta, chosen in parts:
            yield sub.copy(), cta, chosen

    def _split(self, mask, columns):
        idx = np.nonzero(mask)[0]
        if not idx.size:
            return
        # rows in lexicographic order, as np.unique(axis=0) gives them, from each column's
        # ranks (1-D uniques: a row table's unique sorts bytes and costs ~10x more)
        ranks, values = np.zeros(idx.shape, dtype=np.int64), []
        for c in columns:
            if np.ndim(c) == 0:
                values.append((c,))
                continue
            c = np.broadcast_to(c, idx.shape)
            first = c.flat[0]
            if (c == first).all():             # one value at every thread (the common case)
                values.append((first,))
                continue
            u, inverse = _distinct(c)
            values.append(u)
            ranks = ranks * len(u) + inverse
        if len(values) == sum(len(u) == 1 for u in values):     # one row: no ranks to count
            keys, inverse = (0,), None
        else:
            keys, inverse = _distinct(ranks)
            keys = keys.tolist()
        for k, key in enumerate(keys):
            row = []
            for u in reversed(values):
                key, r = divmod(key, len(u))
                row.append(int(u[r]))
            if len(keys) == 1:
                sub = mask.copy()
            else:
                sub = np.zeros_like(mask)
                sub[idx[inverse == k]] = True
            yield sub, tuple(reversed(row))

    def shared_access(self, op, mask, loops, offset, nbytes, span, buffer, kind, proxy,
                      disp=0) -> None:
        """Emit `kind` per CTA for the shared access of `op` at element `offset` (an IR value)
        + `disp` of `buffer`: the byte range spans the pre-swizzle offsets of the threads of
        `mask`, each access `span` bytes (`proxy`: the reading proxy, None for a write). Every
        view of one buffer shares its swizzle, so ranges of one buffer compare exactly."""
        site = self.site(op, loops)
        offsets = self.per_thread(offset, mask)
        if offsets is None:
            self.undecidable(op, loops, f"the shared offset into {buffer} is computed from "
                             "memory; the check skipped this access")
            return
        for sub, cta, chosen in self.cta_parts(mask):
            part = offsets if chosen is None else offsets[chosen]
            rng = km.ByteRange(cta, buffer, (int(part.min()) + disp) * nbytes,
                               (int(part.max()) + disp) * nbytes + span)
            fields = {"bytes": rng, "site": site}
            if proxy is not None:
                fields["proxy"] = proxy
            self.emit(sub, kind, fields)

    def slot_of(self, offset: int, op, site):
        found = self.by_offset.get(offset)
        if found is None:
            bar = op.attrs.get("barrier", "?")
            base = min((o for o, (b, s) in self.by_offset.items() if b == bar and s == 0),
                       default=None)
            stage = (offset - base) // MBARRIER_BYTES if base is not None else offset
            return bar, stage
        return found

    def defined_in(self, block) -> frozenset:
        """The ids of the values `block` defines (its arguments, its ops' results, nested
        blocks' too) that an iteration of a loop over it must recompute: those depending on a
        block argument (a loop counter, a carried value) or on a region op's results; the
        others are functions of values defined outside the block, the same every iteration."""
        found = self._defined.get(id(block))
        if found is None:
            variant = {a.id for a in block.args}
            for inner in walk_ops(block):       # program order: operands before their uses
                if inner.blocks:
                    variant.update(a.id for b in inner.blocks for a in b.args)
                    variant.update(r.id for r in inner.results)
                elif any(v.id in variant for v in inner.operands):
                    variant.update(r.id for r in inner.results)
            found = self._defined[id(block)] = frozenset(variant)
        return found

    def undecidable(self, op, loops, what: str) -> None:
        self.undecided.append(km.Undecided(what, self.site(op, loops)))

    # ---- walking ------------------------------------------------------------------------------
    def block(self, block, mask, loops) -> None:
        if not self.relevant[id(block)] or not mask.any():   # effects never change mask
            return
        for op in block.ops:
            if loops and not op.blocks and op.defn.emits_events:
                self.leaf_effects(op, mask, loops)
            else:
                op.defn.effects(op, self, mask, loops)

    def leaf_effects(self, op, mask, loops) -> None:
        """op.defn.effects of a region-free op inside a loop, remembered: an op's events are a
        function of its threads and its operands' values (the check reads no float values) but
        for their Site, so a later trip that gives them the same values replays the events
        made the first time with this trip's Site (a ring's stage and phase repeat every
        2 * STAGES trips). Not remembered: an op whose effects left something undecided (said
        once each) or put any other Site in an event."""
        key = self._effect_key(op, mask)
        found = self._effects.get(key) if key is not None else False
        site = self.site(op, loops)
        if found:
            for sub, kind, fields, per_thread, sited in found:
                if sited:
                    fields = dict(fields)
                    for name in sited:
                        fields[name] = site
                self.log.append(Proto(sub, kind, fields, per_thread))
            return
        logged, undecided = len(self.log), len(self.undecided)
        op.defn.effects(op, self, mask, loops)
        if found is False:
            return
        made = []
        if len(self.undecided) == undecided:
            for p in self.log[logged:]:
                sited = tuple(name for name, v in p.fields.items() if type(v) is km.Site)
                if any(p.fields[name] is not site for name in sited):
                    made = None
                    break
                made.append((p.mask, p.kind, p.fields, p.per_thread, sited))
        else:
            made = None
        self._effects[key] = made if made else False

    def _effect_key(self, op, mask):
        """(op, its threads, the values of its operands but float ones), or None."""
        held, threads = self._mask_key           # the ops of one block share their mask
        if held is not mask:
            threads = mask.tobytes()
            self._mask_key = (mask, threads)
        parts = [id(op), threads]
        read = self._key_operands.get(id(op))
        if read is None:
            read = self._key_operands[id(op)] = [v for v in op.operands
                                                 if getattr(v.type, "kind", None) != "float"]
        for v in read:
            x = self.values(v)
            kind = type(x)
            if kind is np.ndarray:
                parts.append((x.dtype.str, x.shape, x.tobytes()))
            elif x is None or kind is int or kind is bool or isinstance(x, (np.integer,
                                                                            np.bool_)):
                parts.append((kind, x))
            else:
                return None
        return tuple(parts)

    def choose_loop_params(self) -> list:
        """Fix the parameters that bound loops with events (see the module docstring): a
        coordinate search maximising (the loops that run at all, then sum(min(trips,
        self.trips))), each loop's trips its most over the threads with enclosing loop counters
        at their first value. Returns the value ids chosen."""
        loops = [op for op in self.ops
                 if op.name == "for" and self.relevant[id(op.blocks[0])]]
        enclosing = self._enclosing(self.fn.body, (), (), {})
        guards = {key: ifs for key, (_, ifs) in enclosing.items()}
        bounding = [v for op in loops for v in (*op.operands[:2],
                                                *(g.operands[0] for g in guards[id(op)]))]
        facts = [op.operands[0] for op in self.ops if op.name == "assume"]
        bounding += facts                   # lk.assume: the search walks only values obeying it
        tunable = sorted(set().union(*(self.depends(v) for v in bounding)),
                         key=list(self.params).index)      # the parameters' own order
        if not tunable:
            return []

        tuned = set(tunable)
        nested = {id(op): [inner for inner in loops if op in enclosing[id(inner)][0]
                           and any(self.depends(v) & tuned for v in inner.operands[:2])]
                  for op in loops}       # the loops inside op whose trips the search moves
        pending = {id(op): 2 * self._direct_depth(op.blocks[0], rings=False) + 1
                   for op in loops}
        rings = {id(op): self._direct_ring_ops(op.blocks[0]) for op in loops}
        ring_trips: dict = {}            # loop -> trips its rings want (one search's values)

        def ring_wanted(op) -> int:
            """The trips that show every stage/phase state of the rings loop op's own ops use
            (outside its nested loops), with the enclosing counters at their first values: the
            period of those ops' barrier operands + 1 (a body that takes CHAINS stages a trip
            repeats after 2 * STAGES / CHAINS trips), else 2 * their deepest ring + 1; 0: op's
            own ops use no ring. Found at the parameter values of the search's start, then of
            its choice (choose's rounds below), not at every value it tries (each is a walk of
            2 * STAGES trips of the ring ops' operands)."""
            if not rings[id(op)]:
                return 0
            if id(op) not in ring_trips:
                period = self._ring_period(op, rings[id(op)])
                ring_trips[id(op)] = period + 1 if period else \
                    2 * self._direct_depth(op.blocks[0]) + 1
            return ring_trips[id(op)]

        def wanted(op, trips: dict, ring: dict) -> int:
            """For a loop whose own ops use a ring: the trips its ring states need (ring_wanted;
            at least 2 * a group wait's pending + 3); for a loop around loops that each reach
            theirs (of those whose trips the parameters move): those, or 2 * its deepest group
            wait + 3 (the inner loops cover every residue of the rings they use, and outer
            iterations only add the state carried between them); else self.trips."""
            inner = nested[id(op)]
            if ring[id(op)] or (inner and all(trips[id(i)] >= wanted(i, trips, ring)
                                              for i in inner)):
                return max(ring[id(op)], pending[id(op)])
            return self.trips

        def score():
            self.values.memo.clear()
            if not all(self._holds(f) for f in facts):
                return -1, -1
            trips, ring = {}, {}
            for op in loops:
                for outer in enclosing[id(op)][0]:
                    self.values.fixed[outer.blocks[0].args[0].id] = self.values(outer.operands[0])
                trips[id(op)] = self._most_trips(op, self._taken(guards[id(op)]))
                ring[id(op)] = ring_wanted(op)
            for op in loops:
                for outer in enclosing[id(op)][0]:
                    self.values.fixed.pop(outer.blocks[0].args[0].id, None)
            self.values.memo.clear()
            running = sum(t > 0 for t in trips.values())
            covered = sum(Fraction(min(trips[id(op)], w), w) for op in loops
                          for w in (wanted(op, trips, ring),))
            return running, covered, -sum(trips.values())     # then the fewest trips walked

        most = (len(loops), len(loops))

        def search():
            for vid in tunable:
                self.values.fixed[vid] = self._candidates(vid)[0]
            best = score()
            for _ in range(SEARCH_ROUNDS):
                improved, best = improve(best)
                if not improved:
                    break
            return best

        def improve(best) -> tuple:
            """One round of the coordinate search from score `best`: (whether it improved, the
            score where it ends)."""
            improved = False
            for vid in tunable:
                keep, below = self.values.fixed[vid], None
                candidates = self._candidates(vid)
                for i, value in enumerate(candidates):
                    self.values.fixed[vid] = value
                    got = score()
                    if got > best:
                        best, keep, improved = got, value, True
                        below = candidates[i - 1] if i else None
                    elif got[:2] == most and best[:2] == most:
                        break           # every loop covered: larger values only walk more
                if below is not None:    # the smallest multiple in (below, keep) as good
                    divisor = self.divisors.get(vid, 1)
                    lo, hi = below // divisor, keep // divisor
                    while hi - lo > 1:
                        mid = (lo + hi) // 2
                        self.values.fixed[vid] = mid * divisor
                        got = score()
                        if got[:2] >= best[:2]:
                            hi = mid
                            if got > best:
                                best, keep = got, mid * divisor
                        else:
                            lo = mid
                self.values.fixed[vid] = keep
            return improved, best

        for _ in range(RING_ROUNDS):   # a loop's ring period may move with the parameters
            best = search()
            used = dict(ring_trips)
            ring_trips.clear()
            got = score()                 # the periods at the chosen values
            if ring_trips == used or got[:2] == most:    # the same, or still every one met
                break
        if best[0] == -1:
            text = "; ".join(op.attrs["text"] for op in self.ops
                             if op.name == "assume")
            self.undecided.append(km.Undecided(
                f"no parameter values the check tried satisfy lk.assume ({text}); it walked the "
                "kernel with values that break them", km.Site(None, "")))
        return tunable

    def _direct_depth(self, block, rings: bool = True) -> int:
        """The deepest ring the ops of `block` use outside its nested loops (at least 1): an
        mbarrier op's array's stages (unless not `rings`), a group wait's `pending` + 1."""
        depth = 1
        for op in block.ops:
            name = op.attrs.get("barrier") if op.name.startswith("mbarrier_") else None
            if name is not None and rings:
                depth = max(depth, self.barrier_stages.get(name, self.stages))
            pending = op.attrs.get("pending")
            if isinstance(pending, int):
                depth = max(depth, pending + 1)
            if op.name != "for":
                for inner in op.blocks:
                    depth = max(depth, self._direct_depth(inner, rings))
        return depth

    def _direct_ring_ops(self, block, out=None) -> list:
        """The mbarrier ops (waits, arrives; not inits) of `block` outside its nested loops."""
        out = [] if out is None else out
        for op in block.ops:
            if op.name.startswith("mbarrier_") and op.name != "mbarrier_init" and \
                    op.attrs.get("barrier") is not None:
                out.append(op)
            if op.name != "for":
                for inner in op.blocks:
                    self._direct_ring_ops(inner, out)
        return out

    def _ring_period(self, op, ring_ops) -> int | None:
        """The fewest trips p (<= 2 * the deepest of their rings) after which the operands of
        `ring_ops` (loop op's own barrier ops: slot offsets, parities) at every thread repeat
        the first trip's and the second's, the counter stepping from its first value (the
        enclosing counters and the parameters as fixed now); None: no such p, or an operand not
        known. A ring counter affine in the loop counter (counter = first + trip * c) repeats
        its (stage, phase) after 2 * STAGES / gcd(c, 2 * STAGES) trips."""
        values = self.values
        lo, step = values(op.operands[0]), values(op.operands[2])
        if lo is UNKNOWN or type(step) not in (int, np.int64):
            return None
        counter = op.blocks[0].args[0].id
        horizon = 2 * max(self.barrier_stages.get(r.attrs["barrier"], self.stages)
                          for r in ring_ops)
        states, variant = [], self.defined_in(op.blocks[0])  # what a trip recomputes
        try:
            for trip in range(horizon + 2):
                values.fixed[counter] = lo + trip * int(step)     # lo: per thread, or one
                values.forget(variant)
                state = [values(v) for r in ring_ops for v in r.operands]
                if any(x is UNKNOWN for x in state):
                    return None
                states.append(state)
                p = trip - 1
                if p >= 1 and _same(states[p], states[0]) and _same(states[trip], states[1]):
                    return p
            return None
        finally:
            values.fixed.pop(counter, None)
            values.forget(variant)

    def _holds(self, fact) -> bool:
        value = self.values(fact)
        return value is UNKNOWN or bool(np.all(value))

    def _enclosing(self, block, fors: tuple, ifs: tuple, out) -> dict:
        """id(for op) -> (the for ops around it, outermost first; the if ops around it)."""
        for op in block.ops:
            if op.name == "for":
                out[id(op)] = (fors, ifs)
            for inner in op.blocks:
                self._enclosing(inner, fors + (op,) if op.name == "for" else fors,
                                ifs + (op,) if op.name == "if" else ifs, out)
        return out

    def _taken(self, ifs):
        """The threads whose conditions of `ifs` hold (one unknown from memory: taken)."""
        mask = self.all
        for op in ifs:
            cond = self.values(op.operands[0])
            if cond is not UNKNOWN:
                mask = mask & np.broadcast_to(np.asarray(cond, dtype=bool), mask.shape)
        return mask

    def _most_trips(self, op, mask) -> int:
        values = self.values
        lo, hi, step = values(op.operands[0]), values(op.operands[1]), values(op.operands[2])
        if lo is UNKNOWN or hi is UNKNOWN or step is UNKNOWN or not mask.any():
            return 0
        step = step if type(step) is int else int(np.asarray(step).reshape(-1)[0])
        if isinstance(lo, (int, np.integer)) and isinstance(hi, (int, np.integer)):  # scalars
            lo, hi = int(lo), int(hi)
            return max(-((lo - hi) // step) if step > 0 else -((hi - lo) // -step), 0)
        lo, hi = (x[mask] if x.shape == mask.shape else np.broadcast_to(x, mask.shape)[mask]
                  for x in (np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)))
        trips = -((lo - hi) // step) if step > 0 else -((hi - lo) // -step)
        return int(np.max(trips, initial=0))

    def depends(self, value) -> set:
        out, stack, seen = set(), [value], set()
        while stack:
            v = stack.pop()
            if v.id in seen:
                continue
            seen.add(v.id)
            if v.id in self.params:         # chosen by the search, whatever defines it
                out.add(v.id)
                continue
            op = self.values.defs.get(v.id)
            if op is not None and op.name != "for":
                stack.extend(op.operands)
        return out

    # ---- thread classes ---------------------------------------------------------------------
    def run(self) -> km.KernelProtocol:
        """Walk the kernel and group the threads into classes (see the module docstring)."""
        self.block(self.fn.body, self.all, [])
        n, prologue = len(self.all), (km.Init, km.InitFence)   # one thread's: no new class
        masks, which = self._distinct_masks(n)        # log entry i ran at masks[which[i]]
        splits = np.array([p.kind not in prologue for p in self.log], dtype=bool)
        # a thread's class: its CTA, its role and the events it executed (the same partition
        # as one bit per event: one bit per distinct thread mask of those events)
        # the distinct rows of the split events, in order (row indices < len(masks): counted,
        # not np.unique, whose first call imports numpy.ma, ~5-18 ms of a process's first check)
        used = np.flatnonzero(np.bincount(which[splits], minlength=len(masks)))
        signature = np.packbits(np.ascontiguousarray(masks[used].T), axis=1)
        start = self.cta * (len(self.roles) + 1) + self.role + 1
        groups: dict = {}
        for thread, (first, bits) in enumerate(zip(start.tolist(), signature)):
            groups.setdefault((first, bits.tobytes()), []).append(thread)
        inits = np.nonzero(~splits)[0]
        classes, made = [], {}           # an event of a proto is made once for equal fields
        # the events whose fields do not depend on the class, made once for every class
        shared = [None if p.kind in PER_CLASS else p.kind(**p.fields) for p in self.log]
        kinds: dict = {}                 # event type -> its code
        codes = np.array([kinds.setdefault(p.kind, len(kinds)) for p in self.log], dtype=np.intp)
        for members in groups.values():
            threads = np.array(members)
            rep, size = members[0], len(members)
            chosen = masks[which, rep]
            chosen[inits] = masks[which[inits]][:, threads].any(axis=1)
            taken = np.nonzero(chosen)[0]
            events = [shared[i] or self._event(i, size, threads, made) for i in taken.tolist()]
            if events:
                role = int(self.role[rep])
                c = km.ThreadClass(self.roles[role] if role >= 0 else None, int(self.cta[rep]),
                                   tuple(self.tid[threads].tolist()), events, self.ctas > 1)
                of = codes[taken]
                c.know_positions({kind: np.flatnonzero(of == code).tolist()
                                  for kind, code in kinds.items() if (of == code).any()})
                classes.append((rep, c))
        classes.sort(key=lambda item: item[0])
        assumed = ", ".join(f"{self.params[vid]}={int(self.values.fixed[vid])}"
                            for vid in self.searched)
        return km.KernelProtocol(self.fn.name, dict(self.barriers), [c for _, c in classes],
                                 self.ctas, assumed, self.undecided)

    def _distinct_masks(self, n: int):
        """(the distinct thread masks of the log as rows, each entry's row index): replayed
        events share their masks, and few masks recur across many events."""
        rows, which, by_id, by_bytes = [], [], {}, {}
        for p in self.log:
            row = by_id.get(id(p.mask))       # the log holds every mask: ids stay unique
            if row is None:
                key = p.mask.tobytes()
                row = by_bytes.get(key)
                if row is None:
                    row = by_bytes[key] = len(rows)
                    rows.append(p.mask)
                by_id[id(p.mask)] = row
            which.append(row)
        return (np.array(rows, dtype=bool).reshape(len(rows), n),
                np.array(which, dtype=np.intp))

    def _event(self, i: int, size: int, threads, made: dict):
        """instantiate(self.log[i], size, threads), shared by the classes whose fields of it are
        equal (events are frozen): a count per class size, an init's partial flag."""
        proto = self.log[i]
        if proto.kind is km.Init:
            key = (i, not proto.mask[threads].all())
        elif proto.kind in (km.Arrive, km.ThreadBarrier):
            key = (i, size)
        else:
            key = i
        event = made.get(key)
        if event is None:
            event = made[key] = self.instantiate(proto, size, threads)
        return event

    @staticmethod
    def instantiate(proto: Proto, size: int, threads):
        fields = dict(proto.fields)
        if proto.kind is km.Init:
            fields["partial"] = not proto.mask[threads].all()
        if proto.kind in (km.Arrive, km.ThreadBarrier):
            fields["arrivals"] = size * proto.per_thread
        return proto.kind(**fields)


def extract(fn) -> km.KernelProtocol:
    """The KernelProtocol of a verified kernel IR (see the module docstring)."""
    return Extractor(fn).run()


__all__ = ["Extractor", "TooLong", "extract", "has_sync", "MAX_TRIPS", "MAX_WALKS"]
