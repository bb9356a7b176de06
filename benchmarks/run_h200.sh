#!/usr/bin/env bash
# One batched device run on the H200: GPU tests, then benchmarks; logs under $OUT.
# Usage (device machine, repo root): bash benchmarks/run_h200.sh [tests] [bench] [recipes]
#   (no argument: all three). Each pytest group runs in its own process with its own timeout,
#   so a hang in one group (a pipeline bug) cannot take the others with it; groups whose
#   kernels wait on mbarriers run with LAYOUTKIT_DEBUG=1 (bounded waits raise, never hang).
#   JOBS=N runs up to N test groups at once (their tracing and ptxas use the host's cores; the
#   GPU is shared; the cubin cache survives concurrent writers); EXAMPLE=0 skips the
#   transformer-block example; TESTS_S=S ends the test groups within S seconds (each one's
#   timeout cut to what is left, a group not started in time says so). The groups' summary
#   lines end the tests part.
set -uo pipefail
OUT=${OUT:-/tmp/layoutkit-out}; mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1 LAYOUTKIT_CACHE_DIR=/tmp/layoutkit-cache
command -v ptxas >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
parts=${*:-tests bench recipes}
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv
  git rev-parse --short HEAD 2>/dev/null; ptxas --version | tail -1
  python3 -c "import torch, triton, cuda.bindings; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda-bindings', cuda.bindings.__version__)"
} 2>&1 | tee "$OUT/env.txt"

TESTS_END=$(( $(date +%s) + ${TESTS_S:-100000} ))
run_group() {   # a group's timeout is cut to what is left of TESTS_S (a device call's limit)
  local label=$1 limit=${GPU_TIMEOUT:-300} left=$(( TESTS_END - $(date +%s) )); shift
  (( limit > left )) && limit=$left
  if (( limit < 10 )); then
    echo "not run: TESTS_S spent" > "$OUT/pytest_$label.log"; return
  fi
  echo "== pytest $label"
  timeout $limit env ${GPU_ENV:-} python3 -m pytest -m gpu "$@" -p no:cacheprovider -q -rs \
      --timeout=150 --timeout-method=thread > "$OUT/pytest_$label.log" 2>&1
  echo "== pytest $label: $(awk 'NF {last = $0} END {print last}' "$OUT/pytest_$label.log")"
}

gpu_tests() {   # [GPU_ENV=VAR=value] [GPU_TIMEOUT=seconds] gpu_tests LABEL FILES...
  if (( ${JOBS:-1} > 1 )); then      # a background group; its prefix variables go with it
    while (( $(jobs -rp | wc -l) >= JOBS )); do wait -n; done
    run_group "$@" &
  else
    run_group "$@"
  fi
}

if [[ $parts == *tests* ]]; then
  gpu_tests core tests/gpu/test_ptx_backend_gpu.py tests/gpu/test_dsl_gpu.py \
      tests/gpu/test_sync_gpu.py tests/gpu/test_recipes_gpu.py
  GPU_ENV=LAYOUTKIT_DEBUG=1 gpu_tests dsl_sync tests/gpu/test_dsl_sync_gpu.py
  GPU_ENV=LAYOUTKIT_DEBUG=1 gpu_tests dsl_tma tests/gpu/test_dsl_tma_gpu.py
  gpu_tests dsl_wgmma tests/gpu/test_dsl_wgmma_gpu.py
  gpu_tests recipes tests/gpu/test_recipe_transpose_gpu.py \
      tests/gpu/test_recipe_layernorm_gpu.py tests/gpu/test_recipe_mma_gemm_gpu.py
  gpu_tests row_backward tests/gpu/test_recipe_rmsnorm_gpu.py \
      tests/gpu/test_recipe_softmax_backward_gpu.py tests/gpu/test_recipe_layernorm_backward_gpu.py
  # many specializations each (shapes' divisibility facts, dtypes, epilogues): minutes of
  # tracing and ptxas on a cold cache
  GPU_TIMEOUT=600 GPU_ENV=LAYOUTKIT_DEBUG=1 gpu_tests gemm_hopper tests/gpu/test_recipe_gemm_hopper_gpu.py
  GPU_TIMEOUT=600 GPU_ENV=LAYOUTKIT_DEBUG=1 gpu_tests gemm_fp8 tests/gpu/test_recipe_gemm_fp8_gpu.py
  GPU_ENV=LAYOUTKIT_DEBUG=1 gpu_tests flash_attention tests/gpu/test_recipe_flash_attention_gpu.py
  # a padded specialization per sequence shape and config beside each varlen one: minutes cold
  GPU_TIMEOUT=600 GPU_ENV=LAYOUTKIT_DEBUG=1 gpu_tests flash_attention_varlen tests/gpu/test_recipe_flash_attention_varlen_gpu.py
  # a decode specialization per (group, head dim, paged, causal, split) and tensor facts: minutes cold
  GPU_TIMEOUT=600 GPU_ENV=LAYOUTKIT_DEBUG=1 gpu_tests flash_attention_kvcache tests/gpu/test_recipe_flash_attention_kvcache_gpu.py
  GPU_TIMEOUT=600 GPU_ENV=LAYOUTKIT_DEBUG=1 gpu_tests gemm_small_grouped tests/gpu/test_recipe_gemm_small_m_gpu.py \
      tests/gpu/test_recipe_gemm_grouped_gpu.py
  GPU_TIMEOUT=600 GPU_ENV=LAYOUTKIT_DEBUG=1 gpu_tests attention_consumers tests/gpu/test_recipe_flash_attention_consumers_gpu.py
  GPU_TIMEOUT=600 GPU_ENV=LAYOUTKIT_DEBUG=1 gpu_tests attention_backward tests/gpu/test_recipe_flash_attention_backward_gpu.py \
      tests/gpu/test_recipe_flash_attention_varlen_backward_gpu.py
  GPU_ENV=LAYOUTKIT_DEBUG=1 gpu_tests rows_cluster tests/gpu/test_recipe_rows_cluster_gpu.py
  gpu_tests launch tests/gpu/test_spec_cache_gpu.py tests/gpu/test_launch_fast_maps_gpu.py
  gpu_tests misuse tests/gpu/test_misuse_gpu.py
  gpu_tests torch tests/gpu/test_torch_ops_gpu.py -k "not example"   # layoutkit.torch's ops
  GPU_ENV=LAYOUTKIT_DEBUG=1 gpu_tests tma_reduce tests/gpu/test_dsl_tma_reduce_gpu.py \
      tests/gpu/test_dsl_tma_reduce_probe_gpu.py tests/gpu/test_recipe_softmax_staged_gpu.py
  gpu_tests no_host_sync tests/gpu/test_recipes_no_host_sync_gpu.py   # release builds (its own)
  wait
  if [[ ${EXAMPLE:-1} != 0 ]]; then
    echo "== examples/transformer_block.py"      # compiles the block (inductor): minutes
    timeout 900 python3 examples/transformer_block.py --steps 5 2>&1 | tee "$OUT/transformer_block.txt"
  fi
  for log in "$OUT"/pytest_*.log; do echo "$(basename "$log" .log): $(awk 'NF {last = $0} END {print last}' "$log")"; done
fi
if [[ $parts == *bench* ]]; then
  for bench in benchmarks/bench_launch.py benchmarks/bench_gemm.py benchmarks/bench_attention.py; do
    echo "== $bench"
    timeout 300 python3 "$bench" 2>&1 | tee "$OUT/$(basename "$bench" .py).md"
  done
  echo "== benchmarks/bench_gemm_fp8.py"   # 4096^3, 8192^3 beside torch._scaled_mm (--shapes issue --part I/N: the rest)
  timeout 600 python3 benchmarks/bench_gemm_fp8.py --shapes main 2>&1 | tee "$OUT/bench_gemm_fp8.md"
  echo "== benchmarks/bench_gemm_epilogue.py"   # fused bias + activation vs the plain store
  timeout 300 python3 benchmarks/bench_gemm_epilogue.py 2>&1 | tee "$OUT/bench_gemm_epilogue.md"
  echo "== benchmarks/bench_attention_varlen.py"   # FA4's varlen beside: needs the peers pack
  timeout 420 python3 benchmarks/bench_attention_varlen.py --reps 15 2>&1 | tee "$OUT/bench_attention_varlen.md"
  echo "== benchmarks/bench_attention_kvcache.py"   # FA4's paged decode beside: needs the peers pack
  timeout 900 python3 benchmarks/bench_attention_kvcache.py --reps 15 2>&1 | tee "$OUT/bench_attention_kvcache.md"
  echo "== benchmarks/bench_gemm_host.py"   # gemm()'s host path, its plans and the TMA fast path
  timeout 300 python3 benchmarks/bench_gemm_host.py 2>&1 | tee "$OUT/bench_gemm_host.md"
  echo "== benchmarks/bench_gemm_grouped.py"   # beside a torch.matmul loop and torch._grouped_mm
  timeout 600 python3 benchmarks/bench_gemm_grouped.py --reps 20 2>&1 | tee "$OUT/bench_gemm_grouped.md"
  echo "== benchmarks/bench_attention_backward.py"   # FA4's sm90 backward beside: the peers pack
  timeout 600 python3 benchmarks/bench_attention_backward.py --quick 2>&1 | tee "$OUT/bench_attention_backward.md"
  echo "== benchmarks/bench_rows.py"   # quack beside: needs the peers pack (carry .peers)
  timeout 570 python3 benchmarks/bench_rows.py 2>&1 | tee "$OUT/bench_rows.md"
fi
if [[ $parts == *recipes* ]]; then
  for recipe in recipes/[!_]*.py; do     # recipes/_<name>.py: a recipe's helper module
    echo "== layoutkit run $recipe"
    timeout 300 python3 -m layoutkit run "$(basename "$recipe" .py)" 2>&1 | tee "$OUT/run_$(basename "$recipe" .py).txt"
  done
fi
