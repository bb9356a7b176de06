"""Facts of the device a recipe's host path launches on, queried once per device."""
from __future__ import annotations

import functools

from recipes._row_split import SMS


@functools.cache
def sm_count(device) -> int:
    """The multiprocessor count of a torch device: the CUDA device's, SMS for another (a CPU
    tensor's, which the CPU interpreter runs through layoutkit.torch)."""
    if device.type != "cuda":
        return SMS
    import torch
    return torch.cuda.get_device_properties(device).multi_processor_count
