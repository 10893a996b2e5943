#!/usr/bin/env bash
# One device-tool call for issue 21's v20 (GPU machine, repository root): v19's untimed variants (hyb7 at M = 512,
# pp7d2 at M = 1024-2048) and v20's held stage released later (hold7r2, hold7r3 at M = 512-2048) beside v18, the
# tile-language kernel and cuBLAS (scripts/bench_gluon_v19.py); the per-bucket winners written into GLUON_TABLE of
# this copy (scripts/apply_gluon_selection.py); then the GPU tests and the 16-case bench on that code.
# Usage: bash scripts/gpu_v20_session.sh [sweep] [apply] [tests] [bench]   (no step named: all four; ~560 s at most)
# SWEEP_ARGS (environment): the sweep's variants and shapes (default: v20's --only and --timed below).
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then  # the header above, and nothing run
  sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
steps=${*:-sweep apply tests bench}
# v18's entries first (each shape times v18, the variants, v18 again); the first timed shape carries the timing
# process's start-up (v19 run b: ~90 s), so M = 512, the shape v20 is about, comes first
ONLY="v18_512 v18_1024 v18_2048 hyb7_512 pp7d2_1024 pp7d2_2048"
ONLY="$ONLY hold7r2_512 hold7r3_512 hold7r2_1024 hold7r3_1024 hold7r2_2048 hold7r3_2048"
ONLY="$ONLY hold7r3_256"  # checked only (M = 64-192: tiles shorter than the release step), (1,256) is not timed
SWEEP_ARGS=${SWEEP_ARGS:---only $ONLY --timed 4,128 1,1024 8,128 2,1024 16,128}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
for step in $steps; do
  start=$SECONDS
  case $step in
    sweep) timeout 280 python3 scripts/bench_gluon_v19.py --out "$OUT" --select "$OUT/select.json" --budget-s 230 \
             $SWEEP_ARGS 2>&1 | grep -v -i "warn" | tee "$OUT/v20_sweep.log" ;;
    apply) [ -f "$OUT/select.json" ] && python3 scripts/apply_gluon_selection.py "$OUT/select.json" \
             && grep -n "^    [0-9]*: (GluonConfig" kernel/gluon_backward.py ;;
    tests) timeout 100 python3 -m pytest --noconftest -q -m gpu tests/kernel tests/harness/test_replay_gpu.py 2>&1 \
             | tee "$OUT/v20_gpu_tests.log" | tail -n 15 ;;
    bench) timeout 170 python3 scripts/solci_bench_direct.py --csv "$OUT/v20_bench.csv" 2>&1 | grep -v -i "warn" \
             | tee "$OUT/v20_bench.log" | tail -n 32 ;;
  esac
  echo "step $step: $((SECONDS - start)) s"
done
