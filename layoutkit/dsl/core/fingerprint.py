"""What a kernel's persistent cache entries are keyed on besides the specialization key: the
kernel function's *fingerprint* (its source and every value it closes over) and the
*environment* that turns a trace into a cubin.

The fingerprint is a sha256 over a canonical text of:

    the function          module, qualname, file, first line, source text (its lines in the file),
                          defaults, and each closure cell's value
    each global it reads  every name its code (nested functions and lambdas included) loads
                          that its module's globals define, by value (a name only builtins
                          define is its name; a name defined nowhere is an attribute)
    functions it reads    the same, recursively (a helper edited elsewhere changes it too)
    classes it reads      module, qualname, bases and every attribute (methods recursively)
    modules it reads      layoutkit's: their name (layoutkit's source is in the environment);
                          an installed library's: its name and version; any other module's:
                          its name and the values of the names the code reads from it

Values are written down by `canonical`: None, bools, numbers, strings, bytes, tuples and
frozensets of values, enums, frozen dataclass instances, layoutkit's immutable values (layouts,
swizzles, dtypes: their repr), functions (functools.lru_cache'd ones and partials too), classes
and modules. Anything else (a list, a dict, an
object whose repr is its address) has no stable text: `NotCacheable` names it, and the kernel is
traced in every process as before.

The environment is layoutkit's own source (a sha256 of every .py file of the package), the
ptxas version, the Python and sympy versions (sympy's installed one, whether or not the process
has imported it yet); the source digest and the ptxas and sympy versions are remembered in a
small JSON file of the cache, valid while the files' sizes and modification times stay the same
(so a new process reads neither the package's source nor runs ptxas to find them).
"""
from __future__ import annotations

import builtins
import dataclasses
import enum
import functools
import hashlib
import importlib.util
import json
import os
import linecache
import site
import sys
import sysconfig
import types
import weakref
from pathlib import Path

__all__ = ["NotCacheable", "canonical", "function_fingerprint", "environment",
           "environment_digest", "layoutkit_source_digest", "digest"]

PACKAGE_ROOT = Path(__file__).resolve().parents[2]      # layoutkit/
_ATOMS = (type(None), bool, int, float, complex, str, bytes)


class NotCacheable(Exception):
    """Why a kernel or a specialization key cannot be written down for the on-disk cache:
    `reason` names the thing, its value and the rule."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def digest(*parts: str) -> str:
    """Hex sha256 of the parts, each length-prefixed (no two part lists collide)."""
    h = hashlib.sha256()
    for part in parts:
        raw = part.encode()
        h.update(len(raw).to_bytes(8, "little") + raw)
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    """The standard library's directory and the site-packages directories, resolved (site's
    list: ~0.05 ms, where sysconfig.get_paths() first takes ~1.2 ms)."""
    try:
        found = [os.path.dirname(os.__file__), *site.getsitepackages()]
    except AttributeError:              # an old virtualenv's site module
        paths = sysconfig.get_paths()
        found = [paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths]
    return tuple(sorted({os.path.realpath(p) for p in found}))


def _is_layoutkit(name: str) -> bool:
    return name == "layoutkit" or name.startswith("layoutkit.")


def _is_library(module: types.ModuleType) -> bool:
    """A module of the standard library or an installed package (or a built-in one)."""
    file = getattr(module, "__file__", None)
    if file is None:
        return True
    found = _LIBRARY_FILES.get(file)
    if found is None:        # resolving the path (its symlinks) costs ~40 µs: once per file
        path = os.path.realpath(file)
        found = _LIBRARY_FILES[file] = any(path.startswith(root + "/") for root in _library_roots())
    return found


_LIBRARY_FILES: dict[str, bool] = {}      # a module's __file__ -> whether it is a library's


def _version_of(module_name: str) -> str:
    top = sys.modules.get(module_name.split(".")[0])
    return str(getattr(top, "__version__", ""))


class _Walker:
    """One fingerprint's walk: canonical text of values, functions visited once each."""

    def __init__(self):
        self.visiting: set[int] = set()
        self.done: dict[int, str] = {}
        self.keep: list = []          # the functions visited, alive while their ids are keys
        self.reads: list[tuple] = []  # (how, where, name, the value read): see _still_read
        self.files: dict = {}         # each source file checked against linecache's -> _stamp
        self.refs = 0                 # fn-ref / class-ref texts written (cycles)
        self.spans: dict[int, tuple[int, int]] = {}  # a walked function or class -> its reads
        self.contextual: set[int] = set()  # those whose text names something walked above it

    # ---- values --------------------------------------------------------------------------
    def value(self, value, what: str) -> str:
        t = type(value)
        if t in _ATOMS:
            return f"{t.__name__}:{value!r}"
        if isinstance(value, enum.Enum):
            return f"enum:{t.__module__}.{t.__qualname__}.{value.name}"
        if isinstance(value, tuple):
            items = ",".join(self.value(v, f"{what}[{i}]") for i, v in enumerate(value))
            return f"({items})" if t is tuple else f"{self.cls(t, what)}({items})"
        if t is frozenset:
            return "frozenset{" + ",".join(sorted(self.value(v, f"an item of {what}")
                                                  for v in value)) + "}"
        if isinstance(value, types.ModuleType):
            return self.module(value, (), what)
        if isinstance(value, types.FunctionType):
            return self.function(value)
        if isinstance(value, (types.BuiltinFunctionType, types.BuiltinMethodType)):
            owner = getattr(value, "__self__", None)
            if owner is None or isinstance(owner, types.ModuleType):
                module = getattr(value, "__module__", None) or getattr(owner, "__name__", "")
                return f"builtin:{module}.{value.__qualname__}@{_version_of(module)}"
        if isinstance(value, types.MethodType):
            return f"method:{self.value(value.__self__, what)}.{self.function(value.__func__)}"
        if type(value).__module__ == "functools" and \
                isinstance(getattr(value, "__wrapped__", None), types.FunctionType):
            return f"cached:{self.function(value.__wrapped__)}"    # functools.lru_cache / cache
        if isinstance(value, functools.partial):
            return (f"partial:{self.value(value.func, what)}"
                    f"{self.value(tuple(value.args), what)}"
                    f"{self.value(tuple(sorted(value.keywords.items())), what)}")
        if isinstance(value, type):
            return self.cls(value, what)
        fn = getattr(value, "fn", None)
        if t.__module__ == "layoutkit.dsl.core.kernel" and isinstance(fn, types.FunctionType):
            return f"kernel:{self.function(fn)}:{value.identity()}"   # another @lk.kernel
        if dataclasses.is_dataclass(t) and t.__dataclass_params__.frozen:
            fields = ",".join(f"{f.name}={self.value(getattr(value, f.name), f'{what}.{f.name}')}"
                              for f in dataclasses.fields(value))
            return f"{self.cls(t, what)}({fields})"
        if _is_layoutkit(t.__module__) or t.__module__.split(".")[0] == "numpy":
            text = repr(value)
            try:
                hash(value)
            except TypeError:
                text = " at 0x"          # mutable: refused below
            if " at 0x" not in text:
                return f"{t.__module__}.{t.__qualname__}:{text}"
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise NotCacheable(f"{what} is a {t.__name__} ({shown}), which the specialization "
                           "cache cannot write down (it keys on numbers, strings, tuples, frozen "
                           "dataclasses, layouts, functions, classes and modules; a list, dict "
                           "or other mutable object could change between processes)")

    def module(self, module: types.ModuleType, names, what: str) -> str:
        name = module.__name__
        if _is_layoutkit(name):
            return f"module:{name}"
        if _is_library(module):
            return f"module:{name}@{_version_of(name)}"
        read = []
        for attr in sorted(names):
            found = getattr(module, attr, _ABSENT)
            self.reads.append((_ATTRIBUTE, module, attr, found))
            if found is not _ABSENT:
                read.append(f"{attr}={self.value(found, f'{name}.{attr}')}")
        return f"module:{name}{{{','.join(read)}}}"

    def cls(self, t: type, what: str) -> str:
        name = f"{t.__module__}.{t.__qualname__}"
        if _is_layoutkit(t.__module__) or t.__module__ == "builtins":
            return f"class:{name}"
        module = sys.modules.get(t.__module__)
        if module is None or _is_library(module):
            return f"class:{name}@{_version_of(t.__module__)}"
        key = id(t)
        if key in self.done:
            return self._again(key)
        if key in self.visiting:
            self.refs += 1
            return f"class-ref:{name}"
        refs, first_read = self.refs, len(self.reads)
        self.visiting.add(key)
        self.keep.append(t)
        parts = [f"class:{name}", "bases=" + ",".join(self.cls(b, what) for b in t.__bases__
                                                      if b is not object)]
        members = vars(t)
        self.reads.append((_ATTRIBUTE, t, "__bases__", t.__bases__))
        self.reads.append((_KEYS, members, None, tuple(members)))
        for attr, member in sorted(members.items()):
            self.reads.append((_ITEM, members, attr, member))
            if attr.startswith("__") and attr not in ("__init__", "__post_init__", "__call__"):
                continue
            for f in (member.fget, member.fset) if isinstance(member, property) else (member,):
                if isinstance(f, (staticmethod, classmethod)):
                    f = f.__func__
                if f is not None:
                    parts.append(f"{attr}={self.value(f, f'{name}.{attr}')}")
        self.visiting.discard(key)
        text = self.done[key] = "{" + ";".join(parts) + "}"
        self._walked(key, refs, first_read)
        return text

    def _walked(self, key: int, refs: int, first_read: int) -> None:
        """Keep where a function's or class's reads lie, and whether its text depends on the
        walk above it (a cycle: its subtree wrote a reference)."""
        self.spans[key] = (first_read, len(self.reads))
        if self.refs != refs:
            self.contextual.add(key)

    def _again(self, key: int) -> str:
        """The text of a function or class this walk has written already: its reads count again
        (a memo of the function reading it must see them) and so does its dependence on the
        walk above it."""
        start, end = self.spans[key]
        self.reads += self.reads[start:end]
        if key in self.contextual:
            self.refs += 1
        return self.done[key]

    # ---- functions -------------------------------------------------------------------------
    def function(self, fn: types.FunctionType) -> str:
        key = id(fn)
        if key in self.done:
            return self._again(key)
        name = f"{fn.__module__}.{fn.__qualname__}"
        if key in self.visiting:
            self.refs += 1
            return f"fn-ref:{name}"
        module = sys.modules.get(fn.__module__ or "")
        if fn.__module__ and _is_layoutkit(fn.__module__) and module is not None:
            return f"fn:{name}"         # layoutkit's own code: in the environment's digest
        if module is not None and _is_library(module):
            return f"fn:{name}@{_version_of(fn.__module__)}"
        refs, first_read = self.refs, len(self.reads)
        memo = _FUNCTIONS.get(fn)
        if memo is not None and _still_read(memo[1]):
            self.reads += memo[1]
            self.keep.append(fn)
            self.done[key] = memo[0]
            self._walked(key, refs, first_read)
            return memo[0]
        self.visiting.add(key)
        self.keep.append(fn)
        code = fn.__code__
        self.reads.append((_ATTRIBUTE, fn, "__code__", code))
        source = self.source(code)
        if source is None:
            raise NotCacheable(f"function {fn.__qualname__} has no source file to read "
                               f"({code.co_filename}), so an edit to it could not be noticed")
        names = _names_read(code)
        parts = [f"fn:{name}", code.co_filename, str(code.co_firstlineno), source]
        scope = fn.__globals__
        for n in sorted(names):
            self.reads.append((_ITEM, scope, n, scope.get(n, _ABSENT)))
            if n in scope:
                value = scope[n]
                what = f"global {n} (read by {fn.__qualname__})"
                if isinstance(value, types.ModuleType):
                    parts.append(f"{n}={self.module(value, names, what)}")
                else:
                    parts.append(f"{n}={self.value(value, what)}")
            elif hasattr(builtins, n):
                parts.append(f"{n}=builtin")
        cells = fn.__closure__ or ()
        for n, cell in zip(code.co_freevars, cells):
            try:
                contents = cell.cell_contents
                self.reads.append((_CELL, cell, None, contents))
            except ValueError:
                self.reads.append((_CELL, cell, None, _ABSENT))
                parts.append(f"{n}=<empty cell>")
                continue
            parts.append(f"{n}={self.value(contents, f'{n} (a variable {fn.__qualname__} closes over)')}")
        self.reads.append((_ATTRIBUTE, fn, "__defaults__", fn.__defaults__))
        self.reads.append((_ATTRIBUTE, fn, "__kwdefaults__", fn.__kwdefaults__))
        parts.append("defaults=" + self.value(tuple(fn.__defaults__ or ()),
                                              f"the defaults of {fn.__qualname__}"))
        parts.append("kwdefaults=" + self.value(tuple(sorted((fn.__kwdefaults__ or {}).items())),
                                                f"the keyword defaults of {fn.__qualname__}"))
        self.visiting.discard(key)
        text = self.done[key] = "[" + "|".join(parts) + "]"
        self._walked(key, refs, first_read)
        if self.refs == refs:       # no cycle through a caller: the text stands alone
            _FUNCTIONS[fn] = (text, self.reads[first_read:])
        return text


    def source(self, code: types.CodeType) -> str | None:
        """_source of `code`, its file checked against linecache's copy once per walk (and its
        stamp kept: a memo of this walk is stale once the file changes)."""
        stamp = self.files.get(code.co_filename, _ABSENT)
        if stamp is _ABSENT:
            stamp = self.files[code.co_filename] = _stamp(code.co_filename)   # before reading
            linecache.checkcache(code.co_filename)     # a file edited since it was read
        self.reads.append((_FILE, code.co_filename, None, stamp))
        return _source(code)


def _source(code: types.CodeType) -> str | None:
    """The source lines of `code`: from its first line (its first decorator's) to the last line
    any of its code (nested code included) was compiled from; None without a source file (the
    caller checks linecache's copy against the file)."""
    lines = linecache.getlines(code.co_filename)
    if not lines:
        return None
    last = _last_line(code)
    return "".join(lines[code.co_firstlineno - 1:last])


def _last_line(code: types.CodeType) -> int:
    last = max((line for _, _, line in code.co_lines() if line is not None),
               default=code.co_firstlineno)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            last = max(last, _last_line(const))
    return last


def _names_read(code: types.CodeType) -> set[str]:
    """co_names of `code` and of every code object nested in it (inner functions, lambdas,
    comprehensions): the global and attribute names it may load."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names_read(const)
    return names


def canonical(value, what: str = "the value") -> str:
    """The canonical text of a value the cache can key on (see the module docstring); raises
    NotCacheable naming `what` otherwise.

    >>> canonical((1, "N", True, None))
    "(int:1,str:'N',bool:True,NoneType:None)"
    >>> canonical([1, 2], "constexpr X")
    Traceback (most recent call last):
    ...
    layoutkit.dsl.core.fingerprint.NotCacheable: constexpr X is a list ([1, 2]), which the specialization cache cannot write down (it keys on numbers, strings, tuples, frozen dataclasses, layouts, functions, classes and modules; a list, dict or other mutable object could change between processes)
    """
    return _Walker().value(value, what)


def function_fingerprint(fn) -> str:
    """Hex sha256 of `fn`'s source and everything it closes over (module docstring); raises
    NotCacheable naming what cannot be written down.

    Computed once per function while it stays the same: the walk's every read (a global, a
    closure cell, a module's or class's attribute, the defaults) is kept and a later call
    re-reads them (identity) and re-stats the source files, walking again where one changed
    (~0.1 ms against the walk's 2-5 ms for a recipe's kernel)."""
    memo = _FINGERPRINTS.get(fn)
    if memo is not None and _still_read(memo[1]):
        return memo[0]
    walker = _Walker()
    found = digest(walker.function(fn))
    _FINGERPRINTS[fn] = (found, walker.reads)
    return found


# The memos: a function -> (its fingerprint, the reads of its walk), and a function walked inside
# another's walk -> (its text, its reads), kept where its text names no caller (a cycle: fn-ref),
# so a helper several kernels read is walked once.
_FINGERPRINTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_FUNCTIONS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_ABSENT = object()                  # a name or attribute that was not there when read
_ITEM, _ATTRIBUTE, _CELL, _KEYS, _FILE = range(5)


def _stamp(filename: str) -> tuple | None:
    """(mtime_ns, size) of a file, None when it cannot be read."""
    try:
        st = os.stat(filename)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _still_read(reads: list) -> bool:
    """Whether every read of a walk finds the same object again and every source file it read
    has its stamp: its text would be the same."""
    stamps: dict = {}
    for how, where, name, value in reads:
        if how == _FILE:
            now = stamps.get(where)
            if now is None:
                now = stamps[where] = _stamp(where)
            if now != value:
                return False
            continue
        if how == _ITEM:
            now = where.get(name, _ABSENT)
        elif how == _ATTRIBUTE:
            now = getattr(where, name, _ABSENT)
        elif how == _CELL:
            try:
                now = where.cell_contents
            except ValueError:
                now = _ABSENT
        else:
            now = value if tuple(where) == value else _ABSENT
        if now is not value:
            return False
    return True


def _python_files(root: str) -> list[tuple[str, int, int]]:
    """(path, size, mtime_ns) of every .py file under `root`, sorted."""
    found, pending = [], [root]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__":
                        pending.append(entry.path)
                elif entry.name.endswith(".py"):
                    st = entry.stat()
                    found.append((entry.path, st.st_size, st.st_mtime_ns))
    return sorted(found)


def _memo(path: Path | None) -> dict:
    """The memo file's object ({} when absent or unreadable), parsed once while its stamp holds
    (environment() reads it twice)."""
    if path is None:
        return {}
    stamp = _stamp(path)
    if stamp is not None and _MEMO_READ.get(path, (None,))[0] == stamp:
        return dict(_MEMO_READ[path][1])
    try:
        memo = json.loads(path.read_text())
        memo = memo if isinstance(memo, dict) else {}
    except (OSError, ValueError):
        return {}
    if stamp is not None:
        _MEMO_READ[path] = (stamp, dict(memo))
    return memo


_MEMO_READ: dict = {}       # memo path -> (its _stamp when read, its object)


@functools.lru_cache(maxsize=4)
def layoutkit_source_digest(memo_path: Path | None = None) -> str:
    """Hex sha256 of every .py file of the layoutkit package (paths and contents). With
    `memo_path` (a JSON file), the digest of a file list whose paths, sizes and modification
    times (ns) are all unchanged is read from there instead of reading every file again."""
    files = _python_files(str(PACKAGE_ROOT))
    stats = hashlib.sha256("\n".join(f"{path}\0{size}\0{mtime}" for path, size, mtime in files)
                           .encode()).hexdigest()
    memo = _memo(memo_path)
    if memo.get("source_stats") == stats and isinstance(memo.get("source_digest"), str):
        return memo["source_digest"]
    h = hashlib.sha256()
    for path, _, _ in files:
        h.update(os.path.relpath(path, PACKAGE_ROOT).encode() + b"\0" +
                 Path(path).read_bytes() + b"\0")
    found = h.hexdigest()
    _remember(memo_path, source_stats=stats, source_digest=found)
    return found


def _ptxas_text(memo_path: Path | None) -> str:
    """`ptxas --version`'s text, read from the memo while the executable's path, size and
    modification time are the same."""
    from layoutkit.ptx.toolchain import find_ptxas, ptxas_version
    path = find_ptxas()
    st = path.stat()
    stats = f"{path}:{st.st_size}:{st.st_mtime_ns}"
    memo = _memo(memo_path)
    if memo.get("ptxas_stats") == stats and isinstance(memo.get("ptxas"), str):
        return memo["ptxas"]
    text = ptxas_version(path).text
    _remember(memo_path, ptxas_stats=stats, ptxas=text)
    return text


def _remember(memo_path: Path | None, **fields) -> None:
    if memo_path is None:
        return
    from layoutkit.ptx.cache import write_atomically
    memo = _memo(memo_path)
    memo.update(fields)
    try:
        memo_path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(memo_path, json.dumps(memo, sort_keys=True).encode())
    except OSError:
        pass


def _sympy_version(memo_path: Path | None) -> str:
    """The installed sympy's version ('' without one), the same whether or not this process
    has imported sympy yet (a trace imports it at its first symbolic value): read from the memo
    while sympy's __init__.py keeps its path and stamp, else from the module or the package's
    metadata (~40 ms, once per installed version)."""
    module = sys.modules.get("sympy")
    origin = getattr(module, "__file__", None)
    if origin is None:
        try:
            spec = importlib.util.find_spec("sympy")
        except (ImportError, ValueError):
            spec = None
        origin = getattr(spec, "origin", None)
    if origin is None:
        return ""
    stats = f"{origin}:{_stamp(origin)}"
    memo = _memo(memo_path)
    if memo.get("sympy_stats") == stats and isinstance(memo.get("sympy"), str):
        return memo["sympy"]
    version = getattr(module, "__version__", None)
    if not isinstance(version, str):
        from importlib import metadata
        try:
            version = metadata.version("sympy")
        except metadata.PackageNotFoundError:
            version = ""
    _remember(memo_path, sympy_stats=stats, sympy=version)
    return version


def environment(memo_path: Path | None = None) -> dict[str, str]:
    """What turns the same trace into other code: layoutkit's source, ptxas, Python, sympy
    (`memo_path`: where the source digest and ptxas's and sympy's versions are remembered
    across processes, see layoutkit_source_digest)."""
    return {"layoutkit_source": layoutkit_source_digest(memo_path),
            "layoutkit": str(getattr(sys.modules.get("layoutkit"), "__version__", "")),
            "ptxas": _ptxas_text(memo_path),
            "python": ".".join(map(str, sys.version_info[:3])),
            "sympy": _sympy_version(memo_path)}


def environment_digest(env: dict[str, str] | None = None) -> str:
    """Hex sha256 of `environment()` (or of `env`)."""
    env = environment() if env is None else env
    return digest(*(f"{k}={v}" for k, v in sorted(env.items())))
