"""Settings and the CUDA tool finder: search order, overrides, the not-found error, versions."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from layoutkit.ptx import toolchain
from layoutkit.ptx.settings import SettingsError, get_settings
from layoutkit.ptx.toolchain import (PtxasVersion, ToolchainError, ToolNotFoundError, find_nvdisasm,
                                     find_ptxas, find_tool, ptxas_version)

from .toolchain_samples import make_executable, posix_only

pytestmark = posix_only()

VERSION_TEXT = """ptxas: NVIDIA (R) Ptx optimizing assembler
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Wed_Aug_20_01:55:12_PM_PDT_2025
Cuda compilation tools, release 13.0, V13.0.88
Build cuda_13.0.r13.0/compiler.36424714_0"""


@pytest.fixture
def bare_env(tmp_path, monkeypatch):
    """No override, no wheel on sys.path, no CUDA_HOME, an empty PATH: nothing is found."""
    for name in ("LAYOUTKIT_PTXAS", "LAYOUTKIT_NVDISASM", "CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(name, raising=False)
    site = tmp_path / "site-packages"
    site.mkdir()
    empty_bin = tmp_path / "empty-bin"
    empty_bin.mkdir()
    monkeypatch.setattr(sys, "path", [str(site)])
    monkeypatch.setenv("PATH", str(empty_bin))
    return tmp_path


def places(root: Path, tool: str = "ptxas") -> dict[str, Path]:
    """One fake ``tool`` in each place the finder looks, under ``root``."""
    cuda12_dir = {"ptxas": "cuda_nvcc", "nvdisasm": "cuda_nvdisasm"}[tool]
    return {
        "override": make_executable(root / "override" / tool),
        "wheel": make_executable(root / "site-packages/nvidia/cu13/bin" / tool),
        "wheel_cuda12": make_executable(root / "site-packages/nvidia" / cuda12_dir / "bin" / tool),
        "cuda_home": make_executable(root / "cuda/bin" / tool),
        "path": make_executable(root / "path-bin" / tool),
    }


@pytest.mark.parametrize("tool, override_var, finder", [
    ("ptxas", "LAYOUTKIT_PTXAS", find_ptxas),
    ("nvdisasm", "LAYOUTKIT_NVDISASM", find_nvdisasm),
])
def test_search_order_override_wheel_cuda12_wheel_cuda_home_path(bare_env, monkeypatch, tool,
                                                                  override_var, finder):
    fake = places(bare_env, tool)
    monkeypatch.setenv(override_var, str(fake["override"]))
    monkeypatch.setenv("CUDA_HOME", str(bare_env / "cuda"))
    monkeypatch.setenv("PATH", str(bare_env / "path-bin"))
    # Remove each winner in turn: the next place in the documented order must win.
    for place in ("override", "wheel", "wheel_cuda12", "cuda_home", "path"):
        assert finder() == fake[place].resolve(), place
        if place == "override":
            monkeypatch.delenv(override_var)
        else:
            fake[place].unlink()
    with pytest.raises(ToolNotFoundError):
        finder()


def test_newest_cuda_wheel_directory_wins(bare_env):
    site = bare_env / "site-packages/nvidia"
    make_executable(site / "cu13/bin/ptxas")
    newest = make_executable(site / "cu14/bin/ptxas")
    assert find_ptxas() == newest.resolve()


def test_cuda_path_stands_in_for_cuda_home(bare_env, monkeypatch):
    fake = make_executable(bare_env / "toolkit/bin/ptxas")
    monkeypatch.setenv("CUDA_PATH", str(bare_env / "toolkit"))
    assert find_ptxas() == fake.resolve()


def test_not_found_error_says_how_to_install_and_where_it_looked(bare_env):
    with pytest.raises(ToolNotFoundError) as info:
        find_ptxas()
    message = str(info.value)
    assert "pip install nvidia-cuda-nvcc" in message
    assert "LAYOUTKIT_PTXAS" in message
    assert "nvidia/cuda_nvcc/bin/ptxas" in message and str(bare_env / "site-packages") in message
    assert "CUDA_HOME" in message and str(bare_env / "empty-bin") in message
    with pytest.raises(ToolNotFoundError, match="pip install nvidia-cuda-nvdisasm"):
        find_nvdisasm()
    with pytest.raises(ToolNotFoundError, match="pip install nvidia-cuda-cuobjdump"):
        find_tool("cuobjdump")


def test_override_that_is_not_executable_is_an_error_not_skipped(bare_env, monkeypatch):
    make_executable(bare_env / "site-packages/nvidia/cu13/bin/ptxas")
    plain = bare_env / "not-executable"
    plain.write_text("data")
    for bad in (plain, bare_env / "missing"):
        monkeypatch.setenv("LAYOUTKIT_PTXAS", str(bad))
        with pytest.raises(ToolNotFoundError, match=f"LAYOUTKIT_PTXAS='{bad}'"):
            find_ptxas()


def test_not_found_lists_each_wheel_path_checked(bare_env):
    (bare_env / "site-packages/nvidia/cu13/bin").mkdir(parents=True)
    with pytest.raises(ToolNotFoundError) as info:
        find_ptxas()
    for layout in ("cu13", "cuda_nvcc"):
        assert str(bare_env / "site-packages/nvidia" / layout / "bin/ptxas") in str(info.value)


def test_finder_notices_a_deleted_tool(bare_env):
    first = make_executable(bare_env / "site-packages/nvidia/cu13/bin/ptxas")
    second = make_executable(bare_env / "site-packages/nvidia/cuda_nvcc/bin/ptxas")
    assert find_ptxas() == first.resolve()
    first.unlink()
    assert find_ptxas() == second.resolve()


def test_unknown_tool_name():
    with pytest.raises(ValueError, match="'nvcc'"):
        find_tool("nvcc")


def test_real_ptxas_version():
    version = ptxas_version()
    assert version.release >= (12, 0)
    assert version.build.startswith(f"V{version.release[0]}.{version.release[1]}.")
    assert version.build in version.text and str(version) == f"ptxas {version.build}"


def test_version_is_parsed_and_cached_per_file(tmp_path):
    calls = tmp_path / "calls"
    fake = make_executable(tmp_path / "ptxas",
                           f"echo run >> {calls}\ncat <<'EOF'\n{VERSION_TEXT}\nEOF")
    version = ptxas_version(fake)
    assert version == PtxasVersion((13, 0), "V13.0.88", VERSION_TEXT)
    assert ptxas_version(fake) is version
    assert calls.read_text().count("run") == 1
    make_executable(fake, f"echo run >> {calls}\n"
                          "echo 'Cuda compilation tools, release 13.1, V13.1.2'")
    assert ptxas_version(fake).build == "V13.1.2"  # a replaced file is asked again


def test_version_of_something_that_is_not_ptxas(tmp_path):
    fake = make_executable(tmp_path / "ptxas", "echo hello")
    with pytest.raises(ToolchainError, match="(?s)is it ptxas.*hello"):
        ptxas_version(fake)


def test_settings_flags_and_paths(monkeypatch):
    assert get_settings({"LAYOUTKIT_DEBUG": "YES"}).debug is True
    assert get_settings({"LAYOUTKIT_DEBUG": "0"}).debug is False
    assert get_settings({}).debug is False
    with pytest.raises(SettingsError, match=r"LAYOUTKIT_DEBUG='maybe'.*boolean"):
        get_settings({"LAYOUTKIT_DEBUG": "maybe"})
    assert get_settings({"LAYOUTKIT_PTXAS": "/opt/p"}).ptxas == Path("/opt/p")
    assert get_settings({"LAYOUTKIT_PTXAS": " "}).ptxas is None


def test_cache_dir_default_follows_xdg(monkeypatch):
    explicit = get_settings({"LAYOUTKIT_CACHE_DIR": "/c", "XDG_CACHE_HOME": "/x"})
    assert explicit.cache_dir == Path("/c")
    assert get_settings({"XDG_CACHE_HOME": "/x"}).cache_dir == Path("/x/layoutkit")
    home = Path("~/.cache/layoutkit").expanduser()
    assert get_settings({"XDG_CACHE_HOME": "relative/x"}).cache_dir == home  # invalid per XDG
    assert get_settings({}).cache_dir == home


def test_settings_are_read_at_call_time(monkeypatch, tmp_path):
    monkeypatch.setenv("LAYOUTKIT_CACHE_DIR", str(tmp_path / "a"))
    assert get_settings().cache_dir == tmp_path / "a"
    monkeypatch.setenv("LAYOUTKIT_CACHE_DIR", str(tmp_path / "b"))
    assert get_settings().cache_dir == tmp_path / "b"
    assert toolchain.get_settings is get_settings
