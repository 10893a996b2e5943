#!/usr/bin/env bash
# One device-tool call for issue 21's v31-v32 (kernel/NOTES.md items 31-32; GPU machine, repository root): the 128x256
# tiles in K-steps of 32 (v31's w256b32s8h at M = 1024; v32's w256b32s6d, the epilogue deferred beside the next
# tile's first MMA, at every M) swept beside the table's entries at M = 1024-8192 (CUPTI span, the entry
# timed twice, the 0.5 % margin: v31_sweep.log, v31_select.json), the selection written into this copy's GLUON_TABLE,
# and, only if it moved a bucket off its entry, the GPU tests and the 16 cases on that code (gpu_v19_session.sh
# confirm: v31_gpu_tests.log, v31_bench.log / .csv). v29's multicast is not swept here: it cannot enter the table
# before the replay records a cluster launch (gpu_v30_session.sh d measures it).
# Usage: bash scripts/gpu_v31_session.sh [sweep]   (~550 s at most, logs under $OUT; sweep: the
# sweep alone, ~260 s, on a card whose 16 cases would not count: the issue's targets are the H200's)
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then  # the header above, and nothing run
  sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
case "${1:-}" in
  "") steps="sweep apply confirm" ;;
  sweep) steps=sweep ;;
  *) echo "gpu_v31_session.sh: unknown step '$1' (sweep; none: the sweep, applied and confirmed)" >&2; exit 2 ;;
esac
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
ONLY="lz_1024 w256b32s8h_1024 w256b32s6d_1024 lz_2048 w256b32s6d_2048 w256s3_4096 w256b32s6d_4096"
ONLY="$ONLY w256s3_8192 w256b32s6d_8192"
export SWEEP_ARGS="--only $ONLY --budget-s 190 --timed 8,128 16,128 4,1024 2,4096 --margin 0.005 \
--check-timeout-s 90" TAG=v31 SWEEP_TIMEOUT=260
bash "$(dirname "$0")/gpu_v19_session.sh" $steps
cp "$OUT/select.json" "$OUT/v31_select.json" 2>/dev/null
exit 0
