"""Handlers of the sm_80 matrix path: cp.async (+ commit/wait groups), ldmatrix, mma.sync.

cp.async: at issue the thread reads its global bytes (none where the mask is false: zeros) and
claims the shared destination; the copy lands when the scheduler completes it, and the claim
is released (and the write recorded for race detection as the thread's) when the thread's
cp.async.wait_group covers its group. So reading a stage before its wait, or another thread
reading it before a barrier, is a RaceError. ldmatrix and mma.sync are warp collectives: all
32 lanes meet, then each lane gets its values per the PTX ISA (ldmatrix: lane 8i + r gives the
address of row r of matrix i; lane l receives row l/4, columns 2(l%4), 2(l%4)+1 of each
matrix, or the transpose) and the fragment layouts in the op's attrs (mma.sync: D = A B^T + C
with B over (N, K), exact products summed in float64, rounded once to f32).
"""
from __future__ import annotations

import numpy as np

from ..sm80.mma_layouts import MMA_SHAPES
from .errors import DivergenceError
from .executor import Step, handler
from .machine import WARP_SIZE, Wait, WaitQueue, location_text
from .memory import decode
from .ops_memory import swizzle_function
from .scheduler import AsyncOperation

_U32 = 0xFFFFFFFF


def _split_address(op, nbytes: int, disp_key: str):
    """Byte offset in shared memory of Sw(inner) + outer + disp (smem_address)."""
    swizzle = swizzle_function(op.attrs["swizzle"]) or (lambda x: x)
    constant = op.attrs["base"] + op.attrs[disp_key] * nbytes
    return lambda inner, outer: (constant + (swizzle(inner & _U32) + outer) * nbytes) & _U32


class _Copy(AsyncOperation):
    def __init__(self, thread, start: int, data: np.ndarray, op, claim):
        self.thread, self.start, self.data, self.op, self.claim = thread, start, data, op, claim
        self.done = False
        self.queue = None

    def complete(self) -> None:
        self.thread.cta.shared.view(self.start, self.data.size)[:] = self.data
        self.done = True
        if self.queue is not None:
            self.queue.notify()

    def describe(self) -> str:
        return (f"the cp.async of {self.data.size} bytes issued at {location_text(self.op)} by "
                f"{self.thread.describe()}")


def _groups(thread) -> dict:
    return thread.state.setdefault("cp_async", {"open": [], "committed": []})


@handler("cp_async")
def _cp_async(op, compiler):
    a = op.attrs
    ptr, offset, inner, outer = (v.id for v in op.operands[:4])
    mask = op.operands[4].id if a["masked"] else None
    nbytes, elem = a["bytes"], op.operands[0].type.dtype.nbytes
    address = _split_address(op, elem, "sdisp")
    what = f"the cp.async of {nbytes} bytes into {a['buffer']}"

    def run(thread):
        env, cta = thread.env, thread.cta
        start = address(env[inner], env[outer])
        cta.shared.check_access(start, nbytes, nbytes, True, what, op, a["buffer"])
        if mask is None or env[mask]:
            data = cta.machine.memory.access(env[ptr], (env[offset] + a["disp"]) * elem, nbytes,
                                             nbytes, what, op).copy()
        else:
            data = np.zeros(nbytes, dtype=np.uint8)            # src-size 0: zero-fill
        claim = cta.shared.claim(start, nbytes, True, f"the cp.async issued at "
                                 f"{location_text(op)} by {thread.describe()}",
                                 "wait for its group (lk.cp_async_wait) and lk.barrier() first")
        copy = _Copy(thread, start, data, op, claim)
        _groups(thread)["open"].append(copy)
        cta.machine.scheduler.post(copy)
    return Step(run, op, preempt=True)


@handler("cp_async_commit")
def _commit(op, compiler):
    def run(thread):
        groups = _groups(thread)
        groups["committed"].append(groups["open"])
        groups["open"] = []
    return Step(run, op)


class _GroupWait(Wait):
    def __init__(self, thread, copies: list, op):
        self.thread, self.copies, self.op = thread, copies, op
        self.queue = WaitQueue(thread.cta.machine.scheduler)
        for copy in copies:
            copy.queue = self.queue

    def ready(self) -> bool:
        if not all(c.done for c in self.copies):
            return False
        shared, machine = self.thread.cta.shared, self.thread.cta.machine
        for copy in self.copies:
            if copy.claim in shared.claims:
                shared.release(copy.claim)
                machine.on_shared_access(self.thread, copy.start, copy.data.size, True,
                                         copy.describe(), copy.op)
        return True

    def describe(self) -> str:
        pending = sum(not c.done for c in self.copies)
        return f"waits at cp.async.wait_group for {pending} copies"


@handler("cp_async_wait")
def _wait(op, compiler):
    pending = op.attrs["pending"]

    def run(thread):
        groups = _groups(thread)
        committed = groups["committed"]
        cut = max(0, len(committed) - pending)
        covered = [c for group in committed[:cut] for c in group]
        groups["committed"] = committed[cut:]
        wait = _GroupWait(thread, covered, op)
        return None if wait.ready() else wait
    return Step(run, op)


class _Rendezvous(Wait):
    """The 32 lanes of a warp meeting at one warp-collective op."""

    def __init__(self, warp, op, finish):
        self.warp, self.op, self.finish = warp, op, finish
        self.queue = WaitQueue(warp.cta.machine.scheduler)
        self.arrivals: dict = {}
        self.complete = False

    def ready(self) -> bool:
        return self.complete

    def describe(self) -> str:
        return f"waits at {self.op.name}: {len(self.arrivals)} of {WARP_SIZE} lanes arrived"


def _meet(thread, op, payload, finish):
    warp = thread.warp
    key = op.name
    open_one = warp.collectives.get(key)
    if open_one is None:
        open_one = warp.collectives[key] = _Rendezvous(warp, op, finish)
    elif open_one.op is not op:
        raise DivergenceError(f"lane {thread.lane} reaches a {op.name} while lanes "
                              f"{sorted(open_one.arrivals)} wait at another one "
                              f"({location_text(open_one.op)}): all 32 lanes must execute the "
                              f"same {op.name} (.sync.aligned)", op.location)
    open_one.arrivals[thread.lane] = payload
    if len(open_one.arrivals) == WARP_SIZE:
        del warp.collectives[key]
        open_one.finish(warp, open_one.arrivals)
        open_one.complete = True
        open_one.queue.notify()
    return open_one


@handler("ldmatrix")
def _ldmatrix(op, compiler):
    a = op.attrs
    dtype = op.results[0].type
    inner, outer = (v.id for v in op.operands)
    address = _split_address(op, dtype.nbytes, "disp")
    results = [r.id for r in op.results]
    num, trans = a["num"], a["trans"]
    what = f"the ldmatrix row read from {a['buffer']}"

    def finish(warp, arrivals):
        shared = warp.cta.shared
        rows = {}
        for i in range(num):
            for r in range(8):
                lane = 8 * i + r
                start = arrivals[lane]
                shared.check_access(start, 16, 16, False, what, op, a["buffer"])
                thread = warp.threads[lane]
                warp.cta.machine.on_shared_access(thread, start, 16, False, what, op)
                rows[i, r] = decode(shared.view(start, 16).copy(), dtype)
        for thread in warp.threads:
            g, q = divmod(thread.lane, 4)
            for i in range(num):
                for h in range(2):
                    value = rows[i, 2 * q + h][g] if trans else rows[i, g][2 * q + h]
                    thread.env[results[2 * i + h]] = value

    def run(thread):
        return _meet(thread, op, address(thread.env[inner], thread.env[outer]), finish)
    return Step(run, op, preempt=True)


@handler("mma_sync")
def _mma_sync(op, compiler):
    a = op.attrs
    m, n, k = MMA_SHAPES[a["shape"]]
    layouts = [a["a_layout"], a["b_layout"], a["c_layout"]]
    tiles = [(m, k), (n, k), (m, n)]
    counts = [layout[1].size() for layout in layouts]
    operands = [v.id for v in op.operands]
    results = [r.id for r in op.results]
    places = [[[divmod(layout(lane, v), tile[0])[::-1] for v in range(count)]
               for lane in range(WARP_SIZE)] for layout, tile, count in zip(layouts, tiles, counts)]

    def finish(warp, arrivals):
        mats = [np.zeros(tile) for tile in tiles]
        for lane, values in arrivals.items():
            at = 0
            for mat, count, place in zip(mats, counts, places):
                for v in range(count):
                    mat[place[lane][v]] = float(values[at + v])
                at += count
        d = (mats[0] @ mats[1].T + mats[2]).astype(np.float32)
        for thread in warp.threads:
            for v, r in enumerate(results):
                thread.env[r] = d[places[2][thread.lane][v]]

    def run(thread):
        return _meet(thread, op, [thread.env[v] for v in operands], finish)
    return Step(run, op)
