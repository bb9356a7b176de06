"""recipes/mma_gemm.py without a GPU: its PTX assembles for sm_90a with no spills, the software
pipeline has the shape the docstring draws, every shared access of the main loop is free of
bank conflicts, and ragged specializations build."""
import warnings

import pytest

import layoutkit as lk
from layoutkit.ptx import assemble
from layoutkit.tools.recipe_runner import load_recipe

gemm = load_recipe("recipes/mma_gemm.py")
BF16 = lk.Pointer[lk.bf16]


def specialization(m, n, k, config=gemm.DEFAULT, kmajor=False):
    kernel, grid, constexprs = gemm._launch_args(m, n, config, kmajor)
    return kernel, (BF16, BF16, BF16, m, n, k), constexprs


def loop_ops(fn, name):
    (loop,) = [op for op in fn.body.ops if op.name == "for"]
    return [op for op in loop.blocks[0].ops if op.name == name]


def test_default_specializations_assemble_without_spills():
    with warnings.catch_warnings():
        warnings.simplefilter("error")              # a register spill is a warning: fail on it
        for name, text in gemm.compile_default().items():
            usage = next(iter(assemble(text).resources.values()))
            assert usage.spill_store_bytes == usage.spill_load_bytes == 0, name
            assert usage.stack_frame_bytes == 0, name


@pytest.mark.parametrize("config", list(gemm.CONFIGS))
def test_pipeline_shape(config):
    cfg = gemm.CONFIGS[config]
    kernel, args, constexprs = specialization(4096, 4096, 4096, config)
    text = kernel.ptx(*args, **constexprs)
    warps = cfg["WM"] * cfg["WN"]
    k_steps = cfg["BK"] // 16
    atoms = (cfg["BM"] // 16) * (cfg["BN"] // 8) // warps
    assert text.count("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") == atoms * k_steps
    a_ld = cfg["BM"] // 16 // cfg["WM"] * k_steps                # one x4 per 16 x 16 A atom
    b_ld = cfg["BN"] // 16 // cfg["WN"] * k_steps                # one x4.trans per 16 columns
    assert text.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16") == a_ld
    assert text.count("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16") == b_ld
    assert text.count(f"cp.async.wait_group {cfg['STAGES'] - 2};") == 1
    assert text.count("cp.async.commit_group;") == cfg["STAGES"]        # prologue + loop
    assert text.count("bar.sync 0;") == 1
    copies = (cfg["BM"] + cfg["BN"]) * cfg["BK"] // 8 // (32 * warps)
    assert text.count("cp.async.cg.shared.global") == copies * cfg["STAGES"]


@pytest.mark.parametrize("kmajor", [False, True])
def test_main_loop_shared_accesses_are_bank_conflict_free(kmajor):
    kernel, args, constexprs = specialization(4096, 4096, 4096, kmajor=kmajor)
    fn = kernel.ir(*args, **constexprs)
    ldmatrix, copies = loop_ops(fn, "ldmatrix"), loop_ops(fn, "cp_async")
    assert ldmatrix and copies
    assert {op.attrs["bank_ways"] for op in ldmatrix + copies} == {1}
    assert {op.attrs["trans"] for op in ldmatrix} == ({False} if kmajor else {False, True})


def test_k_beyond_the_last_tile_is_zero_filled_not_read():
    kernel, args, constexprs = specialization(4096, 4096, 4096)
    copies = loop_ops(kernel.ir(*args, **constexprs), "cp_async")
    assert all(op.attrs["masked"] and op.attrs["bytes"] == 16 for op in copies)


@pytest.mark.parametrize("m, n, k", [(1, 1, 1), (7, 5, 3), (129, 257, 31), (100, 130, 70),
                                     (33, 48, 24)])
def test_ragged_specializations_assemble(m, n, k):
    kernel, args, constexprs = specialization(m, n, k)
    usage = next(iter(assemble(kernel.ptx(*args, **constexprs)).resources.values()))
    assert usage.spill_store_bytes == 0


def test_unaligned_k_falls_back_to_synchronous_copies_of_a():
    kernel, args, constexprs = specialization(64, 64, 31)
    fn = kernel.ir(*args, **constexprs)
    assert loop_ops(fn, "load") and loop_ops(fn, "shared_store")
    assert {op.attrs["bytes"] for op in loop_ops(fn, "cp_async")} == {16}   # B's rows (n = 64)


def test_rings_fit_shared_memory():
    for config, cfg in gemm.CONFIGS.items():
        kernel, args, constexprs = specialization(256, 256, 256, config)
        fn = kernel.ir(*args, **constexprs)
        assert fn.shared_bytes == 2 * (cfg["BM"] + cfg["BN"]) * cfg["BK"] * cfg["STAGES"]
