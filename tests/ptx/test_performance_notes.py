"""ptxas's C75xx infos (wgmma serialized, warpgroup waits/arrives injected) become the entry's
performance_notes and a PtxasPerformanceWarning, on ptxas's real output."""
import warnings

import pytest

from layoutkit.ptx import assemble
from layoutkit.ptx.resources import (PtxasPerformanceWarning, ResourceUsage, parse_ptxas_report,
                                     warn_about)

# An accumulator register read between two wgmmas: ptxas injects a wait and an arrive.
TOUCHED_ACCUMULATOR = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry touched(.param .u64 p)
{
    .reg .f32 %f<8>;
    .reg .b64 %d<2>;
    .reg .b64 %rd<2>;
    mov.b64 %d0, 0;
    mov.b64 %d1, 0;
    mov.f32 %f0, 0f00000000;
    mov.f32 %f1, 0f00000000;
    mov.f32 %f2, 0f00000000;
    mov.f32 %f3, 0f00000000;
    wgmma.fence.sync.aligned;
    wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%f0, %f1, %f2, %f3}, %d0, %d1, 1, 1, 1, 0, 0;
    wgmma.commit_group.sync.aligned;
    add.f32 %f0, %f0, %f1;
    wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%f0, %f1, %f2, %f3}, %d0, %d1, 1, 1, 1, 0, 0;
    wgmma.commit_group.sync.aligned;
    wgmma.wait_group.sync.aligned 0;
    ld.param.u64 %rd0, [p];
    st.global.f32 [%rd0], %f0;
    ret;
}
"""


def test_injected_waits_are_performance_notes_and_a_warning():
    with pytest.warns(PtxasPerformanceWarning, match=r"entry 'touched'.*\(C7517\) warpgroup.wait"):
        cubin = assemble(TOUCHED_ACCUMULATOR, cache=False)
    notes = cubin.resources["touched"].performance_notes
    assert [note[:7] for note in notes] == ["(C7519)", "(C7517)"]


def test_notes_name_their_function_and_round_trip_through_json():
    log = ("ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are "
           "serialized due to an ill-formed pipeline in function 'b'\n"
           "ptxas info    : Compiling entry function 'a' for 'sm_90a'\n"
           "ptxas info    : Used 8 registers, used 0 barriers\n"
           "ptxas info    : Compiling entry function 'b' for 'sm_90a'\n"
           "ptxas info    : Used 8 registers, used 0 barriers\n")
    usage = parse_ptxas_report(log)
    assert usage["a"].performance_notes == ()
    assert usage["b"].performance_notes[0].startswith("(C7515) Potential Performance Loss")
    assert ResourceUsage.from_json(usage["b"].to_json()) == usage["b"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_about({"a": usage["a"]})                   # no note, no warning
