"""recipes/softmax.py with its rows staged in shared memory (softmax.staged / kernel_for's
`staged_rows`: x copied by cp.async, read there for the max, the sum and the output, its
exponentials computed twice): the interpreter matches float64 numpy on ragged shapes of every
path (scalar, 8- and 16-byte copies, several rows per warp, a row over a cluster with a ragged
last CTA), and the staged wide rows take far fewer registers than the register-held ones."""
import pytest

import layoutkit as lk
from layoutkit.ptx import assemble
from recipes import softmax
from recipes._row_split import Config

PTR = lk.Pointer[lk.bf16]
CASES = [(3, 7, None), (5, 100, None), (2, 2049, None),
         (7, 60, Config(threads=32, rows=4, vector=4, chunks=2)),
         (5, 400, Config(threads=32, rows=2, vector=8, chunks=1, cluster=4)),
         (2, 1000, Config(threads=64, rows=1, vector=8, chunks=1, cluster=2)),
         (3, 300, Config(threads=64, rows=1, vector=2, chunks=1, cluster=3))]


@pytest.mark.parametrize("m, n, config", CASES)
def test_staged_rows_match_float64_on_the_interpreter(m, n, config):
    assert softmax.check_cpu(seed=m + n, cases=[(m, n, config)], staged_rows=True) < 2 ** -7


@pytest.mark.parametrize("n", [32768, 131072])
def test_wide_rows_staged_take_fewer_registers(n):
    """256 threads of 64 values: the staged kernel keeps no row in registers (<= 48 a thread:
    5 CTAs an SM) where the register-held one takes > 96 (2 CTAs); both assemble without
    spills, 16-byte copies (cp.async.cg) or loads."""
    cfg = softmax.config(4096, n)
    usage = {}
    for staged in (False, True):
        kernel, _, ints, constexprs = softmax.launch_arguments(cfg, 4096, n, staged)
        assert kernel.name.endswith("_staged") == staged
        spec = kernel.specialize(PTR, PTR, *ints, **constexprs)
        usage[staged] = assemble(spec.ptx).resources[kernel.name]
        assert usage[staged].spill_store_bytes == 0
        assert spec.ptx.count("cp.async.cg.shared.global") == (cfg.chunks if staged else 0)
        assert spec.ptx.count("ld.global.v4.b32") == (0 if staged else cfg.chunks)
        assert (spec.ir.shared_bytes >= 2 * cfg.columns) == staged     # the row's bf16 tile
    assert usage[True].registers <= 48 < 96 < usage[False].registers


@pytest.mark.parametrize("from_columns, m, n, staged", [
    (16384, 4096, 131072, True), (16384, 4096, 32768, True), (16384, 4096, 16384, True),
    (16384, 1000, 8192, False), (16384, 1000, 4096, False), (16384, 4096, 32775, False),
    (32768, 4096, 131072, False), (0, 4096, 131072, False)])
def test_staging_follows_the_rule(monkeypatch, from_columns, m, n, staged):
    """CTAs holding at least STAGED_FROM_COLUMNS columns of a row (0: none) with 16-byte
    accesses (32775: scalar) stage their rows; the default launch takes that kernel."""
    monkeypatch.setattr(softmax, "STAGED_FROM_COLUMNS", from_columns)
    cfg = softmax.config(m, n)
    assert softmax.staged(cfg) == staged
    ((kernel, _, _, _),) = softmax.launches(None, None, None, m, n)
    assert kernel is softmax.kernel_for(cfg, staged)
