"""assemble(): real ptxas runs, argument checks, ptxas errors shown with PTX and Python lines."""
from __future__ import annotations

import pickle

import pytest

from layoutkit.ptx import (Cubin, PTXAssemblyError, SourceLocation, RegisterSpillWarning, assemble,
                           ptxas_version)
from layoutkit.ptx.ptxas_errors import ptx_loc

from .toolchain_samples import FADD, HEADER, WGMMA, make_executable, posix_only, spilling_ptx
from .toolchain_samples import cache_dir  # noqa: F401  (a pytest fixture)

# Lines 1-3 are HEADER; the bad instruction is on line 14, the bad operand on line 15.
BROKEN = HEADER + """.file 1 "/home/user/my kernel.py"
.file 2 "/home/user/helpers.py"
.visible .entry k(.param .u64 p)
{
  .reg .b32 %r<4>;
  .loc 1 10 4
  mov.u32 %r0, %tid.x;
  .loc 2 33 8
  add.u32 %r1, %r0, 1;
  .loc 1 12 5
  frobnicate.u32 %r2, %r1;
  mov.u32 %r3, %r9;
  ret;
}
"""
BAD_INSTRUCTION_LINE = 14


def test_assembles_real_ptx_into_an_elf_cubin_with_its_report(cache_dir):
    cubin = assemble(FADD)
    assert isinstance(cubin, Cubin)
    assert cubin.data[:4] == b"\x7fELF"
    assert cubin.arch == "sm_90a" and cubin.entries == ("add_scalar",)
    assert cubin.ptx == FADD and cubin.options == ()
    assert cubin.ptxas_version == ptxas_version().build
    assert "Compiling entry function 'add_scalar' for 'sm_90a'" in cubin.ptxas_log
    assert "add_scalar" in repr(cubin) and "bytes" in repr(cubin)


def test_options_reach_ptxas(cache_dir):
    ptx = spilling_ptx()
    with pytest.warns(RegisterSpillWarning):
        plain = assemble(ptx)
        warned = assemble(ptx, options=["-warn-spills"])
    assert warned.options == ("-warn-spills",)
    assert "ptxas warning : Registers are spilled" in warned.ptxas_log
    assert "Registers are spilled" not in plain.ptxas_log


def test_another_arch(cache_dir):
    ptx = FADD.replace(".target sm_90a", ".target sm_80")
    assert assemble(ptx, "sm_80").arch == "sm_80"


@pytest.mark.parametrize("kwargs, error, match", [
    ({"ptx": b".version 8.0"}, TypeError, "str, got bytes"),
    ({"arch": "sm90a"}, ValueError, "arch='sm90a'"),
    ({"arch": 90}, ValueError, "arch=90"),
    ({"options": "-lineinfo"}, TypeError, r"\('-lineinfo',\)"),
    ({"options": ["-lineinfo", 3]}, TypeError, "must be a str, got 3"),
    ({"options": ["-o", "x.cubin"]}, ValueError, "'-o' is set by assemble"),
    ({"options": ["--gpu-name=sm_80"]}, ValueError, "'--gpu-name=sm_80' is set by assemble"),
])
def test_bad_arguments_name_the_value_and_the_rule(cache_dir, kwargs, error, match):
    arguments = {"ptx": FADD, **kwargs}
    with pytest.raises(error, match=match):
        assemble(arguments.pop("ptx"), **arguments)


def test_ptxas_error_shows_ptxas_message_the_ptx_line_and_the_python_line(cache_dir):
    with pytest.raises(PTXAssemblyError) as info:
        assemble(BROKEN)
    err = info.value
    message = str(err)
    assert "Not a name of any known instruction: 'frobnicate'" in message
    assert err.ptx_lines == (BAD_INSTRUCTION_LINE, BAD_INSTRUCTION_LINE + 1)
    assert f"PTX line {BAD_INSTRUCTION_LINE} (emitted by /home/user/my kernel.py:12)" in message
    assert f"> {BAD_INSTRUCTION_LINE} |   frobnicate.u32 %r2, %r1;" in message
    assert f"  {BAD_INSTRUCTION_LINE - 1} |   .loc 1 12 5" in message  # context
    assert err.source_location == SourceLocation("/home/user/my kernel.py", 12, 5)
    assert "error" in err.diagnostics and err.command[1:3] == ("-arch=sm_90a", "-v")


def test_ptx_loc_takes_the_last_loc_before_the_line_and_resets_per_function():
    assert ptx_loc(BROKEN, 12) == SourceLocation("/home/user/helpers.py", 33, 8)
    assert ptx_loc(BROKEN, 10) == SourceLocation("/home/user/my kernel.py", 10, 4)
    assert ptx_loc(BROKEN, 8) is None  # before any .loc
    two_functions = BROKEN.replace("  ret;\n}\n", "  ret;\n}\n.visible .entry j()\n{\n  ret;\n}\n")
    last_line = two_functions.count("\n") - 1
    assert ptx_loc(two_functions, last_line) is None
    assert ptx_loc('.file 3 "a.py"\n.loc 3 7\nx;\n', 3) == SourceLocation("a.py", 7, 0)
    assert ptx_loc('.loc 4 7 1\nx;\n', 2) is None  # .loc of an undeclared file


def test_error_without_line_info_still_quotes_the_ptx(cache_dir):
    ptx = HEADER + ".visible .entry k()\n{\n  bogus.op;\n  ret;\n}\n"
    with pytest.raises(PTXAssemblyError) as info:
        assemble(ptx)
    assert info.value.ptx_lines == (6,) and info.value.source_location is None
    assert "> 6 |   bogus.op;" in str(info.value)


def test_register_shortage_for_wgmma_is_an_error_quoting_the_instruction(cache_dir):
    starved = WGMMA.replace(".reqntid 128, 1, 1", ".reqntid 128, 1, 1\n.maxnreg 40")
    with pytest.raises(PTXAssemblyError, match=r"\(C7602\) Insufficient registers") as info:
        assemble(starved)
    (line,) = info.value.ptx_lines
    assert "wgmma.mma_async" in starved.splitlines()[line - 1]


def test_unsupported_ptx_version_and_unknown_arch(cache_dir):
    with pytest.raises(PTXAssemblyError, match=r"Unsupported \.version 9\.9"):
        assemble(FADD.replace(".version 8.0", ".version 9.9"))
    with pytest.raises(PTXAssemblyError, match="sm_99"):
        assemble(FADD, "sm_99")


def test_assembly_error_survives_pickling(cache_dir):
    with pytest.raises(PTXAssemblyError) as info:
        assemble(BROKEN)
    copy = pickle.loads(pickle.dumps(info.value))
    assert str(copy) == str(info.value) and copy.source_location == info.value.source_location


@posix_only()
def test_ptxas_that_writes_no_cubin_is_an_error(cache_dir, tmp_path, monkeypatch):
    fake = make_executable(tmp_path / "ptxas", """case "$1" in
  --version) echo 'Cuda compilation tools, release 13.0, V13.0.88';;
  *) echo 'ptxas info    : nothing written' >&2;;
esac""")
    monkeypatch.setenv("LAYOUTKIT_PTXAS", str(fake))
    with pytest.raises(PTXAssemblyError, match="exit status 0"):
        assemble(FADD)


def test_debug_setting_reports_each_call_on_stderr(cache_dir, monkeypatch, capsys):
    monkeypatch.setenv("LAYOUTKIT_DEBUG", "1")
    assemble(FADD)
    assemble(FADD)
    assemble(FADD, cache=False)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("layoutkit:")]
    assert [line.split(" cache ")[1].split()[0] for line in lines] == ["miss", "hit", "off"]
    assert "ptxas=" in lines[0]
