"""The ptxas -v parser on recorded logs and on fresh ptxas runs; spill and C7508 warnings."""
from __future__ import annotations

import re
import warnings

import pytest

from layoutkit.ptx import (PtxasReportError, RegisterSpillWarning, ResourceUsage,
                           SetmaxnregIgnoredWarning, assemble, parse_ptxas_report)

from .toolchain_samples import (FADD, HEADER, LOG_C7508_THREE_ENTRIES, LOG_DEBUG,
                                LOG_ENTRIES_AND_FUNC, LOG_OLD_CMEM, LOG_SPILL,
                                PTX_C7508_THREE_ENTRIES, SETMAXNREG_CAPPED, SETMAXNREG_UNCAPPED,
                                SPILL_CAP, WGMMA, WGMMA_ACCUMULATORS, spilling_ptx)
from .toolchain_samples import cache_dir  # noqa: F401  (a pytest fixture)


# --- recorded logs ---------------------------------------------------------------------------

def test_every_field_of_a_recorded_log():
    usage = parse_ptxas_report(LOG_DEBUG)["debug_demo"]
    assert usage == ResourceUsage(name="debug_demo", registers=24, barriers=1, shared_bytes=8,
                                  stack_frame_bytes=8, spill_store_bytes=0, spill_load_bytes=0,
                                  cumulative_stack_bytes=8)
    assert not usage.spills


def test_spill_counts_from_a_recorded_log():
    usage = parse_ptxas_report(LOG_SPILL)["spiller"]
    spills = (usage.spill_store_bytes, usage.spill_load_bytes, usage.stack_frame_bytes)
    assert spills == (168, 216, 176)
    assert usage.spills


def test_function_properties_of_a_func_do_not_touch_the_entries():
    report = parse_ptxas_report(LOG_ENTRIES_AND_FUNC)
    assert list(report) == ["k2", "k1"]  # ptxas's order
    assert report["k1"].stack_frame_bytes == 64 and report["k1"].shared_bytes == 256
    assert not report["k1"].spills  # the 4-byte spills belong to .func helper
    assert report["k2"].registers == 4 and report["k2"].shared_bytes == 0


def test_constant_banks_of_older_ptxas():
    usage = parse_ptxas_report(LOG_OLD_CMEM)["_Z6kernelPf"]
    assert usage.constant_bytes == {0: 356, 2: 12}
    assert (usage.registers, usage.shared_bytes, usage.barriers) == (35, 2560, 0)


def test_c7508_is_attributed_to_the_uncapped_entry_by_reading_the_ptx():
    report = parse_ptxas_report(LOG_C7508_THREE_ENTRIES, PTX_C7508_THREE_ENTRIES)
    assert {name for name, u in report.items() if u.setmaxnreg_ignored} == {"uncapped"}


def test_c7508_without_the_ptx_flags_every_entry_rather_than_none():
    report = parse_ptxas_report(LOG_C7508_THREE_ENTRIES)
    assert all(u.setmaxnreg_ignored for u in report.values())


def test_a_log_without_a_used_line_is_an_error_not_a_guess():
    log = LOG_DEBUG.replace("ptxas info    : Used", "ptxas info    : Employed")
    with pytest.raises(PtxasReportError, match="'debug_demo'"):
        parse_ptxas_report(log)


def test_json_round_trip():
    usage = parse_ptxas_report(LOG_OLD_CMEM)["_Z6kernelPf"]
    assert ResourceUsage.from_json(usage.to_json()) == usage


# --- fresh ptxas runs: the report against what the PTX declares ------------------------------

def test_report_of_a_kernel_with_shared_memory_a_barrier_and_a_local_buffer(cache_dir):
    shared, local = 384, 64
    ptx = HEADER + f""".visible .entry k(.param .u64 p)
{{
  .reg .b32 %r<4>;
  .reg .b64 %rd<4>;
  .shared .align 4 .b8 tile[{shared}];
  .local .align 4 .b8 scratch[{local}];
  mov.u32 %r0, %tid.x;
  shl.b32 %r1, %r0, 2;
  and.b32 %r1, %r1, {local - 4};
  mov.u64 %rd0, scratch;
  cvt.u64.u32 %rd1, %r1;
  add.s64 %rd0, %rd0, %rd1;
  st.local.u32 [%rd0], %r0;
  st.shared.u32 [tile], %r0;
  bar.sync 0;
  ld.shared.u32 %r2, [tile+4];
  ld.local.u32 %r3, [%rd0];
  add.u32 %r2, %r2, %r3;
  ld.param.u64 %rd2, [p];
  st.global.u32 [%rd2], %r2;
  ret;
}}
"""
    usage = assemble(ptx).resources["k"]
    assert usage.shared_bytes == shared
    assert usage.barriers == 1
    assert usage.stack_frame_bytes >= local and usage.cumulative_stack_bytes >= local
    assert not usage.spills


def test_wgmma_accumulators_live_in_registers(cache_dir):
    usage = assemble(WGMMA).resources["wgmma_demo"]
    assert usage.registers >= WGMMA_ACCUMULATORS and not usage.spills


def test_spills_are_reported_and_warned_about_with_the_byte_counts(cache_dir):
    with pytest.warns(RegisterSpillWarning) as caught:
        cubin = assemble(spilling_ptx("greedy"))
    usage = cubin.resources["greedy"]
    assert usage.registers <= SPILL_CAP
    assert usage.spill_store_bytes > 0 and usage.spill_load_bytes > 0
    message = str(caught[0].message)
    assert "'greedy'" in message
    assert f"{usage.spill_store_bytes} bytes spill stores" in message
    assert f"{usage.spill_load_bytes} bytes spill loads" in message
    assert caught[0].filename == __file__  # points at the caller of assemble()


def test_setmaxnreg_without_a_cap_is_flagged_and_warned_about(cache_dir):
    with pytest.warns(SetmaxnregIgnoredWarning, match=re.escape("'uncapped' (C7508")):
        cubin = assemble(SETMAXNREG_UNCAPPED)
    assert cubin.resources["uncapped"].setmaxnreg_ignored
    assert "(C7508)" in cubin.ptxas_log


def test_setmaxnreg_with_a_cap_is_clean(cache_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        usage = assemble(SETMAXNREG_CAPPED).resources["capped"]
    assert not usage.setmaxnreg_ignored and usage.registers == 168  # the .maxnreg cap


def test_several_entries_each_get_their_own_report(cache_dir):
    with pytest.warns(SetmaxnregIgnoredWarning):
        report = assemble(PTX_C7508_THREE_ENTRIES).resources
    assert set(report) == {"aaa_first", "uncapped", "zzz_last"}
    assert [name for name, u in report.items() if u.setmaxnreg_ignored] == ["uncapped"]


def test_no_warning_for_a_clean_kernel(cache_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not assemble(FADD).resources["add_scalar"].spills
