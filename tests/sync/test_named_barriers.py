"""Named barriers: id range, reserved id 0, counts in whole warps, clashes, role consistency."""
from __future__ import annotations

import pytest

from layoutkit.sync import NamedBarrier, NamedBarrierAllocator, NamedBarrierError, RoleSplit, WarpRole

FA3 = RoleSplit([WarpRole("producer", 1, 24), WarpRole("consumer", 2, 240)])


def test_fa3_barriers():
    ids = NamedBarrierAllocator(split=FA3)
    kv = ids.allocate("kv_ready", 288, roles=("producer", "consumer"))
    wg1 = ids.allocate("wg1_turn", 256, roles="consumer", id=3)
    wg2 = ids.allocate("wg2_turn", 256, roles="consumer", id=4)
    assert (kv.id, wg1.id, wg2.id) == (1, 3, 4)
    assert ids.allocate("epilogue", 256).id == 2  # the lowest free id
    assert [b.name for b in ids.barriers] == ["kv_ready", "epilogue", "wg1_turn", "wg2_turn"]
    assert ids.whole_cta == NamedBarrier(0, 384, "cta")


@pytest.mark.parametrize("kwargs, match", [
    ({"id": 0}, "named barrier 'x' id = 0: id 0 is reserved for whole-CTA syncs"),
    ({"id": 16}, "named barrier 'x' id = 16: must be in 0..15"),
    ({"threads": 48}, "named barrier 'x' threads = 48: must be a multiple of 32"),
    ({"threads": 0}, "named barrier 'x' threads = 0: must be a multiple of 32 in 32..1024"),
    ({"threads": 416}, "named barrier 'x' threads = 416: exceeds the block's 384 threads"),
    ({"threads": 160, "roles": "producer"},
     "named barrier 'x' threads = 160: exceeds the 128 threads of role.s. producer"),
])
def test_refusals_name_the_barrier_value_and_rule(kwargs, match):
    ids = NamedBarrierAllocator(split=FA3)
    threads = kwargs.pop("threads", 128)
    with pytest.raises(NamedBarrierError, match=match):
        ids.allocate("x", threads, **kwargs)


def test_clashes_are_refused():
    ids = NamedBarrierAllocator(block_threads=256)
    ids.allocate("a", 256, id=5)
    with pytest.raises(NamedBarrierError, match=r"named barrier 'b' id = 5: is already taken by "
                                                r"named barrier 5 \('a', 256 threads\)"):
        ids.allocate("b", 256, id=5)
    with pytest.raises(NamedBarrierError, match="named barrier name = 'a': is already named barrier 5"):
        ids.allocate("a", 128)


def test_ids_run_out_after_fifteen():
    ids = NamedBarrierAllocator(block_threads=128)
    assert [ids.allocate(f"b{i}", 128).id for i in range(15)] == list(range(1, 16))
    with pytest.raises(NamedBarrierError, match="all ids 1..15 are taken"):
        ids.allocate("one_more", 128)


def test_allocator_arguments():
    with pytest.raises(NamedBarrierError, match="block_threads = 100: must be a multiple of 32"):
        NamedBarrierAllocator(block_threads=100)
    with pytest.raises(NamedBarrierError, match="block_threads = 256: the role split has 384"):
        NamedBarrierAllocator(block_threads=256, split=FA3)
    with pytest.raises(NamedBarrierError, match="roles= needs an allocator made with split="):
        NamedBarrierAllocator(block_threads=256).allocate("x", 128, roles="consumer")
    with pytest.raises(NamedBarrierError, match="whole-CTA barrier needs the block size"):
        NamedBarrierAllocator().whole_cta
