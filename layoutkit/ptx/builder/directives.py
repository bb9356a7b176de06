"""Kernel performance and cluster directives (`.maxntid`, `.reqntid`, `.minnctapersm`, `.maxnreg`,
`.reqnctapercluster`, `.explicitcluster`, `.maxclusterrank`), validated and rendered in a fixed order.

Rules (hopper-ptx.md §1, measured with ptxas 13.0): `.maxntid` and `.reqntid` exclude each
other; `.minnctapersm` is ignored by ptxas without one of them (so we refuse it); `.maxnreg`
below 24 is silently raised to 24 and above 255 is ignored (so we refuse both);
`.maxclusterrank` excludes `.reqnctapercluster`; a CTA has at most 1024 threads and a cluster
at most 16 CTAs (8 portable).
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import PTXDirectiveError

MAX_THREADS_PER_CTA = 1024
MAX_CTAS_PER_CLUSTER = 16
MAXNREG_RANGE = (24, 255)

Dims = "int | tuple[int, ...]"


def _dims(name: str, value) -> tuple[int, int, int] | None:
    if value is None:
        return None
    dims = (value,) if isinstance(value, int) else tuple(value)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1
                                          for d in dims):
        raise PTXDirectiveError("takes 1 to 3 positive integers (x, y, z)", operand=name, value=value)
    return dims + (1,) * (3 - len(dims))


def _product(dims: tuple[int, int, int]) -> int:
    return dims[0] * dims[1] * dims[2]


@dataclass(frozen=True)
class Directives:
    """The validated directives of one kernel; `lines()` renders them between params and body."""

    maxntid: tuple[int, int, int] | None = None
    reqntid: tuple[int, int, int] | None = None
    minnctapersm: int | None = None
    maxnreg: int | None = None
    reqnctapercluster: tuple[int, int, int] | None = None
    explicitcluster: bool = False
    maxclusterrank: int | None = None

    @classmethod
    def build(cls, *, maxntid=None, reqntid=None, minnctapersm=None, maxnreg=None,
              reqnctapercluster=None, explicitcluster=False, maxclusterrank=None) -> "Directives":
        maxntid, reqntid = _dims(".maxntid", maxntid), _dims(".reqntid", reqntid)
        cluster = _dims(".reqnctapercluster", reqnctapercluster)
        if maxntid and reqntid:
            raise PTXDirectiveError(".maxntid and .reqntid cannot both be given (PTX: mutually "
                                    "exclusive); .reqntid fixes the block size exactly",
                                    operand=".reqntid", value=reqntid)
        for name, dims in ((".maxntid", maxntid), (".reqntid", reqntid)):
            if dims and _product(dims) > MAX_THREADS_PER_CTA:
                raise PTXDirectiveError(f"a CTA has at most {MAX_THREADS_PER_CTA} threads",
                                        operand=name, value=dims)
        if minnctapersm is not None:
            if not isinstance(minnctapersm, int) or minnctapersm < 1:
                raise PTXDirectiveError("must be a positive integer", operand=".minnctapersm",
                                        value=minnctapersm)
            if not (maxntid or reqntid):
                raise PTXDirectiveError("ptxas ignores .minnctapersm unless .maxntid or .reqntid "
                                        "is given", operand=".minnctapersm", value=minnctapersm)
        if maxnreg is not None and not (isinstance(maxnreg, int)
                                        and MAXNREG_RANGE[0] <= maxnreg <= MAXNREG_RANGE[1]):
            raise PTXDirectiveError(f"must be in {MAXNREG_RANGE[0]}..{MAXNREG_RANGE[1]} (ptxas "
                                    "silently adjusts or ignores other values)",
                                    operand=".maxnreg", value=maxnreg)
        if cluster and _product(cluster) > MAX_CTAS_PER_CLUSTER:
            raise PTXDirectiveError(f"a cluster has at most {MAX_CTAS_PER_CLUSTER} CTAs "
                                    "(8 portable)", operand=".reqnctapercluster", value=cluster)
        if maxclusterrank is not None:
            if not isinstance(maxclusterrank, int) or not 1 <= maxclusterrank <= MAX_CTAS_PER_CLUSTER:
                raise PTXDirectiveError(f"must be in 1..{MAX_CTAS_PER_CLUSTER}",
                                        operand=".maxclusterrank", value=maxclusterrank)
            if cluster:
                raise PTXDirectiveError(".maxclusterrank cannot be combined with "
                                        ".reqnctapercluster (PTX)", operand=".maxclusterrank",
                                        value=maxclusterrank)
        return cls(maxntid, reqntid, minnctapersm, maxnreg, cluster, bool(explicitcluster),
                   maxclusterrank)

    @property
    def uses_cluster(self) -> bool:
        return bool(self.reqnctapercluster or self.explicitcluster or self.maxclusterrank)

    def lines(self) -> list[str]:
        out = []
        for name in ("maxntid", "reqntid"):
            dims = getattr(self, name)
            if dims:
                out.append(f".{name} {dims[0]}, {dims[1]}, {dims[2]}")
        if self.minnctapersm is not None:
            out.append(f".minnctapersm {self.minnctapersm}")
        if self.maxnreg is not None:
            out.append(f".maxnreg {self.maxnreg}")
        if self.reqnctapercluster:
            x, y, z = self.reqnctapercluster
            out.append(f".reqnctapercluster {x}, {y}, {z}")
        if self.explicitcluster:
            out.append(".explicitcluster")
        if self.maxclusterrank is not None:
            out.append(f".maxclusterrank {self.maxclusterrank}")
        return out
