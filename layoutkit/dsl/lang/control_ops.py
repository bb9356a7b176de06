"""Runtime control flow in the IR, one definition each: `for` (a loop carrying values across
iterations), `if` (a block run where a bool holds) and `yield` (a loop body's next carried values).

Lowering: `for` is a guarded loop over mutable registers for the induction variable and the
carried values, `if` a branch around its block. The interpreter runs exactly that loop (the
induction variable wraps at its width). The protocol check walks the regions: a loop for its
trip count per thread (the integer parameters that bound loops are chosen beforehand to give
every ring stage and phase; check/extract.py), an `if` for the threads whose condition holds.
"""
from __future__ import annotations

import numpy as np

from layoutkit.ptx.isa import arith, compare, control, convert
from layoutkit.ptx.builder import Reg

from ..check.extract import MAX_TRIPS, MAX_WALKS, TooLong
from ..check.values import UNKNOWN
from ..core.opdef import NoEffects, OpDef
from ..core.types import bool_, i32, i64
from ..core.verifier import fail
from ..interpreter import numerics
from ..interpreter.errors import ExecutionError
from ..interpreter.executor import Step, run_steps
from ..lower.function import mov_type

MAX_ITERATIONS = 1 << 24     # interpreter: per loop execution, beyond it the loop is endless


class For(OpDef):
    """A runtime loop: start, stop, step, then the initial carried values; the body block's
    arguments are the induction variable and the carried values, and it ends in a yield of the
    next ones. `unroll`, `thread_dependent` (bounds differ between threads)."""

    name = "for"
    emits_events = False    # its effects are its body's, walked per iteration

    def verify(self, op):
        start, stop, step, *inits = op.operands
        if len(op.blocks) != 1:
            fail(op, "owns exactly one body block")
        body = op.blocks[0]
        if {start.type, stop.type, step.type} - {i32, i64} or len({start.type, stop.type,
                                                                  step.type}) != 1:
            fail(op, "start, stop and step are integers of one type")
        if len(body.args) != 1 + len(inits) or body.args[0].type != start.type:
            fail(op, "the body's arguments are the induction variable then the carried values")
        if [v.type for v in body.args[1:]] != [v.type for v in inits] or \
                [v.type for v in op.results] != [v.type for v in inits]:
            fail(op, "carried values keep their types (init, body argument and result)")
        last = body.ops[-1] if body.ops else None
        if last is None or last.name != "yield" or [v.type for v in last.operands] != \
                [v.type for v in inits]:
            fail(op, "the body ends in a yield of the carried values")

    def lower(self, op, lw):
        k = lw.k
        start, stop, step, *inits = op.operands
        body = op.blocks[0]
        itype = start.type.ptx
        iv = k.var(itype)
        convert.mov(k, lw.operand(start), dtype=itype, out=iv)
        carried = []
        for init in inits:
            var = k.var(init.type.ptx)
            convert.mov(k, lw.operand(init), dtype=mov_type(init.type), out=var)
            carried.append(var)
        step_value = lw.operand(step)
        forward = step_value > 0
        stop_value = lw.operand(stop)
        top, end = k.label("loop"), k.label("loop_end")
        exit_cmp = "ge" if forward else "le"
        p = compare.setp(k, exit_cmp, iv, stop_value, dtype=itype)
        control.bra(k, end, pred=p)
        k.place(top)
        if op.attrs.get("unroll") == 1:
            control.pragma(k, "nounroll")
        lw.vals[body.args[0].id] = iv
        for arg, var in zip(body.args[1:], carried):
            lw.vals[arg.id] = var
        lw.push()
        lw.loops.append(carried)
        lw.block(body)          # ends with the yield of the next carried values
        lw.loops.pop()
        lw.pop()
        arith.add(k, iv, step_value, dtype=itype, out=iv)
        q = compare.setp(k, "lt" if forward else "gt", iv, stop_value, dtype=itype)
        control.bra(k, top, pred=q)
        k.place(end)
        for result, var in zip(op.results, carried):
            lw.vals[result.id] = var

    def interpret(self, op, compiler):
        start, stop, step, *inits = (v.id for v in op.operands)
        body = op.blocks[0]
        steps = compiler.block(body)
        iv, *args = (a.id for a in body.args)
        results = [r.id for r in op.results]
        itype = op.operands[0].type

        def loop(thread):
            env = thread.env
            i, end, delta = env[start], env[stop], env[step]
            carried = [env[v] for v in inits]
            count = 0
            while (i < end) if delta > 0 else (i > end):
                count += 1
                if count > MAX_ITERATIONS:
                    raise ExecutionError(f"the lk.range loop ran {MAX_ITERATIONS} iterations "
                                         f"(start {env[start]}, stop {end}, step {delta}); "
                                         "taken to be endless", op.location)
                env[iv] = i
                for arg, value in zip(args, carried):
                    env[arg] = value
                yield from run_steps(thread, steps)
                carried = thread.yielded
                i = numerics.wrap(i + delta, itype)
            for r, value in zip(results, carried):
                env[r] = value
        return Step(loop, op)

    def effects(self, op, ex, mask, loops):
        body = op.blocks[0]
        if not ex.relevant[id(body)]:
            return
        start, stop = op.operands[0], op.operands[1]
        step = ex.values(op.operands[2])
        lo, hi = ex.per_thread(start, mask), ex.per_thread(stop, mask)
        if lo is None or hi is None or step is UNKNOWN:
            ex.undecidable(op, loops, "the trip count of this lk.range is not known at trace "
                             "time; the check ran its body once")
            lo, hi, step = np.zeros(1, np.int64), np.ones(1, np.int64), 1
        step = int(np.asarray(step).reshape(-1)[0])
        trips = np.maximum(0, -((lo - hi) // step)) if step > 0 else \
            np.maximum(0, -((hi - lo) // -step))
        full_lo = np.zeros(mask.shape, np.int64)
        full_lo[mask] = lo
        full_trips = np.zeros(mask.shape, np.int64)
        full_trips[mask] = trips
        body_ids = ex.defined_in(body)
        count = int(trips.max(initial=0))
        ex.walks += count
        if count > MAX_TRIPS or ex.walks > MAX_WALKS:
            line = op.location.line if op.location else "?"
            raise TooLong(f"the lk.range at line {line} runs {count} iterations (in all "
                          f"{ex.walks} loop-body walks; the check follows at most "
                          f"{MAX_TRIPS} and {MAX_WALKS}), so the kernel was not checked")
        for i in range(count):
            sub = mask & (full_trips > i)
            ex.values.forget(body_ids)
            ex.values.fixed[body.args[0].id] = full_lo + i * step
            ex.block(body, sub, loops + [(op, i)])
        ex.values.fixed.pop(body.args[0].id, None)
        ex.values.forget(body_ids)


class If(OpDef):
    """Run the block where the bool operand holds (no results: values defined inside stay
    inside)."""

    name = "if"
    emits_events = False    # its effects are its block's, for the threads that take it

    def verify(self, op):
        if len(op.operands) != 1 or op.operands[0].type != bool_ or len(op.blocks) != 1:
            fail(op, "takes one bool and owns one block")

    def lower(self, op, lw):
        cond = lw.operand(op.operands[0])
        if cond is False:
            return
        lw.push()
        if cond is True:
            lw.block(op.blocks[0])
        else:
            end = lw.k.label("endif")
            control.bra(lw.k, end, pred=~cond)
            lw.block(op.blocks[0])
            lw.k.place(end)
        lw.pop()

    def interpret(self, op, compiler):
        cond = op.operands[0].id
        steps = compiler.block(op.blocks[0])

        def run(thread):
            return run_steps(thread, steps) if thread.env[cond] else None
        return Step(run, op)

    def effects(self, op, ex, mask, loops):
        if not ex.relevant[id(op.blocks[0])]:
            return
        cond = ex.values(op.operands[0])
        if cond is UNKNOWN:
            if ex.syncs[id(op.blocks[0])]:
                ex.undecidable(op, loops, "the condition of this lk.if_ depends on values "
                                 "loaded from memory; the check assumed every thread takes it")
            sub = mask
        else:
            sub = mask & np.broadcast_to(np.asarray(cond, dtype=bool), mask.shape)
        if sub.any():
            ex.block(op.blocks[0], sub, loops)


class Yield(NoEffects, OpDef):
    """The next carried values of the enclosing loop (the last op of its body)."""

    name = "yield"

    def verify(self, op):
        return None     # its place and types are the enclosing for's rule (For.verify)

    def lower(self, op, lw):
        parent_args = lw.loops[-1]    # the enclosing loop's carried registers
        k = lw.k
        staged = []
        for value, var in zip(op.operands, parent_args):
            src = lw.operand(value)
            if isinstance(src, Reg) and src.mutable and src != var:
                src = convert.mov(k, src, dtype=mov_type(value.type))   # parallel copy
            staged.append((src, var, value))
        for src, var, value in staged:
            if src != var:
                convert.mov(k, src, dtype=mov_type(value.type), out=var)

    def interpret(self, op, compiler):
        values = [v.id for v in op.operands]

        def run(thread):
            env = thread.env
            thread.yielded = [env[v] for v in values]
        return Step(run, op)
