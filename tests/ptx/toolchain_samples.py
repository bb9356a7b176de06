"""PTX texts and real ptxas 13.0 ``-v`` logs for the toolchain tests, plus shared fixtures.

The PTX here is written for these tests (the wgmma and setmaxnreg bodies follow
shared/ptx-snippets 07 and 09, condensed); CI has no shared/ directory, so nothing is read
from it at test time.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from layoutkit.ptx import cache as cubin_cache

HEADER = ".version 8.0\n.target sm_90a\n.address_size 64\n"

# out[0] += a, with line info: .loc lines 10..12 of a made-up Python file.
FADD = HEADER + """.file 1 "/home/user/my_kernel.py"
.visible .entry add_scalar(.param .u64 out, .param .f32 a)
{
  .reg .f32 %f<4>;
  .reg .b64 %rd<3>;
  .loc 1 10 4
  ld.param.u64 %rd0, [out];
  ld.param.f32 %f0, [a];
  cvta.to.global.u64 %rd1, %rd0;
  .loc 1 11 4
  ld.global.f32 %f1, [%rd1];
  add.f32 %f2, %f1, %f0;
  .loc 1 12 4
  st.global.f32 [%rd1], %f2;
  ret;
}
"""

# One warpgroup, one m64n64k16 bf16 wgmma from shared-memory descriptors; stores 32 f32
# accumulators per thread, so at least 32 registers are live at once.
WGMMA_ACCUMULATORS = 32
_ACC = ", ".join(f"%f{i}" for i in range(WGMMA_ACCUMULATORS))
WGMMA = HEADER + f""".extern .shared .align 1024 .b8 smem[];
.visible .entry wgmma_demo(.param .u64 out)
.reqntid 128, 1, 1
{{
  .reg .f32 %f<{WGMMA_ACCUMULATORS}>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<8>;
  ld.param.u64 %rd0, [out];
  cvta.to.global.u64 %rd5, %rd0;
  mov.u32 %r1, smem;
  shr.u32 %r3, %r1, 4;
  and.b32 %r3, %r3, 0x3FFF;
  cvt.u64.u32 %rd1, %r3;
  or.b64 %rd1, %rd1, 0x4000004000010000;
  add.s64 %rd2, %rd1, 512;
  wgmma.fence.sync.aligned;
  wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{{_ACC}}}, %rd1, %rd2, 0, 1, 1, 0, 0;
  wgmma.commit_group.sync.aligned;
  wgmma.wait_group.sync.aligned 0;
  mov.u32 %r0, %tid.x;
  mul.wide.u32 %rd6, %r0, {4 * WGMMA_ACCUMULATORS};
  add.s64 %rd7, %rd5, %rd6;
""" + "".join(f"  st.global.f32 [%rd7+{4 * i}], %f{i};\n" for i in range(WGMMA_ACCUMULATORS)) + """\
  ret;
}
"""

SETMAXNREG_BODY = """{
  .reg .b32 %r<4>;
  .reg .pred %p<2>;
  mov.u32 %r0, %tid.x;
  shr.u32 %r1, %r0, 7;
  setp.eq.u32 %p0, %r1, 0;
  @%p0 bra PRODUCER;
  setmaxnreg.inc.sync.aligned.u32 240;
  bra DONE;
PRODUCER:
  setmaxnreg.dec.sync.aligned.u32 24;
DONE:
  ret;
}
"""


def setmaxnreg_entry(name: str, cap: str) -> str:
    """An entry running setmaxnreg; ``cap`` is its performance directives (hopper-ptx §6)."""
    return f".visible .entry {name}()\n{cap}\n{SETMAXNREG_BODY}"


# No register cap at entry: ptxas prints C7508 and drops setmaxnreg.
SETMAXNREG_UNCAPPED = HEADER + setmaxnreg_entry("uncapped", ".maxntid 384, 1, 1")
SETMAXNREG_CAPPED = HEADER + setmaxnreg_entry("capped", ".maxnreg 168")

SPILL_CAP = 24
SPILL_VALUES = 48


def spilling_ptx(name: str = "spiller") -> str:
    """``SPILL_VALUES`` floats loaded (volatile) and all live at once under ``.maxnreg 24``."""
    n = SPILL_VALUES
    body = [f"  ld.global.volatile.f32 %f{i}, [%rd1+{4 * i}];" for i in range(n)]
    body.append(f"  mov.f32 %f{n}, 0f00000000;")
    body += [f"  fma.rn.f32 %f{n}, %f{i}, %f{j}, %f{n};"
             for i in range(n) for j in range(i + 1, min(n, i + 4))]
    body += [f"  st.global.volatile.f32 [%rd1+{4 * i}], %f{i};" for i in range(n)]
    body.append(f"  st.global.f32 [%rd1], %f{n};")
    return HEADER + (f".visible .entry {name}(.param .u64 p)\n.maxnreg {SPILL_CAP}\n{{\n"
                     f"  .reg .f32 %f<{n + 1}>;\n  .reg .b64 %rd<2>;\n"
                     "  ld.param.u64 %rd0, [p];\n  cvta.to.global.u64 %rd1, %rd0;\n"
                     + "\n".join(body) + "\n  ret;\n}\n")


# --- real ptxas 13.0.88 -v logs (captured from the PTX named in each comment) -----------

# shared/ptx-snippets/16_debug.ptx (printf, a barrier, 8 bytes of shared memory)
LOG_DEBUG = """\
ptxas info    : 25 bytes gmem
ptxas info    : Compiling entry function 'debug_demo' for 'sm_90a'
ptxas info    : Function properties for debug_demo
    8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 24 registers, used 1 barriers, 8 bytes cumulative stack size, 8 bytes smem
ptxas info    : Compile time = 3.745 ms
"""

# spilling_ptx() with ptxas -v -warn-spills
LOG_SPILL = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'spiller' for 'sm_90a'
ptxas info    : Function properties for spiller
    176 bytes stack frame, 168 bytes spill stores, 216 bytes spill loads
ptxas info    : Used 24 registers, used 0 barriers, 176 bytes cumulative stack size
ptxas info    : Compile time = 9.485 ms
ptxas warning : Registers are spilled to local memory in function 'spiller', 168 bytes spill stores, 216 bytes spill loads
"""

# two entries and a .func: the .func's properties come after the entry that calls it
LOG_ENTRIES_AND_FUNC = """\
ptxas info    : 16 bytes gmem
ptxas info    : Compiling entry function 'k2' for 'sm_90a'
ptxas info    : Function properties for k2
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 4 registers, used 0 barriers
ptxas info    : Compile time = 1.318 ms
ptxas info    : Compiling entry function 'k1' for 'sm_90a'
ptxas info    : Function properties for k1
    64 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers, 64 bytes cumulative stack size, 256 bytes smem
ptxas info    : Compile time = 1.525 ms
ptxas info    : Function properties for helper
    32 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
"""

# SETMAXNREG_CAPPED's entry, an uncapped one, and a second capped one: C7508 comes first
LOG_C7508_THREE_ENTRIES = """\
ptxas info    : (C7508) Potential Performance Loss: 'setmaxnreg' ignored; unable to determine register count at entry.
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'zzz_last' for 'sm_90a'
ptxas info    : Function properties for zzz_last
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 0 barriers
ptxas info    : Compile time = 3.382 ms
ptxas info    : Compiling entry function 'uncapped' for 'sm_90a'
ptxas info    : Function properties for uncapped
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 5 registers, used 0 barriers
ptxas info    : Compile time = 1.108 ms
ptxas info    : Compiling entry function 'aaa_first' for 'sm_90a'
ptxas info    : Function properties for aaa_first
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 0 barriers
ptxas info    : Compile time = 1.414 ms
"""
PTX_C7508_THREE_ENTRIES = HEADER + "".join((
    setmaxnreg_entry("aaa_first", ".maxnreg 168"),
    setmaxnreg_entry("uncapped", ".maxntid 384, 1, 1  // no .minnctapersm: no cap"),
    setmaxnreg_entry("zzz_last", ".maxntid 384, 1, 1\n.minnctapersm 1")))

# The format of ptxas before CUDA 12 for sm_80 and older: constant banks on the Used line.
LOG_OLD_CMEM = """\
ptxas info    : Compiling entry function '_Z6kernelPf' for 'sm_80'
ptxas info    : Function properties for _Z6kernelPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 35 registers, 2560 bytes smem, 356 bytes cmem[0], 12 bytes cmem[2]
"""


# --- fixtures ------------------------------------------------------------------------------

@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    """A fresh, empty cubin cache for one test (disk root under tmp_path, memory cleared)."""
    root = tmp_path / "lk-cache"
    monkeypatch.setenv("LAYOUTKIT_CACHE_DIR", str(root))
    cubin_cache.clear_memory()
    yield root / "cubin"
    cubin_cache.clear_memory()


def make_executable(path: Path, script: str = "exit 0") -> Path:
    """Write a POSIX shell script at ``path`` and make it executable."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + script + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def posix_only():
    return pytest.mark.skipif(os.name != "posix", reason="fake tools are POSIX shell scripts")
