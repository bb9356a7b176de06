"""isa.setmaxnreg: golden text, the C7508 rule (register cap at entry) checked in ptxas's report,
and every refusal."""
from __future__ import annotations

import warnings

import pytest

from layoutkit.ptx import SetmaxnregIgnoredWarning
from layoutkit.ptx.builder import Module, PTXBuildError, PTXRangeError, PTXTargetError, PTXTypeError
from layoutkit.ptx.isa import compare, control, special
from layoutkit.ptx.isa.setmaxnreg import has_register_cap, setmaxnreg
from tests.ptx.ptxas_helper import assemble, requires_ptxas


def warp_specialized(**directives):
    """Producer warpgroup 0 drops to 24 registers, the consumers rise to 240 (hopper-ptx.md §6)."""
    m = Module(line_info=False)
    k = m.kernel("ws", **directives)
    tid = special.sreg(k, "tid.x")
    producer = compare.setp(k, "lt", tid, 128)
    consumer_path = k.label("consumer")
    done = k.label("done")
    control.bra(k, consumer_path, pred=~producer)
    setmaxnreg(k, "dec", 24)
    control.bra(k, done, uni=True)
    k.place(consumer_path)
    setmaxnreg(k, "inc", 240)
    k.place(done)
    control.ret(k)
    return m, k


def test_golden():
    m, k = warp_specialized(maxntid=384, minnctapersm=1)
    lines = k.body_lines()
    assert "    setmaxnreg.dec.sync.aligned.u32 24;" in lines
    assert "    setmaxnreg.inc.sync.aligned.u32 240;" in lines
    assert m.version == (8, 0)


@requires_ptxas
def test_capped_entry_keeps_setmaxnreg():
    m, k = warp_specialized(maxntid=384, minnctapersm=1)
    assert has_register_cap(k)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SetmaxnregIgnoredWarning)
        cubin = assemble(m.text())
    assert "C7508" not in cubin.ptxas_log
    assert not cubin.resources["ws"].setmaxnreg_ignored


@requires_ptxas
def test_uncapped_entry_reports_c7508():
    m, k = warp_specialized(maxntid=384)      # .maxntid alone is not a cap
    assert not has_register_cap(k)
    with pytest.warns(SetmaxnregIgnoredWarning, match="C7508"):
        cubin = assemble(m.text())
    assert "(C7508)" in cubin.ptxas_log
    assert cubin.resources["ws"].setmaxnreg_ignored


@requires_ptxas
def test_every_count_assembles():
    m = Module(line_info=False)
    k = m.kernel("k", maxnreg=168)
    for count in range(24, 257, 8):
        setmaxnreg(k, "inc" if count >= 168 else "dec", count)
    assemble(m.text())


def test_register_cap_rules():
    m = Module(line_info=False)
    assert has_register_cap(m.kernel("a", maxnreg=168))
    assert has_register_cap(m.kernel("b", reqntid=256, minnctapersm=1))
    assert not has_register_cap(m.kernel("c", reqntid=256))
    assert not has_register_cap(m.kernel("d"))


@pytest.mark.parametrize("count, error, message", [
    (20, PTXRangeError, r"setmaxnreg.dec.sync.aligned.u32: operand count = 20: must be in 24..256 "
                        r"\(registers per thread, in steps of 8\)"),
    (264, PTXRangeError, "operand count = 264: must be in 24..256"),
    (100, PTXRangeError, "operand count = 100: must be a multiple of 8"),
    (24.0, PTXTypeError, "operand count = 24.0: must be an integer constant"),
    (True, PTXTypeError, "operand count = True: must be an integer constant"),
])
def test_refusals(count, error, message):
    k = Module().kernel("k", maxnreg=168)
    with pytest.raises(error, match=message) as info:
        setmaxnreg(k, "dec", count)
    assert "test_isa_setmaxnreg.py" in str(info.value)


def test_register_operand_and_bad_action_are_refused():
    k = Module().kernel("k", maxnreg=168)
    with pytest.raises(PTXTypeError, match="operand count = %u0 .*must be an integer constant"):
        setmaxnreg(k, "inc", k.reg("u32"))
    with pytest.raises(PTXBuildError, match="setmaxnreg: operand action = 'set': must be one of 'inc', 'dec'"):
        setmaxnreg(k, "set", 32)


def test_needs_sm90a():
    k = Module(target="sm_90").kernel("k", maxnreg=168)
    with pytest.raises(PTXTargetError, match="setmaxnreg.inc.sync.aligned.u32: exists only on sm_90a"):
        setmaxnreg(k, "inc", 240)
