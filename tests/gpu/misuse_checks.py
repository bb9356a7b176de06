"""GPU checks of misuse cases only the hardware can show, one per process:
``python tests/gpu/misuse_checks.py NAME``; exit 0 and a last line ``PASS NAME`` when it holds
(a debug-build timeout traps and poisons the CUDA context, hence one process each)."""
from __future__ import annotations

import re
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from layoutkit.ptx import DeviceBuffer  # noqa: E402
from layoutkit.sync import BarrierTimeoutError  # noqa: E402
from tests.dsl.source_lines import line_of  # noqa: E402
from tests.misuse import hardware_kernels as H  # noqa: E402


def check_data_dependent_arrive_times_out():
    flags = DeviceBuffer.empty(H.THREADS, np.int32)
    values = np.ones(H.THREADS, np.int32)
    values[5] = 0                                   # one thread never arrives
    flags.copy_from(values)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")             # the static check's ProtocolWarning
        try:
            H.data_dependent_arrive[1](flags, H.THREADS)
        except BarrierTimeoutError as exc:
            message = str(exc)
        else:
            raise AssertionError("the wait returned although one thread never arrived")
    line = line_of(H.__file__, "# DATA WAIT")
    assert re.search(rf"mbarrier 'ready' stage 0 waited for parity 0 .* at "
                     rf".*hardware_kernels\.py:{line} ", message), message
    print(message)


CHECKS = {name[len("check_"):]: fn for name, fn in globals().items()
          if name.startswith("check_")}

if __name__ == "__main__":
    CHECKS[sys.argv[1]]()
    print(f"PASS {sys.argv[1]}")
