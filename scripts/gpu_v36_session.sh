#!/usr/bin/env bash
# One device-tool call for issue 21's v36 (kernel/NOTES.md item 36; GPU machine, repository root): the program's
# first tile's first 1 or 2 K-steps asked of L2 at its entry (first_prefetch: the first fill's DRAM reads leave
# before the barriers' inits and the partitions' start), swept beside every entry of M = 256-2048 (CUPTI span, the
# entry timed twice, the 0.5 % margin: v36_sweep.log, v36_select.json); the trace of fp2 beside the entry at
# M = 1024 (v36_trace.log); the GPU test of the first fill's switches (v36_gpu_tests.log). A selection that moves a
# bucket is applied and confirmed by the next call (gpu_v19_session.sh tests bench on the committed table).
# Usage: bash scripts/gpu_v36_session.sh   (~300 s at most, logs under $OUT)
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then  # the header above, and nothing run
  sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
if [ -n "${1:-}" ]; then
  echo "gpu_v36_session.sh: no arguments ('$1'); -h says what it runs" >&2
  exit 2
fi
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
ONLY="lz_1024 fp1_1024 fp2_1024 pp7lz_256 fp1_256 fp2_256 lz_512 fp1_512 fp2_512 lz_2048 fp1_2048 fp2_2048"
export SWEEP_ARGS="--only $ONLY --budget-s 170 --timed 8,128 1,256 4,128 16,128 --margin 0.005 \
--check-timeout-s 90" TAG=v36 SWEEP_TIMEOUT=230
bash "$(dirname "$0")/gpu_v19_session.sh" sweep
cp "$OUT/select.json" "$OUT/v36_select.json" 2>/dev/null
timeout 40 python3 scripts/diag_gluon_timeline.py --ms 1024 --variants coop,fp2 --kinds both --reps 10 2>&1 \
  | grep -v -i warn | tee "$OUT/v36_trace.log" | tail -n 12
timeout 60 python3 -m pytest --noconftest -q -m gpu tests/kernel/test_gluon.py -k "first_fill" 2>&1 \
  | tee "$OUT/v36_gpu_tests.log" | tail -n 5
exit 0
