"""benchmarks/bench_driver_call_cpu.py without a GPU: its stand-in libcuda builds, cuda.bindings'
cuLaunchKernel calls it in every argument form the table has (each returning CUDA_SUCCESS), and
the table lists them."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.driver")
SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_driver_call_cpu.py"


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="no C compiler to build the stand-in libcuda")
def test_the_driver_call_table_is_measured_on_the_stand_in():
    out = subprocess.run([sys.executable, str(SCRIPT), "--calls", "200", "--repeats", "2"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    rows = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| row")]
    assert len(rows) == 5 and "held CUstream" in rows[0] and "empty Python call" in rows[-1]
    assert all(float(line.rsplit("|", 2)[1]) > 0 for line in rows)
