"""Without torch installed (simulated: a subprocess whose sys.modules['torch'] is None, which
makes `import torch` fail as on a machine without it), every entry point that needs torch says
in one line what to install, and what needs no torch (the tour on a machine without a GPU,
`layoutkit run --cpu`, `layoutkit compile`) runs. No torch needed to run these tests."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from layoutkit.tools.dependencies import TORCH_INSTALL
from layoutkit.tools.recipe_runner import recipe_names

REPO = Path(__file__).resolve().parents[2]
HIDE_TORCH = "import sys; sys.modules['torch'] = None\n"

# every recipe's entry points that take tensors: module -> {function: its positional arguments}
ENTRIES = {
    "softmax": {"softmax": 1},
    "layernorm": {"layernorm": 3},
    "rmsnorm": {"rmsnorm": 1, "rmsnorm_backward": 4},
    "softmax_backward": {"softmax_backward": 2},
    "layernorm_backward": {"layernorm_backward": 3},
    "gemm_hopper": {"gemm": 2},
    "gemm_fp8": {"gemm_fp8": 4},
    "gemm_grouped": {"gemm_grouped": 3},
    "mma_gemm": {"gemm": 2},
    "transpose": {"transpose": 1},
    "flash_attention": {"flash_attention": 3},
    "flash_attention_backward": {"flash_attention_backward": 6},
    "flash_attention_varlen": {"flash_attention_varlen": 7},
    "flash_attention_varlen_backward": {"flash_attention_varlen_backward": 10},
    "flash_attention_kvcache": {"flash_attention_with_kvcache": 4},
}


def without_torch(code: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter (from the repository) in which torch cannot be
    imported."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO),
                                                       os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", HIDE_TORCH + code], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO, env=env)


def test_every_recipe_module_is_listed():
    """A new recipe's entry points join ENTRIES (and ask for torch through require_torch)."""
    assert set(recipe_names()) <= set(ENTRIES), sorted(set(recipe_names()) - set(ENTRIES))


def test_every_recipe_entry_says_what_to_install():
    present = sorted(set(ENTRIES) & set(recipe_names()))
    code = f"""
import importlib, json
results = {{}}
for module, entries in {json.dumps({m: ENTRIES[m] for m in present})}.items():
    recipe = importlib.import_module("recipes." + module)
    for name, arity in entries.items():
        try:
            getattr(recipe, name)(*[None] * arity)
            results[module + "." + name] = "no error"
        except Exception as exc:
            results[module + "." + name] = type(exc).__name__ + ": " + str(exc)
print(json.dumps(results))
"""
    done = without_torch(code)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)
    assert len(results) == sum(len(ENTRIES[m]) for m in present)
    for entry, result in results.items():
        assert result == (f"MissingDependencyError: recipes.{entry} needs PyTorch, which is not "
                          f"installed: {TORCH_INSTALL}"), entry


def test_layoutkit_torch_says_what_to_install():
    done = without_torch("import layoutkit.torch")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "layoutkit.tools.dependencies.MissingDependencyError: layoutkit.torch needs PyTorch, "
        f"which is not installed: {TORCH_INSTALL}")


def test_layoutkit_run_says_what_to_install_in_one_line():
    done = without_torch("from layoutkit.tools.cli import main; sys.exit(main(['run', "
                         "'softmax']))")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"layoutkit run (without --cpu) needs PyTorch, which is not installed: {TORCH_INSTALL}"]


def test_layoutkit_run_cpu_needs_no_torch():
    done = without_torch("from layoutkit.tools.cli import main; sys.exit(main(['run', "
                         "'transpose', '--cpu']))")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "check on the CPU interpreter (seed 0): worst relative error 0" in done.stdout


def test_the_tour_checks_recipes_only_with_torch():
    """On a GPU machine without torch the tour's GPU part says what to install (and the tour
    fails: it could not check the recipes); without a GPU it needs no torch."""
    code = """
import io
from layoutkit.tools import recipe_runner, tour
for gpu in (False, True):
    recipe_runner.gpu_present = lambda: gpu
    out = io.StringIO()
    print(gpu, tour._run_recipes(out), repr(out.getvalue().strip()))
"""
    done = without_torch(code)
    assert done.returncode == 0, done.stderr[-3000:]
    no_gpu, gpu = done.stdout.splitlines()
    assert no_gpu.startswith("False True 'No GPU here: the recipes were assembled, not run")
    assert gpu == ("True False 'Checking and benchmarking the recipes on this GPU needs PyTorch, "
                   f"which is not installed: {TORCH_INSTALL}'")
