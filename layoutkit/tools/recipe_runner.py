"""Recipes as the command line sees them: a recipe is a module of the ``recipes`` package (or
any Python file given by path) that defines ``compile_default() -> {name: ptx}`` (the
specializations it builds by default, no GPU needed) and, for ``layoutkit run``, ``check()``
(runs on random inputs against a reference, raising on a mismatch) and ``benchmark()`` (times it
beside the library doing the same work). Recipes are imported by name (``recipes.softmax``),
never by a path relative to the working directory.
"""
from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

RECIPE_PACKAGE = "recipes"


class RecipeError(ValueError):
    """A recipe that cannot be found or does not follow the recipe protocol."""


def recipe_names() -> list[str]:
    """The recipes of the ``recipes`` package (helper modules ``_<name>`` excluded)."""
    try:
        package = importlib.import_module(RECIPE_PACKAGE)
    except ModuleNotFoundError:
        return []
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__)
                  if not m.name.startswith("_") and not m.ispkg)


def load_module(path: str | Path) -> ModuleType:
    """The Python file at `path`, executed as module ``layoutkit_recipe_<stem>`` (a recipe of
    the author's own, outside the ``recipes`` package)."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location(f"layoutkit_recipe_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module     # dataclasses and pickling look their module up there
    spec.loader.exec_module(module)
    return module


def recipe_stem(name_or_path: str) -> str:
    """``softmax`` for ``softmax``, ``recipes.softmax`` or ``some/dir/softmax.py``."""
    return Path(name_or_path).stem if name_or_path.endswith(".py") \
        else name_or_path.rsplit(".", 1)[-1]


def load_recipe(name_or_path: str) -> ModuleType:
    """A recipe by name (``softmax``, ``recipes.softmax``) or by the path of a ``.py`` file."""
    if name_or_path.endswith(".py"):
        path = Path(name_or_path)
        if not path.is_file():
            raise RecipeError(f"recipe {name_or_path!r}: no such file")
        module = load_module(path)
    else:
        stem = recipe_stem(name_or_path)
        if stem not in recipe_names():
            raise RecipeError(f"recipe {name_or_path!r}: not a module of the {RECIPE_PACKAGE} "
                              f"package (recipes: {', '.join(recipe_names()) or 'none'}); "
                              "give a path ending in .py for a recipe file of your own")
        module = importlib.import_module(f"{RECIPE_PACKAGE}.{stem}")
    if not callable(getattr(module, "compile_default", None)):
        raise RecipeError(f"recipe {name_or_path}: defines no compile_default() -> {{name: ptx}}")
    return module


@dataclass(frozen=True)
class DefaultSpecialization:
    """One entry of a recipe's compile_default(): its name, PTX and the Specialization that
    Kernel.specialize made it from (IR, timings; None for PTX made some other way)."""

    recipe: str
    name: str
    ptx: str
    specialization: object | None     # layoutkit.dsl.Specialization


def default_specializations(name_or_path: str) -> list[DefaultSpecialization]:
    """A recipe's compile_default() with the Specialization behind each PTX text.

    The recipe protocol stays {name: ptx}: the recipe states its defaults once, and
    `Specialization.collected()` observes the specializations its kernels return meanwhile;
    each text is matched to the one whose PTX it is."""
    from layoutkit.dsl import Specialization
    module = load_recipe(name_or_path)
    with Specialization.collected() as made:
        texts = module.compile_default()
    by_ptx = {spec.ptx: spec for spec in made}
    stem = recipe_stem(name_or_path)
    return [DefaultSpecialization(stem, name, text, by_ptx.get(text))
            for name, text in texts.items()]


@dataclass(frozen=True)
class CompiledSpecialization:
    """A recipe's default specialization assembled: PTX, cubin, and (when Kernel.specialize
    made it) the Specialization, whose IR the resource report reads."""

    recipe: str
    name: str
    ptx: str
    cubin: object                       # layoutkit.ptx.Cubin
    specialization: object | None = None

    def resource_line(self) -> str:
        """registers, dynamic shared memory (from the IR; ptxas sees only static) and spills."""
        usage = next(iter(self.cubin.resources.values()))
        spec = self.specialization
        smem = f"{spec.ir.shared_bytes} B dynamic smem" if spec is not None \
            else f"{usage.shared_bytes} B static smem"
        return (f"{usage.registers} registers, {smem}, "
                f"{usage.spill_store_bytes + usage.spill_load_bytes} B spilled")

    def resource_table(self) -> str:
        """The full report: see layoutkit.tools.resource_report."""
        from layoutkit.tools.resource_report import format_resources
        return format_resources(self)


def compile_recipe(name_or_path: str) -> list[CompiledSpecialization]:
    """Assemble every default specialization of a recipe for sm_90a (no GPU needed)."""
    from layoutkit import ptx
    return [CompiledSpecialization(d.recipe, d.name, d.ptx, d.specialization.cubin
                                   if d.specialization is not None else ptx.assemble(d.ptx),
                                   d.specialization)
            for d in default_specializations(name_or_path)]


# ---- running recipes on a GPU -----------------------------------------------------------------
RATIO_KEYS = ("speedup", "ratio", "vs_copy")   # layoutkit relative to the reference (> 1: faster)
CASE_KEYS = ("case", "dtype", "m", "n", "k", "config")


@dataclass(frozen=True)
class BenchmarkLine:
    """One row of the summary table: recipe, case, and layoutkit's speed relative to the
    reference library in the same run (> 1: layoutkit is faster)."""

    recipe: str
    case: str
    ratio: float


def summarize(recipe: str, rows) -> list[BenchmarkLine]:
    """A recipe's benchmark() rows (dicts) as summary lines: the case from its "case" key (or
    dtype/m/n/k/config), the ratio from "speedup", "ratio" or "vs_copy"."""
    lines = []
    for row in rows or ():
        ratio = next((row[key] for key in RATIO_KEYS if key in row), None)
        if ratio is None:
            raise RecipeError(f"recipe {recipe}: a benchmark() row has none of {RATIO_KEYS}: {row}")
        case = row.get("case") or " ".join(f"{key}={row[key]}" for key in CASE_KEYS[1:]
                                           if key in row)
        lines.append(BenchmarkLine(recipe, str(case), float(ratio)))
    return lines


def gpu_present() -> bool:
    """Whether the driver sees at least one GPU (False without a driver)."""
    from layoutkit.ptx import DriverUnavailableError, device_count
    try:
        return device_count() > 0
    except DriverUnavailableError:
        return False


def check_and_benchmark(path: str) -> tuple[float, list[BenchmarkLine]]:
    """Run a recipe's check() (raising on a mismatch) and benchmark(); (worst error, lines)."""
    module = load_recipe(path)
    for needed in ("check", "benchmark"):
        if not callable(getattr(module, needed, None)):
            raise RecipeError(f"recipe {path}: defines no {needed}()")
    worst = module.check()
    return worst, summarize(recipe_stem(path), module.benchmark())


def format_summary(lines: list[BenchmarkLine]) -> str:
    """The one table the tour prints: recipe, case, layoutkit / reference.

    >>> print(format_summary([BenchmarkLine("softmax", "m=4096 n=4096", 2.08)]))
    recipe   case           layoutkit / reference
    softmax  m=4096 n=4096                   2.08
    """
    width_r = max([len("recipe")] + [len(x.recipe) for x in lines])
    width_c = max([len("case")] + [len(x.case) for x in lines])
    out = [f"{'recipe':<{width_r}}  {'case':<{width_c}}  layoutkit / reference"]
    out += [f"{x.recipe:<{width_r}}  {x.case:<{width_c}}  {x.ratio:>21.2f}" for x in lines]
    return "\n".join(out)
