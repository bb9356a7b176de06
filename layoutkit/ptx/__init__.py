"""layoutkit.ptx: the PTX builder, ptxas and the cubin cache, and the cuda-python launcher.

Imports: stdlib, numpy and (lazily) cuda-python. Knows nothing about layouts.
"""
# --- builder (typed PTX builder; instruction families live in layoutkit.ptx.isa) ---
from .builder import (SINK, Address, Imm, KernelBuilder, Label, Module, NotPred, Param,  # noqa: F401
                      PTXBuildError, PTXDirectiveError, PTXLabelError, PTXRangeError,
                      PTXSSAError, PTXTargetError, PTXType, PTXTypeError, Reg, Requirement,
                      SourceLocation, SpecialReg, Symbol, Vector)
from . import isa  # noqa: F401
# --- end builder ---
# --- toolchain (settings, finding ptxas/nvdisasm, assemble, resources, cubin cache, SASS) ---
from .settings import Settings, SettingsError, debug_enabled, debug_raw_lookup, get_settings  # noqa: F401
from .toolchain import (PtxasVersion, ToolchainError, ToolNotFoundError,  # noqa: F401
                        find_cuobjdump, find_nvdisasm, find_ptxas, find_tool, ptxas_version)
from .resources import (PtxasPerformanceWarning, PtxasReportError, PtxasWarning,  # noqa: F401
                        RegisterSpillWarning, ResourceUsage, SetmaxnregIgnoredWarning,
                        parse_ptxas_report)
from .ptxas_errors import PTXAssemblyError  # noqa: F401
from .cubin import Cubin  # noqa: F401
from .cache import CacheInfo, CacheWarning, cache_clear, cache_info  # noqa: F401
from .assembler import assemble  # noqa: F401
from .sass import DisassemblyError, disassemble  # noqa: F401
# --- end toolchain ---
# --- driver and launch (cuda-python, imported lazily; tensor maps; device buffers) ---
from .driver import (CudaDriverError, Device, DriverUnavailableError, LoadedFunction,  # noqa: F401
                     SharedMemoryLimitError, current_device, device, device_count)
from .signature import (EntrySignature, ParamKind, ParamSpec, SignatureError,  # noqa: F401
                        parse_entries, parse_entry)
from .arguments import DLPackArray, LaunchArgumentError, device_address, dlpack_array  # noqa: F401
from .launch import MAX_GRID, CompiledKernel, LaunchConfigError, launch_dims  # noqa: F401
from .tensormap import TensorMap, TensorMapError, TiledEncoding, encode_tiled_arguments  # noqa: F401
from .memory import DeviceBuffer  # noqa: F401
# --- end driver and launch ---
