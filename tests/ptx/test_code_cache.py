"""The on-disk code objects of generated source (layoutkit.ptx.code_cache): a new process reads
them instead of compiling; a damaged or foreign file is compiled again and rewritten; with the
cache off nothing is written."""
import marshal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from layoutkit.ptx import code_cache
from layoutkit.ptx.fastpath import compile_function

ROOT = Path(__file__).resolve().parents[2]
SOURCE = "def twice(x):\n    return 2 * x + OFFSET\n"
NAME = "<layoutkit test twice>"


@pytest.fixture
def cache(monkeypatch, tmp_path):
    """The cache on, in the test's own directory; in-memory code forgotten before and after."""
    monkeypatch.setenv("LAYOUTKIT_SPEC_CACHE", "1")
    monkeypatch.setenv("LAYOUTKIT_CACHE_DIR", str(tmp_path))
    code_cache._memory.clear()
    yield tmp_path
    code_cache._memory.clear()


def files(root: Path) -> list[Path]:
    return sorted((root / "code").rglob("*" + code_cache.SUFFIX))


def fresh(source=SOURCE, name=NAME):
    """compiled() as a new process calls it: nothing in memory."""
    code_cache._memory.clear()
    return code_cache.compiled(source, name)


def run(code, offset=1):
    namespace = {"OFFSET": offset}
    exec(code, namespace)
    return namespace["twice"](20)


def test_a_new_process_reads_the_code_instead_of_compiling(cache, monkeypatch):
    first = fresh()
    [path] = files(cache)
    assert path.parent.name == sys.implementation.cache_tag
    monkeypatch.setattr(code_cache, "compile", lambda *a: pytest.fail("compiled again"),
                        raising=False)
    again = fresh()
    assert again is not first and again.co_filename == NAME
    assert run(again) == run(first) == 41
    assert code_cache.compiled(SOURCE, NAME) is again          # then from memory


def test_another_source_or_filename_is_another_file(cache):
    fresh()
    fresh(SOURCE.replace("2 * x", "3 * x"))
    fresh(name="<layoutkit test other>")
    assert len(files(cache)) == 3
    assert run(fresh(SOURCE.replace("2 * x", "3 * x"))) == 61


@pytest.mark.parametrize("damage", ["truncate", "flip payload", "flip key", "other magic",
                                    "empty", "not code"])
def test_a_damaged_file_is_compiled_again_and_rewritten(cache, damage):
    fresh()
    [path] = files(cache)
    good = path.read_bytes()
    header = code_cache._HEADER
    if damage == "truncate":
        blob = good[:len(good) // 2]
    elif damage == "flip payload":
        blob = good[:-3] + bytes([good[-3] ^ 0x40]) + good[-2:]
    elif damage == "flip key":
        blob = good[:5] + bytes([good[5] ^ 1]) + good[6:]
    elif damage == "other magic":
        blob = b"\0\0\r\n" + good[4:]
    elif damage == "empty":
        blob = b""
    else:              # a valid container whose payload is not the code of this filename
        import hashlib
        payload = marshal.dumps(compile(SOURCE, "<elsewhere>", "exec"))
        blob = good[:header - 32] + hashlib.sha256(payload).digest() + payload
    path.write_bytes(blob)
    assert run(fresh()) == 41
    assert path.read_bytes() == good           # rewritten whole


def test_the_cache_off_writes_and_reads_nothing(cache, monkeypatch):
    monkeypatch.setenv("LAYOUTKIT_SPEC_CACHE", "0")
    assert run(fresh()) == 41
    assert files(cache) == []


def test_compile_function_serves_its_code_from_disk(cache):
    twice, source = compile_function(SOURCE, "test twice", {"OFFSET": 5})
    assert source == SOURCE and twice(1) == 7
    [path] = files(cache)
    code_cache._memory.clear()
    again, _ = compile_function(SOURCE, "test twice", {"OFFSET": 0})
    assert again(1) == 2 and again.__code__.co_filename == "<layoutkit test twice>"


def test_clear_removes_every_file(cache):
    fresh()
    fresh(name="<layoutkit test other>")
    assert code_cache.clear() == 2 and files(cache) == []


def test_concurrent_processes_leave_whole_files(cache):
    """Four processes compile the same sources at once: every file reads back as valid code."""
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from layoutkit.ptx import code_cache
        for i in range(40):
            code = code_cache.compiled({SOURCE!r} + "# %d\\n" % (i % 8), "<layoutkit race>")
            namespace = {{"OFFSET": 0}}
            exec(code, namespace)
            assert namespace["twice"](3) == 6
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script]) for _ in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    assert len(files(cache)) == 8
    for i in range(8):
        assert run(fresh(SOURCE + "# %d\n" % i, "<layoutkit race>"), 0) == 40
    assert not list((cache / "code").rglob("*.part"))
