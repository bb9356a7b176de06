"""The Hopper (sm_90/sm_90a) instruction namespace: everything in sm80 plus the sm_90 forms.

Hopper families (mbarrier, TMA, wgmma, setmaxnreg, named barriers, elect, cluster) are
separate modules of this package that build on `layoutkit.ptx.builder` and `isa.checks`;
each is re-exported here by adding its import and names below.
"""
from __future__ import annotations

from .sm80 import *  # noqa: F401,F403  (the newer namespace re-exports the older)
from .sm80 import __all__ as _sm80_all
from .matrix import stmatrix
from .memory import cvta_param

__all__ = [*_sm80_all, "cvta_param", "stmatrix"]
