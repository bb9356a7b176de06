#!/usr/bin/env bash
# recipes/flash_attention.py on the H200 in one device run: its GPU tests (debug build: a
# pipeline hang raises BarrierTimeoutError instead of hanging), then benchmarks/bench_attention.py.
# Usage (device machine, repo root): bash benchmarks/run_flash_attention_h200.sh   (~5-8 min)
# Logs: $OUT/pytest_flash_attention.log, $OUT/bench_attention.md
set -uo pipefail
OUT=${OUT:-/tmp/layoutkit-out}; mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1 LAYOUTKIT_CACHE_DIR=/tmp/layoutkit-cache
command -v ptxas >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
echo "== pytest flash_attention (GPU)"
timeout 270 env LAYOUTKIT_DEBUG=1 python3 -m pytest -m gpu \
    tests/gpu/test_recipe_flash_attention_gpu.py -p no:cacheprovider -q -rs \
    --timeout=200 --timeout-method=thread 2>&1 | tee "$OUT/pytest_flash_attention.log" | tail -25
echo "== benchmarks/bench_attention.py"
timeout 290 python3 benchmarks/bench_attention.py --reps 15 2>&1 | tee "$OUT/bench_attention.md"
