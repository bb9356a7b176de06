"""pytest configuration for the whole tree: GPU tests (marker ``gpu``) skip, saying why, where no Hopper GPU is present."""
from __future__ import annotations

import functools
import gc
import importlib.util
import os

import pytest
from hypothesis import settings

# CI (.ci/run sets CI=1) gates landing on one fixed set of examples per property, so a run
# never fails on a counterexample that the change did not cause; local runs keep exploring
# new random examples (and a failure prints the seed to reproduce it).
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

# Tests trace what they test: the on-disk specialization cache (a warm one would serve kernels
# without tracing them, and the facet coverage below counts traces) is off unless a test of the
# cache turns it on, with a cache directory of its own.
os.environ["LAYOUTKIT_SPEC_CACHE"] = "0"


@functools.lru_cache(maxsize=1)
def hopper_gpu_absent_reason() -> str | None:
    """None when an sm_90 GPU is usable through the CUDA driver, else why not."""
    from layoutkit.ptx import DriverUnavailableError, device, device_count
    try:
        if device_count() == 0:
            return "no CUDA device is present"
        major = device(0).attribute("COMPUTE_CAPABILITY_MAJOR")
    except DriverUnavailableError as exc:
        return str(exc)
    if major != 9:
        return f"device 0 has compute capability {major}.x; layoutkit's GPU tests need 9.0 (Hopper)"
    return None


FULL_SUITE = pytest.StashKey[bool]()
FACET_COVERAGE_TEST = "test_every_op_facet_runs_somewhere_in_the_suite"


def pytest_configure(config):
    """Count every call of every IR op's facets (tests/dsl/test_op_definitions.py checks, at the
    end of a full run, that each facet of each op ran in some test)."""
    from layoutkit.dsl.core.opdef import count_facet_calls
    count_facet_calls()


def full_suite(config) -> bool:
    """Whether this run is the whole default suite (no paths, -k or -m given)."""
    everything = not config.args or list(config.args) == list(config.getini("testpaths"))
    return everything and not config.option.keyword and not config.option.markexpr


# The order the suite runs its directories in: coarse first, fine last. Under pytest-xdist the
# run ends when the last worker finishes its last module (see pytest_xdist_make_scheduler), so
# the modules handed out last should be short: the interpreter and torch tests (up to ~9 s
# each, files of up to ~30 s) and docs/dsl.md's doctest (~4 s) run early, the algebra's short
# property modules (a few seconds each) at the end. Each module's tests stay in their order.
RUN_ORDER = ("docs/", "tests/torch/", "tests/dsl/", "tests/test_", "tests/sync/", "tests/ptx/",
             "tests/misuse/", "tests/gpu/", "layoutkit/", "tests/algebra/")


def run_order(item) -> int:
    """The index in RUN_ORDER of the item's file (one past the end where none matches)."""
    path = item.nodeid.split("::", 1)[0]
    return next((i for i, prefix in enumerate(RUN_ORDER) if path.startswith(prefix)),
                len(RUN_ORDER))


def pytest_collection_modifyitems(config, items):
    # the whole default suite: the facet coverage test runs last
    config.stash[FULL_SUITE] = full_suite(config)
    last = [item for item in items if item.name == FACET_COVERAGE_TEST]
    items[:] = sorted((item for item in items if item.name != FACET_COVERAGE_TEST),
                      key=run_order) + last
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    reason = hopper_gpu_absent_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"GPU test skipped: {reason}")
    for item in gpu_items:
        item.add_marker(skip)


def pytest_collection_finish(session):
    """The collected modules' objects (sympy's caches, every test module) are old: freeze them out
    of the cyclic collector's scans, and collect young objects less often, since tests make
    many short-lived ones (~5% of the suite's CPU time went to full collections)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10000, 50, 50)


def pytest_unconfigure(config):
    """pytest's unraisable-exception cleanup collects five times at the end of a run: what the
    run left is frozen first, so that those collections scan nothing (2-3 s per process)."""
    gc.freeze()


# `python -m layoutkit` runs the CLI; doctest collection must not import it.
collect_ignore = ["layoutkit/__main__.py"]
if importlib.util.find_spec("torch") is None:   # layoutkit.torch needs torch ([torch] extra)
    collect_ignore.append("layoutkit/torch")


# Under pytest-xdist each worker counts the facet calls of the tests it ran; the coverage test
# cannot see the others' counts, so the workers hand theirs to the controller, which checks
# their union when the run ends and fails the run, naming the facets, if one never ran.
WORKER_FACET_CALLS: dict[tuple[str, str], int] = {}


# Modules that trace the same specializations (the same recipe kernels, keys and constexprs):
# under xdist each group goes to one worker, which traces them once (a worker's kernels keep
# their specializations in memory); apart, both workers traced them (~8 s CPU in all).
SHARED_TRACES = (
    ("tests/torch/test_attention_backward_cpu.py", "tests/torch/test_compile_cpu.py",
     "tests/torch/test_opcheck_cpu.py"),        # attention fwd/bwd passes, gemm_bm64
    ("tests/torch/test_gemm_grouped_op.py", "tests/dsl/test_recipe_gemm_grouped.py"),
    ("tests/dsl/interpreter/test_recipes_cpu.py", "tests/dsl/test_recipe_mma_gemm_compile.py",
     "tests/dsl/test_mma_interpreter.py"),       # mma_gemm_w8
    ("tests/dsl/test_recipe_transpose.py", "tests/dsl/test_recipe_wrappers.py"),
    ("tests/dsl/test_recipe_gemm_hopper.py", "tests/test_cli.py"),
)
SCOPE_OF_MODULE = {module: group[0] for group in SHARED_TRACES for module in group}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """(xdist controller) `-n` without `--dist` hands each worker one whole module at a time, in
    RUN_ORDER (xdist's loadscope, not reordered by test count), where xdist's default ("load")
    sends runs of consecutive tests: a worker could be left holding a run of a hundred long
    tests while the other idles at the end, and a module split between workers set up its
    module fixtures (traces, ptxas) in both. The modules of a SHARED_TRACES group go together.
    An explicit --dist other than load keeps its own."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return SCOPE_OF_MODULE.get(module, module)

    config.option.loadscopereorder = False
    return ModuleScheduling(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """(xdist controller) Add a finished worker's facet counts to WORKER_FACET_CALLS."""
    for name, facet, count in getattr(node, "workeroutput", {}).get("facet_calls", ()):
        WORKER_FACET_CALLS[name, facet] = WORKER_FACET_CALLS.get((name, facet), 0) + count


def pytest_sessionfinish(session):
    config = session.config
    if hasattr(config, "workerinput"):       # an xdist worker: its counts go to the controller
        from layoutkit.dsl.core.opdef import FACET_CALLS
        config.workeroutput["facet_calls"] = [[name, facet, count] for (name, facet), count
                                              in FACET_CALLS.items()]
    elif WORKER_FACET_CALLS and full_suite(config):
        from tests.dsl.test_op_definitions import missing_facets
        missing = missing_facets(WORKER_FACET_CALLS)
        if missing:
            reporter = config.pluginmanager.get_plugin("terminalreporter")
            reporter.write_line(f"\nFAILED {FACET_COVERAGE_TEST} (all workers): no test ran these "
                                f"facets: {', '.join(missing)}", red=True, bold=True)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
