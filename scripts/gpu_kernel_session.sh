#!/usr/bin/env bash
# One device-tool call for kernel work. Usage (GPU machine, repo root):
#   bash scripts/gpu_kernel_session.sh [tests] [diag] [stages] [ncu] [sweep] [bench] [bench-swept]
# sweep saves the fastest configuration per M bucket to $OUT/best.json; bench-swept times the 16 cases with it.
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then  # the header above, and nothing run
  sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
for step in "$@"; do
  case $step in
    tests) timeout 240 python3 -m pytest -q tests/kernel/test_kernel_gpu.py tests/kernel/test_schedule.py 2>&1 \
             | tee "$OUT/gpu_tests.log" | tail -8 ;;
    stages) timeout 200 python3 scripts/diag_stages.py 2>&1 | grep -v -i warn | tee "$OUT/exp_stages.log" ;;
    ncu) ncu=$(command -v ncu || ls -d /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
         timeout 200 "$ncu" --clock-control none --cache-control all -k regex:_fused_bwd_kernel \
           --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
           --section WarpStateStats python3 scripts/diag_ncu.py 1,256 4,128 4,256 > "$OUT/ncu_small_m.txt" 2>&1
         grep -E "^  _fused|Duration|Memory Throughput|DRAM Throughput|L2 Cache Throughput|Compute \(SM\)|Stall" \
           "$OUT/ncu_small_m.txt" | head -60 ;;
    diag) timeout 200 python3 scripts/diag_overhead.py 2>&1 | tee "$OUT/diag.log" ;;
    sweep) timeout 330 python3 -m ci.cli bench --sweep --warmup 5 --iters 20 --save "$OUT/best.json" 2>&1 \
             | grep -v -i warn | tee "$OUT/sweep.log" ;;
    bench) timeout 150 python3 -m ci.cli bench --csv "$OUT/bench.csv" 2>&1 | tee "$OUT/bench.log" ;;
    bench-swept) timeout 150 python3 -m ci.cli bench --configs "$OUT/best.json" --csv "$OUT/bench_swept.csv" 2>&1 \
             | grep -v -i warn | tee "$OUT/bench_swept.log" ;;
  esac
done
