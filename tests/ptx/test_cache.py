"""The cubin cache: misses and hits, the memory layer, concurrent writers, corrupt entries."""
from __future__ import annotations

import dataclasses
import hashlib
import multiprocessing
import sys

import pytest

from layoutkit.ptx import (CacheWarning, RegisterSpillWarning, assemble, cache_clear, cache_info,
                           ptxas_version)
from layoutkit.ptx import cache as cubin_cache
from layoutkit.ptx.cubin import Cubin, elf_problem
from layoutkit.ptx.toolchain import PtxasVersion

from .toolchain_samples import FADD, WGMMA, spilling_ptx
from .toolchain_samples import cache_dir  # noqa: F401  (a pytest fixture)

assembler = sys.modules["layoutkit.ptx.assembler"]


@pytest.fixture
def ptxas_runs(monkeypatch) -> list[str]:
    """Records the PTX of every real ptxas run that assemble() makes."""
    runs: list[str] = []
    real = assembler.run_ptxas

    def counting(ptxas, ptx, *args, **kwargs):
        runs.append(ptx)
        return real(ptxas, ptx, *args, **kwargs)

    monkeypatch.setattr(assembler, "run_ptxas", counting)
    return runs


def entry_files(cache_dir):
    return sorted(cache_dir.glob("*.lkc"))


def test_miss_then_hit_runs_ptxas_once(cache_dir, ptxas_runs):
    first = assemble(FADD)
    second = assemble(FADD)
    assert len(ptxas_runs) == 1
    assert second == first
    info = cache_info()
    assert info.directory == cache_dir and info.entries == 1
    assert info.bytes == entry_files(cache_dir)[0].stat().st_size > len(first.data)


def test_disk_layer_serves_a_new_process(cache_dir, ptxas_runs):
    first = assemble(WGMMA)
    cubin_cache.clear_memory()  # what a fresh process sees
    second = assemble(WGMMA)
    assert len(ptxas_runs) == 1
    assert second.data == first.data and second.resources == first.resources
    assert second.ptxas_log == first.ptxas_log and second.ptx == WGMMA
    assert second.ptxas_version == first.ptxas_version


def test_memory_layer_answers_without_the_disk(cache_dir, ptxas_runs):
    first = assemble(FADD)
    for path in entry_files(cache_dir):
        path.unlink()
    assert assemble(FADD) is first
    assert len(ptxas_runs) == 1
    cubin_cache.clear_memory()
    assemble(FADD)
    assert len(ptxas_runs) == 2


def test_cache_false_always_runs_ptxas_and_stores_nothing(cache_dir, ptxas_runs):
    assemble(FADD, cache=False)
    assemble(FADD, cache=False)
    assert len(ptxas_runs) == 2 and cache_info().entries == 0


def test_every_key_input_separates_entries(cache_dir, ptxas_runs, monkeypatch):
    assemble(FADD)
    assemble(FADD + "// another text\n")
    assemble(FADD, options=("-O2",))
    assemble(FADD.replace("sm_90a", "sm_90"), "sm_90")
    real = ptxas_version()
    monkeypatch.setattr(assembler, "ptxas_version", lambda path: PtxasVersion(
        real.release, real.build, real.text + " (patched)"))
    assemble(FADD)
    assert len(ptxas_runs) == 5 and cache_info().entries == 5


def test_warnings_are_repeated_on_a_cache_hit(cache_dir, ptxas_runs):
    ptx = spilling_ptx()
    with pytest.warns(RegisterSpillWarning):
        assemble(ptx)
    cubin_cache.clear_memory()
    with pytest.warns(RegisterSpillWarning):
        assemble(ptx)
    assert len(ptxas_runs) == 1


@pytest.mark.parametrize("damage", ["truncate", "flip_payload_byte", "flip_header_byte",
                                    "empty", "extra_bytes", "foreign_key"])
def test_a_corrupt_entry_is_detected_discarded_and_rebuilt(cache_dir, ptxas_runs, damage):
    good = assemble(FADD)
    (path,) = entry_files(cache_dir)
    blob = bytearray(path.read_bytes())
    if damage == "truncate":
        blob = blob[: len(blob) // 2]
    elif damage == "flip_payload_byte":
        blob[len(blob) // 2] ^= 0x40
    elif damage == "flip_header_byte":
        blob[9] ^= 0x01  # inside the cubin length
    elif damage == "empty":
        blob = bytearray()
    elif damage == "extra_bytes":
        blob += b"\0"
    elif damage == "foreign_key":  # a valid entry of other PTX, under this PTX's name
        assemble(WGMMA)
        other = next(p for p in entry_files(cache_dir) if p != path)
        blob = bytearray(other.read_bytes())
    path.write_bytes(bytes(blob))
    cubin_cache.clear_memory()
    rebuilt = assemble(FADD)
    runs_of_fadd = [ptx for ptx in ptxas_runs if ptx == FADD]
    assert len(runs_of_fadd) == 2  # the damaged entry was not used
    assert rebuilt.data == good.data and rebuilt.entries == ("add_scalar",)
    cubin_cache.clear_memory()  # the rewritten entry serves the next call
    assert assemble(FADD).data == good.data and len([p for p in ptxas_runs if p == FADD]) == 2


def _reseal(key: str, cubin: Cubin) -> bytes:
    """A consistent entry (magic, lengths, digest and key all right) for any payload."""
    return cubin_cache._encode(key, cubin)


@pytest.mark.parametrize("payload, arch", [
    ("not_elf", "sm_90a"),          # a consistent entry whose payload is no ELF file
    ("truncated_elf", "sm_90a"),    # the magic, then nothing of a header
    ("not_cuda", "sm_90a"),         # an ELF file for another machine (x86-64)
    ("other_sm", "sm_90a"),         # an ELF cubin for sm_80 under the sm_90a entry
    ("other_sm", "sm_80"),          # ... also recorded as sm_80: not the requested arch
])
def test_a_consistent_entry_that_is_not_a_cubin_for_the_arch_is_rebuilt(cache_dir, ptxas_runs,
                                                                         payload, arch):
    good = assemble(FADD)
    (path,) = entry_files(cache_dir)
    key = path.name.removesuffix(".lkc")
    if payload == "not_elf":
        data = b"MZ" + bytes(good.data[2:])
    elif payload == "truncated_elf":
        data = b"\x7fELF" + bytes(8)
    elif payload == "not_cuda":
        data = bytearray(good.data)
        data[18:20] = (62).to_bytes(2, "little")
        data = bytes(data)
    else:
        data = assemble(FADD.replace("sm_90a", "sm_80"), "sm_80").data
    path.write_bytes(_reseal(key, dataclasses.replace(good, data=data, arch=arch)))
    cubin_cache.clear_memory()
    assert cubin_cache.lookup(key, FADD, "sm_90a") is None and not path.exists()
    rebuilt = assemble(FADD)
    assert rebuilt.data == good.data and len([p for p in ptxas_runs if p == FADD]) == 2


def test_elf_problem_names_what_is_wrong():
    good = assemble(FADD, cache=False).data
    assert elf_problem(good, "sm_90a") is None and elf_problem(good, "sm_90") is None
    assert elf_problem(good, "sm_80") == "a cubin for sm_90, not for sm_80"
    assert elf_problem(b"", "sm_90a") == ("0 bytes that do not start with the ELF magic "
                                          "b'\\x7fELF' (they start with b'')")
    assert elf_problem(b"\x7fELF" + bytes(8), "sm_90a") == \
        "an ELF file of 12 bytes, shorter than a 64-bit ELF header"
    assert elf_problem(b"\x7fELF\x01" + bytes(59), "sm_90a").startswith("an ELF file of class 1")
    x86 = bytearray(good)
    x86[18:20] = (62).to_bytes(2, "little")
    assert elf_problem(bytes(x86), "sm_90a") == "an ELF file for machine 62 (type 2), not a CUDA cubin (190)"
    assert elf_problem(good, "compute_90") == "checked against 'compute_90', which is not an SM arch such as 'sm_90a'"
    assert elf_problem("text", "sm_90a") == "a str, not bytes"


def _assemble_in_child(ptx: str, cache_root: str, start, results) -> None:
    import os
    os.environ["LAYOUTKIT_CACHE_DIR"] = cache_root
    cubin_cache.clear_memory()
    start.wait(timeout=60)  # all writers race for the same entry
    cubin = assemble(ptx)
    results.put(hashlib.sha256(cubin.data).hexdigest())


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                    reason="the concurrency test forks its writers")
def test_concurrent_writers_from_several_processes(cache_dir):
    context = multiprocessing.get_context("fork")
    start, results = context.Barrier(4), context.Queue()
    ptx = WGMMA + "// concurrency test\n"
    workers = [context.Process(target=_assemble_in_child,
                               args=(ptx, str(cache_dir.parent), start, results))
               for _ in range(4)]
    for worker in workers:
        worker.start()
    digests = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    assert len(set(digests)) == 1
    (path,) = entry_files(cache_dir)
    assert not [p for p in cache_dir.iterdir() if p.name.startswith(".tmp-")]
    assert cubin_cache._decode(path.read_bytes(), path.stem, ptx) is not None
    cubin_cache.clear_memory()
    assert hashlib.sha256(assemble(ptx).data).hexdigest() == digests[0]


def test_cache_info_and_clear(cache_dir):
    assert cache_info().entries == 0 and cache_info().bytes == 0  # no directory yet
    assert cache_clear() == 0
    assemble(FADD)
    assemble(WGMMA)
    (cache_dir / ".tmp-crashed-writer.part").write_bytes(b"half an entry")
    (cache_dir / "README").write_text("not ours")
    info = cache_info()
    assert info.entries == 2 and info.memory_entries == 2 and str(cache_dir) in str(info)
    assert cache_clear() == 2
    assert sorted(p.name for p in cache_dir.iterdir()) == ["README"]
    assert cache_info().entries == 0 and cache_info().memory_entries == 0


def test_unwritable_cache_warns_and_still_assembles(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("LAYOUTKIT_CACHE_DIR", str(blocker))
    cubin_cache.clear_memory()
    with pytest.warns(CacheWarning, match="LAYOUTKIT_CACHE_DIR"):
        cubin = assemble(FADD)
    assert cubin.data[:4] == b"\x7fELF"
    cubin_cache.clear_memory()


def test_memory_layer_is_bounded(cache_dir, monkeypatch):
    monkeypatch.setattr(cubin_cache, "_MEMORY_CAPACITY", 2)
    for i in range(3):
        assemble(FADD + f"// {i}\n")
    assert cache_info().memory_entries == 2 and cache_info().entries == 3
