"""Handlers of structured control flow: `for` (a loop with carried values, exactly the
lowering's guarded loop: the induction variable wraps at its width), `yield` (the next carried
values) and `if` (run the block where the condition holds)."""
from __future__ import annotations

from . import numerics
from .errors import ExecutionError
from .executor import Step, handler, run_steps

MAX_ITERATIONS = 1 << 24     # per loop execution: beyond it the loop is taken to be endless


@handler("for")
def _for(op, compiler):
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


@handler("yield")
def _yield(op, compiler):
    values = [v.id for v in op.operands]

    def run(thread):
        env = thread.env
        thread.yielded = [env[v] for v in values]
    return Step(run, op)


@handler("if")
def _if(op, compiler):
    cond = op.operands[0].id
    steps = compiler.block(op.blocks[0])

    def run(thread):
        return run_steps(thread, steps) if thread.env[cond] else None
    return Step(run, op)
