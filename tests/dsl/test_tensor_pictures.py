"""DSL tensors and TV layouts draw themselves in a notebook (`_repr_svg_`), through
layoutkit.algebra's renderer; where nothing can be drawn (symbolic extents) they give None so a
notebook falls back to the text."""
import layoutkit as lk
from layoutkit.algebra import ComposedLayout, Layout, Swizzle

TV = lk.TVLayout((8, 16), Layout((32, 4), (4, 1)))
SEEN = {}


@lk.kernel(num_warps=1)
def pictures(x: lk.Pointer[lk.bf16], n: lk.i32):
    s = lk.shared_tensor(ComposedLayout(Swizzle(3, 3, 3), 0, Layout((8, 64), (64, 1))), lk.bf16)
    g = lk.global_tensor(x, Layout((8, 16), (16, 1)))
    ragged = lk.global_tensor(x, Layout(n))
    values = lk.load(g.tile((8, 16), (0, 0)).partition(TV))
    SEEN.update(shared=s._repr_svg_(), part=s.tile((8, 16), (0, 0)).partition(TV)._repr_svg_(),
                glob=g._repr_svg_(), ragged=ragged._repr_svg_(), regs=values._repr_svg_())


def test_every_kind_of_tensor_draws_itself():
    pictures.ir(lk.Pointer[lk.bf16], 100)
    for key in ("shared", "part", "glob", "regs"):
        assert SEEN[key].startswith("<svg"), key
    assert "SharedTensor(bf16, Sw&lt;3,3,3&gt;" in SEEN["shared"]   # titled by its repr
    assert "16-byte chunk" in SEEN["shared"]                     # coloured by bank group
    assert SEEN["ragged"] is None                                  # symbolic: text instead
    assert TV._repr_svg_().startswith("<svg")
