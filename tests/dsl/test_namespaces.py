"""The target-specific ops are spelled through their namespace (lk.sm80, lk.sm90); the common
language stays at lk. A moved name at lk is an AttributeError naming its new home."""
import pytest

import layoutkit as lk
import layoutkit.dsl as dsl


@pytest.mark.parametrize("space", [lk.sm80, lk.sm90])
@pytest.mark.parametrize("module", [lk, dsl], ids=["layoutkit", "layoutkit.dsl"])
def test_every_target_op_is_only_in_its_namespace(module, space):
    short = space.__name__.rsplit(".", 1)[1]
    for name in space.__all__:
        assert getattr(space, name) is not None
        assert name not in module.__all__
        with pytest.raises(AttributeError) as info:
            getattr(module, name)
        assert str(info.value) == (f"lk.{name} moved to lk.{short}.{name}: the ops of one target "
                                   "are spelled through its namespace (lk.sm80, lk.sm90)")


def test_the_message_names_the_new_home():
    with pytest.raises(AttributeError, match=r"^lk\.tma_load moved to lk\.sm90\.tma_load: "):
        lk.tma_load
    with pytest.raises(AttributeError, match=r"^lk\.cp_async moved to lk\.sm80\.cp_async: "):
        lk.cp_async
    assert not hasattr(lk, "wgmma")


def test_an_unknown_name_is_the_usual_attribute_error():
    with pytest.raises(AttributeError, match=r"^module 'layoutkit' has no attribute 'nothing'$"):
        lk.nothing
    with pytest.raises(AttributeError,
                       match=r"^module 'layoutkit.dsl' has no attribute 'nothing'$"):
        dsl.nothing


def test_thread_indices_are_common_language():
    """warp_id and lane_id are the same on every target: they stay at lk."""
    for name in ("thread_id", "warp_id", "lane_id", "block_id"):
        assert name in lk.__all__ and getattr(lk, name) is getattr(dsl, name)
    assert "warp_id" not in lk.sm90.__all__
