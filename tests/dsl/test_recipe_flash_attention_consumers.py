"""recipes/flash_attention.py with three consumer warpgroups (Config.CONSUMERS = 3, 192-row query
tiles) on the CPU: every three-consumer ablation config (causal where it has a causal row; the
defaults: test_recipe_flash_attention.py's) assembles for sm_90a with no spills, no ignored
setmaxnreg and no ptxas C75xx infos, its PTX has the 512-thread block's role budgets and the
three-barrier ping-pong ring, its SASS three warpgroups' HGMMAs (SS for S, RS for P V) and
no local memory, the CPU interpreter (race and barrier checks on) matches
numpy in float64 on ragged shapes, causal and not, padded and varlen, one head each (GQA on
three consumers: non-causal head dim 64's default, test_recipe_flash_attention.py's CPU_CASES),
and the Config's rules on consumer counts, register budgets and causal key blocks are
ValueErrors naming them."""
import re
import warnings
from dataclasses import replace

import pytest

import layoutkit as lk
from layoutkit.ptx import assemble, disassemble

from .test_recipes_compile import load_recipe

fa = load_recipe("flash_attention")
varlen = load_recipe("flash_attention_varlen")
kernel_module = fa.kernel_module
ROWS = [(d, causal, name) for d in sorted(fa.THREE_CONSUMERS) for causal in (False, True)
        for name, cfg in fa.ablations(d, causal).items()
        if cfg.CONSUMERS == 3 and (name in fa.THREE_CONSUMERS[d] or name == "default")]
# ptxas runs on each config once: a non-causal row whose config also has a causal row is left to
# that one, whose PTX is the non-causal one's plus the diagonal's masked loop (more live values
# in the same 160 registers); BN=80 (no causal row) keeps the non-causal SASS shape's check, and
# the defaults (non-causal head dim 64's) are test_recipe_flash_attention.py's compiled fixture
ASSEMBLED = [(d, causal, name) for d, causal, name in ROWS
             if (causal or (d, True, name) not in ROWS)
             and fa.ablations(d, causal)[name] != fa.CONFIGS[d, causal]]


def _ptx(d: int, causal: bool, cfg) -> str:
    t = lk.TensorSpec(lk.bf16, (4, 4096, 16, d))
    _, args, constexprs = fa.kernel_arguments(t, t, t, t, lk.TensorSpec(lk.f32, (64, 4096)),
                                              causal, d ** -0.5, cfg)
    return fa.kernel_for(cfg).ptx(*args, **constexprs)


def test_three_consumer_rows_are_ablations_and_in_the_autotune_space():
    assert {(d, causal) for d, causal, _ in ROWS} == {(d, c) for d in (64, 128)
                                                      for c in (False, True)}
    for d, causal, name in ROWS:
        cfg = fa.ablations(d, causal)[name]
        assert cfg.BM == 192 and cfg in fa.autotune_space(d, causal)
        assert cfg.smem_bytes(d) <= fa.SHARED_LIMIT
        assert fa.kernel_for(cfg).num_warps == 16 and fa.kernel_for(cfg) is not fa.attention_kernel
    # each default runs on the kernel of its consumer count (non-causal head dim 64: three)
    assert all(fa.kernel_for(c).num_warps == kernel_module.warps(c.CONSUMERS)
               for c in fa.CONFIGS.values())
    assert fa.CONFIGS[64, False].CONSUMERS == 3 and fa.CONFIGS[64, True].CONSUMERS == 2


@pytest.mark.parametrize("d, causal, name", ASSEMBLED,
                         ids=[f"d{d}-{'causal' if c else 'full'}-{n}" for d, c, n in ASSEMBLED])
def test_three_consumer_rows_assemble_without_spills(d, causal, name):
    cfg = fa.ablations(d, causal)[name]
    ptx = _ptx(d, causal, cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # spills and ignored setmaxnreg are warnings
        cubin = assemble(ptx)
    usage = cubin.resources["attention_body"]
    assert usage.spill_store_bytes == usage.spill_load_bytes == 0
    assert usage.stack_frame_bytes == 0 and not usage.setmaxnreg_ignored
    assert "C75" not in cubin.ptxas_log, cubin.ptxas_log
    producer, consumer = kernel_module.ROLE_REGISTERS[3]
    assert (producer + 3 * consumer) * 128 <= kernel_module.REGISTER_FILE
    assert f"setmaxnreg.dec.sync.aligned.u32 {producer}" in ptx
    assert ptx.count(f"setmaxnreg.inc.sync.aligned.u32 {consumer}") == 3
    assert re.search(r"\.(reqntid|maxntid) 512\b", ptx)
    # the ring: consumer wg waits at 4 + wg and passes to 4 + (wg + 1) % 3; epilogues 1, 2, 3
    for barrier in (4, 5, 6):
        assert f"bar.sync {barrier}, 256" in ptx and f"bar.arrive {barrier}, 256" in ptx
    for barrier in (1, 2, 3):
        assert f"bar.sync {barrier}, 128" in ptx
    # SASS: per consumer warpgroup the prologue S, one S + P V per loop body (a masked loop
    # past the first block where causal tiles cross the diagonal), the epilogue P V
    sass = disassemble(cubin)
    assert not re.search(r"\b(LDL|STL)\b", sass)
    loops = 2 if causal else 1
    ss = re.findall(rf"HGMMA\.64x{cfg.BN}x16\.F32\.BF16 R\d+, gdesc\[UR\d+\]", sass)
    rs = re.findall(rf"HGMMA\.64x{d}x16\.F32\.BF16 R\d+, R\d+, gdesc\[UR\d+\]\.tnspB", sass)
    assert len(ss) == 3 * (1 + loops) * d // 16 and len(rs) == 3 * (loops + 1) * cfg.BN // 16


def test_barrier_ids_come_from_one_place():
    assert [kernel_module.pingpong_barrier(2, wg) for wg in range(3)] == [3, 4, 3]
    assert [kernel_module.pingpong_barrier(3, wg) for wg in range(4)] == [4, 5, 6, 4]
    assert kernel_module.PINGPONG_BARRIER == 3 and kernel_module.BM == 128
    assert [kernel_module.warps(n) for n in kernel_module.CONSUMER_COUNTS] == [12, 16]


@pytest.mark.parametrize("case, name", [
    # 2 tiles, the second ragged, on one head: this config is non-causal head dim 64's
    # default, whose GQA test_recipe_flash_attention.py's CPU_CASES run
    ((1, 200, 100, 1, 1, 64, False), "3 consumers"),
    ((1, 100, 300, 1, 1, 64, True), "3 consumers"),         # causal, seqlen_q < seqlen_k
    ((1, 250, 100, 1, 1, 128, True), "3 consumers"),        # causal, rows that see no key
    ((1, 70, 200, 1, 1, 128, False), "3 consumers, BN=80"),
    ((1, 64, 400, 1, 1, 64, False), "3 consumers, 3 stages"),    # ring laps
], ids=["d64", "d64-causal", "d128-causal-sq>sk", "d128-bn80", "d64-3stages"])
def test_interpreter_matches_numpy(case, name):
    d, causal = case[5], case[6]
    assert fa.check_cpu(2, cases=(case,), config=fa.THREE_CONSUMERS[d][name]) < 2 ** -7


def test_no_ping_pong_three_consumers_matches_numpy():
    cfg = replace(fa.THREE_CONSUMERS[64]["3 consumers"], PINGPONG=False, OVERLAP=False)
    assert fa.check_cpu(3, cases=((1, 150, 140, 1, 1, 64, True),), config=cfg) < 2 ** -7


def test_varlen_interpreter_matches_numpy_with_three_consumers():
    cfg = fa.THREE_CONSUMERS[64]["3 consumers"]
    # lengths_q, lengths_k, heads_q, heads_kv, head_dim, causal: one head (the varlen kernel's
    # GQA, which no consumer count changes, is its CPU_CASES' subject)
    cases = (((200, 0, 30), (90, 20, 0), 1, 1, 64, True),)
    assert varlen.check_cpu(4, cases=cases, config=cfg) < 2 ** -7


def test_config_rules_are_value_errors():
    three = fa.Config(CONSUMERS=3)
    assert (three.PRODUCER_REGISTERS, three.CONSUMER_REGISTERS, three.BM) == (32, 160, 192)
    assert fa.Config().with_consumers(3) == three
    assert three.with_consumers(2) == fa.Config()
    assert three.smem_bytes(64) == 2 * 64 * (192 + 2 * 2 * 128)
    with pytest.raises(ValueError, match=r"CONSUMERS = 4 is not one of \(2, 3\)"):
        fa.Config(CONSUMERS=4)
    with pytest.raises(ValueError, match=r"CONSUMERS = True is not one of"):
        fa.Config(CONSUMERS=True)
    with pytest.raises(ValueError, match=r"PRODUCER_REGISTERS = 24 and CONSUMER_REGISTERS = 240 "
                                         r"at CONSUMERS = 3 need 95232 registers, over the "
                                         r"SM's 65536.*leave both None for \(32, 160\)"):
        replace(fa.Config(), CONSUMERS=3)


def test_causal_key_blocks_of_192_row_tiles():
    for bn, fits in ((64, True), (96, True), (128, True), (192, True), (80, False),
                     (176, False)):
        assert fa.causal_block_fits(fa.Config(BN=bn, CONSUMERS=3)) == fits, bn
    q = FakeTensor((2, 10, 4, 64))
    k = FakeTensor((2, 12, 2, 64))
    with pytest.raises(ValueError, match=r"BN dividing 192 \(the query tile\) or one of "
                                         r"\(128,\), got config BN = 80"):
        fa.check_inputs(q, k, k, True, None, "bshd", fa.Config(BN=80, CONSUMERS=3))
    assert fa.check_inputs(q, k, k, True, None, "bshd", fa.Config(BN=128, CONSUMERS=3))[3].BM \
        == 192


def test_tuned_grid_follows_the_chosen_config():
    grid = fa.tuned_grid(1000, 8, 3)
    assert grid({"CONSUMERS": 2}) == (8, 8, 3) and grid({"CONSUMERS": 3}) == (6, 8, 3)
    assert fa._tuned(fa.THREE_CONSUMERS[64]["3 consumers"]).num_warps == 16
    assert fa._tuned(fa.CONFIGS[64, True]).num_warps == 12


class FakeTensor:
    """Shape, dtype, device and transpose of a tensor: enough for check_inputs (no torch)."""

    def __init__(self, shape, dtype="torch.bfloat16", device="cuda:0"):
        self.shape, self.dtype, self.device = tuple(shape), dtype, device
        self.is_cuda = True

    def dim(self):
        return len(self.shape)

    def transpose(self, a, b):
        shape = list(self.shape)
        shape[a], shape[b] = shape[b], shape[a]
        return FakeTensor(shape, self.dtype, self.device)
