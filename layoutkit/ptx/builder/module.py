"""A PTX module: header, module-scope shared memory, kernels, `.file` table; renders byte-stable text.

>>> m = Module(line_info=False)
>>> k = m.kernel("noop", maxntid=128)
>>> _ = k.emit("ret")
>>> print(m.text())
.version 8.0
.target sm_90a
.address_size 64
<BLANKLINE>
.visible .entry noop()
.maxntid 128, 1, 1
{
    ret;
}
<BLANKLINE>
"""
from __future__ import annotations

from .directives import Directives
from .errors import PTXDirectiveError, PTXTargetError
from .kernel import KernelBuilder, check_identifier
from .operands import Symbol
from .target import (DEFAULT_TARGET, DEFAULT_VERSION, MAX_VERSION, Requirement, Target,
                     format_version, parse_version)

# Static shared memory per CTA is capped at 48 KB; more must be the extern dynamic array.
MAX_STATIC_SHARED_BYTES = 48 * 1024


def _is_power_of_two(n) -> bool:
    return isinstance(n, int) and n > 0 and n & (n - 1) == 0


class Module:
    """A PTX module. `version=None` emits .version 8.0, raised automatically (up to 9.0) when a
    used instruction needs more; a fixed `version` makes such instructions an error instead.
    `line_info` emits `.file`/`.loc` mapping instructions to the user's Python lines."""

    def __init__(self, *, version: "str | None" = None, target: str = DEFAULT_TARGET,
                 address_size: int = 64, line_info: bool = True):
        self.target = Target.parse(target)
        self.fixed_version = None if version is None else parse_version(version)
        if self.fixed_version is not None and not (
                self.target.min_version <= self.fixed_version <= MAX_VERSION):
            raise PTXTargetError(f"must be in {format_version(self.target.min_version)}.."
                                 f"{format_version(MAX_VERSION)} for .target {self.target.name} "
                                 "with ptxas 13.0", operand=".version", value=version)
        if address_size != 64:
            raise PTXDirectiveError("layoutkit emits 64-bit modules only",
                                    operand=".address_size", value=address_size)
        self.line_info = line_info
        self.kernels: list[KernelBuilder] = []
        self.symbols: dict[str, str] = {}
        self._module_decls: list[str] = []
        self._static_shared = 0
        self._needed = max(DEFAULT_VERSION, self.target.min_version)
        self._accepted: set[Requirement] = set()    # require() passed them (target, version fixed)

    @property
    def version(self) -> tuple[int, int]:
        """The `.version` that will be emitted."""
        return self.fixed_version or self._needed

    def require(self, requirement: Requirement, instruction: str) -> None:
        """Check an instruction form against the target and version; raise the version if allowed."""
        if requirement in self._accepted:
            return
        problem = requirement.problem(self.target)
        if problem:
            raise PTXTargetError(problem, instruction=instruction)
        if requirement.version > MAX_VERSION:
            raise PTXTargetError(f"needs PTX ISA {format_version(requirement.version)}; ptxas 13.0 "
                                 f"accepts at most {format_version(MAX_VERSION)}",
                                 instruction=instruction)
        if self.fixed_version is not None and requirement.version > self.fixed_version:
            raise PTXTargetError(f"needs PTX ISA {format_version(requirement.version)} but the "
                                 f"module fixes .version {format_version(self.fixed_version)}",
                                 instruction=instruction)
        self._needed = max(self._needed, requirement.version)
        self._accepted.add(requirement)

    def kernel(self, name: str, *, maxntid=None, reqntid=None, minnctapersm=None, maxnreg=None,
               reqnctapercluster=None, explicitcluster=False, maxclusterrank=None) -> KernelBuilder:
        """Add a `.visible .entry name(...)` with the given directives (validated; see directives)."""
        directives = Directives.build(maxntid=maxntid, reqntid=reqntid, minnctapersm=minnctapersm,
                                      maxnreg=maxnreg, reqnctapercluster=reqnctapercluster,
                                      explicitcluster=explicitcluster, maxclusterrank=maxclusterrank)
        if directives.uses_cluster:
            self.require(Requirement(version=(7, 8), sm=90), ".reqnctapercluster")
        self._claim(name, "kernel")
        kernel = KernelBuilder(self, name, directives)
        self.kernels.append(kernel)
        return kernel

    def _claim(self, name: str, what: str) -> None:
        check_identifier(what, name)
        if name in self.symbols:
            raise PTXDirectiveError(f"is already declared in this module as a {self.symbols[name]}",
                                    operand=what, value=name)
        self.symbols[name] = what

    def _shared_declaration(self, name: str, nbytes: int, align: int, kernel=None) -> str:
        self._claim(name, "shared array")
        if not _is_power_of_two(align):
            raise PTXDirectiveError("alignment must be a power of two", operand=name, value=align)
        if not isinstance(nbytes, int) or nbytes < 1:
            raise PTXDirectiveError("a static shared array has a positive byte size",
                                    operand=name, value=nbytes)
        if self._static_shared + nbytes > MAX_STATIC_SHARED_BYTES:
            raise PTXDirectiveError(f"static shared memory would total "
                                    f"{self._static_shared + nbytes} bytes; at most "
                                    f"{MAX_STATIC_SHARED_BYTES} are static, use extern_shared for "
                                    "more (dynamic, up to 227 KB)", operand=name, value=nbytes)
        self._static_shared += nbytes
        return f".shared .align {align} .b8 {name}[{nbytes}];"

    def shared(self, name: str, nbytes: int, *, align: int = 16) -> Symbol:
        """A module-scope static shared array `.shared .align A .b8 name[N];`. Its 32-bit
        shared::cta address is `mov.u32 %r, name` (isa `mov`)."""
        self._module_decls.append(self._shared_declaration(name, nbytes, align))
        return Symbol(name, "shared")

    def extern_shared(self, name: str = "smem", *, align: int = 1024) -> Symbol:
        """The dynamic shared array `.extern .shared .align 1024 .b8 smem[];` (size at launch).
        1024-byte alignment lets a 128B-swizzled tile start at offset 0 (hopper-ptx.md §1)."""
        self._claim(name, "extern shared array")
        if not _is_power_of_two(align):
            raise PTXDirectiveError("alignment must be a power of two", operand=name, value=align)
        self._module_decls.append(f".extern .shared .align {align} .b8 {name}[];")
        return Symbol(name, "shared")

    def file_index(self) -> dict[str, int]:
        """Source files in first-use order, numbered from 1 (the `.file` table)."""
        index: dict[str, int] = {}
        for kernel in self.kernels:
            for line in kernel.lines:
                if line.location is not None and line.location.file not in index:
                    index[line.location.file] = len(index) + 1
        return index

    def text(self) -> str:
        """The module's PTX. Same construction -> same bytes."""
        files = self.file_index() if self.line_info else None
        out = [f".version {format_version(self.version)}", f".target {self.target.name}",
               ".address_size 64", ""]
        if files:
            for path, number in files.items():
                escaped = path.replace("\\", "\\\\").replace('"', '\\"')
                out.append(f'.file {number} "{escaped}"')
            out.append("")
        if self._module_decls:
            out += self._module_decls + [""]
        for kernel in self.kernels:
            out += [kernel.text(files), ""]
        return "\n".join(out)

    __str__ = text
