#!/usr/bin/env bash
# One device-tool call a run for issue 21's items 33-38 (kernel/NOTES.md; GPU machine, repository root): a sweep
# beside the table's entries (CUPTI span, the entry timed twice, the 0.5 % margin: <tag>_sweep.log,
# <tag>_select.json), then where the run has them the trace at M = 1024 (<tag>_trace.log) and the GPU tests of its
# switch (<tag>_gpu_tests.log). A selection that moves a bucket is applied and confirmed by a later call
# (gpu_v19_session.sh tests bench on the committed table), not here. Runs:
#   (none) v33: the epilogue from registers in 16-byte stores of whole lines (epi_vec: ev1s7, ev2s7, ev2s6) at
#          M = 512-2048, trace ev7 (~400 s)
#   b      what items 30 and 32 left untimed at M >= 4096: stream-K (sk) and v32 (w256b32s6d), tag v33b (~250 s)
#   c      v34: the loader's sleep after the ring's first stage (first_delay 150 / 300 / 600 ns) at M = 256-2048,
#          trace fd300, fd600 (~350 s)
#   d      v36: the first tile's first 1 or 2 K-steps asked of L2 at the program's entry (first_prefetch) at
#          M = 256-2048, trace fp2 (~300 s)
#   e      v37: the upper half of the programs running its grad_weight tiles first (stagger) at M = 1024-2048,
#          trace stg (~250 s)
#   f      v38: two programs an SM, one consumer warpgroup each (solo3) at M = 512-4096, trace solo3 (~350 s)
# Usage: bash scripts/gpu_v33_session.sh [b|c|d|e|f]   (logs under $OUT)
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then  # the header above, and nothing run
  sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
small() {  # the variants $1 (space-separated prefixes) of each bucket of M = 256-2048 beside its entry
  local out="pp7lz_256 lz_512 lz_1024 lz_2048" v m
  for v in $1; do for m in 256 512 1024 2048; do out="$out ${v}_$m"; done; done
  echo "$out"
}
case "${1:-}" in
  "") TAG=v33 TIMED="8,128 4,128 16,128" TRACE=coop,ev7 TESTS=16_byte_rows BUDGET=200
      ONLY="lz_1024 ev1s7_1024 ev2s7_1024 ev2s6_1024 lz_512 ev1s7_512 ev2s7_512 lz_2048 ev1s7_2048 ev2s7_2048" ;;
  b) TAG=v33b TIMED="4,1024 2,4096" TRACE="" TESTS="" BUDGET=170
     ONLY="w256s3_4096 sk_4096 w256b32s6d_4096 w256s3_8192 sk_8192 w256b32s6d_8192" ;;
  c) TAG=v34 TIMED="8,128 4,128 1,256 16,128" TRACE=coop,fd300,fd600 TESTS=first_fill BUDGET=190
     ONLY=$(small "fd150 fd300 fd600") ;;
  d) TAG=v36 TIMED="8,128 1,256 4,128 16,128" TRACE=coop,fp2 TESTS=first_fill BUDGET=170
     ONLY=$(small "fp1 fp2") ;;
  e) TAG=v37 TIMED="8,128 1,1024 16,128" TRACE=coop,stg TESTS=stagger BUDGET=150
     ONLY="lz_1024 stg_1024 lz_2048 stg_2048" ;;
  f) TAG=v38 TIMED="4,128 8,128 16,128 4,1024" TRACE=coop,solo3 TESTS=solo BUDGET=200
     ONLY="lz_512 solo3_512 lz_1024 solo3_1024 lz_2048 solo3_2048 w256s3_4096 solo3_4096" ;;
  *) echo "gpu_v33_session.sh: unknown run '$1' (b-f; none: v33's; -h says what each runs)" >&2; exit 2 ;;
esac
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export SWEEP_ARGS="--only $ONLY --budget-s $BUDGET --timed $TIMED --margin 0.005 --check-timeout-s 90" TAG \
  SWEEP_TIMEOUT=$((BUDGET + 70))
bash "$(dirname "$0")/gpu_v19_session.sh" sweep
cp "$OUT/select.json" "$OUT/${TAG}_select.json" 2>/dev/null
if [ -n "$TRACE" ]; then
  timeout 45 python3 scripts/diag_gluon_timeline.py --ms 1024 --variants "$TRACE" --kinds both --reps 10 2>&1 \
    | grep -v -i warn | tee "$OUT/${TAG}_trace.log" | tail -n 16
fi
if [ -n "$TESTS" ]; then
  timeout 90 python3 -m pytest --noconftest -q -m gpu tests/kernel/test_gluon.py -k "$TESTS" 2>&1 \
    | tee "$OUT/${TAG}_gpu_tests.log" | tail -n 5
fi
exit 0
