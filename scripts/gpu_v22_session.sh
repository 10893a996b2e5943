#!/usr/bin/env bash
# One device-tool call for issue 21's v22 (kernel/NOTES.md item 22, Next 1; GPU machine, repository root): the MMA
# ceiling of a warpgroup with two m64n128 accumulators (scripts/diag_wgmma_ceiling.py); 128x256 tiles with a 4th
# stage and a two-pass epilogue (w256s4h) beside the table's entries (w256s3 at M = 4096-8192, v18 at 1024-2048),
# the tile-language kernel and cuBLAS, the per-bucket winners into GLUON_TABLE, the GPU tests and the 16-case bench
# (scripts/gpu_v19_session.sh's steps, logs v22_*); a trace of w256s4h beside w256s3 and coop at M = 1024, 2048,
# with each program's time outside its tiles (item 22, Next 2).
# Usage: bash scripts/gpu_v22_session.sh   (~330 s at most with the machine warm; logs under $OUT; carry .whl)
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then  # the header above, and nothing run
  sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
if ls .whl/nvidia_ml_py*.whl >/dev/null 2>&1; then  # NVML's SM clock beside the ceiling (carry .whl)
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/nvidia_ml_py*.whl && PYTHONPATH=$PWD:/tmp/site
fi
start=$SECONDS
timeout 60 python3 scripts/diag_wgmma_ceiling.py --steps 16384 --variants n128x2,n256x2,n256x2_2acc 2>&1 \
  | tee "$OUT/v22_ceiling.log"
echo "step ceiling: $((SECONDS - start)) s"
# M = 8192 first: the first timed shape carries the timing process's start-up
ONLY="w256s3_8192 w256s4h_8192 w256s3_4096 w256s4h_4096 v18_2048 w256s4h_2048 v18_1024 w256s4h_1024"
SWEEP_ARGS="--only $ONLY --timed 2,4096 4,1024 16,128 8,128" TAG=v22 SWEEP_TIMEOUT=240 TESTS_TIMEOUT=100 \
  bash "$(dirname "$0")/gpu_v19_session.sh" sweep apply tests bench
start=$SECONDS
timeout 120 python3 scripts/diag_gluon_timeline.py --ms 1024 2048 --variants coop,w256s3,w256s4h --kinds both \
  --reps 10 2>&1 | tee "$OUT/v22_trace.log" | tail -n 24
echo "step trace: $((SECONDS - start)) s"
