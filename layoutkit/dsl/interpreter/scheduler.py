"""The seeded adversarial scheduler: which thread runs next, and when asynchronous operations
(TMA copies, wgmma groups) complete.

Threads are coroutines that yield before every memory access and at every sync op. At each
step the scheduler picks, with a `random.Random(seed)`, either a runnable thread (uniformly) or,
with a per-run probability also drawn from the seed, a pending asynchronous operation to
complete. So one seed fixes one interleaving (the run is deterministic: same seed, same
`schedule`), and different seeds explore different ones: early and late completions of copies,
any order of threads between barriers. When no thread can run, a pending operation completes;
when none is pending either and threads remain, that is a deadlock (`DeadlockError`, listing who
waits on what).
"""
from __future__ import annotations

import random
from array import array

from .deadlock import deadlock_report
from .errors import DeadlockError, ExecutionError, InterpreterError
from .machine import PREEMPT, Thread

DEFAULT_MAX_STEPS = 20_000_000
# how eagerly pending asynchronous operations complete, one value drawn per run (per seed)
EAGERNESS = (0.01, 0.1, 0.5)


def _below(getrandbits, n: int) -> int:
    """A uniform random int in [0, n), n > 0: random.Random.randrange(n)'s draw (the same
    numbers from the same generator state), without its argument checks."""
    k = n.bit_length()
    r = getrandbits(k)
    while r >= n:
        r = getrandbits(k)
    return r


class AsyncOperation:
    """A pending asynchronous operation: `complete()` applies its effect (it may notify
    waiters); `describe()` names it for reports; `ready()` says whether it may complete now
    (an in-order queue completes its oldest first)."""

    def ready(self) -> bool:
        return True

    def complete(self) -> None:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


def add_context(exc: InterpreterError, thread: Thread) -> InterpreterError:
    """Prefix the error's message with the CTA and thread that raised it."""
    prefix = thread.describe()
    if not exc.message.startswith("CTA "):
        exc.message = f"{prefix}: {exc.message}"
        exc.args = (exc._text(),)
    return exc


class Scheduler:
    """See the module docstring. `schedule` records every decision (a thread's uid, or -1 - k
    for the k-th asynchronous completion) so two runs can be compared."""

    def __init__(self, seed: int, max_steps: int = DEFAULT_MAX_STEPS):
        self.rng = random.Random(seed)
        self.eagerness = self.rng.choice(EAGERNESS)
        self.runnable: list[Thread] = []
        self.pending: list[AsyncOperation] = []
        self.conditional = 0    # >= the pending operations whose ready() may be False (one
        #                         removed from `pending` elsewhere stays counted)
        self.schedule = array("q")
        self.max_steps = max_steps
        self.steps = 0
        self.completed = 0

    # ---- bookkeeping ----------------------------------------------------------------------
    def start(self, thread: Thread) -> None:
        self.runnable.append(thread)

    def wake(self, thread: Thread) -> None:
        if thread.waiting is not None:
            thread.waiting = None
            self.runnable.append(thread)

    def post(self, operation: AsyncOperation) -> None:
        """Register an asynchronous operation to complete at a later step of our choosing."""
        self.pending.append(operation)
        if type(operation).ready is not AsyncOperation.ready:
            self.conditional += 1

    # ---- running ----------------------------------------------------------------------------
    def run(self, threads: list[Thread]) -> None:
        """Run `threads` (already started) until all finish; DeadlockError when stuck."""
        rng, runnable, pending = self.rng, self.runnable, self.pending
        getrandbits, record = rng.getrandbits, self.schedule.append
        limit = self.max_steps
        while True:
            self.steps += 1
            if self.steps > limit:
                raise ExecutionError(f"the kernel ran more than {self.max_steps} scheduler steps "
                                     "(an endless loop, or a spin that never sees its flag?)",
                                     None)
            if not pending:
                ready = ()
            elif self.conditional:
                ready = [p for p in pending if p.ready()]
            else:
                ready = pending                 # every one is ready (AsyncOperation.ready)
            if ready and (not runnable or rng.random() < self.eagerness):
                operation = ready[_below(getrandbits, len(ready))]
                pending.remove(operation)
                if type(operation).ready is not AsyncOperation.ready:
                    self.conditional -= 1
                record(-1 - self.completed)
                self.completed += 1
                operation.complete()
                continue
            if not runnable:
                if all(t.done for t in threads):
                    return
                if self._recheck(threads):
                    continue
                raise DeadlockError(deadlock_report(threads, pending), None)
            n = len(runnable)                   # _below(getrandbits, n), inline
            k = n.bit_length()
            at = getrandbits(k)
            while at >= n:
                at = getrandbits(k)
            thread = runnable[at]
            record(thread.uid)
            try:                                # run it to its next preemption point or wait
                wait = thread.gen.send(None)
            except StopIteration:
                thread.done = True
                runnable[at] = runnable[-1]
                runnable.pop()
                thread.cta.machine.on_thread_exit(thread)
                continue
            except InterpreterError as exc:
                if getattr(exc, "at_reading_op", False) and thread.last_op is not None:
                    exc.relocate(thread.last_op.location)      # a value that refuses to be read
                raise add_context(exc, thread).with_traceback(None) from None
            if wait is PREEMPT or wait.ready():
                continue
            thread.waiting = wait               # it blocks: out of the runnable threads
            wait.queue.add(thread)
            runnable[at] = runnable[-1]
            runnable.pop()

    def _recheck(self, threads: list[Thread]) -> bool:
        """Wake blocked threads whose condition holds (a sync object that changed state
        without notifying); whether any was."""
        woken = False
        for thread in threads:
            if thread.waiting is not None and thread.waiting.ready():
                queue = thread.waiting.queue
                if thread in queue.threads:
                    queue.threads.remove(thread)
                self.wake(thread)
                woken = True
        return woken


__all__ = ["Scheduler", "AsyncOperation", "DEFAULT_MAX_STEPS", "add_context"]
