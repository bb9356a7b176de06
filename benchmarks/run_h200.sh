#!/usr/bin/env bash
# One batched device run on the H200: every GPU test, then the benchmarks, logs under $OUT.
# Usage (on the device machine, repo root): bash benchmarks/run_h200.sh [pytest args...]
set -uo pipefail
OUT=${OUT:-/tmp/layoutkit-out}; mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1 LAYOUTKIT_CACHE_DIR=/tmp/layoutkit-cache
command -v ptxas >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv
  git rev-parse --short HEAD 2>/dev/null; ptxas --version | tail -1
  python3 -c "import torch, triton, cuda.bindings; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda-bindings', cuda.bindings.__version__)"
} 2>&1 | tee "$OUT/env.txt"
echo "== pytest -m gpu"
timeout 420 python3 -m pytest -m gpu tests/gpu -p no:cacheprovider -q -rs \
    --timeout=90 --timeout-method=thread "$@" 2>&1 | tee "$OUT/pytest_gpu.log" | tail -40
for bench in benchmarks/bench_launch.py; do
  [ -f "$bench" ] || continue
  echo "== $bench"
  timeout 240 python3 "$bench" 2>&1 | tee "$OUT/$(basename "$bench" .py).md"
done
for recipe in recipes/*.py; do
  echo "== layoutkit run $recipe"
  timeout 240 python3 -m layoutkit run "$recipe" 2>&1 | tee "$OUT/run_$(basename "$recipe" .py).txt"
done
