"""Role split lowering (one uniform branch per role, setmaxnreg on top), the entry cap ptxas
derives, and the named/CTA/cluster barrier, fence and elect helpers."""
from __future__ import annotations

import warnings

import pytest

from layoutkit import sync as S
from layoutkit.ptx import Module, SetmaxnregIgnoredWarning
from layoutkit.ptx.isa import sm90 as I
from tests.ptx.ptxas_helper import assemble, requires_ptxas

FA3 = S.RoleSplit([S.WarpRole("producer", 1, 24), S.WarpRole("consumer", 2, 240)])

SPLIT_BODY = """\
    mov.u32 %u0, %tid.x;
    shr.u32 %u1, %u0, 5;
    shfl.sync.idx.b32 %u2, %u1, 0, 31, 0xFFFFFFFF;
    shr.u32 %u3, %u2, 2;
    setp.ge.u32 %p0, %u3, 1;
    @%p0 bra.uni $role_consumer_1;
$role_producer_0:
    setmaxnreg.dec.sync.aligned.u32 24;
    bar.arrive 1, 384;
    bra.uni $roles_end_2;
$role_consumer_1:
    setmaxnreg.inc.sync.aligned.u32 240;
    sub.u32 %u4, %u3, 1;
    bar.sync 1, 384;
$roles_end_2:
    ret;"""


def fa3_kernel(module: Module):
    k = module.kernel("roles", **FA3.directives())
    ready = S.NamedBarrierAllocator(split=FA3).allocate("ready", 384)
    seen = []

    def producer(k, ctx):
        seen.append((ctx.role.name, ctx.first_warpgroup))
        S.named_arrive(k, ready)

    def consumer(k, ctx):
        seen.append((ctx.role.name, ctx.first_warpgroup))
        ctx.warpgroup_in_role(k)
        S.named_sync(k, ready)

    S.emit_role_split(k, FA3, {"consumer": consumer, "producer": producer})
    I.ret(k)
    return k, seen


@requires_ptxas
def test_role_split_golden_and_setmaxnreg_is_honoured():
    m = Module(line_info=False)
    k, seen = fa3_kernel(m)
    assert seen == [("producer", 0), ("consumer", 1)]
    assert "\n".join(k.body_lines()) == SPLIT_BODY
    with warnings.catch_warnings():
        warnings.simplefilter("error", SetmaxnregIgnoredWarning)
        cubin = assemble(m.text())
    usage = cubin.resources["roles"]
    assert not usage.setmaxnreg_ignored and "C7508" not in cubin.ptxas_log
    assert usage.registers == FA3.entry_registers == 168


@requires_ptxas
@pytest.mark.parametrize("warpgroups, ctas", [(1, 1), (2, 1), (2, 2), (3, 2), (4, 1), (5, 1),
                                              (6, 2), (8, 1), (8, 2)])
def test_entry_cap_is_what_ptxas_derives(warpgroups, ctas):
    split = S.RoleSplit([S.WarpRole("low", 1, 24), S.WarpRole("rest", warpgroups - 1)]
                        if warpgroups > 1 else [S.WarpRole("low", 1, 24)], ctas_per_sm=ctas)
    m = Module(line_info=False)
    k = m.kernel("cap", **split.directives())
    S.emit_role_split(k, split, {r.name: (lambda k, ctx: None) for r in split.roles})
    I.ret(k)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SetmaxnregIgnoredWarning)
        usage = assemble(m.text()).resources["cap"]
    assert usage.registers == split.entry_registers


def dispatched_role(lines: list[str], warpgroup: int) -> str:
    """Follow the emitted dispatch for a warpgroup index: setp.ge + @p bra.uni pairs, then the
    fall-through into the first placed role label."""
    i = next(n for n, line in enumerate(lines) if line.strip().startswith(("setp.", "$role_")))
    while True:
        line = lines[i].strip()
        if line.startswith("$role_"):
            return line[len("$role_"):line.rindex("_")]
        cmp, threshold = line.split()[0], int(line.rstrip(";").split(", ")[-1])
        assert cmp == "setp.ge.u32", line
        target = lines[i + 1].strip()
        assert target.startswith("@%p") and " bra.uni $role_" in target, target
        if warpgroup >= threshold:
            name = target.split("$role_")[1].rstrip(";")
            return name[:name.rindex("_")]
        i += 2


@pytest.mark.parametrize("layout", [[("producer", 1), ("consumer", 2)],
                                    [("load", 1), ("mma", 2), ("epilogue", 1)],
                                    [("a", 2), ("b", 1), ("c", 3), ("d", 1)],
                                    [("only", 4)]])
def test_every_warpgroup_reaches_its_own_role(layout):
    split = S.RoleSplit([S.WarpRole(name, n) for name, n in layout])
    k = Module(line_info=False).kernel("k", **split.directives())
    S.emit_role_split(k, split, {name: (lambda k, ctx: None) for name, _ in layout})
    lines = k.body_lines()
    assert sum(" bra.uni $role_" in line for line in lines) == len(layout) - 1
    for wg in range(split.threads // 128):
        assert dispatched_role(lines, wg) == split.role_of_thread(128 * wg).name, f"warpgroup {wg}"


def test_directives_must_match_the_split():
    m = Module()
    for name, directives in (("none", {}), ("ntid_only", {"maxntid": 384}),
                             ("wrong_size", {"maxntid": 256, "minnctapersm": 1}),
                             ("wrong_cap", {"maxnreg": 128})):
        k = m.kernel(name, **directives)
        with pytest.raises(S.RoleBudgetError, match=rf"kernel '{name}' directives = .*the split "
                                                    r"needs 384 threads at 1 CTA\(s\)/SM, entry "
                                                    r"cap 168"):
            S.emit_role_split(k, FA3, {"producer": None, "consumer": None})
    S.check_directives(m.kernel("capped", maxnreg=168), FA3)  # an explicit equal cap is fine


def test_bodies_must_cover_the_roles():
    k = Module().kernel("k", **FA3.directives())
    with pytest.raises(S.RoleBudgetError, match=r"missing \['consumer'\]; unknown \['consumers'\]"):
        S.emit_role_split(k, FA3, {"producer": None, "consumers": None})


def test_role_at_the_cap_gets_no_setmaxnreg():
    split = S.RoleSplit([S.WarpRole("a", 1, 168), S.WarpRole("b", 2, 160)])
    k = Module(line_info=False).kernel("k", **split.directives())
    S.emit_role_split(k, split, {"a": lambda k, c: None, "b": lambda k, c: None})
    setmaxnregs = [line.strip() for line in k.body_lines() if "setmaxnreg" in line]
    assert setmaxnregs == ["setmaxnreg.dec.sync.aligned.u32 160;"]


@requires_ptxas
def test_barrier_and_fence_helpers():
    m = Module(line_info=False)
    k = m.kernel("helpers", maxntid=256, reqnctapercluster=2)
    ids = S.NamedBarrierAllocator(block_threads=256)
    pair = ids.allocate("pair", 64)
    S.cta_sync(k)
    S.named_sync(k, pair)
    S.named_arrive(k, pair)
    S.emit_fence_proxy_async(k)
    S.emit_cluster_sync(k)
    S.cluster_arrive(k, relaxed=True)
    S.cluster_wait(k)
    leader = S.emit_elect_one(k)
    I.ret(k, pred=leader)
    I.ret(k)
    assert k.body_lines() == [
        "    bar.sync 0;",
        "    bar.sync 1, 64;",
        "    bar.arrive 1, 64;",
        "    fence.proxy.async.shared::cta;",
        "    barrier.cluster.arrive.release.aligned;",
        "    barrier.cluster.wait.acquire.aligned;",
        "    barrier.cluster.arrive.relaxed.aligned;",
        "    barrier.cluster.wait.acquire.aligned;",
        "    elect.sync _|%p0, 0xFFFFFFFF;",
        "    @%p0 ret;",
        "    ret;"]
    assemble(m.text())
    with pytest.raises(S.NamedBarrierError, match="named_sync = 3: takes a NamedBarrier"):
        S.named_sync(k, 3)
