"""Which shared-memory accesses of a kernel the protocol extraction did not follow.

An op touches a shared buffer when its attrs name it (`buffer`, or an operand spec such as a
wgmma's `a`/`b` holding one). The extraction turns each access it follows into events at the
op's source line; an op touching a buffer with no event of that buffer at its line was not
followed - its offset was computed from memory, or no thread entered its branch with the
values checked (layoutkit/dsl/check/extract.py) - so what it writes is not known. The answer is
computed on first use: the check asks only when a read sees no write.
"""
from __future__ import annotations

from layoutkit.sync import kernel_model as km

from .extract import walk_ops


def buffers(op) -> set:
    """The shared buffers `op`'s attrs name."""
    out = set()
    for key, value in op.attrs.items():
        if key == "buffer" and isinstance(value, str):
            out.add(value)
        elif isinstance(value, dict) and isinstance(value.get("buffer"), str):
            out.add(value["buffer"])
    return out


def _event_buffer(e):
    if isinstance(e, (km.SharedRead, km.SharedWrite, km.AsyncWrite)):
        return e.bytes.buffer
    if isinstance(e, km.Copy) and e.dst is not None:
        return e.dst.buffer
    return None


def unfollowed(fn, protocol: km.KernelProtocol):
    """A function: buffer -> the Site of an op of `fn` touching that buffer that `protocol`
    has no event of (module docstring), or None."""
    found: dict = {}

    def build() -> None:
        followed: dict = {}
        for c in protocol.classes:
            for e in c.events:
                buffer = _event_buffer(e)
                if buffer is not None:
                    followed.setdefault(buffer, set()).add(e.site.location)
        for op in walk_ops(fn.body):
            for buffer in buffers(op):
                if op.location not in followed.get(buffer, ()):
                    found.setdefault(buffer, km.Site(op.location))
        found[None] = None

    def lookup(buffer: str):
        if None not in found:
            build()
        return found.get(buffer)
    return lookup


__all__ = ["buffers", "unfollowed"]
