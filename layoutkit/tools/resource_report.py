"""`layoutkit compile RECIPE --resources`: what each kernel costs an SM, in one table per kernel.

Two sources, each for what only it knows:

- the traced IR (a `layoutkit.dsl.Specialization`): the warp roles and the register budget each
  sets with setmaxnreg (the `warp_role` ops), the dynamic shared memory buffer by buffer (the
  Function's `shared` allocations: name, offset, bytes, alignment, what made it and where),
  the mbarrier arrays (the `mbarrier_init` ops: stages and arrivals per phase) and the named
  barrier ids;
- ptxas (`ptxas -v`, parsed by layoutkit.ptx.resources): registers per thread at entry, the
  hardware barriers used, static shared memory, spills and stack, and its performance notes
  (C75xx: the wgmma pipeline it serialized or patched; C7508: setmaxnreg ignored), plus the
  entry's performance directives as the PTX gives them to ptxas.

PTX that no `Kernel.specialize` made (a recipe returning hand-written text) has no IR: its
report says so and shows what ptxas knows.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from layoutkit.sync import WARPGROUP_THREADS

KIB = 1024


@dataclass(frozen=True)
class RoleBudget:
    """A warp role of a warp-specialized kernel: its warpgroups and the registers per thread
    it runs with (`registers` None: the entry cap, no setmaxnreg)."""

    name: str
    first_warpgroup: int
    warpgroups: int
    registers: int | None
    setmaxnreg: str | None        # "inc", "dec" or None

    @property
    def threads(self) -> int:
        return WARPGROUP_THREADS * self.warpgroups


@dataclass(frozen=True)
class MbarrierArrayUse:
    """An mbarrier array the kernel initialises: `stages` barriers of `arrive_count` arrivals."""

    name: str
    stages: int
    arrive_count: int


def _ops(block):
    for op in block.ops:
        yield op
        for inner in op.blocks:
            yield from _ops(inner)


def roles_of(ir) -> list[RoleBudget]:
    """The warp roles of a traced kernel (its top-level `warp_role` ops), by first warpgroup."""
    roles = [RoleBudget(op.attrs["role"], op.attrs["warpgroups"][0], op.attrs["warpgroups"][1],
                        op.attrs.get("registers"), op.attrs.get("setmaxnreg"))
             for op in ir.body.ops if op.name == "warp_role"]
    return sorted(roles, key=lambda r: r.first_warpgroup)


def mbarriers_of(ir) -> list[MbarrierArrayUse]:
    """The mbarrier arrays a traced kernel initialises, in the order it initialises them."""
    return [MbarrierArrayUse(op.attrs["barrier"], op.attrs["stages"], op.attrs["arrive_count"])
            for op in _ops(ir.body) if op.name == "mbarrier_init"]


def named_barrier_ids(ir) -> list[int]:
    """The named-barrier ids (bar.sync / bar.arrive with an id) a traced kernel uses."""
    return sorted({op.attrs["id"] for op in _ops(ir.body) if op.name == "named_barrier"})


# ---- formatting ---------------------------------------------------------------------------------
def table(header: tuple[str, ...], rows: list[tuple], indent: str = "   ") -> list[str]:
    """Aligned columns: numbers right-aligned, text left-aligned, two spaces apart.

    >>> print("\\n".join(table(("buffer", "bytes"), [("sA", 65536), ("full", 32)], "")))
    buffer  bytes
    sA      65536
    full       32
    """
    cells = [tuple("" if c is None else str(c) for c in row) for row in rows]
    numeric = [all(isinstance(row[i], int) or row[i] is None for row in rows) and rows != []
               for i in range(len(header))]
    widths = [max([len(header[i])] + [len(row[i]) for row in cells]) for i in range(len(header))]

    def line(row):
        parts = [c.rjust(w) if num else c.ljust(w) for c, w, num in zip(row, widths, numeric)]
        return (indent + "  ".join(parts)).rstrip()
    return [line(header)] + [line(row) for row in cells]


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}" + ("" if n == 1 else "s")


def _kib(nbytes: int) -> str:
    return f"{nbytes} B ({nbytes / KIB:.1f} KiB)" if nbytes >= KIB else f"{nbytes} B"


def _directives(found: dict) -> str:
    return "; ".join(f".{name} {', '.join(map(str, numbers))}"
                     for name, numbers in found.items()) or "none"


def _where(location) -> str:
    return f"{Path(location.file).name}:{location.line}" if location is not None else "?"


def _shared_rows(ir) -> list[tuple]:
    rows, end = [], 0
    for alloc in sorted(ir.shared, key=lambda a: a.offset):
        if alloc.offset > end:
            rows.append(("(padding)", end, alloc.offset - end, None, "alignment", ""))
        rows.append((alloc.name, alloc.offset, alloc.nbytes, alloc.align, alloc.what,
                     _where(alloc.location)))
        end = max(end, alloc.offset + alloc.nbytes)
    return rows


def entry_report(usage, directives: dict, ir=None) -> list[str]:
    """The lines of one entry's report: ptxas's `usage` (ResourceUsage), the entry's PTX
    `directives` (layoutkit.ptx.resources.entry_directives) and, when known, its traced IR."""
    spilled = usage.spill_store_bytes + usage.spill_load_bytes
    summary = [
        ("directives", _directives(directives)),
        ("registers", f"{usage.registers} per thread at entry (ptxas)"),
        ("spills", ("none" if not spilled else f"{usage.spill_store_bytes} B stores, "
                    f"{usage.spill_load_bytes} B loads")
         + f"; stack frame {usage.stack_frame_bytes} B"
         + (f", {usage.cumulative_stack_bytes} B cumulative" if usage.cumulative_stack_bytes
            else "")),
    ]
    roles = mbarriers = ids = ()
    if ir is not None:
        roles, mbarriers, ids = roles_of(ir), mbarriers_of(ir), named_barrier_ids(ir)
        summary.append(("roles", f"{len(roles)} warp roles (registers after setmaxnreg below)"
                        if roles else "none (every warp keeps the entry registers)"))
        summary.append(("shared", f"{_kib(ir.shared_bytes)} dynamic"
                        + (f" in {_count(len(ir.shared), 'buffer')}" if ir.shared else "")
                        + f"; {usage.shared_bytes} B static (ptxas)"))
        stages = sum(m.stages for m in mbarriers)
        summary.append(("mbarriers", f"{stages} in {_count(len(mbarriers), 'array')}"
                        if mbarriers else "none"))
    else:
        summary.append(("shared", f"{usage.shared_bytes} B static (ptxas); dynamic unknown: "
                                  "this PTX was not made by Kernel.specialize (no IR)"))
    summary.append(("barriers", f"{_count(usage.barriers, 'hardware barrier')} (ptxas)" +
                    (f"; named barrier ids {', '.join(map(str, ids))}" if ids else "")))
    notes = list(usage.performance_notes)
    if usage.setmaxnreg_ignored:
        notes.insert(0, "(C7508) setmaxnreg ignored: no register cap at entry")
    summary.append(("ptxas notes", notes[0] if notes else "none"))
    summary += [("", note) for note in notes[1:]]
    width = max(len(label) for label, _ in summary)
    out = [f"   {label:<{width}}  {text}".rstrip() for label, text in summary]
    if roles:
        rows = [(r.name, f"{r.first_warpgroup}" if r.warpgroups == 1 else
                 f"{r.first_warpgroup}-{r.first_warpgroup + r.warpgroups - 1}", r.threads,
                 r.registers if r.registers is not None else usage.registers,
                 r.setmaxnreg or "-") for r in roles]
        rows = [row + (row[2] * row[3],) for row in rows]
        rows.append(("total", "", sum(row[2] for row in rows), None, "",
                     sum(row[5] for row in rows)))
        out += [""] + table(("role", "warpgroups", "threads", "registers", "setmaxnreg",
                             "regs x threads"), rows)
    if ir is not None and ir.shared:
        out += [""] + table(("buffer", "offset", "bytes", "align", "made by", "at"),
                            _shared_rows(ir) + [("total", None, ir.shared_bytes, None, "", "")])
    if mbarriers:
        out += [""] + table(("mbarrier array", "stages", "arrivals per phase"),
                            [(m.name, m.stages, m.arrive_count) for m in mbarriers])
    return out


def format_resources(compiled) -> str:
    """The report of a CompiledSpecialization (layoutkit.tools.recipe_runner): one block per
    entry of its cubin; the IR's facts go with the entry the Specialization traced."""
    from layoutkit.ptx.resources import entry_directives
    directives = entry_directives(compiled.ptx)
    spec = compiled.specialization
    out = []
    for entry, usage in compiled.cubin.resources.items():
        ir = spec.ir if spec is not None and spec.ir.name == entry else None
        out.append(f"   entry {entry} ({compiled.cubin.arch})")
        out += entry_report(usage, directives.get(entry, {}), ir)
    return "\n".join(out)
