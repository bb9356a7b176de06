"""Per-thread execution: IR blocks compiled once into `Step`s by each op's `interpret` facet
(its definition, layoutkit.dsl.core.opdef), run by each thread as a coroutine over the
structured IR.

`op.defn.interpret(op, compiler)` returns a Step; `Step.run(thread)` executes the op for one thread and returns None, a `Wait` (the
thread blocks until it is ready; sync ops), or an iterator of Waits (ops with regions: loops,
branches, warp roles, which run their blocks with `run_steps`). `Step.preempt` marks memory
accesses: the thread yields to the scheduler just before them.
"""
from __future__ import annotations

from typing import Callable

from ..core.ir import Block, Function, Op
from .machine import PREEMPT, Wait


class Step:
    """One compiled op: `run(thread)` (see the module docstring), the `op`, `preempt`."""

    __slots__ = ("run", "op", "preempt")

    def __init__(self, run: Callable, op: Op, preempt: bool = False):
        self.run, self.op, self.preempt = run, op, preempt


class Compiler:
    """Compiles a verified `Function`'s blocks into Steps (the steps keep no run's state: one
    Compiler serves every run of the IR; `interpret` reuses it)."""

    def __init__(self, fn: Function):
        self.fn = fn
        self.allocations = {a.name: a for a in fn.shared}
        self.cluster_memory = False     # set by an op touching a peer CTA's shared memory
        self.body = self.block(fn.body)

    def block(self, block: Block) -> "Steps":
        return Steps(op.defn.interpret(op, self) for op in block.ops)


class Steps(list):
    """A block's compiled Steps (a list, not changed after compilation), with `plan`: their
    (run, op, preempt) triples, what run_steps iterates."""

    __slots__ = ("plan",)

    def __init__(self, steps):
        super().__init__(steps)
        self.plan = tuple((s.run, s.op, s.preempt) for s in self)


def run_steps(thread, steps: list[Step]):
    """Run compiled steps for `thread`, yielding Waits and preemption points."""
    plan = steps.plan if isinstance(steps, Steps) else [(s.run, s.op, s.preempt) for s in steps]
    for run, op, preempt in plan:
        if preempt:
            yield PREEMPT
        thread.last_op = op
        result = run(thread)
        if result is None:
            continue
        if isinstance(result, Wait):
            yield result
            while not result.ready():
                yield result
            result.acquired(thread)
        else:
            yield from result


__all__ = ["Step", "Steps", "Compiler", "run_steps"]
