"""function_fingerprint is computed once per function while what it read stays the same
(layoutkit.dsl.core.fingerprint): a second call walks nothing, and every change the walk would
see (the file's text, a global, a closure cell, the defaults, a module's or class's attribute)
gives the fingerprint a fresh walk gives."""
import importlib
import os
import sys
import textwrap

import pytest

from layoutkit.dsl.core import fingerprint
from layoutkit.dsl.core.fingerprint import function_fingerprint

SOURCE = textwrap.dedent('''
    import memo_helpers
    SCALE = 2

    class Tiles:
        ROWS = 64

    def helper(x):
        return x * SCALE

    def kernel_like(x, y=1):
        return helper(x) + y + Tiles.ROWS

    def reads_helpers():
        return memo_helpers.TILE

    def other_kernel(x):
        return helper(x) - 1

    def ping(n):
        return pong(n - 1) if n else 0

    def pong(n):
        return ping(n - 1) if n else 1

    LEVEL = 1

    def shared():
        return LEVEL

    def alpha():
        return shared()

    def beta():
        return shared() + 1

    def reads_both():
        return alpha() + beta()

    def reads_beta():
        return beta()

    def cycle_a(n):
        return cycle_b(n - 1) if n else 0

    def cycle_b(n):
        return cycle_a(n - 1) if n else 1

    def then_cycle():
        return cycle_b(2)

    def reads_a_then_cycle():
        return cycle_a(1) + then_cycle()

    def reads_then():
        return then_cycle()
''')


@pytest.fixture
def module(tmp_path, monkeypatch):
    """A module of the test's own, written to a file (its source is read from there)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "memo_subject.py"
    path.write_text(SOURCE)
    (tmp_path / "memo_helpers.py").write_text("TILE = 64\n")
    sys.modules.pop("memo_subject", None)
    sys.modules.pop("memo_helpers", None)
    importlib.invalidate_caches()
    found = importlib.import_module("memo_subject")
    yield found
    sys.modules.pop("memo_subject", None)
    sys.modules.pop("memo_helpers", None)


def walked(fn) -> str:
    """The fingerprint a fresh walk gives (no memo)."""
    return fingerprint.digest(fingerprint._Walker().function(fn))


@pytest.fixture
def walks(monkeypatch):
    """Counts the walks of top-level functions."""
    count = [0]
    original = fingerprint._Walker.function

    def counting(self, fn):
        if not self.visiting:
            count[0] += 1
        return original(self, fn)
    monkeypatch.setattr(fingerprint._Walker, "function", counting)
    return count


def test_a_second_call_walks_nothing(module, walks):
    first = function_fingerprint(module.kernel_like)
    assert walks[0] == 1
    assert function_fingerprint(module.kernel_like) == first == walked(module.kernel_like)
    assert walks[0] == 2        # the call above: memo; walked(): a walk


@pytest.mark.parametrize("change", ["global", "helper's global", "defaults", "class attribute",
                                    "new class attribute"])
def test_each_change_the_walk_sees_gives_a_fresh_walk(module, change):
    fn = module.kernel_like
    before = function_fingerprint(fn)
    if change == "global":
        module.helper = lambda x: x * 3
    elif change == "helper's global":
        module.SCALE = 3
    elif change == "defaults":
        fn.__defaults__ = (2,)
    elif change == "class attribute":
        module.Tiles.ROWS = 128
    else:
        module.Tiles.COLUMNS = 8
    after = function_fingerprint(fn)
    assert after != before and after == walked(fn)


def test_a_closure_cell_rebound_gives_a_fresh_walk():
    tile = 64

    def kernel_like():
        return tile

    before = function_fingerprint(kernel_like)
    tile = 128  # noqa: F841 - read through the closure
    assert function_fingerprint(kernel_like) != before
    assert function_fingerprint(kernel_like) == walked(kernel_like)


def test_the_file_edited_without_a_reload_gives_a_fresh_walk(module):
    fn = module.kernel_like
    before = function_fingerprint(fn)
    path = module.__file__
    stat = os.stat(path)
    with open(path, "w") as f:
        f.write(SOURCE.replace("+ y +", "- y +"))      # same length: only the text differs
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    after = function_fingerprint(fn)
    assert after != before and after == walked(fn)


def test_a_module_attribute_read_gives_a_fresh_walk(module):
    """memo_helpers is a module of the user's (a file outside the libraries): the values of the
    names read from it are part of the fingerprint."""
    fn = module.reads_helpers
    before = function_fingerprint(fn)
    module.memo_helpers.TILE = 128
    after = function_fingerprint(fn)
    assert after != before and after == walked(fn)


def test_a_helper_two_functions_read_is_walked_once(module, monkeypatch):
    walked_names = []
    original = fingerprint._Walker.function

    def recording(self, fn):
        kept = fingerprint._FUNCTIONS.get(fn)
        memo = kept is not None and fingerprint._still_read(kept[1])
        text = original(self, fn)
        if not memo and fn.__module__ == "memo_subject":
            walked_names.append(fn.__name__)
        return text
    monkeypatch.setattr(fingerprint._Walker, "function", recording)
    function_fingerprint(module.kernel_like)
    function_fingerprint(module.other_kernel)
    assert walked_names.count("helper") == 1 and "other_kernel" in walked_names
    module.SCALE = 5                               # read by the helper: both change
    assert function_fingerprint(module.other_kernel) == walked(module.other_kernel)
    assert walked_names.count("helper") == 2


def test_functions_in_a_cycle_are_written_as_a_fresh_walk_writes_them(module):
    """ping reads pong, which reads ping: pong's text inside ping's walk names ping by
    reference, so it is not kept for pong's own walk."""
    first = function_fingerprint(module.ping)
    assert function_fingerprint(module.pong) == walked(module.pong)
    assert function_fingerprint(module.ping) == first == walked(module.ping)
    assert module.pong not in fingerprint._FUNCTIONS


def test_a_helper_written_earlier_in_the_walk_counts_in_the_memo_of_its_next_reader(module):
    """reads_both walks alpha (and in it shared) before beta, whose walk then finds shared
    written already: beta's memo must still see shared's reads, so that LEVEL changing
    changes what reads beta."""
    function_fingerprint(module.reads_both)
    before = function_fingerprint(module.reads_beta)
    module.LEVEL = 2
    after = function_fingerprint(module.reads_beta)
    assert after != before and after == walked(module.reads_beta)


def test_a_text_written_inside_a_cycle_is_not_kept_for_its_next_reader(module):
    """reads_a_then_cycle walks cycle_a, in which cycle_b names cycle_a by reference; then
    then_cycle finds cycle_b written already: that text depends on the walk above it, so
    then_cycle's is not kept, and reads_then is written as a fresh walk writes it."""
    function_fingerprint(module.reads_a_then_cycle)
    assert module.then_cycle not in fingerprint._FUNCTIONS
    assert function_fingerprint(module.reads_then) == walked(module.reads_then)
