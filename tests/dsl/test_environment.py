"""The environment part of the specialization cache's keys (layoutkit.dsl.core.fingerprint):
the same in a process that has imported sympy and in one that has not (a warm process never
imports it, a tracing one does), and remembered in the cache's memo."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def environment_of(cache: Path, before: str = "") -> dict:
    """environment() in a new process (after running `before`), with its memo in `cache`."""
    script = (f"{before}\nimport json, sys\nfrom pathlib import Path\n"
              "from layoutkit.dsl.core import fingerprint\n"
              f"env = fingerprint.environment(Path({str(cache / 'environment.json')!r}))\n"
              "print(json.dumps({'env': env, 'sympy loaded': 'sympy' in sys.modules}))")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_sympy_imported_or_not_gives_the_same_environment(tmp_path):
    import sympy
    cold = environment_of(tmp_path)                            # no memo yet: the metadata
    assert cold["sympy loaded"] is False and cold["env"]["sympy"] == sympy.__version__
    memo = json.loads((tmp_path / "environment.json").read_text())
    assert memo["sympy"] == sympy.__version__ and memo["sympy_stats"].startswith(
        str(Path(sympy.__file__)))
    with_sympy = environment_of(tmp_path, "import sympy")
    assert with_sympy["sympy loaded"] is True and with_sympy["env"] == cold["env"]
    assert environment_of(tmp_path)["env"] == cold["env"]      # from the memo


def test_a_stale_sympy_memo_is_read_again(tmp_path):
    import sympy
    environment_of(tmp_path)
    path = tmp_path / "environment.json"
    memo = json.loads(path.read_text())
    memo.update(sympy="0.0-stale", sympy_stats=memo["sympy_stats"] + "-other")
    path.write_text(json.dumps(memo))
    assert environment_of(tmp_path)["env"]["sympy"] == sympy.__version__
