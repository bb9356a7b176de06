"""GPU tests (marker `gpu`) of recipes/softmax.py with its rows staged in shared memory
(kernel_for's staged_rows=True: cp.async, three reads of the tile, the exponentials computed
twice) against float64 torch.softmax on random ragged shapes: one CTA a row, a cluster with a
ragged last CTA, 8-byte copies; nothing written past the output."""
import pytest

from tests.gpu.gpu_only import require_gpu

require_gpu()

torch = pytest.importorskip("torch")

from recipes import _rowwise as rw  # noqa: E402
from recipes import softmax  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("m, n", [(5, 32776), (3, 131072), (1000, 65536), (7, 16385),
                                  (4, 16384), (33, 3004), (1, 1000)])
def test_staged_rows_match_float64(m, n):
    x = (torch.randn(m, n, device="cuda") * 4).to(torch.bfloat16)
    buffer = torch.full((m * n + 64,), float("nan"), device="cuda", dtype=torch.bfloat16)
    y, guard = buffer[:m * n].view(m, n), buffer[m * n:]
    rw.launch(softmax.launches(x, y, rw.cuda_floats(x.device), m, n, staged_rows=True))
    torch.cuda.synchronize()
    want = torch.softmax(x.double(), dim=-1)
    err = ((y.double() - want).abs() / want.amax(dim=-1, keepdim=True)).max().item()
    assert err < 2 ** -7 and torch.isnan(guard).all()
