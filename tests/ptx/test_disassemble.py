"""disassemble(): SASS through nvdisasm, the cuobjdump fallback, and the errors."""
from __future__ import annotations

import sys

import pytest

from layoutkit.ptx import DisassemblyError, ToolNotFoundError, assemble, disassemble

from .toolchain_samples import FADD, WGMMA, make_executable, posix_only
from .toolchain_samples import cache_dir  # noqa: F401  (a pytest fixture)


def test_wgmma_becomes_hgmma(cache_dir):
    sass = disassemble(assemble(WGMMA))
    assert "HGMMA.64x64x16.F32.BF16" in sass
    assert "WARPGROUP.ARRIVE" in sass


def test_line_info_names_the_python_lines(cache_dir):
    cubin = assemble(FADD, options=["-lineinfo"])
    sass = disassemble(cubin)
    assert "FADD" in sass
    for line in (10, 11, 12):
        assert f'File "/home/user/my_kernel.py", line {line}' in sass
    assert "my_kernel.py" not in disassemble(cubin, line_info=False)


def test_accepts_raw_bytes(cache_dir):
    cubin = assemble(FADD)
    assert disassemble(cubin.data) == disassemble(cubin)


def test_bytes_that_are_not_a_cubin():
    with pytest.raises(DisassemblyError, match=r"not an ELF cubin.*b'PTX!'"):
        disassemble(b"PTX! not a cubin")
    with pytest.raises(TypeError, match="got str"):
        disassemble(FADD)


def test_truncated_cubin_reports_nvdisasm_message(cache_dir):
    data = assemble(FADD).data
    with pytest.raises(DisassemblyError, match="nvdisasm exited with status"):
        disassemble(data[:64])


@pytest.fixture
def no_cuda_tools(tmp_path, monkeypatch):
    for name in ("LAYOUTKIT_NVDISASM", "CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site-packages")])
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    return tmp_path / "bin"


@pytest.fixture(scope="module")
def fadd_cubin():
    """Assembled once, before any test hides the tools (a wider-scoped fixture runs first)."""
    return assemble(FADD, cache=False)


@posix_only()
def test_falls_back_to_cuobjdump(fadd_cubin, no_cuda_tools):
    make_executable(no_cuda_tools / "cuobjdump", 'echo "cuobjdump called with $1"')
    assert disassemble(fadd_cubin).strip() == "cuobjdump called with --dump-sass"


@posix_only()
def test_neither_tool_is_a_clear_error(fadd_cubin, no_cuda_tools):
    with pytest.raises(ToolNotFoundError) as info:
        disassemble(fadd_cubin)
    message = str(info.value)
    assert "nvdisasm or cuobjdump" in message
    assert "pip install nvidia-cuda-nvdisasm" in message
    assert "pip install nvidia-cuda-cuobjdump" in message
