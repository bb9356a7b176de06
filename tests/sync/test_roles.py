"""Warp roles and register budgets: warpgroup assignment, entry cap, inc/dec, and the errors."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layoutkit.sync import REGISTERS_PER_SM, RoleBudgetError, RoleSplit, WarpRole, entry_register_cap


def test_fa3_two_consumer_split():
    split = RoleSplit([WarpRole("producer", 1, 24), WarpRole("consumer", 2, 240)])
    assert split.threads == 384 and split.entry_registers == 168
    assert split.total_registers == 128 * 24 + 256 * 240 == 64512 <= split.pool_registers
    assert split.warpgroup_range("consumer") == range(1, 3)
    assert split.thread_range("consumer") == range(128, 384)
    assert [split.direction(r.name) for r in split.roles] == ["dec", "inc"]
    assert split.directives() == {"maxntid": 384, "minnctapersm": 1}
    assert split.role_of_thread(127).name == "producer" and split.role_of_thread(128).name == "consumer"


def test_fa3_three_consumer_split_fills_the_pool_exactly():
    split = RoleSplit([WarpRole("producer", 1, 32), WarpRole("consumer", 3, 160)])
    assert split.entry_registers == 128
    assert split.total_registers == split.pool_registers == REGISTERS_PER_SM


def test_a_role_at_the_entry_cap_or_without_budget_emits_no_setmaxnreg():
    split = RoleSplit([WarpRole("a", 1, 168), WarpRole("b", 1), WarpRole("c", 1, 160)])
    assert split.entry_registers == 168
    assert [split.direction(n) for n in "abc"] == [None, None, "dec"]


@pytest.mark.parametrize("registers", [16, 20, 25, 257, 264, 100])
def test_budget_must_be_a_setmaxnreg_immediate(registers):
    with pytest.raises(RoleBudgetError) as info:
        WarpRole("consumer", 2, registers)
    message = str(info.value)
    assert f"role 'consumer' registers = {registers}" in message
    assert "multiple of 8 in 24..256" in message


def test_over_budget_names_every_role_and_the_pool():
    with pytest.raises(RoleBudgetError) as info:
        RoleSplit([WarpRole("producer", 1, 40), WarpRole("consumer", 2, 240)])
    message = str(info.value)
    assert "128*40 (producer) + 256*240 (consumer) = 66560" in message
    assert "pool of 64512" in message and "384 threads x 168" in message
    assert "setmaxnreg.inc would block forever" in message


def test_two_ctas_per_sm_halve_the_pool():
    split = RoleSplit([WarpRole("p", 1, 24), WarpRole("c", 1, 128)], ctas_per_sm=2)
    assert split.entry_registers == 128 and split.pool_registers == 256 * 128
    with pytest.raises(RoleBudgetError, match="pool of 30720 .640 threads x 48 at entry, 65536 per "
                                              "SM / 2 CTA"):
        RoleSplit([WarpRole("p", 1, 24), WarpRole("c", 4, 56)], ctas_per_sm=2)


@pytest.mark.parametrize("roles, match", [
    ([], "non-empty sequence of WarpRole"),
    ([WarpRole("a", 1), WarpRole("a", 1)], "role name = 'a': each role needs its own name"),
    ([WarpRole("a", 5), WarpRole("b", 4)], "block threads of a\\+b = 1152: a CTA has at most 1024"),
])
def test_bad_splits(roles, match):
    with pytest.raises(RoleBudgetError, match=match):
        RoleSplit(roles)


def test_bad_role_fields():
    with pytest.raises(RoleBudgetError, match="role 'p' warpgroups = 0: must be a positive"):
        WarpRole("p", 0, 24)
    with pytest.raises(RoleBudgetError, match="WarpRole.name = 'two words'"):
        WarpRole("two words", 1)
    with pytest.raises(RoleBudgetError, match="role = 'x': no such role; roles: p"):
        RoleSplit([WarpRole("p", 1)]).role("x")
    with pytest.raises(RoleBudgetError, match=r"tid.x = 128: must be in 0..127"):
        RoleSplit([WarpRole("p", 1)]).role_of_thread(128)


@settings(max_examples=100, deadline=None)
@given(budgets=st.lists(st.tuples(st.integers(1, 3), st.sampled_from(range(24, 257, 8))),
                        min_size=1, max_size=4),
       ctas=st.integers(1, 2))
def test_split_accepts_exactly_the_budgets_that_fit(budgets, ctas):
    roles = [WarpRole(f"r{i}", wgs, regs) for i, (wgs, regs) in enumerate(budgets)]
    threads = 128 * sum(w for w, _ in budgets)
    if threads > 1024:
        with pytest.raises(RoleBudgetError):
            RoleSplit(roles, ctas_per_sm=ctas)
        return
    cap = entry_register_cap(threads, ctas)
    pool = -(-cap // 8) * 8 * threads
    need = sum(128 * w * r for w, r in budgets)
    if need > pool:
        with pytest.raises(RoleBudgetError, match="exceed the CTA's pool"):
            RoleSplit(roles, ctas_per_sm=ctas)
        return
    split = RoleSplit(roles, ctas_per_sm=ctas)
    assert pool * ctas <= REGISTERS_PER_SM + 256 * ctas  # within the register file (cap 255 rounds up)
    covered = [split.role_of_thread(t).name for t in range(0, threads, 32)]
    assert covered == [r.name for r in roles for _ in range(4 * r.warpgroups)]
    for role in roles:
        d = split.direction(role.name)
        assert d == (None if role.registers == cap else "dec" if role.registers < cap else "inc")
