"""The static protocol check of every traced kernel (run by `lk.kernel` right after the IR
verifier, before lowering; always on): the kernel's own IR becomes layoutkit.sync's
KernelProtocol (protocol_extract) and layoutkit.sync.kernel_check decides it.

Errors raise one `ProtocolError` listing every finding, located at the first one's source line;
what the analysis could not decide is a `ProtocolWarning` saying what it assumed. In a debug
build (`@lk.kernel(debug=True)`, bounded waits) the errors are a ProtocolWarning instead, so
that a suspect kernel can still be run and its hang shown by the hardware as a
BarrierTimeoutError. Kernels
without barrier, TMA, wgmma, cp.async or proxy-fence ops are not walked at all. See docs/sync.md
for how to read each diagnostic.
"""
from __future__ import annotations

import contextlib
import contextvars
import warnings

from layoutkit.sync import ProtocolViolation
from layoutkit.sync.kernel_check import check_kernel

from ..core import collector
from ..core.errors import DSLError
from .coverage import unfollowed
from .extract import TooLong, extract, has_sync


_SKIPPED: contextvars.ContextVar[bool] = contextvars.ContextVar("layoutkit_protocol_skip",
                                                                default=False)


class ProtocolError(DSLError, ProtocolViolation):
    """The kernel's synchronization would hang, race or corrupt data (the static protocol
    check's errors); `findings` holds each layoutkit.sync Finding, `ir` the verified IR (a CPU
    interpreter may still run it to show the failure)."""

    def __init__(self, message: str, location, findings=(), ir=None):
        self.message, self.location, self.findings = message, location, tuple(findings)
        self.ir = ir
        self.rule, self.thing, self.value = message, "barrier protocol", None
        Exception.__init__(self, self._text())


class ProtocolWarning(UserWarning):
    """Something the static protocol check could not prove (it says what it assumed)."""


def _header(kernel: str, assumed: str, errors: int) -> str:
    ran = f" (runtime loops checked with {assumed})" if assumed else ""
    return (f"kernel {kernel}: the static protocol check found {errors} "
            f"error{'s' if errors != 1 else ''}{ran}:")


@contextlib.contextmanager
def protocol_check_skipped():
    """Kernels traced inside the `with` are not checked (for tests of single ops that are not
    whole protocols); such a specialization is checked when it is next used outside one."""
    token = _SKIPPED.set(True)
    try:
        yield
    finally:
        _SKIPPED.reset(token)


def check_kernel_protocol(fn):
    """Check the verified IR `fn`; return it unchanged, raise ProtocolError, or warn."""
    if _SKIPPED.get() or not has_sync(fn):
        fn.protocol_checked = not _SKIPPED.get()
        return fn
    with collector.paused():     # its acyclic events are freed by refcounting
        try:
            protocol = extract(fn)
        except TooLong as exc:
            warnings.warn(ProtocolWarning(f"kernel {fn.name}: the static protocol check could "
                                          f"not decide: {exc}"), stacklevel=2)
            return fn
        protocol.unfollowed = unfollowed(fn, protocol)
        findings = check_kernel(protocol)
        # the lookup closes over the protocol: without this cycle the protocol's events go
        # with it here, not in a collection during the next kernel's trace or lowering
        protocol.unfollowed = None
        kernel, assumed = protocol.kernel, protocol.assumed
        del protocol
    for finding in findings:
        if not finding.error:
            location = finding.site.location
            warnings.warn_explicit(
                ProtocolWarning(f"kernel {kernel}: the static protocol check could not "
                                f"decide: {finding.message}"),
                ProtocolWarning, location.file if location else "<kernel>",
                location.line if location else 0)
    errors = [f for f in findings if f.error]
    if errors:
        body = "\n".join(f"  - {f.text()}" for f in errors)
        error = ProtocolError(f"{_header(kernel, assumed, len(errors))}\n{body}",
                              errors[0].site.location, errors, fn)
        if not getattr(fn, "debug", False):
            raise error
        warnings.warn(ProtocolWarning(f"debug build, run anyway: {error}"), stacklevel=2)
    fn.protocol_checked = True
    return fn


__all__ = ["ProtocolError", "ProtocolWarning", "check_kernel_protocol", "protocol_check_skipped"]
