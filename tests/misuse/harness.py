"""Run a deliberately broken kernel and check its diagnostic: the exception type, the exact
message and the user's source line (found by a marker comment in the test file)."""
import json
import os

import pytest

import layoutkit.dsl as lk

from ..dsl.source_lines import line_of

I32 = lk.Pointer[lk.i32]
F32 = lk.Pointer[lk.f32]
# the tails of the wgmma rules' texts (layoutkit.sync.wgmma_rules), static check and interpreter
COLLECTIVE = ("wgmma ops are warpgroup-collective (PTX .sync.aligned): all 128 threads of the "
              "warpgroup execute each one together, or the behaviour is undefined; issue it "
              "where whole warpgroups run (a warp role), not under an lk.if_ on the thread "
              "index or lk.sm90.elect_one()")
IN_FLIGHT = ("so it may still read its shared operands and write its accumulator when the "
             "threads exit")


def diagnose(fn, *args, error=lk.DSLError, num_warps=4, **options) -> lk.DSLError:
    """The `error` raised while tracing `fn` as a kernel with these launch arguments."""
    with pytest.raises(error) as info:
        lk.Kernel(fn, num_warps, **options).ptx(*args)
    return info.value


def check(err, path: str, marker: str, message: str) -> None:
    """`err` says exactly `message` and points at the line of `path` holding `marker`."""
    if message is None and os.environ.get("MISUSE_RECORD"):    # authoring aid: record the text
        with open(os.environ["MISUSE_RECORD"], "a") as f:
            f.write(json.dumps([os.environ.get("PYTEST_CURRENT_TEST"), err.message,
                                err.location.line if err.location else None]) + "\n")
    assert message is not None, f"\nACTUAL ({err.location}):\n{err.message}"
    assert err.message == message, f"\n{err.message}\n!=\n{message}"
    assert err.location is not None and err.location.file == path
    assert err.location.line == line_of(path, marker), (err.location, marker)
